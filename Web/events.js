// What the server says: events applied to the state, typing and presence notices.

import { mentions } from "./text.js";
import { addNotice, conversation, keyOf, num, session, state, wantProfile } from "./state.js";
import { acknowledgeEvents, markRead } from "./requests.js";
import { render, toast } from "./render.js";
import { dropMessage, onPin } from "./pins.js";

export function addMessage(c, message) {
  const seq = num(message.seq);
  const known = c.messages.get(seq);
  if (known && !message.reactions) message.reactions = known.reactions;
  c.messages.set(seq, message);
  if (seq > c.lastSeq) c.lastSeq = seq;
  if (!c.last || seq >= num(c.last.seq)) c.last = message;
  c.lastActivity = Math.max(c.lastActivity, num(message.timeMs));
  wantProfile(message.from);
  wantProfile(message.body?.forwardedFrom);
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
  if (last > 0) acknowledgeEvents(last);
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
    // A recall unpins.
    dropMessage(c, num(event.recall.seq), false);
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
    // The mention list asks for the members again before it shows them.
    c.membersFresh = false;
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
    c.membersFresh = false;
  } else if (event.title) {
    const c = conversation(`g:${event.title.group}`);
    c.title = event.title.title ?? "";
    addNotice(c, c.lastSeq, { user: event.title.by ?? "", kind: "title", title: c.title });
  } else if (event.notify) {
    conversation(keyOf(event.notify.conversation)).notify = event.notify.level ?? "NOTIFY_LEVEL_ALL";
  } else if (event.pin) {
    onPin(event.pin, conversation(keyOf(event.pin.message.conversation)));
  } else if (event.hidden) {
    // Deleted for this user on one of its devices: gone here too.
    dropMessage(conversation(keyOf(event.hidden.conversation)), num(event.hidden.seq), true);
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

export function setUpEvents() {
  session.addEventListener("envelope", (event) => {
    const envelope = event.detail;
    if (envelope.events) onEvents(envelope.events);
    else if (envelope.typing) onTyping(envelope.typing);
    else if (envelope.presence) onPresence(envelope.presence);
    // What the server says before it closes (an idle timeout, a revoked device); a refused login says it on the form.
    else if (envelope.error && session.state === "online") toast(`${envelope.error.message || envelope.error.code}`);
  });
}
