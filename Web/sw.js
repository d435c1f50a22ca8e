// The web chat's service worker, controlling the whole origin (served with `Service-Worker-Allowed: /`): it shows the
// server's Web Push messages as notifications, one per conversation (a burst replaces it), and a click on one focuses
// the chat, or opens it, at that conversation; and it keeps the page's own files, so that the chat opens when the
// server cannot be reached (below). It sees no token: a push carries all it shows, and it keeps nothing of the user's.

const keyOf = (conversation) =>
  conversation?.user ? `u:${conversation.user}` : conversation?.group ? `g:${conversation.group}` : "";

self.addEventListener("install", (event) => {
  self.skipWaiting();
  // A worker installed while the server cannot be reached works still (notifications): the files are kept later.
  event.waitUntil(refresh().catch(() => {}));
});
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

// The page offline: its own files, kept one version at a time, network first (docs/WEB.md).

const cachePrefix = "courier-page-";
const current = "courier-page"; // its one entry, /current, names the current version's cache

const isPageFile = (url) =>
  url.origin === self.location.origin &&
  (url.pathname === "/" || (/^\/web\/[\w-][\w.-]*$/.test(url.pathname) && url.pathname !== "/web/sw.js"));

self.addEventListener("fetch", (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (request.method !== "GET" || !isPageFile(url) || request.headers.has("Authorization")) return;
  event.respondWith(networkFirst(event, url));
});

async function networkFirst(event, url) {
  let answer;
  try {
    answer = await fetch(event.request);
  } catch (error) {
    const kept = await keptFile(url);
    if (kept) return kept;
    throw error;
  }
  if (answer.status >= 500) return (await keptFile(url)) ?? answer;
  if (event.request.mode === "navigate" && answer.ok) event.waitUntil(refresh().catch(() => {}));
  return answer;
}

async function currentCache() {
  const name = await (await caches.open(current)).match("/current");
  return name ? name.text() : "";
}

async function keptFile(url) {
  const name = await currentCache();
  if (!name || !(await caches.has(name))) return null;
  return (await (await caches.open(name)).match(url.pathname, { ignoreVary: true })) ?? null;
}

// The files a file of the page names: the page's links ("/web/app.css"), a module's imports ("./state.js"), the
// manifest's icon. A name that is no file (a comment's) is skipped; the worker's own script is the browser's to keep.
function namedFiles(text) {
  const names = [];
  for (const [, name] of text.matchAll(/["'(](?:\/web\/|\.\/)([\w-][\w.-]*\.(?:js|css|svg|webmanifest))["')]/g)) {
    if (name !== "sw.js") names.push(`/web/${name}`);
  }
  return names;
}

async function fetchFile(path) {
  const answer = await fetch(path, { credentials: "omit", cache: "no-cache", redirect: "error" });
  if (answer.status === 404 && path !== "/") return null;
  const cacheControl = answer.headers.get("Cache-Control") ?? "";
  if (!answer.ok || answer.type !== "basic" || /no-store|private/i.test(cacheControl)) {
    throw new Error(`${path}: ${answer.status}`);
  }
  return { path, answer, text: await answer.clone().text() };
}

async function versionOf(files) {
  const bytes = new TextEncoder().encode(files.map((file) => `${file.path}\n${file.text}`).join("\n\u0000\n"));
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(digest.slice(0, 12), (byte) => byte.toString(16).padStart(2, "0")).join("");
}

// The page's files as the server has them now, kept as one version (once at a time).
let refreshing = null;
function refresh() {
  refreshing ??= keepPage().finally(() => {
    refreshing = null;
  });
  return refreshing;
}

async function keepPage() {
  const files = new Map(); // path -> {path, answer, text}, or null for a name that is no file
  let wanted = ["/"];
  while (wanted.length > 0) {
    for (const path of wanted) files.set(path, null);
    const fetched = (await Promise.all(wanted.map(fetchFile))).filter(Boolean);
    for (const file of fetched) files.set(file.path, file);
    wanted = [...new Set(fetched.flatMap((file) => namedFiles(file.text)))].filter((path) => !files.has(path));
  }
  const kept = [...files.values()].filter(Boolean).sort((a, b) => (a.path < b.path ? -1 : 1));
  const name = cachePrefix + (await versionOf(kept));
  if ((await currentCache()) === name && (await caches.has(name))) return;
  const cache = await caches.open(name);
  await Promise.all(kept.map((file) => cache.put(file.path, file.answer)));
  await (await caches.open(current)).put("/current", new Response(name));
  for (const other of await caches.keys()) {
    if (other.startsWith(cachePrefix) && other !== name) await caches.delete(other);
  }
}
