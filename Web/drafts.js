// The composer's unsent text, per conversation, kept in the browser (each user's apart): it outlives a switch of
// conversation and a reload, and goes when it is sent. Each change reads the stored drafts afresh, so tabs of one
// browser each change only their own conversation's.

import { session } from "./state.js";

const draftsKey = () => `courier.drafts.${session.user}`;

function stored() {
  try {
    const drafts = JSON.parse(localStorage.getItem(draftsKey()) || "{}");
    return drafts && typeof drafts === "object" && !Array.isArray(drafts) ? drafts : {};
  } catch {
    return {};
  }
}

export function loadDraft(key) {
  const text = session.user ? stored()[key] : "";
  return typeof text === "string" ? text : "";
}

export function saveDraft(key, text) {
  if (!session.user || !key) return;
  const drafts = stored();
  if ((drafts[key] ?? "") === text) return;
  if (text.trim()) drafts[key] = text;
  else delete drafts[key];
  try {
    if (Object.keys(drafts).length > 0) localStorage.setItem(draftsKey(), JSON.stringify(drafts));
    else localStorage.removeItem(draftsKey());
  } catch {
    // Storage full: the draft stays in the field for this visit.
  }
}

export const clearDraft = (key) => saveDraft(key, "");

// A logout from this browser (or the account deleted) leaves no words behind on it.
export function forgetDrafts() {
  if (session.user) localStorage.removeItem(draftsKey());
}
