// The web chat's state: the session, the conversations and profiles, the lines a group's history shows from its
// events, and the outbox. A module's own state (the drafts, the search, the redraw) stays in that module.

import { Session } from "./session.js";
import { h } from "./text.js";
import { addMessage } from "./events.js";
import { fetchProfiles, sendMessage } from "./requests.js";
import { render } from "./render.js";

export const $ = (id) => document.getElementById(id);
// Replaces an element's children, leaving out the absent ones (a `cond ? element : null`).
export const fill = (element, ...children) =>
  element.replaceChildren(...children.flat().filter((child) => child !== null && child !== undefined && child !== false));

export const session = new Session({
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

// State

export const state = {
  conversations: new Map(), // key -> conversation
  open: null, // the open conversation's key
  profiles: new Map(), // user -> Profile
  presence: new Map(), // user -> {online, lastSeenMs}
  blocked: new Set(), // the users this one blocks, lower-cased
  outbox: [], // messages written and not yet acknowledged, kept in storage
  replyTo: null, // the message a reply answers
  editing: null, // the message being edited
  loadedList: false,
  wantedProfiles: new Set(),
};

export const keyOf = (conversation) => (conversation.user ? `u:${conversation.user}` : `g:${conversation.group}`);
const peerOf = (key) => (key.startsWith("u:") ? { user: key.slice(2) } : { group: key.slice(2) });
export const num = (value) => Number(value ?? 0);

export function conversation(key) {
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

export function displayName(user) {
  const name = state.profiles.get(user)?.displayName;
  return name || user;
}

// A program's account (its profile says `bot`) is marked wherever its name shows.
export const isBot = (user) => !!user && state.profiles.get(user)?.bot === true;
export const botBadge = () => h("span", { class: "bot-badge", title: "a bot: a program's account", text: "bot" });

export function titleOf(c) {
  if (c.isGroup) return c.title || c.peer.group;
  return displayName(c.peer.user);
}

export function wantProfile(user) {
  if (!user || state.profiles.has(user) || state.wantedProfiles.has(user)) return;
  state.wantedProfiles.add(user);
  clearTimeout(wantProfile.timer);
  wantProfile.timer = setTimeout(fetchProfiles, 50);
}

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

export function addNotice(c, afterSeq, notice) {
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

export function noticesOf(c) {
  if (!c.notices) c.notices = Array.isArray(storedNotices()[c.key]) ? storedNotices()[c.key] : [];
  return c.notices;
}

const outboxKey = () => `courier.outbox.${session.user}`;

// Tabs of one browser share the outbox: each merges what the others stored (by id) and drops what any of them saw
// acknowledged. Two tabs may then send one entry both: the server stores it once (same id) and both hear the ack.
export const acknowledgedIds = new Set();

function storedOutbox() {
  try {
    const stored = JSON.parse(localStorage.getItem(outboxKey()) || "[]");
    return Array.isArray(stored) ? stored : [];
  } catch {
    return [];
  }
}

export function loadOutbox() {
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

export function watchOutbox() {
  window.addEventListener("storage", (event) => {
    if (session.user && event.key === outboxKey()) {
      loadOutbox();
      flushOutbox();
      render();
    }
  });
}

export function newId() {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return `w-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

export function queue(key, body, replyTo = null) {
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

export function flushOutbox() {
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
    sendMessage(send, (envelope) => {
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

export function retrySend(entry) {
  delete entry.error;
  delete entry.retryAt;
  saveOutbox();
  flushOutbox();
  render();
}

export function discard(entry) {
  acknowledgedIds.add(entry.id);
  state.outbox = state.outbox.filter((other) => other !== entry);
  saveOutbox();
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
