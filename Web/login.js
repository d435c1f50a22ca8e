// Logging in, signing up, and the connection's state (what a sign-out clears, what a welcome loads).

import { h } from "./text.js";
import { pushEnabled, enablePush } from "./push.js";
import {
  $,
  acknowledgedIds,
  conversation,
  displayName,
  flushOutbox,
  loadOutbox,
  num,
  session,
  state,
  wantProfile,
} from "./state.js";
import { fetchProfiles, loadBlocks, loadConversations, markRead } from "./requests.js";
import { avatar, render, showError } from "./render.js";
import { dropBlobs, uploads } from "./media.js";
import { forgetDrafts } from "./drafts.js";
import { search } from "./search.js";

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

export function showLogin(reason = "") {
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
    "account-deleted": "Your account was deleted.",
  };
  $("login-error").textContent = reasons[reason] ?? "";
  $("login-user").focus();
  applyServerInfo();
}

export let signingUp = false;
export function setSignUp(on) {
  signingUp = on;
  const invited = new URLSearchParams(location.hash.slice(1)).has("invite");
  $("invite-row").hidden = !on || (serverInfo?.registration === "open" && !invited);
  $("login-submit").textContent = on ? "Create the account" : "Log in";
  $("login-switch").textContent = on ? "I have an account" : "Create an account";
  $("login-password").autocomplete = on ? "new-password" : "current-password";
}

export async function submitLogin(event) {
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

export function started() {
  $("login").hidden = true;
  $("app").hidden = false;
  renderMe();
  // A subscription this browser holds is told to the server again: the server may have dropped it (a 410 from the
  // push service, the device logged out elsewhere) while the browser kept it.
  pushEnabled().then((on) => on && enablePush(session.token)).catch(() => {});
}

let meShown = "";
export function renderMe() {
  const profile = state.profiles.get(session.user);
  const shown = `${session.user}:${profile?.displayName ?? ""}:${profile?.thumbnail?.sha256 ?? ""}`;
  if (shown === meShown) return;
  meShown = shown;
  $("me").replaceChildren(avatar(session.user, displayName(session.user), "small"), h("span", { class: "visually-hidden", text: session.user }));
}

export function renderConnection(detail) {
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

export function setUpConnection() {
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
      // Logged out here, or the account deleted: its drafts go too. Logged out from elsewhere, they wait for the user.
      if (["logged-out", "account-deleted"].includes(event.detail.reason)) forgetDrafts();
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
    loadBlocks().then(render, () => {});
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
}
