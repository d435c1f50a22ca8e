// The chat kept for offline, in IndexedDB: what it holds, its bounds and when it is deleted are in docs/WEB.md.

import { $, conversation, loadOutbox, num, session, state } from "./state.js";
import { loadOlder } from "./requests.js";
import { render } from "./render.js";
import { openConversation } from "./list.js";

const maxConversations = 100;
const maxMessages = 50;
const databasePrefix = "courier.offline.";
// Written at most once in this long, after the page redrew.
const keepDelayMs = 500;
// A conversation's fields that are kept (besides its messages, members and marks).
const fields = [
  "title", "unread", "mentions", "lastSeq", "readSeq", "peerDeliveredSeq", "peerReadSeq", "notify", "last",
  "lastActivity", "left",
];

// What was restored and not yet replaced by the server's answers.
const restoredMessages = new WeakSet();
const restoredProfiles = new WeakSet();
export const isRestored = (message) => !!message && restoredMessages.has(message);

// A conversation's restored messages, dropped when its first page comes from the server: the page is the newest, and
// older ones load from there on, with no gap between what was kept and what the server has now.
export function forgetRestored(c) {
  for (const [seq, message] of c.messages) if (restoredMessages.has(message)) c.messages.delete(seq);
}

// The database

let database = null; // Promise of the open database of `databaseUser`, or of null where there is none
let databaseUser = "";

const result = (request) =>
  new Promise((resolve, reject) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });

function openDatabase() {
  const user = session.user;
  if (!user || !session.hasToken || !window.indexedDB) return Promise.resolve(null);
  if (database && databaseUser === user) return database;
  databaseUser = user;
  database = new Promise((resolve) => {
    const request = indexedDB.open(databasePrefix + user, 1);
    request.onupgradeneeded = () => {
      const db = request.result;
      db.createObjectStore("conversations", { keyPath: "key" });
      db.createObjectStore("profiles", { keyPath: "user" });
      db.createObjectStore("meta");
    };
    request.onsuccess = () => {
      const db = request.result;
      // Another tab deletes it (a logout there): let it go.
      db.onversionchange = () => {
        db.close();
        if (databaseUser === user) {
          database = null;
          forgetWritten();
        }
      };
      resolve(db);
    };
    // Storage refused (a private window, a full disk): the page works without.
    request.onerror = () => resolve(null);
  });
  return database;
}

function deleteDatabase(user) {
  const closing = databaseUser === user ? database : null;
  if (closing) {
    database = null;
    databaseUser = "";
    closing.then((db) => db?.close());
  }
  indexedDB.deleteDatabase(databasePrefix + user);
}

// Restoring

// Shows what the page kept (and the outbox), before the server answers. A welcome that came first wins: then the
// page shows the server's state, and the kept one is not laid over it. Nothing is written before it has been read.
let restoring = Promise.resolve();
export function restore() {
  restoring = restoreKept();
  return restoring;
}

async function restoreKept() {
  loadOutbox();
  for (const entry of state.outbox) conversation(entry.key).lastActivity ||= entry.createdMs;
  render();
  let kept;
  try {
    const db = await openDatabase();
    if (!db) return;
    const transaction = db.transaction(["conversations", "profiles", "meta"], "readonly");
    kept = await Promise.all([
      result(transaction.objectStore("conversations").getAll()),
      result(transaction.objectStore("profiles").getAll()),
      result(transaction.objectStore("meta").get("open")),
    ]);
  } catch {
    return;
  }
  if (session.state === "online" || session.cursor !== 0 || state.loadedList || !session.hasToken) return;
  const [records, profiles, open] = kept;
  for (const profile of profiles) {
    if (state.profiles.has(profile.user)) continue;
    state.profiles.set(profile.user, profile);
    restoredProfiles.add(profile);
  }
  for (const record of records) {
    if (typeof record?.key !== "string" || !/^[ug]:./.test(record.key)) continue;
    const c = conversation(record.key);
    if (c.loaded || c.messages.size > 0) continue;
    for (const field of fields) if (record[field] !== undefined) c[field] = record[field];
    for (const message of record.messages ?? []) {
      restoredMessages.add(message);
      c.messages.set(num(message.seq), message);
    }
    if (c.last) {
      c.last = c.messages.get(num(c.last.seq)) ?? c.last;
      restoredMessages.add(c.last);
    }
    c.members = new Map(record.members ?? []);
    c.marks = new Map(record.marks ?? []);
    written.set(record.key, JSON.stringify(record));
  }
  if (typeof open === "string" && state.conversations.has(open) && !state.open) {
    openConversation(open, { focus: false });
  }
  render({ toBottom: true });
}

// Keeping

const written = new Map(); // key -> the record as last written, as JSON
let writtenProfiles = "";
let writtenOpen = null;
let keepTimer = null;

// After a redraw: what the page shows is written a moment later (once for a burst of redraws).
export function keepSoon() {
  if (keepTimer || !session.hasToken) return;
  keepTimer = setTimeout(keep, keepDelayMs);
}

function recordOf(c) {
  const seqs = [...c.messages.keys()].sort((a, b) => a - b).slice(-maxMessages);
  const record = { key: c.key, messages: seqs.map((seq) => c.messages.get(seq)) };
  // Not opened on this page yet (listed only): the messages kept before stay as they are.
  if (!c.loaded && c.messages.size === 0) record.keepMessages = true;
  for (const field of fields) record[field] = c[field];
  record.members = [...c.members];
  record.marks = [...c.marks];
  return record;
}

async function keep() {
  await restoring;
  keepTimer = null;
  const user = session.user;
  const db = await openDatabase().catch(() => null);
  // Signed out (or another user in) meanwhile: nothing is written.
  if (!db || !session.hasToken || session.user !== user) return;
  const pending = new Set(state.outbox.map((entry) => entry.key));
  const conversations = [...state.conversations.values()]
    .filter((c) => c.last || c.lastSeq > 0 || c.isGroup || c.key === state.open || pending.has(c.key))
    .sort((a, b) => (b.key === state.open) - (a.key === state.open) || b.lastActivity - a.lastActivity)
    .slice(0, maxConversations);
  const names = new Set([session.user]);
  const changed = [];
  for (const c of conversations) {
    const record = recordOf(c);
    if (!c.isGroup) names.add(c.peer.user);
    for (const message of [c.last, ...record.messages]) if (message?.from) names.add(message.from);
    for (const member of c.members.keys()) names.add(member);
    const json = JSON.stringify(record);
    if (written.get(c.key) !== json) changed.push([c.key, json]);
  }
  const profiles = [...names]
    .map((name) => state.profiles.get(name))
    .filter((profile) => profile?.user)
    .map((profile) => ({ user: profile.user, displayName: profile.displayName ?? "", bot: profile.bot === true }));
  const profilesJSON = JSON.stringify(profiles);
  const open = state.open ?? "";
  const keys = new Set(conversations.map((c) => c.key));
  // Only a list the server gave drops what was kept: before it came (a page online before the restore, its list
  // still on the way), what the page holds is not all there is.
  const dropped = state.loadedList ? [...written.keys()].filter((key) => !keys.has(key)) : [];
  if (changed.length === 0 && dropped.length === 0 && profilesJSON === writtenProfiles && open === writtenOpen) return;
  try {
    const transaction = db.transaction(["conversations", "profiles", "meta"], "readwrite");
    const store = transaction.objectStore("conversations");
    for (const [key, json] of changed) {
      const record = JSON.parse(json);
      if (!record.keepMessages) {
        store.put(record);
        continue;
      }
      delete record.keepMessages;
      const kept = store.get(key);
      kept.onsuccess = () => store.put({ ...record, messages: kept.result?.messages ?? [] });
    }
    // Those no longer among the kept (another tab's too), once the server's list is in.
    if (state.loadedList) {
      store.getAllKeys().onsuccess = (event) => {
        for (const key of event.target.result) if (!keys.has(key)) store.delete(key);
      };
    }
    if (profilesJSON !== writtenProfiles) {
      const profileStore = transaction.objectStore("profiles");
      profileStore.clear();
      for (const profile of profiles) profileStore.put(profile);
    }
    transaction.objectStore("meta").put(open, "open");
    await new Promise((resolve, reject) => {
      transaction.oncomplete = resolve;
      transaction.onerror = transaction.onabort = () => reject(transaction.error);
    });
  } catch {
    // Storage full or gone: tried again at the next redraw.
    return;
  }
  for (const [key, json] of changed) written.set(key, json);
  for (const key of dropped) written.delete(key);
  writtenProfiles = profilesJSON;
  writtenOpen = open;
}

function forgetWritten() {
  written.clear();
  writtenProfiles = "";
  writtenOpen = null;
}

// Everything kept for `user`, or (none named: no one is signed in on this browser) for anyone: gone.
function forget(user) {
  clearTimeout(keepTimer);
  keepTimer = null;
  forgetWritten();
  if (!window.indexedDB) return;
  if (user) {
    deleteDatabase(user);
    return;
  }
  indexedDB
    .databases?.()
    .then((all) => {
      for (const { name } of all) {
        if (name?.startsWith(databasePrefix)) deleteDatabase(name.slice(databasePrefix.length));
      }
    })
    .catch(() => {});
}

// The connection, as the page kept offline sees it

export function setUpOffline() {
  if (!session.hasToken) forget("");
  // The note over the conversation: shown once the server could not be reached, until it is back.
  const note = $("offline-note");
  note?.querySelector("button")?.addEventListener("click", () => session.retryNow());
  session.addEventListener("state", (event) => {
    const now = event.detail.state;
    if (note && now === "offline") note.hidden = false;
    else if (note && now !== "connecting") note.hidden = true;
    if (now === "signedOut" && session.user) forget(session.user);
  });
  // Registered before login.js's welcome, which asks for the wanted profiles.
  session.addEventListener("welcome", () => {
    for (const [user, profile] of state.profiles) if (restoredProfiles.has(profile)) state.wantedProfiles.add(user);
    // The conversation open since before the server answered (restored, or opened offline) is loaded now.
    const c = state.open && conversation(state.open);
    if (c && !c.loaded) loadOlder(c).then(() => render(), () => {});
  });
  // Written at once when the page is left (a reload, a closed tab), not a moment later.
  window.addEventListener("pagehide", () => {
    if (keepTimer) {
      clearTimeout(keepTimer);
      keep();
    }
  });
}
