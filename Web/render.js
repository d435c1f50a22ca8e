// Redrawing the page, once a frame; the chat's header; what every part draws alike (avatars, previews, errors).

import { RequestError } from "./session.js";
import { h, relativeTime, initial, hue } from "./text.js";
import { $, botBadge, conversation, displayName, isBot, state, titleOf } from "./state.js";
import { renderList } from "./list.js";
import { renderMessages } from "./messages.js";
import { isDigest, picture } from "./media.js";
import { renderMe } from "./login.js";
import { keepSoon } from "./offline.js";
import { showUnread } from "./favicon.js";

// Everything that changes asks for a redraw; one happens per frame, however many asked (a reconnect's presence
// notices, a page of events). The messages are redrawn only when something asked for them.
let renderQueued = false;
let scrollToBottom = false;
let messagesWanted = false;
export function render({ toBottom = false, messages = true } = {}) {
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
  renderTitle();
  if (messagesWanted) renderMessages(scrollToBottom);
  messagesWanted = false;
  scrollToBottom = false;
  // What is shown is kept for a reload while the server cannot be reached.
  keepSoon();
}

// Draws now, the messages with the rest.
export function drawNow() {
  messagesWanted = true;
  draw();
}

// The tab's title: the unread messages of the conversations that alert (not muted), then the open conversation's
// title, as other messengers' tabs say it: "(3) 读书会 · Courier"; the tab's icon shows the count too.
function renderTitle() {
  let unread = 0;
  for (const c of state.conversations.values()) if (c.notify === "NOTIFY_LEVEL_ALL") unread += Math.max(0, c.unread);
  const c = state.open && conversation(state.open);
  const title = `${c ? `${titleOf(c)} · ` : ""}Courier`;
  const shown = unread > 0 ? `(${unread > 999 ? "999+" : unread}) ${title}` : title;
  if (document.title !== shown) document.title = shown;
  showUnread(unread);
}

export function avatar(user, label = user, size = "") {
  const thumb = user ? state.profiles.get(user)?.thumbnail?.sha256 : null;
  if (isDigest(thumb)) return picture(thumb, { class: `avatar ${size}`, alt: "" });
  const element = h("span", { class: `avatar ${size}`, "aria-hidden": "true", text: initial(label) });
  element.style.setProperty("--hue", hue(label));
  return element;
}

export function preview(message) {
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

export function subtitle(c) {
  const typers = [...c.typing.entries()].filter(([, until]) => until > Date.now()).map(([user]) => displayName(user));
  if (typers.length > 0) return `${typers.join(", ")} ${typers.length === 1 ? "is" : "are"} typing…`;
  if (c.isGroup) {
    if (c.left) return "You are not a member";
    const count = c.members.size;
    return count ? `${count} member${count === 1 ? "" : "s"} · ${c.peer.group}` : c.peer.group;
  }
  const presence = state.presence.get(c.peer.user);
  const name = c.peer.user;
  if (state.blocked.has(name.toLowerCase())) return `${name} · blocked`;
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
  $("chat-avatar").replaceChildren(avatar(c.isGroup ? null : c.peer.user, title));
  $("notify").value = c.notify;
  $("manage").title = c.isGroup ? "Group" : "Person";
  $("manage").setAttribute("aria-label", c.isGroup ? "Group members and settings" : `${c.peer.user}: block or unblock`);
  $("chat-subtitle").textContent = subtitle(c);
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

export function showError(error) {
  const text = error instanceof RequestError ? `${error.message} (${error.code})` : String(error.message ?? error);
  toast(text);
}

export function toast(text) {
  const box = h("div", { class: "toast", role: "alert", text });
  document.body.append(box);
  setTimeout(() => box.remove(), 6000);
}
