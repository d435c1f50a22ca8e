// The settings of the profile dialog that are the account's and the browser's: light or dark, the password, the
// devices logged in (each logged out from here), deleting the account, and logging out. Refusals are said in words.

import { h, fullTime, relativeTime } from "./text.js";
import { disablePush } from "./push.js";
import { $, fill, num, session } from "./state.js";
import { changePassword, deleteAccount, listDevices, revokeDevice } from "./requests.js";
import { setTheme, theme, themes } from "./theme.js";

// A refusal as the user reads it; `words` for the codes that mean something of their own in one place.
function inWords(error, words = {}) {
  const wait = error.retryAfterMs ? `try again in ${Math.ceil(error.retryAfterMs / 1000)} s` : "try again later";
  const known = {
    "wrong-password": "That is not your present password.",
    "weak-password": "Choose a password of at least 8 characters (at most 1,024 bytes).",
    "rate-limited": `Too many tries: ${wait}.`,
    throttled: `Too many tries: ${wait}.`,
    disconnected: "The server cannot be reached: try again once you are online.",
    "storage-failed": "The server could not save that: try again.",
    ...words,
  };
  return known[error.code] ?? (error.code && error.message !== error.code ? error.message : "That did not work: try again.");
}

function passwordField(label, autocomplete) {
  const id = `f-${Math.random().toString(36).slice(2)}`;
  return [h("label", { for: id, text: label }), h("input", { id, type: "password", autocomplete })];
}

const status = () => h("p", { class: "note", role: "status" });

export function appearanceSettings() {
  const chosen = theme();
  return h(
    "fieldset",
    { class: "stack settings", "data-settings": "theme" },
    h("legend", { text: "Appearance" }),
    h(
      "div",
      { class: "choices" },
      Object.entries(themes).map(([value, label]) =>
        h(
          "label",
          { class: "check" },
          h("input", { type: "radio", name: "theme", value, checked: value === chosen, onchange: () => setTheme(value) }),
          ` ${label}`,
        ),
      ),
    ),
  );
}

export function passwordSettings() {
  const [oldLabel, oldInput] = passwordField("Present password", "current-password");
  const [newLabel, newInput] = passwordField("New password (8 characters or more)", "new-password");
  const [againLabel, againInput] = passwordField("New password again", "new-password");
  const keep = h("input", { type: "checkbox", name: "keep-devices" });
  const note = status();
  const form = h(
    "form",
    {
      class: "stack",
      "data-form": "password",
      onsubmit: async (event) => {
        event.preventDefault();
        if (newInput.value !== againInput.value) {
          note.textContent = "The two new passwords differ.";
          return;
        }
        if (Array.from(newInput.value).length < 8) {
          note.textContent = "Choose a password of at least 8 characters.";
          return;
        }
        note.textContent = "Changing…";
        try {
          await changePassword(oldInput.value, newInput.value, keep.checked);
          form.reset();
          note.textContent = keep.checked ? "Changed." : "Changed. Your other devices were logged out.";
          form.closest("dialog")?.querySelector("[data-settings=devices]")?.dispatchEvent(new Event("reload"));
        } catch (error) {
          note.textContent = inWords(error);
        }
      },
    },
    oldLabel,
    oldInput,
    newLabel,
    newInput,
    againLabel,
    againInput,
    h("label", { class: "check" }, keep, " Keep my other devices logged in"),
    h("button", { type: "submit" }, "Change the password"),
    note,
  );
  return h("details", { class: "settings" }, h("summary", { text: "Change the password" }), form);
}

export function deviceSettings() {
  const list = h("ul", { class: "devices", "aria-label": "Your devices" });
  const note = status();
  const load = async () => {
    try {
      const answer = (await listDevices()).devices ?? {};
      fill(list, (answer.devices ?? []).map((device) => deviceItem(device, load, note)));
      if (answer.more) note.textContent = "Older devices are left out.";
    } catch (error) {
      note.textContent = inWords(error);
    }
  };
  load();
  const fieldset = h("fieldset", { class: "stack settings", "data-settings": "devices" }, h("legend", { text: "Devices logged in" }), list, note);
  fieldset.addEventListener("reload", load);
  return fieldset;
}

function deviceItem(device, reload, note) {
  const name = device.name || "A device";
  const lastSeen = num(device.lastSeenMs);
  const expires = num(device.expiresMs);
  const when = device.current
    ? "This device"
    : num(device.connectedSinceMs) > 0
      ? "Connected now"
      : expires > 0 && expires < Date.now()
        ? "Expired"
        : lastSeen > 0
          ? `Last seen ${relativeTime(lastSeen)}`
          : "Not connected";
  const logOutDevice = async () => {
    if (device.current) return logOut();
    try {
      await revokeDevice(device.id);
      note.textContent = `Logged out: ${name}.`;
      reload();
    } catch (error) {
      note.textContent = inWords(error, { "invalid-request": "That device is logged out already." });
      reload();
    }
  };
  return h(
    "li",
    { "data-device": device.id, class: device.current ? "current" : false, title: `Logged in ${fullTime(num(device.createdMs))}` },
    h("span", { class: "device" }, h("bdi", { class: "device-name", text: name }), h("span", { class: "device-when", text: when })),
    h("button", { type: "button", class: "link", "data-action": "revoke-device", onclick: logOutDevice }, "Log out"),
  );
}

// Deleting the account asks for its password (the protocol's confirmation), then once more in words.
export function deleteSettings() {
  const [label, input] = passwordField("Your password", "current-password");
  const note = status();
  const form = h(
    "form",
    {
      class: "stack",
      "data-form": "delete-account",
      onsubmit: async (event) => {
        event.preventDefault();
        if (!input.value) {
          note.textContent = "Type your password to delete the account.";
          return;
        }
        if (!window.confirm(`Delete the account ${session.user} for good? Its name is never given again.`)) return;
        try {
          await deleteAccount(input.value);
          $("dialog").close();
          session.signedOut("account-deleted");
          disablePush("").catch(() => {});
        } catch (error) {
          note.textContent = inWords(error, { "wrong-password": "That is not your password: the account stays." });
        }
      },
    },
    h("p", { class: "note", text: "Every device is logged out and you leave every group. What you wrote stays with those you wrote to." }),
    label,
    input,
    h("button", { type: "submit", class: "danger" }, "Delete the account"),
    note,
  );
  return h("details", { class: "settings" }, h("summary", { text: "Delete the account" }), form);
}

export async function logOut() {
  $("dialog").close();
  // This browser's notifications stop with the device (the server drops its subscriptions too).
  await disablePush(session.token).catch(() => {});
  await session.logOut().catch(() => {});
}
