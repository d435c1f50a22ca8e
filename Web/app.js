// Courier's web chat: the page's start. The server's envelopes are documented in docs/PROTOCOL.md; each module says
// on its first line what it holds (state.js the state and the outbox, requests.js every request, render.js the redraw).

import { relativeTime } from "./text.js";
import { registerWorker, onNotificationClick } from "./push.js";
import { $, conversation, session, state, watchOutbox } from "./state.js";
import { setUpEvents } from "./events.js";
import { markRead, setNotify } from "./requests.js";
import { render, showError, subtitle } from "./render.js";
import { closeConversation, openConversation, openWhenListed } from "./list.js";
import { setUpMessages } from "./messages.js";
import { setUpComposer } from "./composer.js";
import { groupDialog, newChatDialog, profileDialog } from "./dialogs.js";
import { search } from "./search.js";
import { setUpTheme } from "./theme.js";
import { renderConnection, setSignUp, setUpConnection, showLogin, signingUp, started, submitLogin } from "./login.js";
import { restore, setUpOffline } from "./offline.js";

function start() {
  setUpTheme();
  // The conversation a notification's click asked for (`/#open=u:alice`), opened once the list is loaded.
  const key = new URLSearchParams(location.hash.slice(1)).get("open") ?? "";
  if (key) history.replaceState(null, "", location.pathname);
  openWhenListed(/^[ug]:./.test(key) ? key : "");
  watchOutbox();
  // Before setUpConnection: its welcome asks for the profiles the offline copy's welcome wants again.
  setUpOffline();
  setUpConnection();
  setUpEvents();
  registerWorker();
  onNotificationClick((key) => {
    if (!session.hasToken || $("app").hidden || !state.loadedList) openWhenListed(key);
    else if (state.conversations.has(key)) openConversation(key);
  });
  $("login-form").addEventListener("submit", submitLogin);
  $("login-switch").addEventListener("click", () => setSignUp(!signingUp));
  $("retry").addEventListener("click", () => session.retryNow());
  $("new-chat").addEventListener("click", newChatDialog);
  $("manage").addEventListener("click", groupDialog);
  $("me").addEventListener("click", profileDialog);
  $("back").addEventListener("click", closeConversation);
  $("notify").addEventListener("change", async (event) => {
    const c = state.open && conversation(state.open);
    if (!c) return;
    const level = event.target.value;
    try {
      await setNotify(c.peer, level);
      c.notify = level;
      render();
    } catch (error) {
      showError(error);
      render();
    }
  });
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    search($("search").value.trim());
  });
  $("search").addEventListener("input", (event) => {
    if (!event.target.value) search("");
  });
  setUpMessages();
  document.addEventListener("visibilitychange", () => {
    const c = state.open && conversation(state.open);
    if (c && document.visibilityState === "visible") {
      markRead(c);
      render();
    }
  });
  // Escape leaves a conversation for the list, on a phone's one pane: not while composing, nor when a menu, a
  // dialog or the draft's reply or edit took the key first (they stop it).
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || event.isComposing || event.keyCode === 229 || event.defaultPrevented) return;
    if (document.body.classList.contains("chat-open") && !$("dialog").open && $("menu").hidden) closeConversation();
  });
  window.addEventListener("hashchange", () => {
    if (!session.hasToken) showLogin();
  });
  setUpComposer();
  // Relative times, typing that stopped, the retry countdown.
  setInterval(() => {
    if (session.state === "offline") renderConnection({ state: "offline" });
    if ($("app").hidden) return;
    let expired = false;
    for (const c of state.conversations.values()) {
      for (const [user, until] of c.typing) {
        if (until <= Date.now()) expired = c.typing.delete(user);
      }
    }
    if (expired) render();
    for (const time of document.querySelectorAll("#conversations time[data-ms]")) {
      time.textContent = relativeTime(Number(time.dataset.ms));
    }
    const c = state.open && conversation(state.open);
    if (c) $("chat-subtitle").textContent = subtitle(c);
  }, 1000);
  if (session.hasToken) {
    started();
    // What the page showed last, from the browser, while it connects (at once when the server cannot be reached).
    restore();
    session.open(null);
  } else {
    setSignUp(false);
    showLogin();
  }
}

start();
