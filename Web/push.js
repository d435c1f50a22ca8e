// Web Push in the page: the service worker (registered on every visit, so that it controls the page and takes
// clicks on notifications), the subscription the server pushes to (made only on the user's click, never on load), and
// its removal. The server is told with the device's token, in a header.

const worker = "/web/sw.js";

export const pushSupported = () =>
  "serviceWorker" in navigator && "PushManager" in window && "Notification" in window && window.isSecureContext;

// The service worker, registered for the whole origin; null where the browser has none.
export async function registerWorker() {
  if (!("serviceWorker" in navigator)) return null;
  try {
    return await navigator.serviceWorker.register(worker, { scope: "/", updateViaCache: "none" });
  } catch {
    return null;
  }
}

// Calls `open(key)` when a click on a notification asks this page to show a conversation.
export function onNotificationClick(open) {
  navigator.serviceWorker?.addEventListener("message", (event) => {
    if (event.origin && event.origin !== location.origin) return;
    const key = event.data?.open;
    if (typeof key === "string" && /^[ug]:/.test(key)) open(key);
  });
}

// Whether this browser is subscribed (and allowed to show notifications).
export async function pushEnabled() {
  if (!pushSupported() || Notification.permission !== "granted") return false;
  const registration = await navigator.serviceWorker.getRegistration("/");
  return Boolean(await registration?.pushManager.getSubscription());
}

const decode = (text) => {
  const plain = atob(text.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (text.length % 4)) % 4));
  return Uint8Array.from(plain, (c) => c.charCodeAt(0));
};
const same = (a, b) => a.length === b.length && a.every((byte, index) => byte === b[index]);

async function tell(token, method, body) {
  const answer = await fetch("/api/v1/push/subscriptions", {
    method,
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
    body: JSON.stringify(body),
    credentials: "omit",
  });
  if (!answer.ok && !(method === "DELETE" && answer.status === 404)) {
    const error = await answer.json().catch(() => null);
    throw new Error(error?.error?.message ?? `the server answered ${answer.status}`);
  }
}

// Asks for permission (on a click), subscribes with the server's key, and registers the subscription for this device.
export async function enablePush(token) {
  if (!pushSupported()) throw new Error("This browser cannot show notifications when the page is closed.");
  const permission = await Notification.requestPermission();
  if (permission !== "granted") {
    throw new Error("Notifications are blocked for this site: allow them in the browser's site settings.");
  }
  await registerWorker();
  const registration = await navigator.serviceWorker.ready;
  const answer = await fetch("/api/v1/push/vapid-public-key", { credentials: "omit" });
  if (!answer.ok) throw new Error(`the server answered ${answer.status}`);
  const key = decode((await answer.json()).key);
  let subscription = await registration.pushManager.getSubscription();
  // A subscription made for another server's key (the data folder was replaced) is of no use: made again.
  const held = subscription?.options?.applicationServerKey;
  if (subscription && held && !same(new Uint8Array(held), key)) {
    await subscription.unsubscribe();
    subscription = null;
  }
  subscription ??= await registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key });
  await tell(token, "POST", subscription.toJSON());
}

// Removes this browser's subscription, from the server (while the token is good) and from the browser.
export async function disablePush(token) {
  if (!("serviceWorker" in navigator)) return;
  const registration = await navigator.serviceWorker.getRegistration("/");
  const subscription = await registration?.pushManager.getSubscription();
  if (!subscription) return;
  if (token) await tell(token, "DELETE", { endpoint: subscription.endpoint }).catch(() => {});
  await subscription.unsubscribe().catch(() => {});
}
