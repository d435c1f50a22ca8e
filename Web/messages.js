// The message pane: the rows (day lines, group notices, receipts, reactions), its scrolling, and each message's
// actions menu.

import { h, clock, fullTime, richText } from "./text.js";
import {
  $,
  botBadge,
  conversation,
  discard,
  displayName,
  fill,
  isBot,
  noticesOf,
  num,
  retrySend,
  session,
  state,
} from "./state.js";
import { fetchVersions, loadOlder, recallMessage, sendReaction } from "./requests.js";
import { preview, render, showError } from "./render.js";
import { jumpTo } from "./list.js";
import { mediaElement } from "./media.js";
import { startEdit, startReply } from "./composer.js";
import { openDialog } from "./dialogs.js";
import { pinItems, pinnedBar } from "./pins.js";
import { forwardItem, forwardedLine } from "./forward.js";
import { chipHandlers } from "./reactors.js";

// The message pane

function memberNames(c) {
  const names = new Set([...c.members.keys()].map((name) => name.toLowerCase()));
  if (!c.isGroup) names.add(c.peer.user.toLowerCase()).add(session.user.toLowerCase());
  return names;
}

// Whether the message pane's view is at its bottom (the user has not scrolled up from there).
let pinnedToBottom = true;

export function renderMessages(toBottom) {
  const c = state.open && conversation(state.open);
  const box = $("messages");
  if (!c) {
    box.replaceChildren();
    return;
  }
  const focused = document.activeElement?.dataset?.focus;
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
  const fromBottom = box.scrollHeight - box.scrollTop;
  const names = memberNames(c);
  const rows = [];
  const bar = pinnedBar(c);
  if (bar) rows.push(bar);
  rows.push(
    c.more || !c.loaded
      ? h("button", { type: "button", class: "older", "data-focus": "older", onclick: () => older(c) }, c.loading ? "Loading…" : "Load older messages")
      : h("p", { class: "start", text: "The beginning of the conversation" }),
  );
  let day = "";
  // Membership and title lines go after the message they followed; those after the newest message, at the end.
  const notices = c.isGroup ? noticesOf(c).filter((n) => typeof n?.afterSeq === "number") : [];
  let next = 0;
  const oldest = Math.min(...c.messages.keys());
  while (next < notices.length && notices[next].afterSeq < oldest && c.more) next += 1;
  for (const seq of [...c.messages.keys()].sort((a, b) => a - b)) {
    while (next < notices.length && notices[next].afterSeq < seq) rows.push(noticeRow(notices[next++]));
    const message = c.messages.get(seq);
    const date = new Date(num(message.timeMs)).toDateString();
    if (date !== day) {
      day = date;
      rows.push(h("p", { class: "day", text: dayLabel(num(message.timeMs)) }));
    }
    rows.push(messageRow(c, message, names));
  }
  while (next < notices.length) rows.push(noticeRow(notices[next++]));
  for (const entry of state.outbox.filter((e) => e.key === c.key)) {
    rows.push(
      messageRow(
        c,
        { id: entry.id, from: session.user, body: entry.body, timeMs: entry.createdMs, replyTo: entry.replyTo, pending: entry },
        names,
      ),
    );
  }
  box.replaceChildren(...rows);
  if (toBottom || atBottom) {
    box.scrollTop = box.scrollHeight;
    pinnedToBottom = true;
  } else box.scrollTop = box.scrollHeight - fromBottom;
  if (focused) box.querySelector(`[data-focus="${CSS.escape(focused)}"]`)?.focus({ preventScroll: true });
}

function dayLabel(ms) {
  const date = new Date(ms);
  const today = new Date();
  if (date.toDateString() === today.toDateString()) return "Today";
  today.setDate(today.getDate() - 1);
  if (date.toDateString() === today.toDateString()) return "Yesterday";
  return date.toLocaleDateString(undefined, { weekday: "short", year: "numeric", month: "short", day: "numeric" });
}

async function older(c) {
  try {
    const pending = loadOlder(c);
    render();
    await pending;
  } catch (error) {
    showError(error);
  }
  render();
}

function statusMark(c, message) {
  if (message.pending) {
    if (message.pending.error) return h("span", { class: "status failed", title: message.pending.error, text: "⚠ not sent" });
    return h("span", { class: "status", "aria-label": "sending", title: "sending", text: "🕓" });
  }
  const seq = num(message.seq);
  if (!c.isGroup) {
    if (c.peerReadSeq >= seq) return h("span", { class: "status read", "aria-label": "read", title: "read", text: "✓✓" });
    if (c.peerDeliveredSeq >= seq) return h("span", { class: "status", "aria-label": "delivered", title: "delivered", text: "✓✓" });
    return h("span", { class: "status", "aria-label": "sent", title: "sent", text: "✓" });
  }
  let delivered = 0;
  let read = 0;
  for (const [user, mark] of c.marks) {
    if (user === session.user || mark.joined >= seq) continue;
    if (mark.delivered >= seq) delivered++;
    if (mark.read >= seq) read++;
  }
  if (read > 0) return h("span", { class: "status read", "aria-label": `read by ${read}`, title: `read by ${read}`, text: `✓✓ ${read}` });
  if (delivered > 0) return h("span", { class: "status", "aria-label": "delivered", title: "delivered", text: "✓✓" });
  return h("span", { class: "status", "aria-label": "sent", title: "sent", text: "✓" });
}

function noticeRow(notice) {
  const who = notice.user === session.user ? "You" : notice.user ? displayName(notice.user) : "The administrator";
  const text =
    notice.kind === "joined" ? `${who} joined` :
    notice.kind === "left" ? `${who} left` :
    notice.title ? `${who} named the group “${notice.title}”` : `${who} took the group's title away`;
  return h("p", { class: "notice", dir: "auto", text });
}

function flashing(c, message) {
  const flash = state.flash;
  return !!flash && !message.pending && flash.key === c.key && flash.seq === num(message.seq) && flash.until > Date.now();
}

function messageRow(c, message, names) {
  const mine = message.from === session.user;
  const seq = num(message.seq);
  const body = message.body ?? {};
  const content = [];
  if (c.isGroup && !mine) {
    // The user name beside the display name: two members cannot pass for each other by choosing one name.
    const shown = displayName(message.from);
    content.push(
      h(
        "span",
        { class: "sender" },
        h("bdi", { text: shown }),
        shown !== message.from ? h("span", { class: "handle", text: ` @${message.from}` }) : null,
        isBot(message.from) ? botBadge() : null,
      ),
    );
  }
  const reply = message.replyTo;
  if (reply) {
    const quoted = !reply.visible && !message.pending
      ? "an earlier message"
      : reply.recalled
        ? "Message recalled"
        : `${displayName(reply.from)}: ${preview({ body: reply.body })}`;
    content.push(
      h("button", { type: "button", class: "quote", dir: "auto", "data-focus": `quote:${seq}`, onclick: () => jumpTo(c.key, num(reply.seq)) }, quoted),
    );
  }
  content.push(forwardedLine(body));
  if (message.recalled) {
    content.push(h("p", { class: "text recalled", text: mine ? "You recalled this message" : "This message was recalled" }));
  } else if (body.media) {
    content.push(mediaElement(c, message, body.media));
    if (body.media.caption) content.push(h("p", { class: "text", dir: "auto" }, richText(body.media.caption, names)));
  } else {
    content.push(h("p", { class: "text", dir: "auto" }, richText(body.text ?? "", names)));
  }
  const meta = h(
    "span",
    { class: "meta" },
    message.pinned && !message.recalled ? h("span", { class: "pinned", title: "Pinned", text: "📌" }) : null,
    num(message.editedMs) > 0 && !message.recalled ? h("span", { class: "edited", title: fullTime(num(message.editedMs)), text: "edited" }) : null,
    h("time", { title: fullTime(num(message.timeMs)), text: clock(num(message.timeMs)) }),
    mine ? statusMark(c, message) : null,
  );
  content.push(meta);
  const reactions = (message.reactions ?? []).filter((r) => num(r.count) > 0);
  if (reactions.length > 0 && !message.recalled) {
    content.push(
      h(
        "div",
        { class: "reactions" },
        reactions.map((r) =>
          h(
            "button",
            {
              type: "button",
              class: `reaction${r.mine ? " mine" : ""}`,
              "data-key": r.key,
              "data-focus": `reaction:${seq}:${r.key}`,
              "aria-pressed": r.mine ? "true" : "false",
              "aria-label": `${r.key} ${r.count}`,
              ...chipHandlers(c, message, () => react(c, message, r.key, !!r.mine)),
            },
            `${r.key} ${r.count}`,
          ),
        ),
      ),
    );
  }
  const actions =
    message.pending || message.recalled
      ? message.pending?.error
        ? h(
            "span",
            { class: "failed-actions" },
            h("button", { type: "button", class: "link", "data-action": "retry", onclick: () => retrySend(message.pending) }, "Retry"),
            h("button", { type: "button", class: "link", "data-action": "discard", onclick: () => discard(message.pending) }, "Discard"),
          )
        : null
      : h(
          "button",
          {
            type: "button",
            class: "icon actions",
            "aria-label": "Message actions",
            "aria-haspopup": "menu",
            "data-focus": `actions:${seq}`,
            onclick: (event) => openMenu(event.currentTarget, c, message),
          },
          "⋯",
        );
  return h(
    "article",
    {
      class: `message${mine ? " mine" : ""}${message.pending ? " pending" : ""}${flashing(c, message) ? " flash" : ""}`,
      "data-seq": message.pending ? false : String(seq),
      "data-id": message.id,
      "data-from": message.from,
      tabindex: "-1",
    },
    h("div", { class: "bubble" }, content),
    actions,
  );
}

// Message actions

const reactionKeys = ["👍", "❤️", "😂", "🎉", "😮", "😢"];

function openMenu(anchor, c, message) {
  const menu = $("menu");
  const mine = message.from === session.user;
  let open = true;
  const close = () => {
    if (!open) return;
    open = false;
    menu.hidden = true;
    document.removeEventListener("keydown", onKey, true);
    document.removeEventListener("click", onOutside, true);
    // The button again, as the page now draws it (a redraw while the menu was open made a new one).
    const key = anchor.dataset.focus;
    (document.querySelector(`#messages [data-focus="${CSS.escape(key ?? "")}"]`) ?? anchor).focus();
  };
  const onKey = (event) => {
    if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      close();
    } else if (event.key === "ArrowDown" || event.key === "ArrowUp" || event.key === "ArrowRight" || event.key === "ArrowLeft") {
      // Arrow keys move between the menu's items.
      const items = [...menu.querySelectorAll("button")];
      const at = items.indexOf(document.activeElement);
      const step = event.key === "ArrowDown" || event.key === "ArrowRight" ? 1 : -1;
      items[(at + step + items.length) % items.length]?.focus();
      event.preventDefault();
    }
  };
  const onOutside = (event) => {
    if (!menu.contains(event.target)) close();
  };
  const item = (label, action, extra = {}) =>
    h("button", { type: "button", role: "menuitem", ...extra, onclick: () => { close(); action(); } }, label);
  const hasText = !message.body?.media || message.body.media.caption !== undefined;
  fill(menu,
    h(
      "div",
      { class: "menu-reactions", role: "group", "aria-label": "React" },
      reactionKeys.map((key) => {
        const mineAlready = (message.reactions ?? []).some((r) => r.key === key && r.mine);
        return item(key, () => react(c, message, key, mineAlready), { "data-key": key, "aria-label": `React ${key}` });
      }),
    ),
    item("Reply", () => startReply(message), { "data-action": "reply" }),
    forwardItem(c, message, item),
    mine && hasText && !message.body?.forwardedFrom && within(message, session.limits?.editWindowMs) ? item("Edit", () => startEdit(message), { "data-action": "edit" }) : null,
    mine && within(message, session.limits?.recallWindowMs)
      ? item(`Recall${left(message, session.limits?.recallWindowMs)}`, () => recall(c, message), { "data-action": "recall" })
      : null,
    num(message.editedMs) > 0 ? item("Earlier versions", () => showVersions(c, message), { "data-action": "versions" }) : null,
    !message.body?.media ? item("Copy text", () => navigator.clipboard?.writeText(message.body?.text ?? ""), { "data-action": "copy" }) : null,
    ...pinItems(c, message, item),
  );
  menu.hidden = false;
  const box = anchor.getBoundingClientRect();
  menu.style.top = `${Math.min(window.innerHeight - menu.offsetHeight - 8, box.bottom + 4)}px`;
  menu.style.left = `${Math.max(8, Math.min(window.innerWidth - menu.offsetWidth - 8, box.right - menu.offsetWidth))}px`;
  menu.querySelector("[data-action=reply]").focus();
  // At once: the click or key that opened the menu has passed the document's capture phase, so these do not see
  // it; added later, a key pressed quickly enough could close the menu before they came, and they would stay.
  document.addEventListener("keydown", onKey, true);
  document.addEventListener("click", onOutside, true);
}

async function react(c, message, key, off) {
  try {
    await sendReaction(c, message, key, off);
  } catch (error) {
    showError(error);
  }
}

// Whether a message of one's own is still within a window the server said (its welcome's limits; 0 or none: for
// ever), by the message's server time; and what is left of it, said beside Recall.
function within(message, windowMs) {
  const window = num(windowMs);
  if (!window || message.pending) return true;
  return Date.now() - num(message.timeMs) < window;
}

function left(message, windowMs) {
  const window = num(windowMs);
  if (!window || message.pending) return "";
  const seconds = Math.max(0, Math.ceil((num(message.timeMs) + window - Date.now()) / 1000));
  return seconds >= 120 ? ` (${Math.ceil(seconds / 60)} min left)` : ` (${seconds} s left)`;
}

async function recall(c, message) {
  try {
    await recallMessage(c, message);
  } catch (error) {
    showError(error);
  }
}

async function showVersions(c, message) {
  try {
    const answer = await fetchVersions(c, message);
    const versions = answer.versions?.versions ?? [];
    openDialog(
      "Earlier versions",
      h(
        "ol",
        { class: "versions" },
        versions.map((v) =>
          h("li", {}, h("p", { class: "text", dir: "auto", text: v.body?.text ?? v.body?.media?.caption ?? "" }), h("small", { text: v.replacedMs ? `replaced ${fullTime(num(v.replacedMs))}` : "" })),
        ),
      ),
    );
  } catch (error) {
    showError(error);
  }
}

// The pane's scrolling: older messages near its top, and a view at its bottom kept there.
export function setUpMessages() {
  $("messages").addEventListener("scroll", () => {
    const box = $("messages");
    pinnedToBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
    const c = state.open && conversation(state.open);
    if (c && box.scrollTop < 120 && c.more && c.loaded && !c.loading) older(c);
  });
  // A picture or a video that loads after the pane was scrolled grows it: a view at the bottom stays there, so the
  // newest message is never pushed below the fold. (Load events do not bubble: caught on the way down.)
  for (const type of ["load", "loadedmetadata"]) {
    $("messages").addEventListener(type, () => {
      if (pinnedToBottom) $("messages").scrollTop = $("messages").scrollHeight;
    }, true);
  }
}
