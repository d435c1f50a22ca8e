// The conversation list, and opening a conversation from it (or from a search hit, a quote, a notification).

import { h, relativeTime, fullTime } from "./text.js";
import { $, botBadge, conversation, displayName, isBot, num, session, state, titleOf } from "./state.js";
import { loadMembers, loadOlder, markRead } from "./requests.js";
import { avatar, drawNow, preview, render, showError, toast } from "./render.js";
import { showDraft } from "./composer.js";

// Opening a conversation, and jumping to a message in it

export async function openConversation(key, { focus = true } = {}) {
  const c = conversation(key);
  const changed = state.open !== key;
  state.open = key;
  if (changed) {
    state.replyTo = null;
    state.editing = null;
    showDraft(key);
  }
  document.body.classList.add("chat-open");
  render({ toBottom: true });
  if (focus) $("draft").focus();
  if (changed) loadMembers(c);
  if (!c.loaded) {
    try {
      await loadOlder(c);
    } catch (error) {
      if (error.code !== "disconnected") showError(error);
    }
  }
  if (state.open === key && document.visibilityState === "visible") markRead(c);
  render({ toBottom: true });
}

export function closeConversation() {
  state.open = null;
  document.body.classList.remove("chat-open");
  render();
}

export async function jumpTo(key, seq) {
  await openConversation(key, { focus: false });
  const c = conversation(key);
  for (let pages = 0; !c.messages.has(seq) && c.more && pages < 100; pages++) {
    try {
      await loadOlder(c);
    } catch (error) {
      showError(error);
      return;
    }
  }
  drawNow();
  const element = document.querySelector(`#messages [data-seq="${seq}"]`);
  if (!element) {
    toast("That message can no longer be shown.");
    return;
  }
  element.scrollIntoView({ block: "center" });
  // Marked for a few seconds (across redraws), and focused for a screen reader.
  state.flash = { key, seq, until: Date.now() + 3000 };
  element.classList.add("flash");
  element.focus({ preventScroll: true });
  setTimeout(() => render(), 3100);
}

// The conversation a notification's click asked for (`/#open=u:alice`), opened once the list is loaded.
let openAtStart = "";

export function openWhenListed(key) {
  openAtStart = key;
}

export function openAsked() {
  if (openAtStart) {
    const key = openAtStart;
    openAtStart = "";
    // Only one of the user's own conversations: a link cannot start one with anybody.
    if (state.conversations.has(key)) openConversation(key);
  }
}

// The conversation list

export function renderList() {
  const list = $("conversations");
  const pendingKeys = new Set(state.outbox.map((entry) => entry.key));
  const items = [...state.conversations.values()]
    .filter((c) => c.last || c.lastSeq > 0 || pendingKeys.has(c.key) || c.key === state.open || c.isGroup)
    .sort((a, b) => b.lastActivity - a.lastActivity || titleOf(a).localeCompare(titleOf(b)));
  $("no-conversations").hidden = items.length > 0 || !state.loadedList;
  const focused = list.contains(document.activeElement) ? document.activeElement.dataset.key : null;
  list.replaceChildren(
    ...items.map((c) => {
      const title = titleOf(c);
      const last = c.last;
      // Who wrote the last message: "You:" in any conversation, the sender's name in a group.
      const who = !last ? "" : last.from === session.user ? "You: " : c.isGroup ? `${displayName(last.from)}: ` : "";
      const typingNow = [...c.typing.entries()].some(([, until]) => until > Date.now());
      const online = !c.isGroup && state.presence.get(c.peer.user)?.online;
      const muted = c.notify !== "NOTIFY_LEVEL_ALL";
      return h(
        "li",
        {},
        h(
          "button",
          {
            type: "button",
            class: `conversation${c.key === state.open ? " selected" : ""}${c.unread > 0 ? " unread" : ""}`,
            "data-key": c.key,
            "aria-current": c.key === state.open ? "true" : false,
            onclick: () => openConversation(c.key),
          },
          h("span", { class: "avatar-slot" }, avatar(c.isGroup ? null : c.peer.user, title), online ? h("span", { class: "online-dot", title: "online" }) : null),
          h(
            "span",
            { class: "conversation-text" },
            h(
              "span",
              { class: "conversation-top" },
              h("span", { class: "conversation-title", dir: "auto", text: title }),
              !c.isGroup && isBot(c.peer.user) ? botBadge() : null,
              muted ? h("span", { class: "muted", title: "muted", "aria-label": "muted", text: "🔕" }) : null,
              h("time", { class: "time", "data-ms": last ? String(num(last.timeMs)) : false, title: last ? fullTime(num(last.timeMs)) : "", text: last ? relativeTime(num(last.timeMs)) : "" }),
            ),
            h(
              "span",
              { class: "conversation-bottom" },
              h("span", { class: "preview", dir: "auto", text: typingNow ? "typing…" : who + preview(last) }),
              c.mentions > 0 ? h("span", { class: "badge mention-badge", "aria-label": `${c.mentions} mentions`, text: "@" }) : null,
              c.unread > 0
                ? h("span", { class: `badge${muted ? " quiet" : ""}`, "aria-label": `${c.unread} unread`, text: String(c.unread) })
                : null,
            ),
          ),
        ),
      );
    }),
  );
  if (focused) list.querySelector(`[data-key="${CSS.escape(focused)}"]`)?.focus({ preventScroll: true });
}
