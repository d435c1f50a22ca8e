// Every request to the server: the lists and pages the page loads, and what its controls ask for.

import { conversation, keyOf, num, session, state, wantProfile } from "./state.js";
import { addMessage } from "./events.js";
import { render } from "./render.js";
import { openAsked } from "./list.js";
import { forgetRestored, isRestored } from "./offline.js";

const pageSize = 30;

export async function fetchProfiles() {
  const users = [...state.wantedProfiles].slice(0, 100);
  if (users.length === 0 || session.state !== "online") return;
  try {
    const answer = await session.ask({ profiles: { users } });
    for (const profile of answer.profiles?.profiles ?? []) state.profiles.set(profile.user, profile);
    for (const user of users) {
      state.wantedProfiles.delete(user);
      if (!state.profiles.has(user)) state.profiles.set(user, { user });
    }
    render();
  } catch {
    // Asked again a second later, or at the next welcome.
    setTimeout(fetchProfiles, 1000);
    return;
  }
  if (state.wantedProfiles.size > 0) setTimeout(fetchProfiles, 50);
}

export async function loadConversations() {
  let offset = 0;
  for (let page = 0; page < 20; page++) {
    const answer = await session.ask({ unread: { offset } });
    const counts = answer.unread ?? {};
    for (const entry of counts.entries ?? []) {
      const c = conversation(keyOf(entry.conversation));
      c.unread = num(entry.unread);
      c.mentions = num(entry.mentions);
      c.lastSeq = Math.max(c.lastSeq, num(entry.lastSeq));
      c.readSeq = num(entry.readSeq);
      c.peerDeliveredSeq = Math.max(c.peerDeliveredSeq, num(entry.peerDeliveredSeq));
      c.peerReadSeq = Math.max(c.peerReadSeq, num(entry.peerReadSeq));
      c.notify = entry.notify ?? "NOTIFY_LEVEL_ALL";
      if (c.isGroup) c.title = entry.title ?? "";
      else wantProfile(c.peer.user);
    }
    if (!counts.more) break;
    offset = num(counts.nextOffset);
  }
  state.loadedList = true;
  render();
  // A notification's click opened this page at a conversation: shown once the list is in.
  openAsked();
  // The last message of each, for the list (again where it was the one kept offline).
  await Promise.all(
    [...state.conversations.values()]
      .filter((c) => (!c.last || isRestored(c.last)) && c.lastSeq > 0)
      .slice(0, 200)
      .map(async (c) => {
        const answer = await session.ask({ history: { conversation: c.peer, limit: 1 } }).catch(() => null);
        const newest = answer?.history?.messages?.[0];
        if (newest && (!c.last || isRestored(c.last))) {
          c.last = newest;
          c.lastActivity = Math.max(c.lastActivity, num(newest.timeMs));
          wantProfile(newest.from);
        }
      }),
  );
  render();
}

// The page of messages before the oldest loaded (or the newest page).
export function loadOlder(c) {
  if (c.loading) return c.loading;
  if (c.loaded && !c.more) return Promise.resolve();
  const loaded = [...c.messages.keys()];
  const oldest = c.loaded && loaded.length > 0 ? Math.min(...loaded) : 0;
  const history = { conversation: c.peer, limit: pageSize };
  if (oldest > 0) history.beforeSeq = String(oldest);
  c.loading = session
    .ask({ history })
    .then((answer) => {
      const page = answer.history ?? {};
      if (!c.loaded) forgetRestored(c);
      for (const message of page.messages ?? []) addMessage(c, message);
      for (const mark of page.receipts ?? []) {
        if (mark.user === session.user) continue;
        if (!c.isGroup) {
          c.peerDeliveredSeq = Math.max(c.peerDeliveredSeq, num(mark.deliveredSeq));
          c.peerReadSeq = Math.max(c.peerReadSeq, num(mark.readSeq));
        } else {
          const known = c.marks.get(mark.user) ?? { delivered: 0, read: 0, joined: 0 };
          known.delivered = Math.max(known.delivered, num(mark.deliveredSeq));
          known.read = Math.max(known.read, num(mark.readSeq));
          known.joined = num(mark.joinedSeq);
          c.marks.set(mark.user, known);
        }
      }
      c.more = !!page.more;
      c.loaded = true;
    })
    .catch((error) => {
      if (error.code === "not-member") {
        c.more = false;
        c.loaded = true;
      }
      throw error;
    })
    .finally(() => {
      c.loading = null;
    });
  return c.loading;
}

export async function loadMembers(c) {
  if (!c.isGroup) return;
  try {
    const answer = await session.ask({ groupMembers: { group: c.peer.group } });
    const members = answer.groupMembers ?? {};
    c.members = new Map(
      (members.members ?? []).map((m) => [m.user, { role: m.role ?? "GROUP_ROLE_MEMBER", joinedSeq: num(m.joinedSeq) }]),
    );
    c.title = members.title ?? "";
    c.membersFresh = true;
    for (const user of c.members.keys()) wantProfile(user);
    c.left = !c.members.has(session.user);
  } catch (error) {
    if (error.code === "not-member") c.left = true;
  }
  render();
}

export function markRead(c) {
  if (c.lastSeq <= c.readSeq && c.unread === 0) return;
  c.readSeq = Math.max(c.readSeq, c.lastSeq);
  c.unread = 0;
  c.mentions = 0;
  if (c.lastSeq > 0) {
    session.request({ markRead: { conversation: c.peer, upToSeq: String(c.lastSeq) } }, () => true);
  }
}

// What the page's controls ask for: each resolves with the server's answer, or rejects with its error.

function ref(c, message) {
  return { conversation: c.peer, seq: String(message.seq) };
}

export function sendReaction(c, message, key, off) {
  return session.ask({ react: { message: ref(c, message), key, off } });
}

// Pins (shown at the top of a conversation), and deleting a message for oneself.
export async function loadPins(c) {
  // An answer older than the last pin event is not the list: that event asks again.
  const generation = (c.pinsGeneration = (c.pinsGeneration ?? 0) + 1);
  try {
    const answer = await session.ask({ pins: { conversation: c.peer } });
    if (generation === c.pinsGeneration) c.pins = answer.pins?.messages ?? [];
  } finally {
    // Asked once, answered or refused (a conversation not yet made): not asked at every redraw.
    if (generation === c.pinsGeneration) c.pinsLoaded = true;
  }
}

export function pinMessage(c, message, off) {
  return session.ask({ pin: { message: ref(c, message), off } });
}

export function hideMessage(c, message) {
  return session.ask({ hide: { message: ref(c, message) } });
}

export function recallMessage(c, message) {
  return session.ask({ recall: { conversation: c.peer, id: message.id } });
}

// A forward: the server copies the body into `to`.
export function forwardMessage(c, message, to, id) {
  return session.ask({ send: { id, to, forward: ref(c, message) } });
}

export function fetchReactors(c, message) {
  return session.ask({ reactors: { message: ref(c, message) } });
}

export function fetchVersions(c, message) {
  return session.ask({ versions: { message: ref(c, message) } });
}

export function editMessage(c, message, text) {
  return session.ask({ edit: { message: ref(c, message), text } });
}

export function findUser(name) {
  return session.ask({ findUser: { name } });
}

export function manageGroup(group, action) {
  return session.ask({ manageGroup: { group, ...action } });
}

export function leaveGroups(addedBy) {
  return session.ask({ leaveGroups: { addedBy } });
}

export function setProfile(profile) {
  return session.ask({ setProfile: profile });
}

export function searchMessages(request) {
  return session.ask({ search: request });
}

// Blocking: a blocked user's direct messages never reach this user, and it sees nothing of this user.
export async function loadBlocks() {
  const answer = await session.ask({ blocks: {} });
  state.blocked = new Set((answer.blocks?.users ?? []).map((entry) => entry.user.toLowerCase()));
}

export async function setBlocked(user, blocked) {
  await session.ask({ block: { user, blocked } });
  if (blocked) state.blocked.add(user.toLowerCase());
  else state.blocked.delete(user.toLowerCase());
}

export function setNotify(peer, level) {
  return session.ask({ setNotify: { conversation: peer, level } });
}

// The account: its password, its devices (each logged out by id), and the account itself (given its password).
export function changePassword(oldPassword, newPassword, keepDevices) {
  return session.ask({ changePassword: { oldPassword, newPassword, keepDevices } });
}

export function listDevices() {
  return session.ask({ devices: {} });
}

export function revokeDevice(id) {
  return session.ask({ revokeDevice: { id } });
}

export function deleteAccount(password) {
  return session.ask({ deleteAccount: { password } });
}

// Sent without waiting: a message from the outbox (each of its answers to `onAnswer`), the events applied, typing.
export function sendMessage(send, onAnswer) {
  session.request({ send }, onAnswer);
}

export function acknowledgeEvents(cursor) {
  session.post({ ack: { cursor: String(cursor) } });
}

export function sayTyping(peer, typing) {
  session.post({ typing: { conversation: peer, typing } });
}
