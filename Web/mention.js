// @mentions in a group's composer: `@` and the start of a member's user or display name (any script: 张伟, ليلى, 🐱)
// offer the members it fits; the arrows and Enter or Tab, or a click, put `@name ` in the draft (the user name, as the
// server reads mentions), Escape closes. Keys an input method is composing with are never taken.

import { h } from "./text.js";
import { $, conversation, displayName, fill, session, state } from "./state.js";
import { loadMembers } from "./requests.js";
import { avatar } from "./render.js";

const maxShown = 8;
let open = null; // {found, active, start}: the list shown, and where its `@` is in the draft
let dismissed = -1; // the `@` whose list Escape closed: not offered again until another is typed

// The mention being typed: an `@` (at the start, or after a character no name holds, as the server reads mentions)
// and what follows it up to the caret, without a space.
function typedMention(draft) {
  const caret = draft.selectionStart;
  if (caret !== draft.selectionEnd) return null;
  const match = /(?:^|[^A-Za-z0-9_.\-@＠])[@＠]([^\s@＠]{0,32})$/u.exec(draft.value.slice(0, caret));
  return match ? { start: caret - match[1].length - 1, prefix: match[1] } : null;
}

const fold = (text) => text.normalize("NFKC").toLocaleLowerCase();
const mayMentionAll = (c) => ["GROUP_ROLE_OWNER", "GROUP_ROLE_ADMIN"].includes(c.members.get(session.user)?.role);

// The members whose user name, display name, or a word of it, starts with the prefix; `@all` for the owner and
// admins, last (a quick Enter after `@` never mentions everyone).
function candidates(c, prefix) {
  const wanted = fold(prefix);
  const found = [];
  for (const user of c.members.keys()) {
    if (user === session.user) continue;
    const name = fold(displayName(user));
    if ([fold(user), name, ...name.split(/\s+/)].some((word) => word.startsWith(wanted))) found.push(user);
  }
  const shown = found.slice(0, maxShown - 1);
  if (mayMentionAll(c) && "all".startsWith(wanted)) shown.push("all");
  return shown;
}

// Asks for the members again when a membership event said they changed (once at a time).
function refresh(c) {
  if (c.membersFresh || c.membersAsking) return;
  c.membersAsking = loadMembers(c).finally(() => {
    c.membersAsking = null;
    c.membersFresh = true;
    if (state.open === c.key) updateMentions();
  });
}

// After each change of the draft: shows, changes or closes the list.
export function updateMentions() {
  const draft = $("draft");
  const c = state.open && conversation(state.open);
  const typed = c?.isGroup && !c.left && !state.editing ? typedMention(draft) : null;
  if (!typed || typed.start === dismissed) {
    if (!typed) dismissed = -1;
    closeMentions();
    return;
  }
  refresh(c);
  const found = candidates(c, typed.prefix);
  if (found.length === 0) {
    closeMentions();
    return;
  }
  const same = open && open.start === typed.start && open.found.join() === found.join();
  open = { found, active: same ? open.active : 0, start: typed.start };
  draw();
}

function draw() {
  const draft = $("draft");
  let list = $("mentions");
  if (!list) {
    // A press anywhere in the list leaves the focus in the draft (its blur would close the list).
    list = h("ul", {
      id: "mentions",
      class: "mention-list",
      role: "listbox",
      "aria-label": "Members to mention",
      onmousedown: (event) => event.preventDefault(),
    });
    $("composer").append(list);
  }
  fill(
    list,
    open.found.map((user, index) =>
      h(
        "li",
        {
          id: `mention-${index}`,
          role: "option",
          "aria-selected": String(index === open.active),
          "data-user": user,
          onclick: () => pick(index),
        },
        user === "all" ? avatar(null, "@", "small") : avatar(user, displayName(user), "small"),
        h("bdi", { class: "mention-name", text: user === "all" ? "Everyone" : displayName(user) }),
        h("span", { class: "mention-handle", text: `@${user}` }),
      ),
    ),
  );
  list.hidden = false;
  draft.setAttribute("aria-activedescendant", `mention-${open.active}`);
  list.children[open.active]?.scrollIntoView({ block: "nearest" });
}

export function closeMentions() {
  open = null;
  const list = $("mentions");
  if (list) list.hidden = true;
  $("draft").removeAttribute("aria-activedescendant");
}

// Puts `@name ` in place of what was typed after the `@`, and the caret after it.
function pick(index) {
  const draft = $("draft");
  const user = open?.found[index];
  const typed = typedMention(draft);
  closeMentions();
  if (!user || !typed) return;
  draft.setRangeText(`@${user} `, typed.start, draft.selectionStart, "end");
  draft.focus();
  draft.dispatchEvent(new Event("input")); // kept as the draft, typing said
}

// A key in the draft while the list is open: true when the list took it (the composer then does nothing with it).
export function mentionKey(event) {
  if (!open || event.isComposing || event.keyCode === 229 || event.altKey || event.ctrlKey || event.metaKey) return false;
  const count = open.found.length;
  if (event.key === "ArrowDown" || event.key === "ArrowUp") {
    open.active = (open.active + (event.key === "ArrowDown" ? 1 : count - 1)) % count;
    draw();
  } else if ((event.key === "Enter" || event.key === "Tab") && !event.shiftKey) {
    pick(open.active);
  } else if (event.key === "Escape") {
    dismissed = open.start;
    closeMentions();
  } else {
    return false;
  }
  event.preventDefault();
  return true;
}

export function setUpMentions() {
  const draft = $("draft");
  draft.setAttribute("aria-autocomplete", "list");
  draft.addEventListener("blur", closeMentions);
  // The caret moved by a click or an arrow key: into a mention, or out of one.
  draft.addEventListener("click", updateMentions);
  draft.addEventListener("keyup", (event) => {
    if (["ArrowLeft", "ArrowRight", "Home", "End"].includes(event.key)) updateMentions();
  });
}
