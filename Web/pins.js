// Pinned messages: the bar at the top of a conversation, the list it opens, and the menu's Pin, Unpin and
// "Delete for me".

import { h } from "./text.js";
import { displayName, num, session, state } from "./state.js";
import { hideMessage, loadPins, pinMessage } from "./requests.js";
import { preview, render, showError, toast } from "./render.js";
import { jumpTo } from "./list.js";
import { openDialog } from "./dialogs.js";

// Whether this user may pin in a conversation: either side of a direct one; a group's owner and admins.
function mayPin(c) {
  if (!c.isGroup) return true;
  const role = c.members.get(session.user)?.role;
  return role === "GROUP_ROLE_OWNER" || role === "GROUP_ROLE_ADMIN";
}

// The bar above the messages: the newest pin, and how many more; nothing without pins. Asks for them once a
// conversation is shown (again after a pin event).
export function pinnedBar(c) {
  if (!c.pinsLoaded && !c.pinsLoading && c.loaded) {
    c.pinsLoading = true;
    loadPins(c)
      .then(() => render(), () => {})
      .finally(() => { c.pinsLoading = false; });
  }
  const pins = c.pins ?? [];
  if (pins.length === 0) return null;
  const newest = pins[0];
  return h(
    "button",
    { type: "button", class: "pinned-bar", "data-focus": "pinned", "aria-label": `Pinned messages: ${pins.length}`, onclick: () => pinsDialog(c) },
    h("span", { class: "pin-mark", "aria-hidden": "true", text: "📌" }),
    h("bdi", { class: "pinned-text", text: `${displayName(newest.from)}: ${preview(newest)}` }),
    pins.length > 1 ? h("span", { class: "pinned-more", text: `+${pins.length - 1}` }) : null,
  );
}

function pinsDialog(c) {
  const pins = c.pins ?? [];
  openDialog(
    pins.length === 1 ? "1 pinned message" : `${pins.length} pinned messages`,
    h(
      "ul",
      { class: "pins" },
      pins.map((message) =>
        h(
          "li",
          {},
          h("button", { type: "button", class: "link", dir: "auto", onclick: () => { document.getElementById("dialog").close(); jumpTo(c.key, num(message.seq)); } }, `${displayName(message.from)}: ${preview(message)}`),
          mayPin(c) ? h("button", { type: "button", class: "link", "data-action": "unpin", onclick: () => setPinned(c, message, false, true) }, "Unpin") : null,
        ),
      ),
    ),
  );
}

async function setPinned(c, message, on, reopen = false) {
  try {
    await pinMessage(c, message, !on);
    await loadPins(c);
    toast(on ? "Pinned" : "Unpinned");
    if (reopen) pinsDialog(c);
    render();
  } catch (error) {
    showError(error);
  }
}

async function hide(c, message) {
  if (!window.confirm("Delete this message for you? The others keep it.")) return;
  try {
    await hideMessage(c, message);
    dropMessage(c, num(message.seq), true);
    render();
  } catch (error) {
    showError(error);
  }
}

// The menu's items for a sent message: Pin or Unpin where this user may, and Delete for me.
export function pinItems(c, message, item) {
  if (message.pending) return [];
  const pinned = (c.pins ?? []).some((m) => num(m.seq) === num(message.seq)) || message.pinned;
  return [
    mayPin(c) && !message.recalled
      ? item(pinned ? "Unpin" : "Pin", () => setPinned(c, message, !pinned), { "data-action": pinned ? "unpin" : "pin" })
      : null,
    item("Delete for me", () => hide(c, message), { "data-action": "hide" }),
  ];
}

// A pin event: the message's mark, and the bar's list asked for again.
export function onPin(notice, c) {
  const known = c.messages.get(num(notice.message.seq));
  if (known) known.pinned = !!notice.pinned;
  c.pinsLoaded = false;
  c.pinsGeneration = (c.pinsGeneration ?? 0) + 1;
  if (state.open === c.key) render();
}

// A message gone from this page (recalled, or deleted for this user): its pin goes, and the list's preview is
// the newest message left.
export function dropMessage(c, seq, deleted) {
  c.pins = (c.pins ?? []).filter((m) => num(m.seq) !== seq);
  if (!deleted) return;
  c.messages.delete(seq);
  if (c.last && num(c.last.seq) === seq) {
    const newest = Math.max(0, ...c.messages.keys());
    c.last = c.messages.get(newest) ?? null;
  }
}
