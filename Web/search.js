// Searching the user's messages: the hits shown in place of the conversation list.

import { h, relativeTime, markedFragment } from "./text.js";
import { $, conversation, displayName, fill, keyOf, num, titleOf } from "./state.js";
import { searchMessages } from "./requests.js";
import { showError } from "./render.js";
import { jumpTo } from "./list.js";

let searchState = null;
let searchAsked = 0;
export async function search(query, before = null) {
  const asked = ++searchAsked;
  const results = $("search-results");
  if (!query) {
    results.hidden = true;
    $("conversations").hidden = false;
    searchState = null;
    return;
  }
  const request = { query, limit: 20 };
  if (before) request.before = before;
  try {
    const answer = await searchMessages(request);
    if (asked !== searchAsked) return; // a newer search was asked meanwhile
    const page = answer.search ?? {};
    searchState = { query, hits: [...(before ? searchState?.hits ?? [] : []), ...(page.hits ?? [])], more: !!page.more, next: page.next };
  } catch (error) {
    showError(error);
    return;
  }
  results.hidden = false;
  $("conversations").hidden = true;
  fill(results,
    h("p", { class: "note", text: searchState.hits.length ? `Messages with “${query}”` : `Nothing found for “${query}”` }),
    h(
      "ul",
      { class: "hits" },
      searchState.hits.map((hit) => {
        const message = hit.message;
        const key = keyOf(message.conversation);
        return h(
          "li",
          {},
          h(
            "button",
            { type: "button", class: "hit", "data-key": key, "data-seq": message.seq, onclick: () => jumpTo(key, num(message.seq)) },
            h("span", { class: "conversation-top" }, h("span", { class: "conversation-title", dir: "auto", text: titleOf(conversation(key)) }), h("time", { class: "time", text: relativeTime(num(message.timeMs)) })),
            h("span", { class: "fragment", dir: "auto" }, `${displayName(message.from)}: `, ...markedFragment(hit.fragment ?? "", hit.marks ?? [])),
          ),
        );
      }),
    ),
    searchState.more ? h("button", { type: "button", class: "link", onclick: () => search(query, searchState.next) }, "More results") : null,
    h("button", { type: "button", class: "link", onclick: () => { $("search").value = ""; search(""); } }, "Close the search"),
  );
}
