// Who reacted: a long press on a reaction's chip (or a right click, the context-menu key) lists them; a click toggles.

import { h } from "./text.js";
import { displayName, num, state, wantProfile } from "./state.js";
import { fetchProfiles, fetchReactors } from "./requests.js";
import { showError } from "./render.js";
import { openDialog } from "./dialogs.js";

// A press turned long: the click ending it toggles nothing (a keyboard's, detail 0, does).
let held = false;
let timer = 0;

export function chipHandlers(c, message, toggle) {
  const stop = () => clearTimeout(timer);
  const list = () => {
    held = true;
    showReactors(c, message);
  };
  return {
    title: "Hold or right-click: who reacted",
    onpointerdown: (event) => {
      held = false;
      stop();
      if (event.button === 0) timer = setTimeout(list, 500);
    },
    onkeydown: () => (held = false), // Shift+F10 or the menu key: a press before it says nothing of this one
    onpointerup: stop,
    onpointerleave: stop,
    onpointercancel: stop,
    oncontextmenu: (event) => {
      event.preventDefault();
      stop();
      if (!held) list();
    },
    onclick: (event) => {
      if (!(held && event.detail)) toggle();
    },
  };
}

async function showReactors(c, message) {
  try {
    const answer = await fetchReactors(c, message);
    const entries = answer.reactors?.entries ?? [];
    for (const entry of entries) for (const user of entry.users ?? []) wantProfile(user);
    if (state.wantedProfiles.size > 0) await fetchProfiles();
    openDialog("Who reacted", h("ul", { class: "reactors" }, entries.map((entry) => {
      const users = entry.users ?? [];
      const more = num(entry.count) - users.length;
      const names = users.flatMap((user, i) => [i ? ", " : null, h("bdi", { "data-user": user, text: displayName(user) })]);
      return h("li", { "data-key": entry.key }, `${entry.key} ${num(entry.count)}: `, names, more > 0 ? ` and ${more} more` : null);
    })));
  } catch (error) {
    showError(error);
  }
}
