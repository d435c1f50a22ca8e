// Courier's web chat: the page's state and what it shows. The server's envelopes are documented in docs/PROTOCOL.md;
// the connection is session.js's, uploads upload.js's, and text helpers text.js's.

import { Session, RequestError } from "./session.js";
import { Upload, imageSize, mediaKind, thumbnail } from "./upload.js";
import { h, relativeTime, clock, fullTime, byteSize, richText, mentions, markedFragment, initial, hue } from "./text.js";
import { registerWorker, onNotificationClick, pushSupported, pushEnabled, enablePush, disablePush } from "./push.js";

const $ = (id) => document.getElementById(id);
// Replaces an element's children, leaving out the absent ones (a `cond ? element : null`).
const fill = (element, ...children) =>
  element.replaceChildren(...children.flat().filter((child) => child !== null && child !== undefined && child !== false));
const reactionKeys = ["👍", "❤️", "😂", "🎉", "😮", "😢"];
const pageSize = 30;

const session = new Session({
  url: `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`,
  deviceName: deviceName(),
});

function deviceName() {
  const agent = navigator.userAgent;
  const browser = /Edg\//.test(agent)
    ? "Edge"
    : /Firefox\//.test(agent)
      ? "Firefox"
      : /Chrom(e|ium)\//.test(agent)
        ? "Chromium"
        : /Safari\//.test(agent)
          ? "Safari"
          : "Browser";
  return `Web · ${browser}`;
}

// ---------------------------------------------------------------------------------------------------------------
// State

const state = {
  conversations: new Map(), // key -> conversation
  open: null, // the open conversation's key
  profiles: new Map(), // user -> Profile
  presence: new Map(), // user -> {online, lastSeenMs}
  outbox: [], // messages written and not yet acknowledged, kept in storage
  replyTo: null, // the message a reply answers
  editing: null, // the message being edited
  loadedList: false,
  wantedProfiles: new Set(),
};

const keyOf = (conversation) => (conversation.user ? `u:${conversation.user}` : `g:${conversation.group}`);
const peerOf = (key) => (key.startsWith("u:") ? { user: key.slice(2) } : { group: key.slice(2) });
const num = (value) => Number(value ?? 0);

function conversation(key) {
  let c = state.conversations.get(key);
  if (!c) {
    c = {
      key,
      peer: peerOf(key),
      isGroup: key.startsWith("g:"),
      title: "",
      unread: 0,
      mentions: 0,
      lastSeq: 0,
      readSeq: 0,
      peerDeliveredSeq: 0,
      peerReadSeq: 0,
      notify: "NOTIFY_LEVEL_ALL",
      last: null,
      messages: new Map(), // seq -> message
      more: true,
      loaded: false,
      loading: null,
      members: new Map(), // user -> {role, joinedSeq}
      marks: new Map(), // user -> {delivered, read, joined}
      typing: new Map(), // user -> expiry
      lastActivity: 0,
    };
    state.conversations.set(key, c);
  }
  return c;
}

function displayName(user) {
  const name = state.profiles.get(user)?.displayName;
  return name || user;
}

// A program's account (its profile says `bot`) is marked wherever its name shows.
const isBot = (user) => !!user && state.profiles.get(user)?.bot === true;
const botBadge = () => h("span", { class: "bot-badge", title: "a bot: a program's account", text: "bot" });

function titleOf(c) {
  if (c.isGroup) return c.title || c.peer.group;
  return displayName(c.peer.user);
}

function wantProfile(user) {
  if (!user || state.profiles.has(user) || state.wantedProfiles.has(user)) return;
  state.wantedProfiles.add(user);
  clearTimeout(wantProfile.timer);
  wantProfile.timer = setTimeout(fetchProfiles, 50);
}

async function fetchProfiles() {
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

const isDigest = (sha256) => typeof sha256 === "string" && /^[0-9a-f]{64}$/.test(sha256);

// Audio and video stream from `/media` with byte ranges, which only a URL gives a player: the token rides in it.
function mediaURL(sha256) {
  return `/media/${sha256}?token=${encodeURIComponent(session.token)}`;
}

// Pictures and files are fetched with the token in a header and shown from `blob:` URLs, so no link on the page
// (copied, opened in a tab, kept in the history) carries the token. Dropped at sign-out.
const blobs = new Map(); // sha256 -> Promise of a blob: URL
function blobURL(sha256) {
  if (!blobs.has(sha256)) {
    const url = fetch(`/media/${sha256}`, { headers: { Authorization: `Bearer ${session.token}` } })
      .then((answer) => {
        if (!answer.ok) throw new Error(`media: ${answer.status}`);
        return answer.blob();
      })
      .then((blob) => URL.createObjectURL(blob));
    url.catch(() => blobs.delete(sha256));
    blobs.set(sha256, url);
  }
  return blobs.get(sha256);
}

function dropBlobs() {
  for (const url of blobs.values()) url.then(URL.revokeObjectURL, () => {});
  blobs.clear();
  mediaNodes.clear();
}

function picture(sha256, attributes) {
  const image = h("img", attributes);
  if (isDigest(sha256)) blobURL(sha256).then((url) => (image.src = url), () => image.classList.add("broken"));
  return image;
}

// ---------------------------------------------------------------------------------------------------------------
// The outbox: a message goes in before it is sent and leaves when the server acknowledges it. It is kept in the
// browser's storage, so one written while the server cannot be reached goes out at the next welcome, once: its id
// is chosen here, and the server answers a resend of an id it committed with the original acknowledgement.

// Lines in a group's history from its membership and title events ("bob joined", "alice named the group …"), each
// after the message it followed (by seq). Kept in the browser (the newest 100 a group), as history pages carry none.
const noticesKey = () => `courier.notices.${session.user}`;
const maxNotices = 100;

function storedNotices() {
  try {
    const stored = JSON.parse(localStorage.getItem(noticesKey()) || "{}");
    return stored && typeof stored === "object" && !Array.isArray(stored) ? stored : {};
  } catch {
    return {};
  }
}

function addNotice(c, afterSeq, notice) {
  const entry = { afterSeq, timeMs: Date.now(), ...notice };
  c.notices = [...noticesOf(c), entry].slice(-maxNotices);
  const all = storedNotices();
  all[c.key] = c.notices;
  try {
    localStorage.setItem(noticesKey(), JSON.stringify(all));
  } catch {
    // Storage full: the lines stay for this visit.
  }
}

function noticesOf(c) {
  if (!c.notices) c.notices = Array.isArray(storedNotices()[c.key]) ? storedNotices()[c.key] : [];
  return c.notices;
}

function noticeRow(notice) {
  const who = notice.user === session.user ? "You" : notice.user ? displayName(notice.user) : "The administrator";
  const text =
    notice.kind === "joined" ? `${who} joined` :
    notice.kind === "left" ? `${who} left` :
    notice.title ? `${who} named the group “${notice.title}”` : `${who} took the group's title away`;
  return h("p", { class: "notice", dir: "auto", text });
}

const outboxKey = () => `courier.outbox.${session.user}`;

// Tabs of one browser share the outbox: each merges what the others stored (by id) and drops what any of them saw
// acknowledged. Two tabs may then send one entry both: the server stores it once (same id) and both hear the ack.
const acknowledgedIds = new Set();

function storedOutbox() {
  try {
    const stored = JSON.parse(localStorage.getItem(outboxKey()) || "[]");
    return Array.isArray(stored) ? stored : [];
  } catch {
    return [];
  }
}

function loadOutbox() {
  const known = new Map(state.outbox.map((entry) => [entry.id, entry]));
  for (const entry of storedOutbox()) {
    if (!known.has(entry.id) && !acknowledgedIds.has(entry.id)) known.set(entry.id, { ...entry, inFlight: false });
  }
  state.outbox = [...known.values()].sort((a, b) => a.createdMs - b.createdMs);
  if (session.state !== "online") for (const entry of state.outbox) entry.inFlight = false;
}

function saveOutbox() {
  const mine = new Set(state.outbox.map((entry) => entry.id));
  const others = storedOutbox().filter((entry) => !mine.has(entry.id) && !acknowledgedIds.has(entry.id));
  const kept = [...state.outbox.map(({ inFlight, retryAt, ...entry }) => entry), ...others];
  localStorage.setItem(outboxKey(), JSON.stringify(kept.sort((a, b) => a.createdMs - b.createdMs)));
}

window.addEventListener("storage", (event) => {
  if (session.user && event.key === outboxKey()) {
    loadOutbox();
    flushOutbox();
    render();
  }
});

function newId() {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return `w-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

function queue(key, body, replyTo = null) {
  const entry = { id: newId(), key, to: peerOf(key), body, createdMs: Date.now() };
  if (replyTo) entry.replyTo = { seq: replyTo.seq, from: replyTo.from, body: replyTo.body };
  state.outbox.push(entry);
  saveOutbox();
  conversation(key).lastActivity = Date.now();
  flushOutbox();
  render({ toBottom: true });
}

// Errors that pass: the entry is sent again, in its place, after the server's `retryAfterMs` (or a second).
const passingErrors = new Set(["storage-failed", "rate-limited", "throttled", "server-full", "shutting-down"]);
let flushTimer = null;

function flushOutbox() {
  if (session.state !== "online") return;
  const window = Math.max(1, Math.min(32, num(session.limits.maxUnackedSends) || 32));
  let inFlight = state.outbox.filter((entry) => entry.inFlight).length;
  for (const entry of state.outbox) {
    if (inFlight >= window) break;
    if (entry.inFlight || entry.error) continue;
    if (entry.retryAt > Date.now()) {
      // Nothing after it overtakes it.
      clearTimeout(flushTimer);
      flushTimer = setTimeout(flushOutbox, entry.retryAt - Date.now());
      break;
    }
    entry.inFlight = true;
    inFlight++;
    const send = { id: entry.id, to: entry.to, body: entry.body };
    if (entry.replyTo) send.replyTo = { conversation: entry.to, seq: entry.replyTo.seq };
    session.request({ send }, (envelope) => {
      entry.inFlight = false;
      const error = envelope.error;
      if (envelope.sendAck) {
        acknowledged(entry, envelope.sendAck);
      } else if (error && passingErrors.has(error.code)) {
        entry.retryAt = Date.now() + Math.max(1000, num(error.retryAfterMs));
      } else if (error && error.code !== "disconnected") {
        entry.error = `${error.message || error.code} (${error.code})`;
        saveOutbox();
      }
      render();
      flushOutbox();
      return true;
    });
  }
}

function retrySend(entry) {
  delete entry.error;
  delete entry.retryAt;
  saveOutbox();
  flushOutbox();
  render();
}

function acknowledged(entry, ack) {
  acknowledgedIds.add(entry.id);
  state.outbox = state.outbox.filter((other) => other.id !== entry.id);
  saveOutbox();
  const c = conversation(keyOf(ack.conversation));
  const seq = num(ack.seq);
  if (!c.messages.has(seq)) {
    const message = {
      id: entry.id,
      from: session.user,
      conversation: ack.conversation,
      seq: String(seq),
      timeMs: ack.timeMs,
      body: entry.body,
    };
    if (entry.replyTo) message.replyTo = { ...entry.replyTo, seq: String(entry.replyTo.seq), visible: true };
    addMessage(c, message);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// What the server says

function addMessage(c, message) {
  const seq = num(message.seq);
  const known = c.messages.get(seq);
  if (known && !message.reactions) message.reactions = known.reactions;
  c.messages.set(seq, message);
  if (seq > c.lastSeq) c.lastSeq = seq;
  if (!c.last || seq >= num(c.last.seq)) c.last = message;
  c.lastActivity = Math.max(c.lastActivity, num(message.timeMs));
  wantProfile(message.from);
}

// Events are applied once each, in cursor order: one at or below the newest applied is skipped (a resend after a
// reconnect; on a page's first login, what the lists and pages it loads already show). Each page is acknowledged
// once applied; one that fails to apply is logged and the page goes on (the next load of the conversation shows it).
function onEvents(events) {
  let last = 0;
  for (const event of events.events ?? []) {
    const cursor = num(event.cursor);
    last = Math.max(last, cursor);
    if (cursor <= session.cursor) continue;
    session.cursor = cursor;
    try {
      applyEvent(event);
    } catch (error) {
      console.error("event", cursor, error);
    }
  }
  if (last > 0) session.post({ ack: { cursor: String(last) } });
  render();
}

function applyEvent(event) {
  if (event.message) {
    const message = event.message;
    const c = conversation(keyOf(message.conversation));
    const seq = num(message.seq);
    const isNew = !c.messages.has(seq) && seq > c.lastSeq;
    addMessage(c, message);
    if (message.from === session.user) {
      c.readSeq = Math.max(c.readSeq, seq);
    } else if (isNew && seq > c.readSeq) {
      if (state.open === c.key && document.visibilityState === "visible") markRead(c);
      else {
        c.unread++;
        if (c.isGroup && mentions(message.body?.text ?? message.body?.media?.caption, session.user)) c.mentions++;
      }
    }
    c.typing.delete(message.from);
  } else if (event.edit) {
    const c = conversation(keyOf(event.edit.conversation));
    const known = c.messages.get(num(event.edit.seq));
    if (known) {
      known.body = event.edit.body;
      known.editedMs = event.edit.editedMs;
    }
    for (const message of c.messages.values()) {
      if (message.replyTo && num(message.replyTo.seq) === num(event.edit.seq)) message.replyTo.body = event.edit.body;
    }
  } else if (event.recall) {
    const c = conversation(keyOf(event.recall.conversation));
    const known = c.messages.get(num(event.recall.seq));
    if (known) {
      known.recalled = true;
      known.body = {};
    }
    for (const message of c.messages.values()) {
      if (message.replyTo && num(message.replyTo.seq) === num(event.recall.seq)) {
        message.replyTo.recalled = true;
        message.replyTo.body = {};
      }
    }
  } else if (event.reaction) {
    const notice = event.reaction;
    const c = conversation(keyOf(notice.message.conversation));
    const known = c.messages.get(num(notice.message.seq));
    if (known) {
      const reactions = (known.reactions = known.reactions ?? []);
      let entry = reactions.find((r) => r.key === notice.key);
      if (!entry) reactions.push((entry = { key: notice.key, count: 0, mine: false }));
      entry.count = Math.max(0, num(entry.count) + (notice.on ? 1 : -1));
      if (notice.user === session.user) entry.mine = !!notice.on;
      known.reactions = reactions.filter((r) => num(r.count) > 0);
    }
  } else if (event.receipt) {
    const receipt = event.receipt;
    const c = conversation(keyOf(receipt.conversation));
    const upTo = num(receipt.upToSeq);
    const read = receipt.kind === "KIND_READ";
    if (receipt.user === session.user) {
      if (read && upTo > c.readSeq) {
        c.readSeq = upTo;
        if (upTo >= c.lastSeq) c.unread = c.mentions = 0;
      }
    } else if (!c.isGroup) {
      c.peerDeliveredSeq = Math.max(c.peerDeliveredSeq, upTo);
      if (read) c.peerReadSeq = Math.max(c.peerReadSeq, upTo);
    } else {
      const mark = c.marks.get(receipt.user) ?? { delivered: 0, read: 0, joined: 0 };
      mark.delivered = Math.max(mark.delivered, upTo);
      if (read) mark.read = Math.max(mark.read, upTo);
      c.marks.set(receipt.user, mark);
    }
  } else if (event.membership) {
    const notice = event.membership;
    const c = conversation(`g:${notice.group}`);
    const joined = notice.change === "CHANGE_JOINED";
    addNotice(c, num(notice.seq), { user: notice.user, kind: joined ? "joined" : "left" });
    if (joined) c.members.set(notice.user, { role: "GROUP_ROLE_MEMBER", joinedSeq: num(notice.seq) });
    else c.members.delete(notice.user);
    if (notice.user === session.user && !joined) c.left = true;
    if (notice.user === session.user && joined) c.left = false;
    c.lastActivity = Math.max(c.lastActivity, Date.now());
    wantProfile(notice.user);
  } else if (event.profile) {
    state.profiles.set(event.profile.user, event.profile);
  } else if (event.role) {
    const c = conversation(`g:${event.role.group}`);
    const member = c.members.get(event.role.user) ?? { joinedSeq: 0 };
    member.role = event.role.role ?? "GROUP_ROLE_MEMBER";
    c.members.set(event.role.user, member);
  } else if (event.title) {
    const c = conversation(`g:${event.title.group}`);
    c.title = event.title.title ?? "";
    addNotice(c, c.lastSeq, { user: event.title.by ?? "", kind: "title", title: c.title });
  } else if (event.notify) {
    conversation(keyOf(event.notify.conversation)).notify = event.notify.level ?? "NOTIFY_LEVEL_ALL";
  }
}

// Typing shows where the conversation is known here (a new one the user opened too); a typing notice never makes a
// conversation appear in the list by itself.
function onTyping(notice) {
  const key = keyOf(notice.conversation);
  if (!state.conversations.has(key) && state.open !== key) return;
  const c = conversation(key);
  if (notice.typing) c.typing.set(notice.user, Date.now() + 6000);
  else c.typing.delete(notice.user);
  render({ messages: false });
}

function onPresence(notice) {
  state.presence.set(notice.user, { online: !!notice.online, lastSeenMs: num(notice.lastSeenMs) });
  render({ messages: false });
}

// ---------------------------------------------------------------------------------------------------------------
// Asking the server

async function loadConversations() {
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
  if (openAtStart) {
    const key = openAtStart;
    openAtStart = "";
    // Only one of the user's own conversations: a link cannot start one with anybody.
    if (state.conversations.has(key)) openConversation(key);
  }
  // The last message of each, for the list.
  await Promise.all(
    [...state.conversations.values()]
      .filter((c) => !c.last && c.lastSeq > 0)
      .slice(0, 200)
      .map(async (c) => {
        const answer = await session.ask({ history: { conversation: c.peer, limit: 1 } }).catch(() => null);
        const newest = answer?.history?.messages?.[0];
        if (newest && !c.last) {
          c.last = newest;
          c.lastActivity = Math.max(c.lastActivity, num(newest.timeMs));
          wantProfile(newest.from);
        }
      }),
  );
  render();
}

// The page of messages before the oldest loaded (or the newest page).
function loadOlder(c) {
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

async function loadMembers(c) {
  if (!c.isGroup) return;
  try {
    const answer = await session.ask({ groupMembers: { group: c.peer.group } });
    const members = answer.groupMembers ?? {};
    c.members = new Map(
      (members.members ?? []).map((m) => [m.user, { role: m.role ?? "GROUP_ROLE_MEMBER", joinedSeq: num(m.joinedSeq) }]),
    );
    c.title = members.title ?? "";
    for (const user of c.members.keys()) wantProfile(user);
    c.left = !c.members.has(session.user);
  } catch (error) {
    if (error.code === "not-member") c.left = true;
  }
  render();
}

function markRead(c) {
  if (c.lastSeq <= c.readSeq && c.unread === 0) return;
  c.readSeq = Math.max(c.readSeq, c.lastSeq);
  c.unread = 0;
  c.mentions = 0;
  if (c.lastSeq > 0) {
    session.request({ markRead: { conversation: c.peer, upToSeq: String(c.lastSeq) } }, () => true);
  }
}

// Typing notices: "typing" at most every 3 s while the draft changes, "stopped" 4 s after the last change, on a send,
// or when the draft loses focus; each to the conversation the typing was in.
let typingSentAt = 0;
let typingIn = null;
let typingStop = null;
function typing(active) {
  clearTimeout(typingStop);
  if (typingIn && (!active || typingIn.key !== state.open)) {
    if (typingSentAt) session.post({ typing: { conversation: typingIn.peer, typing: false } });
    typingSentAt = 0;
    typingIn = null;
  }
  const c = state.open && conversation(state.open);
  if (!active || !c || session.state !== "online") return;
  if (Date.now() - typingSentAt > 3000) {
    typingSentAt = Date.now();
    typingIn = c;
    session.post({ typing: { conversation: c.peer, typing: true } });
  }
  typingStop = setTimeout(() => typing(false), 4000);
}

function showError(error) {
  const text = error instanceof RequestError ? `${error.message} (${error.code})` : String(error.message ?? error);
  toast(text);
}

function toast(text) {
  const box = h("div", { class: "toast", role: "alert", text });
  document.body.append(box);
  setTimeout(() => box.remove(), 6000);
}

// ---------------------------------------------------------------------------------------------------------------
// Opening a conversation, and jumping to a message in it

async function openConversation(key, { focus = true } = {}) {
  const c = conversation(key);
  const changed = state.open !== key;
  state.open = key;
  if (changed) {
    state.replyTo = null;
    state.editing = null;
    $("draft").value = loadDraft(key);
  }
  document.body.classList.add("chat-open");
  render({ toBottom: true });
  if (focus) $("draft").focus();
  if (changed) loadMembers(c);
  if (!c.loaded) {
    try {
      await loadOlder(c);
    } catch (error) {
      if (error.code !== "disconnected") showError(error);
    }
  }
  if (state.open === key && document.visibilityState === "visible") markRead(c);
  render({ toBottom: true });
}

function closeConversation() {
  state.open = null;
  document.body.classList.remove("chat-open");
  render();
}

async function jumpTo(key, seq) {
  await openConversation(key, { focus: false });
  const c = conversation(key);
  for (let pages = 0; !c.messages.has(seq) && c.more && pages < 100; pages++) {
    try {
      await loadOlder(c);
    } catch (error) {
      showError(error);
      return;
    }
  }
  messagesWanted = true;
  draw();
  const element = document.querySelector(`#messages [data-seq="${seq}"]`);
  if (!element) {
    toast("That message can no longer be shown.");
    return;
  }
  element.scrollIntoView({ block: "center" });
  // Marked for a few seconds (across redraws), and focused for a screen reader.
  state.flash = { key, seq, until: Date.now() + 3000 };
  element.classList.add("flash");
  element.focus({ preventScroll: true });
  setTimeout(() => render(), 3100);
}

const drafts = new Map();
const loadDraft = (key) => drafts.get(key) ?? "";

// ---------------------------------------------------------------------------------------------------------------
// Rendering

// Everything that changes asks for a redraw; one happens per frame, however many asked (a reconnect's presence
// notices, a page of events). The messages are redrawn only when something asked for them.
let renderQueued = false;
let scrollToBottom = false;
let messagesWanted = false;
function render({ toBottom = false, messages = true } = {}) {
  scrollToBottom ||= toBottom;
  messagesWanted ||= messages;
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(draw);
}

// Draws what was asked for, now (a jump draws at once, to find the message it jumps to).
function draw() {
  renderQueued = false;
  renderMe();
  renderList();
  renderHeader();
  if (messagesWanted) renderMessages(scrollToBottom);
  messagesWanted = false;
  scrollToBottom = false;
}

function avatar(user, label = user, size = "") {
  const thumb = user ? state.profiles.get(user)?.thumbnail?.sha256 : null;
  if (isDigest(thumb)) return picture(thumb, { class: `avatar ${size}`, alt: "" });
  const element = h("span", { class: `avatar ${size}`, "aria-hidden": "true", text: initial(label) });
  element.style.setProperty("--hue", hue(label));
  return element;
}

function preview(message) {
  if (!message) return "";
  if (message.recalled) return "Message recalled";
  const body = message.body ?? {};
  let text = body.text ?? "";
  if (body.media) {
    const media = body.media;
    const kind = { KIND_IMAGE: "🖼 Picture", KIND_VOICE: "🎤 Voice", KIND_VIDEO: "🎬 Video" }[media.kind];
    text = `${kind ?? `📄 ${media.name || "File"}`}${media.caption ? ` ${media.caption}` : ""}`;
  }
  return text.replace(/\s+/g, " ").slice(0, 120);
}

function renderList() {
  const list = $("conversations");
  const pendingKeys = new Set(state.outbox.map((entry) => entry.key));
  const items = [...state.conversations.values()]
    .filter((c) => c.last || c.lastSeq > 0 || pendingKeys.has(c.key) || c.key === state.open || c.isGroup)
    .sort((a, b) => b.lastActivity - a.lastActivity || titleOf(a).localeCompare(titleOf(b)));
  $("no-conversations").hidden = items.length > 0 || !state.loadedList;
  const focused = list.contains(document.activeElement) ? document.activeElement.dataset.key : null;
  list.replaceChildren(
    ...items.map((c) => {
      const title = titleOf(c);
      const last = c.last;
      const who = last && c.isGroup ? (last.from === session.user ? "You: " : `${displayName(last.from)}: `) : "";
      const typingNow = [...c.typing.entries()].some(([, until]) => until > Date.now());
      const online = !c.isGroup && state.presence.get(c.peer.user)?.online;
      const muted = c.notify !== "NOTIFY_LEVEL_ALL";
      return h(
        "li",
        {},
        h(
          "button",
          {
            type: "button",
            class: `conversation${c.key === state.open ? " selected" : ""}${c.unread > 0 ? " unread" : ""}`,
            "data-key": c.key,
            "aria-current": c.key === state.open ? "true" : false,
            onclick: () => openConversation(c.key),
          },
          h("span", { class: "avatar-slot" }, avatar(c.isGroup ? null : c.peer.user, title), online ? h("span", { class: "online-dot", title: "online" }) : null),
          h(
            "span",
            { class: "conversation-text" },
            h(
              "span",
              { class: "conversation-top" },
              h("span", { class: "conversation-title", dir: "auto", text: title }),
              !c.isGroup && isBot(c.peer.user) ? botBadge() : null,
              muted ? h("span", { class: "muted", title: "muted", "aria-label": "muted", text: "🔕" }) : null,
              h("time", { class: "time", "data-ms": last ? String(num(last.timeMs)) : false, title: last ? fullTime(num(last.timeMs)) : "", text: last ? relativeTime(num(last.timeMs)) : "" }),
            ),
            h(
              "span",
              { class: "conversation-bottom" },
              h("span", { class: "preview", dir: "auto", text: typingNow ? "typing…" : who + preview(last) }),
              c.mentions > 0 ? h("span", { class: "badge mention-badge", "aria-label": `${c.mentions} mentions`, text: "@" }) : null,
              c.unread > 0
                ? h("span", { class: `badge${muted ? " quiet" : ""}`, "aria-label": `${c.unread} unread`, text: String(c.unread) })
                : null,
            ),
          ),
        ),
      );
    }),
  );
  if (focused) list.querySelector(`[data-key="${CSS.escape(focused)}"]`)?.focus({ preventScroll: true });
}

function subtitle(c) {
  const typers = [...c.typing.entries()].filter(([, until]) => until > Date.now()).map(([user]) => displayName(user));
  if (typers.length > 0) return `${typers.join(", ")} ${typers.length === 1 ? "is" : "are"} typing…`;
  if (c.isGroup) {
    if (c.left) return "You are not a member";
    const count = c.members.size;
    return count ? `${count} member${count === 1 ? "" : "s"} · ${c.peer.group}` : c.peer.group;
  }
  const presence = state.presence.get(c.peer.user);
  const name = c.peer.user;
  if (presence?.online) return `${name} · online`;
  if (presence?.lastSeenMs) return `${name} · last seen ${relativeTime(presence.lastSeenMs)}`;
  return name;
}

function renderHeader() {
  const c = state.open && conversation(state.open);
  $("no-chat").hidden = !!c;
  $("chat-bar").hidden = !c;
  $("messages").hidden = !c;
  $("composer").hidden = !c;
  if (!c) return;
  const title = titleOf(c);
  $("chat-title").replaceChildren(h("bdi", { text: title }), ...(!c.isGroup && isBot(c.peer.user) ? [botBadge()] : []));
  $("chat-subtitle").textContent = subtitle(c);
  $("chat-avatar").replaceChildren(avatar(c.isGroup ? null : c.peer.user, title));
  $("notify").value = c.notify;
  $("manage").hidden = !c.isGroup;
  document.title = `${title} · Courier`;
  const context = $("composer-context");
  const target = state.editing ?? state.replyTo;
  context.hidden = !target;
  if (target) {
    $("composer-context-text").textContent = state.editing
      ? `Editing: ${preview(target)}`
      : `Replying to ${displayName(target.from)}: ${preview(target)}`;
  }
  $("send").textContent = state.editing ? "Save" : "Send";
}

function memberNames(c) {
  const names = new Set([...c.members.keys()].map((name) => name.toLowerCase()));
  if (!c.isGroup) names.add(c.peer.user.toLowerCase()).add(session.user.toLowerCase());
  return names;
}

// Whether the message pane's view is at its bottom (the user has not scrolled up from there).
let pinnedToBottom = true;

function renderMessages(toBottom) {
  const c = state.open && conversation(state.open);
  const box = $("messages");
  if (!c) {
    box.replaceChildren();
    return;
  }
  const focused = document.activeElement?.dataset?.focus;
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
  const fromBottom = box.scrollHeight - box.scrollTop;
  const names = memberNames(c);
  const rows = [];
  rows.push(
    c.more || !c.loaded
      ? h("button", { type: "button", class: "older", "data-focus": "older", onclick: () => older(c) }, c.loading ? "Loading…" : "Load older messages")
      : h("p", { class: "start", text: "The beginning of the conversation" }),
  );
  let day = "";
  // Membership and title lines go after the message they followed; those after the newest message, at the end.
  const notices = c.isGroup ? noticesOf(c).filter((n) => typeof n?.afterSeq === "number") : [];
  let next = 0;
  const oldest = Math.min(...c.messages.keys());
  while (next < notices.length && notices[next].afterSeq < oldest && c.more) next += 1;
  for (const seq of [...c.messages.keys()].sort((a, b) => a - b)) {
    while (next < notices.length && notices[next].afterSeq < seq) rows.push(noticeRow(notices[next++]));
    const message = c.messages.get(seq);
    const date = new Date(num(message.timeMs)).toDateString();
    if (date !== day) {
      day = date;
      rows.push(h("p", { class: "day", text: dayLabel(num(message.timeMs)) }));
    }
    rows.push(messageRow(c, message, names));
  }
  while (next < notices.length) rows.push(noticeRow(notices[next++]));
  for (const entry of state.outbox.filter((e) => e.key === c.key)) {
    rows.push(
      messageRow(
        c,
        { id: entry.id, from: session.user, body: entry.body, timeMs: entry.createdMs, replyTo: entry.replyTo, pending: entry },
        names,
      ),
    );
  }
  box.replaceChildren(...rows);
  if (toBottom || atBottom) {
    box.scrollTop = box.scrollHeight;
    pinnedToBottom = true;
  } else box.scrollTop = box.scrollHeight - fromBottom;
  if (focused) box.querySelector(`[data-focus="${CSS.escape(focused)}"]`)?.focus({ preventScroll: true });
}

function dayLabel(ms) {
  const date = new Date(ms);
  const today = new Date();
  if (date.toDateString() === today.toDateString()) return "Today";
  today.setDate(today.getDate() - 1);
  if (date.toDateString() === today.toDateString()) return "Yesterday";
  return date.toLocaleDateString(undefined, { weekday: "short", year: "numeric", month: "short", day: "numeric" });
}

async function older(c) {
  try {
    const pending = loadOlder(c);
    render();
    await pending;
  } catch (error) {
    showError(error);
  }
  render();
}

function statusMark(c, message) {
  if (message.pending) {
    if (message.pending.error) return h("span", { class: "status failed", title: message.pending.error, text: "⚠ not sent" });
    return h("span", { class: "status", "aria-label": "sending", title: "sending", text: "🕓" });
  }
  const seq = num(message.seq);
  if (!c.isGroup) {
    if (c.peerReadSeq >= seq) return h("span", { class: "status read", "aria-label": "read", title: "read", text: "✓✓" });
    if (c.peerDeliveredSeq >= seq) return h("span", { class: "status", "aria-label": "delivered", title: "delivered", text: "✓✓" });
    return h("span", { class: "status", "aria-label": "sent", title: "sent", text: "✓" });
  }
  let delivered = 0;
  let read = 0;
  for (const [user, mark] of c.marks) {
    if (user === session.user || mark.joined >= seq) continue;
    if (mark.delivered >= seq) delivered++;
    if (mark.read >= seq) read++;
  }
  if (read > 0) return h("span", { class: "status read", "aria-label": `read by ${read}`, title: `read by ${read}`, text: `✓✓ ${read}` });
  if (delivered > 0) return h("span", { class: "status", "aria-label": "delivered", title: "delivered", text: "✓✓" });
  return h("span", { class: "status", "aria-label": "sent", title: "sent", text: "✓" });
}

// Media elements, one per message, kept across redraws: a playing video goes on playing, a picture is not fetched
// again.
const mediaNodes = new Map();

function mediaElement(c, message, media) {
  const sha = media.sha256;
  const key = `${c.key}:${message.seq ?? message.id}:${sha}`;
  const cached = mediaNodes.get(key);
  if (cached) return cached;
  if (!isDigest(sha)) return h("p", { class: "text recalled", text: "(media this page cannot show)" });
  let element;
  if (media.kind === "KIND_IMAGE") {
    const image = picture(sha, { class: "image", alt: media.name || "picture" });
    if (media.width && media.height) {
      image.width = Math.min(280, num(media.width));
      image.style.aspectRatio = `${num(media.width)} / ${num(media.height)}`;
    }
    element = h("button", { type: "button", class: "image-link", "aria-label": `Open ${media.name || "the picture"}`, onclick: () => openViewer(sha, media.name) }, image);
  } else if (media.kind === "KIND_VOICE") {
    // The metadata only (a range of the file's start): its length shows before it is played.
    element = h("audio", { controls: true, preload: "metadata", src: mediaURL(sha), class: "voice" });
  } else if (media.kind === "KIND_VIDEO") {
    element = h("video", { controls: true, preload: "metadata", playsinline: true, src: mediaURL(sha), class: "video" });
  } else {
    element = h(
      "a",
      {
        class: "file",
        href: "#",
        "data-sha256": sha,
        download: media.name || "file",
        onclick: (event) => {
          event.preventDefault();
          // A large file goes to the browser's downloads straight from /media (the token in that one request's
          // URL), not through this page's memory.
          if (num(media.size) > 32 * 1024 * 1024) {
            h("a", { href: mediaURL(sha), download: media.name || "file" }).click();
            return;
          }
          blobURL(sha).then(
            (url) => h("a", { href: url, download: media.name || "file" }).click(),
            (error) => showError(error),
          );
        },
      },
      `📄 ${media.name || "file"} · ${byteSize(media.size)}`,
    );
  }
  mediaNodes.set(key, element);
  return element;
}

// A picture opens here, in the page, as an <img>: never as a document of its own (a `blob:` or `/media` address in a
// tab would be a page on this origin built from bytes a user uploaded, whatever type the server gave them).
function openViewer(sha256, name) {
  const viewer = $("viewer");
  const image = picture(sha256, { class: "viewer-image", alt: name || "picture" });
  fill(viewer,
    h("div", { class: "viewer-bar" },
      h("span", { class: "viewer-name", dir: "auto", text: name || "" }),
      h("button", { type: "button", class: "icon", "aria-label": "Close", title: "Close", onclick: () => viewer.close() }, "×")),
    h("button", { type: "button", class: "viewer-body", "aria-label": "Close the picture", onclick: () => viewer.close() }, image),
  );
  if (!viewer.open) viewer.showModal();
  viewer.querySelector(".viewer-bar button").focus();
}

function flashing(c, message) {
  const flash = state.flash;
  return !!flash && !message.pending && flash.key === c.key && flash.seq === num(message.seq) && flash.until > Date.now();
}

function messageRow(c, message, names) {
  const mine = message.from === session.user;
  const seq = num(message.seq);
  const body = message.body ?? {};
  const content = [];
  if (c.isGroup && !mine) {
    // The user name beside the display name: two members cannot pass for each other by choosing one name.
    const shown = displayName(message.from);
    content.push(
      h(
        "span",
        { class: "sender" },
        h("bdi", { text: shown }),
        shown !== message.from ? h("span", { class: "handle", text: ` @${message.from}` }) : null,
        isBot(message.from) ? botBadge() : null,
      ),
    );
  }
  const reply = message.replyTo;
  if (reply) {
    const quoted = !reply.visible && !message.pending
      ? "an earlier message"
      : reply.recalled
        ? "Message recalled"
        : `${displayName(reply.from)}: ${preview({ body: reply.body })}`;
    content.push(
      h("button", { type: "button", class: "quote", dir: "auto", "data-focus": `quote:${seq}`, onclick: () => jumpTo(c.key, num(reply.seq)) }, quoted),
    );
  }
  if (message.recalled) {
    content.push(h("p", { class: "text recalled", text: mine ? "You recalled this message" : "This message was recalled" }));
  } else if (body.media) {
    content.push(mediaElement(c, message, body.media));
    if (body.media.caption) content.push(h("p", { class: "text", dir: "auto" }, richText(body.media.caption, names)));
  } else {
    content.push(h("p", { class: "text", dir: "auto" }, richText(body.text ?? "", names)));
  }
  const meta = h(
    "span",
    { class: "meta" },
    num(message.editedMs) > 0 && !message.recalled ? h("span", { class: "edited", title: fullTime(num(message.editedMs)), text: "edited" }) : null,
    h("time", { title: fullTime(num(message.timeMs)), text: clock(num(message.timeMs)) }),
    mine ? statusMark(c, message) : null,
  );
  content.push(meta);
  const reactions = (message.reactions ?? []).filter((r) => num(r.count) > 0);
  if (reactions.length > 0 && !message.recalled) {
    content.push(
      h(
        "div",
        { class: "reactions" },
        reactions.map((r) =>
          h(
            "button",
            {
              type: "button",
              class: `reaction${r.mine ? " mine" : ""}`,
              "data-key": r.key,
              "data-focus": `reaction:${seq}:${r.key}`,
              "aria-pressed": r.mine ? "true" : "false",
              "aria-label": `${r.key} ${r.count}`,
              onclick: () => react(c, message, r.key, !!r.mine),
            },
            `${r.key} ${r.count}`,
          ),
        ),
      ),
    );
  }
  const actions =
    message.pending || message.recalled
      ? message.pending?.error
        ? h(
            "span",
            { class: "failed-actions" },
            h("button", { type: "button", class: "link", "data-action": "retry", onclick: () => retrySend(message.pending) }, "Retry"),
            h("button", { type: "button", class: "link", "data-action": "discard", onclick: () => discard(message.pending) }, "Discard"),
          )
        : null
      : h(
          "button",
          {
            type: "button",
            class: "icon actions",
            "aria-label": "Message actions",
            "aria-haspopup": "menu",
            "data-focus": `actions:${seq}`,
            onclick: (event) => openMenu(event.currentTarget, c, message),
          },
          "⋯",
        );
  return h(
    "article",
    {
      class: `message${mine ? " mine" : ""}${message.pending ? " pending" : ""}${flashing(c, message) ? " flash" : ""}`,
      "data-seq": message.pending ? false : String(seq),
      "data-id": message.id,
      "data-from": message.from,
      tabindex: "-1",
    },
    h("div", { class: "bubble" }, content),
    actions,
  );
}

// ---------------------------------------------------------------------------------------------------------------
// Message actions

function openMenu(anchor, c, message) {
  const menu = $("menu");
  const mine = message.from === session.user;
  let open = true;
  const close = () => {
    if (!open) return;
    open = false;
    menu.hidden = true;
    document.removeEventListener("keydown", onKey, true);
    document.removeEventListener("click", onOutside, true);
    // The button again, as the page now draws it (a redraw while the menu was open made a new one).
    const key = anchor.dataset.focus;
    (document.querySelector(`#messages [data-focus="${CSS.escape(key ?? "")}"]`) ?? anchor).focus();
  };
  const onKey = (event) => {
    if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      close();
    } else if (event.key === "ArrowDown" || event.key === "ArrowUp" || event.key === "ArrowRight" || event.key === "ArrowLeft") {
      // Arrow keys move between the menu's items.
      const items = [...menu.querySelectorAll("button")];
      const at = items.indexOf(document.activeElement);
      const step = event.key === "ArrowDown" || event.key === "ArrowRight" ? 1 : -1;
      items[(at + step + items.length) % items.length]?.focus();
      event.preventDefault();
    }
  };
  const onOutside = (event) => {
    if (!menu.contains(event.target)) close();
  };
  const item = (label, action, extra = {}) =>
    h("button", { type: "button", role: "menuitem", ...extra, onclick: () => { close(); action(); } }, label);
  const hasText = !message.body?.media || message.body.media.caption !== undefined;
  fill(menu,
    h(
      "div",
      { class: "menu-reactions", role: "group", "aria-label": "React" },
      reactionKeys.map((key) => {
        const mineAlready = (message.reactions ?? []).some((r) => r.key === key && r.mine);
        return item(key, () => react(c, message, key, mineAlready), { "data-key": key, "aria-label": `React ${key}` });
      }),
    ),
    item("Reply", () => startReply(message), { "data-action": "reply" }),
    mine && hasText && within(message, session.limits?.editWindowMs) ? item("Edit", () => startEdit(message), { "data-action": "edit" }) : null,
    mine && within(message, session.limits?.recallWindowMs)
      ? item(`Recall${left(message, session.limits?.recallWindowMs)}`, () => recall(c, message), { "data-action": "recall" })
      : null,
    num(message.editedMs) > 0 ? item("Earlier versions", () => showVersions(c, message), { "data-action": "versions" }) : null,
    !message.body?.media ? item("Copy text", () => navigator.clipboard?.writeText(message.body?.text ?? ""), { "data-action": "copy" }) : null,
  );
  menu.hidden = false;
  const box = anchor.getBoundingClientRect();
  menu.style.top = `${Math.min(window.innerHeight - menu.offsetHeight - 8, box.bottom + 4)}px`;
  menu.style.left = `${Math.max(8, Math.min(window.innerWidth - menu.offsetWidth - 8, box.right - menu.offsetWidth))}px`;
  menu.querySelector("[data-action=reply]").focus();
  // At once: the click or key that opened the menu has passed the document's capture phase, so these do not see
  // it; added later, a key pressed quickly enough could close the menu before they came, and they would stay.
  document.addEventListener("keydown", onKey, true);
  document.addEventListener("click", onOutside, true);
}

function ref(c, message) {
  return { conversation: c.peer, seq: String(message.seq) };
}

async function react(c, message, key, off) {
  try {
    await session.ask({ react: { message: ref(c, message), key, off } });
  } catch (error) {
    showError(error);
  }
}

function startReply(message) {
  state.editing = null;
  state.replyTo = message;
  render();
  $("draft").focus();
}

function startEdit(message) {
  state.replyTo = null;
  state.editing = message;
  $("draft").value = message.body?.text ?? message.body?.media?.caption ?? "";
  render();
  $("draft").focus();
}

// Whether a message of one's own is still within a window the server said (its welcome's limits; 0 or none: for
// ever), by the message's server time; and what is left of it, said beside Recall.
function within(message, windowMs) {
  const window = num(windowMs);
  if (!window || message.pending) return true;
  return Date.now() - num(message.timeMs) < window;
}

function left(message, windowMs) {
  const window = num(windowMs);
  if (!window || message.pending) return "";
  const seconds = Math.max(0, Math.ceil((num(message.timeMs) + window - Date.now()) / 1000));
  return seconds >= 120 ? ` (${Math.ceil(seconds / 60)} min left)` : ` (${seconds} s left)`;
}

async function recall(c, message) {
  try {
    await session.ask({ recall: { conversation: c.peer, id: message.id } });
  } catch (error) {
    showError(error);
  }
}

function discard(entry) {
  acknowledgedIds.add(entry.id);
  state.outbox = state.outbox.filter((other) => other !== entry);
  saveOutbox();
  render();
}

async function showVersions(c, message) {
  try {
    const answer = await session.ask({ versions: { message: ref(c, message) } });
    const versions = answer.versions?.versions ?? [];
    openDialog(
      "Earlier versions",
      h(
        "ol",
        { class: "versions" },
        versions.map((v) =>
          h("li", {}, h("p", { class: "text", dir: "auto", text: v.body?.text ?? v.body?.media?.caption ?? "" }), h("small", { text: v.replacedMs ? `replaced ${fullTime(num(v.replacedMs))}` : "" })),
        ),
      ),
    );
  } catch (error) {
    showError(error);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The composer

function submitDraft() {
  const c = state.open && conversation(state.open);
  const draft = $("draft");
  const text = draft.value.replace(/^\s+|\s+$/g, "");
  if (!c) return;
  if (state.editing) {
    const message = state.editing;
    state.editing = null;
    draft.value = "";
    session
      .ask({ edit: { message: ref(c, message), text } })
      .then(() => {
        message.body = message.body?.media ? { media: { ...message.body.media, caption: text } } : { text };
        message.editedMs = String(Date.now());
        render();
      })
      .catch((error) => {
        // Refused (the edit window passed, too many edits): the words come back to the draft.
        showError(error);
        if (!draft.value) draft.value = text;
      });
    render();
    return;
  }
  if (!text) return;
  const maxBytes = num(session.limits.maxTextBytes) || 65536;
  if (new TextEncoder().encode(text).length > maxBytes) {
    toast(`A message may have at most ${maxBytes} bytes.`);
    return;
  }
  queue(c.key, { text }, state.replyTo);
  state.replyTo = null;
  draft.value = "";
  drafts.delete(c.key);
  typing(false);
  autosize();
}

function autosize() {
  const draft = $("draft");
  draft.style.height = "auto";
  draft.style.height = `${Math.min(draft.scrollHeight, 160)}px`;
}

// Enter sends; Shift+Enter is a new line; an Enter while an input method composes (pinyin, kana…) confirms the
// composition and sends nothing. Browsers differ in the order of `compositionend` and that Enter's `keydown`, so all
// three signs are checked: the event's own `isComposing`, keyCode 229 (what a composing keydown carries), and our
// own flag between `compositionstart` and `compositionend`.
let composing = false;
function setUpComposer() {
  const draft = $("draft");
  draft.addEventListener("compositionstart", () => {
    composing = true;
    draft.dataset.composing = "true";
  });
  draft.addEventListener("compositionend", () => {
    // Safari sends compositionend before the Enter's keydown: stay composing until that keydown has passed.
    setTimeout(() => {
      composing = false;
      delete draft.dataset.composing;
    });
  });
  draft.addEventListener("keydown", (event) => {
    if (event.isComposing || composing || event.keyCode === 229) return;
    if (event.key === "Escape" && (state.replyTo || state.editing)) {
      event.stopPropagation();
      cancelContext();
      return;
    }
    if (event.key !== "Enter" || event.shiftKey || event.altKey || event.ctrlKey || event.metaKey) return;
    event.preventDefault();
    submitDraft();
  });
  draft.addEventListener("input", () => {
    autosize();
    if (state.open) drafts.set(state.open, draft.value);
    if (!state.editing) typing(draft.value.length > 0);
  });
  draft.addEventListener("blur", () => typing(false));
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    submitDraft();
    draft.focus();
  });
  $("composer-cancel").addEventListener("click", cancelContext);
  $("file").addEventListener("change", (event) => {
    const files = [...event.target.files];
    event.target.value = "";
    for (const file of files) sendFile(file);
  });
  // Files dropped on, or pasted into, the conversation.
  $("chat").addEventListener("dragover", (event) => event.preventDefault());
  $("chat").addEventListener("drop", (event) => {
    event.preventDefault();
    for (const file of event.dataTransfer?.files ?? []) sendFile(file);
  });
  draft.addEventListener("paste", (event) => {
    const files = [...(event.clipboardData?.files ?? [])];
    if (files.length === 0) return;
    event.preventDefault();
    for (const file of files) sendFile(file);
  });
}

function cancelContext() {
  if (state.editing) $("draft").value = "";
  state.replyTo = null;
  state.editing = null;
  render();
}

// ---------------------------------------------------------------------------------------------------------------
// Media

// The longest start of `text` within `bytes` UTF-8 bytes, cut between characters.
function cutToBytes(text, bytes) {
  const encoder = new TextEncoder();
  let cut = "";
  for (const character of text) {
    if (encoder.encode(cut + character).length > bytes) break;
    cut += character;
  }
  return cut;
}

const uploads = new Set(); // under way, cancelled at sign-out

function sendFile(file) {
  const c = state.open && conversation(state.open);
  if (!c) return;
  const maxBytes = num(session.limits.maxMediaBytes);
  if (maxBytes && file.size > maxBytes) {
    toast(`${file.name} is larger than this server takes (${byteSize(maxBytes)}).`);
    return;
  }
  if (file.size === 0) {
    toast(`${file.name} is empty.`);
    return;
  }
  const upload = new Upload(session, file);
  uploads.add(upload);
  upload.done.finally(() => uploads.delete(upload)).catch(() => {});
  const bar = h("progress", { max: "1", value: "0", "aria-label": `Uploading ${file.name}` });
  const label = h("span", { class: "upload-state", text: "preparing" });
  const cancel = h("button", { type: "button", class: "link", onclick: () => upload.cancel() }, "Cancel");
  const row = h("div", { class: "upload", "data-name": file.name, "data-state": "hashing" }, h("span", { class: "upload-name", dir: "auto", text: file.name }), bar, label, cancel);
  $("uploads").append(row);
  upload.addEventListener("change", () => {
    bar.value = upload.progress;
    row.dataset.state = upload.state;
    if (upload.resumedFrom) row.dataset.resumedFrom = String(upload.resumedFrom);
    label.textContent = {
      hashing: "preparing",
      waiting: "waiting for the connection",
      sending: `${Math.round(upload.progress * 100)}%`,
      done: "sent",
      failed: `failed: ${upload.error?.message ?? ""}`,
      cancelled: "cancelled",
    }[upload.state];
    if (upload.state === "failed") cancel.textContent = "Dismiss";
    if (upload.state === "failed") cancel.onclick = () => row.remove();
  });
  upload.done.then(
    async (sha256) => {
      setTimeout(() => row.remove(), 1500);
      const type = file.type || "application/octet-stream";
      const media = { kind: mediaKind(type), sha256, size: String(file.size), mime: type, name: cutToBytes(file.name, 255) };
      if (media.kind === "KIND_IMAGE") Object.assign(media, await imageSize(file));
      queue(c.key, { media });
    },
    (error) => {
      if (error.message === "cancelled") setTimeout(() => row.remove(), 1500);
    },
  );
}

// ---------------------------------------------------------------------------------------------------------------
// Dialogs: new chat, group, profile

function openDialog(title, ...content) {
  const dialog = $("dialog");
  fill(dialog,
    h("h2", { id: "dialog-title", dir: "auto", text: title }),
    ...content,
    h("div", { class: "dialog-buttons" }, h("button", { type: "button", class: "close", onclick: () => dialog.close() }, "Close")),
  );
  if (!dialog.open) dialog.showModal();
  dialog.querySelector("input, select, textarea, button")?.focus();
}

function field(label, attributes) {
  const id = `f-${Math.random().toString(36).slice(2)}`;
  return [h("label", { for: id, text: label }), h("input", { id, dir: "auto", ...attributes })];
}

function newChatDialog() {
  const [userLabel, userInput] = field("User name", { name: "user", autocomplete: "off", spellcheck: "false" });
  const direct = h(
    "form",
    {
      class: "stack",
      "data-form": "direct",
      onsubmit: async (event) => {
        event.preventDefault();
        try {
          const answer = await session.ask({ findUser: { name: userInput.value.trim() } });
          const card = answer.user;
          if (card.profile) state.profiles.set(card.name, { ...card.profile, user: card.name });
          $("dialog").close();
          openConversation(`u:${card.name}`);
        } catch (error) {
          showError(error);
        }
      },
    },
    h("h3", { text: "Write to someone" }),
    userLabel,
    userInput,
    h("button", { type: "submit", class: "primary" }, "Open chat"),
  );
  const [nameLabel, nameInput] = field("Group name (its address: letters, digits, . _ -)", { name: "group", autocomplete: "off" });
  const [titleLabel, titleInput] = field("Title (optional, any script)", { name: "title", autocomplete: "off" });
  const [membersLabel, membersInput] = field("Members (names, separated by spaces or commas)", { name: "members", autocomplete: "off" });
  const group = h(
    "form",
    {
      class: "stack",
      "data-form": "group",
      onsubmit: async (event) => {
        event.preventDefault();
        const name = nameInput.value.trim();
        const users = membersInput.value.split(/[\s,，、]+/).filter(Boolean);
        try {
          await session.ask({ manageGroup: { group: name, create: { users } } });
          if (titleInput.value.trim()) {
            await session.ask({ manageGroup: { group: name, title: { title: titleInput.value.trim() } } });
          }
          $("dialog").close();
          const c = conversation(`g:${name}`);
          c.title = titleInput.value.trim();
          c.lastActivity = Date.now();
          openConversation(c.key);
        } catch (error) {
          showError(error);
        }
      },
    },
    h("h3", { text: "Start a group" }),
    nameLabel,
    nameInput,
    titleLabel,
    titleInput,
    membersLabel,
    membersInput,
    h("button", { type: "submit", class: "primary" }, "Create group"),
  );
  openDialog("New chat", direct, group);
}

const roleNames = { GROUP_ROLE_OWNER: "owner", GROUP_ROLE_ADMIN: "admin", GROUP_ROLE_MEMBER: "member" };
const rank = { GROUP_ROLE_OWNER: 2, GROUP_ROLE_ADMIN: 1, GROUP_ROLE_MEMBER: 0 };

async function groupDialog() {
  const c = state.open && conversation(state.open);
  if (!c?.isGroup) return;
  await loadMembers(c);
  const group = c.peer.group;
  const myRole = c.members.get(session.user)?.role ?? "GROUP_ROLE_MEMBER";
  const manage = async (action, question = null) => {
    if (question && !window.confirm(question)) return;
    try {
      await session.ask({ manageGroup: { group, ...action } });
      if (action.leave) {
        $("dialog").close();
        c.left = true;
        render();
        return;
      }
      await loadMembers(c);
      groupDialog();
    } catch (error) {
      showError(error);
    }
  };
  const members = h(
    "ul",
    { class: "members" },
    [...c.members.entries()].map(([user, member]) => {
      const role = member.role ?? "GROUP_ROLE_MEMBER";
      const buttons = [];
      if (user !== session.user && rank[myRole] > rank[role] && rank[myRole] >= 1) {
        buttons.push(h("button", { type: "button", class: "link", onclick: () => manage({ remove: { users: [user] } }, `Remove ${user} from the group?`) }, "Remove"));
      }
      if (myRole === "GROUP_ROLE_OWNER" && user !== session.user) {
        if (role === "GROUP_ROLE_MEMBER") buttons.push(h("button", { type: "button", class: "link", onclick: () => manage({ promote: { users: [user] } }) }, "Make admin"));
        if (role === "GROUP_ROLE_ADMIN") buttons.push(h("button", { type: "button", class: "link", onclick: () => manage({ demote: { users: [user] } }) }, "Make member"));
        buttons.push(h("button", { type: "button", class: "link", onclick: () => manage({ transfer: { user } }, `Make ${user} the group's owner? You become an admin.`) }, "Hand over"));
      }
      return h(
        "li",
        { "data-user": user },
        avatar(user, displayName(user), "small"),
        h("span", { class: "member-name", dir: "auto", text: displayName(user) }),
        h("span", { class: "role", text: roleNames[role] }),
        ...buttons,
      );
    }),
  );
  const [titleLabel, titleInput] = field("Title", { value: c.title, autocomplete: "off" });
  const [addLabel, addInput] = field("Add members (names)", { autocomplete: "off" });
  const isAdmin = rank[myRole] >= 1;
  openDialog(
    titleOf(c),
    h("p", { class: "note", text: `Group ${group} · you are ${roleNames[myRole]}` }),
    isAdmin
      ? h("form", { class: "stack", onsubmit: (e) => { e.preventDefault(); manage({ title: { title: titleInput.value.trim() } }); } }, titleLabel, titleInput, h("button", { type: "submit" }, "Set title"))
      : null,
    members,
    isAdmin
      ? h("form", { class: "stack", onsubmit: (e) => { e.preventDefault(); manage({ add: { users: addInput.value.split(/[\s,，、]+/).filter(Boolean) } }); } }, addLabel, addInput, h("button", { type: "submit" }, "Add"))
      : null,
    h("button", { type: "button", class: "danger", onclick: () => manage({ leave: {} }, "Leave the group?") }, "Leave the group"),
    leaveAllForm(),
  );
}

// Leaves, in one request, every group one user put this one in: the answer to someone who fills the list with groups.
function leaveAllForm() {
  const [label, input] = field("Leave every group this user put you in", { name: "added-by", autocomplete: "off", spellcheck: "false" });
  return h(
    "form",
    {
      class: "stack",
      "data-form": "leave-all",
      onsubmit: async (event) => {
        event.preventDefault();
        const addedBy = input.value.trim().replace(/^[@＠]/, "");
        if (!addedBy) return;
        try {
          const answer = await session.ask({ leaveGroups: { addedBy } });
          const left = answer.groupsLeft?.groups ?? [];
          for (const group of left) conversation(`g:${group}`).left = true;
          toast(left.length ? `Left ${left.length} group${left.length === 1 ? "" : "s"} ${addedBy} put you in.` : `${addedBy} put you in no group.`);
          $("dialog").close();
          render();
        } catch (error) {
          showError(error);
        }
      },
    },
    label,
    input,
    h("button", { type: "submit", class: "danger" }, "Leave them all"),
  );
}

function profileDialog() {
  const me = state.profiles.get(session.user) ?? {};
  const [nameLabel, nameInput] = field("Display name (any script)", { value: me.displayName ?? "", autocomplete: "nickname" });
  const status = h("p", { class: "note", "aria-live": "polite" });
  const picture = h("input", { type: "file", accept: "image/jpeg,image/png,image/webp,image/gif", "aria-label": "Choose a picture" });
  picture.addEventListener("change", async () => {
    const file = picture.files[0];
    if (!file) return;
    try {
      status.textContent = "Uploading the picture…";
      const small = await thumbnail(file);
      const describe = async (f) => ({ kind: "KIND_IMAGE", sha256: await new Upload(session, f).done, size: String(f.size), mime: f.type, name: f.name, ...(await imageSize(f)) });
      const avatarMedia = await describe(file);
      const thumbnailMedia = await describe(small);
      await session.ask({ setProfile: { avatar: avatarMedia, thumbnail: thumbnailMedia } });
      state.profiles.set(session.user, { ...me, user: session.user, avatar: avatarMedia, thumbnail: thumbnailMedia });
      status.textContent = "Saved.";
      render();
    } catch (error) {
      status.textContent = "";
      showError(error);
    }
  });
  async function setDisplayName(name) {
    try {
      await session.ask({ setProfile: { displayName: name } });
      state.profiles.set(session.user, { ...me, user: session.user, displayName: name });
      nameInput.value = name;
      status.textContent = name ? "Saved." : "The name is cleared.";
      render();
    } catch (error) {
      showError(error);
    }
  }
  openDialog(
    "Your profile",
    h("div", { class: "profile-head" }, avatar(session.user, me.displayName || session.user, "large"), h("p", { text: `Logged in as ${session.user}` })),
    h(
      "form",
      {
        class: "stack",
        onsubmit: async (event) => {
          event.preventDefault();
          // An empty field saves nothing: clearing the name is its own button, never a slip of Enter.
          const name = nameInput.value.trim();
          if (!name) {
            status.textContent = me.displayName ? "Type a name, or use “Clear the name”." : "Type a name to show beside yours.";
            return;
          }
          await setDisplayName(name);
        },
      },
      nameLabel,
      nameInput,
      h("button", { type: "submit", class: "primary" }, "Save name"),
      me.displayName
        ? h("button", { type: "button", class: "link", "data-action": "clear-name", onclick: () => setDisplayName("") }, "Clear the name")
        : null,
    ),
    h("label", { class: "stack" }, "Picture", picture),
    me.avatar
      ? h("button", { type: "button", class: "link", onclick: async () => { await session.ask({ setProfile: { removeAvatar: true } }).catch(showError); state.profiles.delete(session.user); wantProfile(session.user); } }, "Remove the picture")
      : null,
    status,
    notificationSettings(),
    h("button", { type: "button", class: "danger", "data-action": "logout", onclick: logOut }, "Log out"),
  );
}

async function logOut() {
  $("dialog").close();
  // This browser's notifications stop with the device (the server drops its subscriptions too).
  await disablePush(session.token).catch(() => {});
  await session.logOut().catch(() => {});
}

// Notifications while the page is closed: asked for on a click, never on load; and whether they show who wrote what.
function notificationSettings() {
  const note = h("p", { class: "note", "aria-live": "polite" });
  const enabled = h("input", { type: "checkbox", "data-setting": "push", disabled: !pushSupported() });
  const previews = h("input", { type: "checkbox", "data-setting": "push-previews" });
  const me = state.profiles.get(session.user) ?? {};
  previews.checked = me.pushPreviews !== false;
  if (!pushSupported()) note.textContent = "This browser cannot notify you while the page is closed.";
  else pushEnabled().then((on) => { enabled.checked = on; }).catch(() => {});
  enabled.addEventListener("change", async () => {
    enabled.disabled = true;
    try {
      if (enabled.checked) {
        await enablePush(session.token);
        note.textContent = "On: this browser shows new messages while Courier is closed.";
      } else {
        await disablePush(session.token);
        note.textContent = "Off.";
      }
    } catch (error) {
      enabled.checked = false;
      note.textContent = error.message;
    } finally {
      enabled.disabled = false;
    }
  });
  previews.addEventListener("change", async () => {
    const on = previews.checked;
    try {
      await session.ask({ setProfile: { pushPreviews: on } });
      state.profiles.set(session.user, { ...(state.profiles.get(session.user) ?? {}), user: session.user, pushPreviews: on });
      note.textContent = on ? "Notifications show who wrote and what." : "Notifications say only “New message”.";
    } catch (error) {
      previews.checked = !on;
      showError(error);
    }
  });
  return h(
    "fieldset",
    { class: "stack settings" },
    h("legend", { text: "Notifications" }),
    h("label", { class: "check" }, enabled, " Notify me when Courier is closed"),
    h("label", { class: "check" }, previews, " Show who wrote and what"),
    note,
  );
}

// ---------------------------------------------------------------------------------------------------------------
// Search

let searchState = null;
let searchAsked = 0;
async function search(query, before = null) {
  const asked = ++searchAsked;
  const results = $("search-results");
  if (!query) {
    results.hidden = true;
    $("conversations").hidden = false;
    searchState = null;
    return;
  }
  const request = { query, limit: 20 };
  if (before) request.before = before;
  try {
    const answer = await session.ask({ search: request });
    if (asked !== searchAsked) return; // a newer search was asked meanwhile
    const page = answer.search ?? {};
    searchState = { query, hits: [...(before ? searchState?.hits ?? [] : []), ...(page.hits ?? [])], more: !!page.more, next: page.next };
  } catch (error) {
    showError(error);
    return;
  }
  results.hidden = false;
  $("conversations").hidden = true;
  fill(results,
    h("p", { class: "note", text: searchState.hits.length ? `Messages with “${query}”` : `Nothing found for “${query}”` }),
    h(
      "ul",
      { class: "hits" },
      searchState.hits.map((hit) => {
        const message = hit.message;
        const key = keyOf(message.conversation);
        return h(
          "li",
          {},
          h(
            "button",
            { type: "button", class: "hit", "data-key": key, "data-seq": message.seq, onclick: () => jumpTo(key, num(message.seq)) },
            h("span", { class: "conversation-top" }, h("span", { class: "conversation-title", dir: "auto", text: titleOf(conversation(key)) }), h("time", { class: "time", text: relativeTime(num(message.timeMs)) })),
            h("span", { class: "fragment", dir: "auto" }, `${displayName(message.from)}: `, ...markedFragment(hit.fragment ?? "", hit.marks ?? [])),
          ),
        );
      }),
    ),
    searchState.more ? h("button", { type: "button", class: "link", onclick: () => search(query, searchState.next) }, "More results") : null,
    h("button", { type: "button", class: "link", onclick: () => { $("search").value = ""; search(""); } }, "Close the search"),
  );
}

// ---------------------------------------------------------------------------------------------------------------
// Logging in, signing up, the connection's state

// What the server says before a login (GET /api/v1/server): who may sign up, and whether this page's origin may
// open the gateway. Asked once; the form shows "Create an account" only where accounts are made, and the invitation
// field only where one is needed.
let serverInfo = null;
async function loadServerInfo() {
  if (serverInfo) return serverInfo;
  try {
    const answer = await fetch(`/api/v1/server?origin=${encodeURIComponent(location.origin)}`, { cache: "no-store" });
    if (answer.ok) serverInfo = await answer.json();
  } catch {
    // The server cannot be reached: the form says so when a login fails.
  }
  return serverInfo;
}

async function applyServerInfo() {
  const info = await loadServerInfo();
  if (!info) return;
  const invited = new URLSearchParams(location.hash.slice(1)).has("invite");
  $("login-switch").hidden = info.registration === "closed" && !invited;
  if (signingUp) $("invite-row").hidden = info.registration === "open" && !invited;
  if (info.originAllowed === false) {
    $("login-error").textContent =
      `This page's address (${location.origin}) is not one the server lets in: start it with ` +
      `--allow-origin ${location.origin}, or open the page at the server's own address.`;
  }
}

function showLogin(reason = "") {
  $("app").hidden = true;
  $("login").hidden = false;
  const invite = new URLSearchParams(location.hash.slice(1)).get("invite");
  if (invite) {
    $("login-invite").value = invite;
    setSignUp(true);
    $("login-note").textContent = "You are invited: choose a user name and a password.";
  }
  const reasons = {
    "token-revoked": "This device was logged out.",
    "token-expired": "Your session expired: log in again.",
    "auth-failed": "Log in again.",
    "logged-out": "",
  };
  $("login-error").textContent = reasons[reason] ?? "";
  $("login-user").focus();
  applyServerInfo();
}

let signingUp = false;
function setSignUp(on) {
  signingUp = on;
  const invited = new URLSearchParams(location.hash.slice(1)).has("invite");
  $("invite-row").hidden = !on || (serverInfo?.registration === "open" && !invited);
  $("login-submit").textContent = on ? "Create the account" : "Log in";
  $("login-switch").textContent = on ? "I have an account" : "Create an account";
  $("login-password").autocomplete = on ? "new-password" : "current-password";
}

async function submitLogin(event) {
  event.preventDefault();
  const user = $("login-user").value.trim();
  const password = $("login-password").value;
  if (!user || !password) {
    $("login-error").textContent = "Enter a user name and a password.";
    return;
  }
  $("login-submit").disabled = true;
  $("login-error").textContent = "";
  const messages = {
    "auth-failed": "Wrong user name or password.",
    throttled: "Too many attempts: try again later.",
    "weak-password": "Choose a password of at least 8 characters.",
    "name-taken": "That name is taken.",
    "invalid-name": "That name cannot be used: letters, digits, . _ - only.",
    "registration-closed": "This server does not take new accounts.",
    "invite-invalid": "That invitation is not valid.",
    "invite-expired": "That invitation has expired.",
    "invite-used-up": "That invitation has been used up.",
    disconnected: "The server cannot be reached.",
  };
  // A page under an address the server does not let in sees the gateway refused as a connection that failed.
  if (serverInfo?.originAllowed === false) {
    messages.disconnected =
      `This page's address (${location.origin}) is not one the server lets in: start it with ` +
      `--allow-origin ${location.origin}, or open the page at the server's own address.`;
  }
  try {
    const credentials = signingUp
      ? { signUp: { user, password, invite: $("login-invite").value.trim() } }
      : { password: { user, password } };
    await session.logIn(credentials);
    $("login-password").value = "";
    if (location.hash) history.replaceState(null, "", location.pathname);
    started();
  } catch (error) {
    $("login-error").textContent = messages[error.code] ?? `${error.message} (${error.code})`;
  } finally {
    $("login-submit").disabled = false;
  }
}

function started() {
  $("login").hidden = true;
  $("app").hidden = false;
  renderMe();
  // A subscription this browser holds is told to the server again: the server may have dropped it (a 410 from the
  // push service, the device logged out elsewhere) while the browser kept it.
  pushEnabled().then((on) => on && enablePush(session.token)).catch(() => {});
}

let meShown = "";
function renderMe() {
  const profile = state.profiles.get(session.user);
  const shown = `${session.user}:${profile?.displayName ?? ""}:${profile?.thumbnail?.sha256 ?? ""}`;
  if (shown === meShown) return;
  meShown = shown;
  $("me").replaceChildren(avatar(session.user, displayName(session.user), "small"), h("span", { class: "visually-hidden", text: session.user }));
}

function renderConnection(detail) {
  const text = $("connection-text");
  const retry = $("retry");
  document.body.dataset.connection = detail.state;
  retry.hidden = detail.state !== "offline";
  const label = { online: "Online", connecting: "Connecting…", offline: "Offline" }[detail.state];
  if (label && text.textContent !== label) text.textContent = label;
  // The countdown is outside the live region: a screen reader hears "Offline" once, not every second.
  const seconds = Math.max(0, Math.ceil((session.retryAt - Date.now()) / 1000));
  $("connection-retry").textContent = detail.state === "offline" ? `· retrying in ${seconds} s` : "";
}

session.addEventListener("state", (event) => {
  renderConnection(event.detail);
  if (event.detail.state === "offline") {
    // Who is online and typing is unknown until the next welcome brings it again.
    state.presence.clear();
    for (const c of state.conversations.values()) c.typing.clear();
    render({ messages: false });
  }
  if (event.detail.state === "signedOut") {
    const wasIn = !$("app").hidden;
    for (const upload of uploads) upload.cancel();
    $("uploads").replaceChildren();
    state.conversations.clear();
    state.open = null;
    state.profiles.clear();
    state.wantedProfiles.clear();
    state.presence.clear();
    state.outbox = [];
    state.replyTo = state.editing = null;
    acknowledgedIds.clear();
    drafts.clear();
    $("draft").value = "";
    dropBlobs();
    $("search").value = "";
    search("");
    document.body.classList.remove("chat-open");
    // A refused login keeps its own message on the form.
    if (wasIn) showLogin(event.detail.reason);
  }
});

session.addEventListener("welcome", (event) => {
  // The first login of this page loads the lists and pages as they stand at `latestCursor`: the events up to it
  // change nothing more. A reconnect resumed after the newest event applied, so nothing is missed or applied twice.
  if (session.cursor === 0) session.cursor = num(event.detail.latestCursor);
  loadOutbox();
  started();
  flushOutbox();
  wantProfile(session.user);
  fetchProfiles();
  loadConversations()
    .then(() => {
      const c = state.open && conversation(state.open);
      if (c && document.visibilityState === "visible") markRead(c);
      render();
    })
    .catch((error) => {
      if (error.code !== "disconnected") showError(error);
    });
});

session.addEventListener("envelope", (event) => {
  const envelope = event.detail;
  if (envelope.events) onEvents(envelope.events);
  else if (envelope.typing) onTyping(envelope.typing);
  else if (envelope.presence) onPresence(envelope.presence);
  // What the server says before it closes (an idle timeout, a revoked device); a refused login says it on the form.
  else if (envelope.error && session.state === "online") toast(`${envelope.error.message || envelope.error.code}`);
});

// ---------------------------------------------------------------------------------------------------------------
// Start

// The conversation a notification's click asked for (`/#open=u:alice`), opened once the list is loaded.
let openAtStart = (() => {
  const key = new URLSearchParams(location.hash.slice(1)).get("open") ?? "";
  if (key) history.replaceState(null, "", location.pathname);
  return /^[ug]:./.test(key) ? key : "";
})();

function start() {
  registerWorker();
  onNotificationClick((key) => {
    if (!session.hasToken || $("app").hidden || !state.loadedList) openAtStart = key;
    else if (state.conversations.has(key)) openConversation(key);
  });
  $("login-form").addEventListener("submit", submitLogin);
  $("login-switch").addEventListener("click", () => setSignUp(!signingUp));
  $("retry").addEventListener("click", () => session.retryNow());
  $("new-chat").addEventListener("click", newChatDialog);
  $("manage").addEventListener("click", groupDialog);
  $("me").addEventListener("click", profileDialog);
  $("back").addEventListener("click", closeConversation);
  $("notify").addEventListener("change", async (event) => {
    const c = state.open && conversation(state.open);
    if (!c) return;
    const level = event.target.value;
    try {
      await session.ask({ setNotify: { conversation: c.peer, level } });
      c.notify = level;
      render();
    } catch (error) {
      showError(error);
      render();
    }
  });
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    search($("search").value.trim());
  });
  $("search").addEventListener("input", (event) => {
    if (!event.target.value) search("");
  });
  $("messages").addEventListener("scroll", () => {
    const box = $("messages");
    pinnedToBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
    const c = state.open && conversation(state.open);
    if (c && box.scrollTop < 120 && c.more && c.loaded && !c.loading) older(c);
  });
  // A picture or a video that loads after the pane was scrolled grows it: a view at the bottom stays there, so the
  // newest message is never pushed below the fold. (Load events do not bubble: caught on the way down.)
  for (const type of ["load", "loadedmetadata"]) {
    $("messages").addEventListener(type, () => {
      if (pinnedToBottom) $("messages").scrollTop = $("messages").scrollHeight;
    }, true);
  }
  document.addEventListener("visibilitychange", () => {
    const c = state.open && conversation(state.open);
    if (c && document.visibilityState === "visible") {
      markRead(c);
      render();
    }
  });
  // Escape leaves a conversation for the list, on a phone's one pane: not while composing, nor when a menu, a
  // dialog or the draft's reply or edit took the key first (they stop it).
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || event.isComposing || event.keyCode === 229 || event.defaultPrevented) return;
    if (document.body.classList.contains("chat-open") && !$("dialog").open && $("menu").hidden) closeConversation();
  });
  window.addEventListener("hashchange", () => {
    if (!session.hasToken) showLogin();
  });
  setUpComposer();
  // Relative times, typing that stopped, the retry countdown.
  setInterval(() => {
    if (session.state === "offline") renderConnection({ state: "offline" });
    if ($("app").hidden) return;
    let expired = false;
    for (const c of state.conversations.values()) {
      for (const [user, until] of c.typing) {
        if (until <= Date.now()) expired = c.typing.delete(user);
      }
    }
    if (expired) render();
    for (const time of document.querySelectorAll("#conversations time[data-ms]")) {
      time.textContent = relativeTime(Number(time.dataset.ms));
    }
    const c = state.open && conversation(state.open);
    if (c) $("chat-subtitle").textContent = subtitle(c);
  }, 1000);
  if (session.hasToken) {
    started();
    session.open(null);
  } else {
    setSignUp(false);
    showLogin();
  }
}

start();
