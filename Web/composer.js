// The composer: drafts, typing notices, replies and edits, and files attached, dropped or pasted.

import { $, conversation, num, queue, session, state } from "./state.js";
import { editMessage, sayTyping } from "./requests.js";
import { render, showError, toast } from "./render.js";
import { sendFile } from "./media.js";
import { clearDraft, loadDraft, saveDraft } from "./drafts.js";
import { closeMentions, mentionKey, setUpMentions, updateMentions } from "./mention.js";
import { cancelVoice, setUpVoice } from "./voice.js";

// The draft of the conversation opened, as it was left (drafts.js keeps it).
export function showDraft(key) {
  closeMentions();
  cancelVoice();
  $("draft").value = loadDraft(key);
  autosize();
}

// Typing notices: "typing" at most every 3 s while the draft changes, "stopped" 4 s after the last change, on a send,
// or when the draft loses focus; each to the conversation the typing was in.
let typingSentAt = 0;
let typingIn = null;
let typingStop = null;
function typing(active) {
  clearTimeout(typingStop);
  if (typingIn && (!active || typingIn.key !== state.open)) {
    if (typingSentAt) sayTyping(typingIn.peer, false);
    typingSentAt = 0;
    typingIn = null;
  }
  const c = state.open && conversation(state.open);
  if (!active || !c || session.state !== "online") return;
  if (Date.now() - typingSentAt > 3000) {
    typingSentAt = Date.now();
    typingIn = c;
    sayTyping(c.peer, true);
  }
  typingStop = setTimeout(() => typing(false), 4000);
}

export function startReply(message) {
  state.editing = null;
  state.replyTo = message;
  render();
  $("draft").focus();
}

export function startEdit(message) {
  state.replyTo = null;
  state.editing = message;
  $("draft").value = message.body?.text ?? message.body?.media?.caption ?? "";
  render();
  $("draft").focus();
}

function submitDraft() {
  const c = state.open && conversation(state.open);
  const draft = $("draft");
  const text = draft.value.replace(/^\s+|\s+$/g, "");
  if (!c) return;
  if (state.editing) {
    const message = state.editing;
    state.editing = null;
    // The draft the edit took the place of comes back.
    draft.value = loadDraft(c.key);
    editMessage(c, message, text)
      .then(() => {
        message.body = message.body?.media ? { media: { ...message.body.media, caption: text } } : { text };
        message.editedMs = String(Date.now());
        render();
      })
      .catch((error) => {
        // Refused (the edit window passed, too many edits): the words come back to the draft.
        showError(error);
        if (!draft.value) draft.value = text;
      });
    render();
    return;
  }
  if (!text) return;
  const maxBytes = num(session.limits.maxTextBytes) || 65536;
  if (new TextEncoder().encode(text).length > maxBytes) {
    toast(`A message may have at most ${maxBytes} bytes.`);
    return;
  }
  queue(c.key, { text }, state.replyTo);
  state.replyTo = null;
  draft.value = "";
  clearDraft(c.key);
  typing(false);
  autosize();
}

function autosize() {
  const draft = $("draft");
  draft.style.height = "auto";
  draft.style.height = `${Math.min(draft.scrollHeight, 160)}px`;
}

// Enter sends, Shift+Enter is a new line; an Enter that confirms an input method's composition (pinyin, kana…) sends
// nothing. Browsers order `compositionend` and that keydown differently: three checks, `isComposing`, 229, our flag.
let composing = false;
export function setUpComposer() {
  const draft = $("draft");
  draft.addEventListener("compositionstart", () => {
    composing = true;
    draft.dataset.composing = "true";
  });
  draft.addEventListener("compositionend", () => {
    // Safari sends compositionend before the Enter's keydown: stay composing until that keydown has passed.
    setTimeout(() => {
      composing = false;
      delete draft.dataset.composing;
    });
  });
  setUpMentions();
  setUpVoice();
  draft.addEventListener("keydown", (event) => {
    if (event.isComposing || composing || event.keyCode === 229) return;
    // An open list of members to mention takes the arrows, Enter, Tab and Escape.
    if (mentionKey(event)) return;
    if (event.key === "Escape" && (state.replyTo || state.editing)) {
      event.stopPropagation();
      cancelContext();
      return;
    }
    if (event.key !== "Enter" || event.shiftKey || event.altKey || event.ctrlKey || event.metaKey) return;
    event.preventDefault();
    submitDraft();
  });
  draft.addEventListener("input", () => {
    autosize();
    // What an edit puts in the field is not the draft.
    if (state.open && !state.editing) saveDraft(state.open, draft.value);
    if (!state.editing) typing(draft.value.length > 0);
    updateMentions();
  });
  draft.addEventListener("blur", () => typing(false));
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    submitDraft();
    draft.focus();
  });
  $("composer-cancel").addEventListener("click", cancelContext);
  $("file").addEventListener("change", (event) => {
    const files = [...event.target.files];
    event.target.value = "";
    for (const file of files) sendFile(file);
  });
  // Files dropped on, or pasted into, the conversation.
  $("chat").addEventListener("dragover", (event) => event.preventDefault());
  $("chat").addEventListener("drop", (event) => {
    event.preventDefault();
    for (const file of event.dataTransfer?.files ?? []) sendFile(file);
  });
  draft.addEventListener("paste", (event) => {
    const files = [...(event.clipboardData?.files ?? [])];
    if (files.length === 0) return;
    event.preventDefault();
    for (const file of files) sendFile(file);
  });
}

function cancelContext() {
  if (state.editing) $("draft").value = loadDraft(state.open);
  state.replyTo = null;
  state.editing = null;
  render();
}
