// The web chat's service worker, controlling the whole origin (served with `Service-Worker-Allowed: /`): it shows the
// server's Web Push messages as notifications, one per conversation (a burst replaces it), and a click on one focuses
// the chat, or opens it, at that conversation. It caches nothing and sees no token: a push carries all it shows.

const keyOf = (conversation) =>
  conversation?.user ? `u:${conversation.user}` : conversation?.group ? `g:${conversation.group}` : "";

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

// What a push says, as a notification: the sender's display name (and the group) and one line of text, or only "New
// message" when the user hides previews.
function notificationOf(push) {
  const key = keyOf(push?.conversation);
  if (!key) return null;
  const options = { tag: key, renotify: true, icon: "/web/icon.svg", dir: "auto", data: { key, seq: push.seq ?? 0 } };
  if (push.previews === false || typeof push.text !== "string") {
    return { title: "Courier", options: { ...options, body: "New message" } };
  }
  const from = String(push.from_name || push.from || "");
  const title = push.conversation.group ? `${from} in ${push.conversation.group}` : from;
  return { title, options: { ...options, body: push.text } };
}

self.addEventListener("push", (event) => {
  let push = null;
  try {
    push = event.data?.json() ?? null;
  } catch {
    push = null;
  }
  // A push that says nothing readable still shows one: a push the user never sees is not what was promised
  // (`userVisibleOnly`).
  const shown = notificationOf(push) ?? { title: "Courier", options: { body: "New message", tag: "courier" } };
  event.waitUntil(self.registration.showNotification(shown.title, shown.options));
});

// The chat at a conversation: a window of it told to open the conversation and focused, or a new one opened there.
async function openChat(key) {
  const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  // The chat's own page, never another address of the origin (a file open from /media).
  const open = windows.find((client) => {
    const url = new URL(client.url);
    return url.origin === self.location.origin && url.pathname === "/";
  });
  if (open) {
    open.postMessage({ open: key });
    await open.focus().catch(() => {});
    return;
  }
  await self.clients.openWindow("/#open=" + encodeURIComponent(key));
}

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const opened = openChat(event.notification.data?.key ?? "");
  // A click the browser dispatched keeps the worker alive until the chat is open; an event a script made cannot.
  try {
    event.waitUntil(opened);
  } catch {
    opened.catch(() => {});
  }
});
