// Forwarding: the menu's Forward, the dialog picking a conversation, and a forwarded message's line.

import { h } from "./text.js";
import { $, displayName, fill, newId, state, titleOf } from "./state.js";
import { forwardMessage } from "./requests.js";
import { avatar, showError, toast } from "./render.js";
import { openDialog } from "./dialogs.js";

// For a message the server holds (not one in the outbox), not recalled.
export function forwardItem(c, message, item) {
  if (message.pending || message.recalled) return null;
  return item("Forward", () => forwardDialog(c, message), { "data-action": "forward" });
}

export function forwardedLine(body) {
  if (!body.forwardedFrom) return null;
  return h("p", { class: "forwarded", dir: "auto", text: `Forwarded from ${displayName(body.forwardedFrom)}` });
}

function forwardDialog(c, message) {
  const targets = [...state.conversations.values()]
    .filter((t) => (t.last || t.lastSeq > 0 || t.isGroup) && !t.left)
    .sort((a, b) => b.lastActivity - a.lastActivity || titleOf(a).localeCompare(titleOf(b)));
  const list = h("ul", { class: "conversations" });
  const row = (t) =>
    h("li", {}, h("button", { type: "button", class: "conversation", "data-key": t.key, onclick: () => forward(c, message, t) },
      avatar(t.isGroup ? null : t.peer.user, titleOf(t), "small"),
      h("span", { class: "conversation-title", dir: "auto", text: titleOf(t) })));
  const filter = h("input", { type: "search", "aria-label": "Find a conversation", placeholder: "Find a conversation", oninput: () => show() });
  const show = () => {
    const query = filter.value.trim().toLowerCase();
    fill(list, targets.filter((t) => `${titleOf(t)} ${t.key.slice(2)}`.toLowerCase().includes(query)).map(row));
  };
  show();
  openDialog("Forward to…", h("div", { class: "stack" }, filter, list));
}

async function forward(c, message, target) {
  $("dialog").close();
  try {
    await forwardMessage(c, message, target.peer, newId());
    toast(`Forwarded to ${titleOf(target)}`);
  } catch (error) {
    showError(error);
  }
}
