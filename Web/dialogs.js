// Dialogs: a new chat or group, a group's members and settings, the user's profile and notifications (the account's
// and the browser's own settings are settings.js's).

import { Upload, imageSize, thumbnail } from "./upload.js";
import { h } from "./text.js";
import { pushSupported, pushEnabled, enablePush, disablePush } from "./push.js";
import { appearanceSettings, deleteSettings, deviceSettings, logOut, passwordSettings } from "./settings.js";
import { $, conversation, displayName, fill, session, state, titleOf, wantProfile } from "./state.js";
import { findUser, leaveGroups, loadBlocks, loadMembers, manageGroup, setBlocked, setProfile } from "./requests.js";
import { avatar, render, showError, toast } from "./render.js";
import { openConversation } from "./list.js";

export function openDialog(title, ...content) {
  const dialog = $("dialog");
  fill(dialog,
    h("h2", { id: "dialog-title", dir: "auto", text: title }),
    ...content,
    h("div", { class: "dialog-buttons" }, h("button", { type: "button", class: "close", onclick: () => dialog.close() }, "Close")),
  );
  if (!dialog.open) dialog.showModal();
  dialog.querySelector("input, select, textarea, button")?.focus();
}

function field(label, attributes) {
  const id = `f-${Math.random().toString(36).slice(2)}`;
  return [h("label", { for: id, text: label }), h("input", { id, dir: "auto", ...attributes })];
}

export function newChatDialog() {
  const [userLabel, userInput] = field("User name", { name: "user", autocomplete: "off", spellcheck: "false" });
  const direct = h(
    "form",
    {
      class: "stack",
      "data-form": "direct",
      onsubmit: async (event) => {
        event.preventDefault();
        try {
          const answer = await findUser(userInput.value.trim());
          const card = answer.user;
          if (card.profile) state.profiles.set(card.name, { ...card.profile, user: card.name });
          $("dialog").close();
          openConversation(`u:${card.name}`);
        } catch (error) {
          showError(error);
        }
      },
    },
    h("h3", { text: "Write to someone" }),
    userLabel,
    userInput,
    h("button", { type: "submit", class: "primary" }, "Open chat"),
  );
  const [nameLabel, nameInput] = field("Group name (its address: letters, digits, . _ -)", { name: "group", autocomplete: "off" });
  const [titleLabel, titleInput] = field("Title (optional, any script)", { name: "title", autocomplete: "off" });
  const [membersLabel, membersInput] = field("Members (names, separated by spaces or commas)", { name: "members", autocomplete: "off" });
  const group = h(
    "form",
    {
      class: "stack",
      "data-form": "group",
      onsubmit: async (event) => {
        event.preventDefault();
        const name = nameInput.value.trim();
        const users = membersInput.value.split(/[\s,，、]+/).filter(Boolean);
        try {
          await manageGroup(name, { create: { users } });
          if (titleInput.value.trim()) {
            await manageGroup(name, { title: { title: titleInput.value.trim() } });
          }
          $("dialog").close();
          const c = conversation(`g:${name}`);
          c.title = titleInput.value.trim();
          c.lastActivity = Date.now();
          openConversation(c.key);
        } catch (error) {
          showError(error);
        }
      },
    },
    h("h3", { text: "Start a group" }),
    nameLabel,
    nameInput,
    titleLabel,
    titleInput,
    membersLabel,
    membersInput,
    h("button", { type: "submit", class: "primary" }, "Create group"),
  );
  openDialog("New chat", direct, group);
}

const roleNames = { GROUP_ROLE_OWNER: "owner", GROUP_ROLE_ADMIN: "admin", GROUP_ROLE_MEMBER: "member" };
const rank = { GROUP_ROLE_OWNER: 2, GROUP_ROLE_ADMIN: 1, GROUP_ROLE_MEMBER: 0 };

// A direct chat's person: block or unblock them (what the server keeps apart is said beside the button).
export async function personDialog() {
  const c = state.open && conversation(state.open);
  if (!c || c.isGroup) return;
  const user = c.peer.user;
  try { await loadBlocks(); } catch (error) { showError(error); }
  const blocked = state.blocked.has(user.toLowerCase());
  const toggle = async () => {
    if (!blocked && !window.confirm(`Block ${user}? Their messages will no longer reach you, and they will see nothing of you.`)) return;
    try {
      await setBlocked(user, !blocked);
      toast(blocked ? `${user} is unblocked` : `${user} is blocked`);
      personDialog();
      render();
    } catch (error) {
      showError(error);
    }
  };
  openDialog(displayName(user),
    h("p", { class: "note", dir: "auto", text: blocked
      ? `You block ${user}: their direct messages do not reach you (they see them sent, never delivered), and they see none of your presence, typing, read marks or profile. Messages sent meanwhile stay hidden after unblocking.`
      : `Blocking ${user} keeps their direct messages from you and shows them nothing of you; they are not told. In a group you share, you both still see every message.` }),
    h("button", { type: "button", class: blocked ? "" : "danger", "data-action": "block", onclick: toggle }, blocked ? `Unblock ${user}` : `Block ${user}`),
  );
}

export async function groupDialog() {
  const c = state.open && conversation(state.open);
  if (!c) return;
  if (!c.isGroup) return personDialog();
  await loadMembers(c);
  const group = c.peer.group;
  const myRole = c.members.get(session.user)?.role ?? "GROUP_ROLE_MEMBER";
  const manage = async (action, question = null) => {
    if (question && !window.confirm(question)) return;
    try {
      await manageGroup(group, action);
      if (action.leave) {
        $("dialog").close();
        c.left = true;
        render();
        return;
      }
      await loadMembers(c);
      groupDialog();
    } catch (error) {
      showError(error);
    }
  };
  const members = h(
    "ul",
    { class: "members" },
    [...c.members.entries()].map(([user, member]) => {
      const role = member.role ?? "GROUP_ROLE_MEMBER";
      const buttons = [];
      if (user !== session.user && rank[myRole] > rank[role] && rank[myRole] >= 1) {
        buttons.push(h("button", { type: "button", class: "link", onclick: () => manage({ remove: { users: [user] } }, `Remove ${user} from the group?`) }, "Remove"));
      }
      if (myRole === "GROUP_ROLE_OWNER" && user !== session.user) {
        if (role === "GROUP_ROLE_MEMBER") buttons.push(h("button", { type: "button", class: "link", onclick: () => manage({ promote: { users: [user] } }) }, "Make admin"));
        if (role === "GROUP_ROLE_ADMIN") buttons.push(h("button", { type: "button", class: "link", onclick: () => manage({ demote: { users: [user] } }) }, "Make member"));
        buttons.push(h("button", { type: "button", class: "link", onclick: () => manage({ transfer: { user } }, `Make ${user} the group's owner? You become an admin.`) }, "Hand over"));
      }
      return h(
        "li",
        { "data-user": user },
        avatar(user, displayName(user), "small"),
        h("span", { class: "member-name", dir: "auto", text: displayName(user) }),
        h("span", { class: "role", text: roleNames[role] }),
        ...buttons,
      );
    }),
  );
  const [titleLabel, titleInput] = field("Title", { value: c.title, autocomplete: "off" });
  const [addLabel, addInput] = field("Add members (names)", { autocomplete: "off" });
  const isAdmin = rank[myRole] >= 1;
  openDialog(
    titleOf(c),
    h("p", { class: "note", text: `Group ${group} · you are ${roleNames[myRole]}` }),
    isAdmin
      ? h("form", { class: "stack", onsubmit: (e) => { e.preventDefault(); manage({ title: { title: titleInput.value.trim() } }); } }, titleLabel, titleInput, h("button", { type: "submit" }, "Set title"))
      : null,
    members,
    isAdmin
      ? h("form", { class: "stack", onsubmit: (e) => { e.preventDefault(); manage({ add: { users: addInput.value.split(/[\s,，、]+/).filter(Boolean) } }); } }, addLabel, addInput, h("button", { type: "submit" }, "Add"))
      : null,
    h("button", { type: "button", class: "danger", onclick: () => manage({ leave: {} }, "Leave the group?") }, "Leave the group"),
    leaveAllForm(),
  );
}

// Leaves, in one request, every group one user put this one in: the answer to someone who fills the list with groups.
function leaveAllForm() {
  const [label, input] = field("Leave every group this user put you in", { name: "added-by", autocomplete: "off", spellcheck: "false" });
  return h(
    "form",
    {
      class: "stack",
      "data-form": "leave-all",
      onsubmit: async (event) => {
        event.preventDefault();
        const addedBy = input.value.trim().replace(/^[@＠]/, "");
        if (!addedBy) return;
        try {
          const answer = await leaveGroups(addedBy);
          const left = answer.groupsLeft?.groups ?? [];
          for (const group of left) conversation(`g:${group}`).left = true;
          toast(left.length ? `Left ${left.length} group${left.length === 1 ? "" : "s"} ${addedBy} put you in.` : `${addedBy} put you in no group.`);
          $("dialog").close();
          render();
        } catch (error) {
          showError(error);
        }
      },
    },
    label,
    input,
    h("button", { type: "submit", class: "danger" }, "Leave them all"),
  );
}

export function profileDialog() {
  const me = state.profiles.get(session.user) ?? {};
  const [nameLabel, nameInput] = field("Display name (any script)", { value: me.displayName ?? "", autocomplete: "nickname" });
  const status = h("p", { class: "note", "aria-live": "polite" });
  const picture = h("input", { type: "file", accept: "image/jpeg,image/png,image/webp,image/gif", "aria-label": "Choose a picture" });
  picture.addEventListener("change", async () => {
    const file = picture.files[0];
    if (!file) return;
    try {
      status.textContent = "Uploading the picture…";
      const small = await thumbnail(file);
      const describe = async (f) => ({ kind: "KIND_IMAGE", sha256: await new Upload(session, f).done, size: String(f.size), mime: f.type, name: f.name, ...(await imageSize(f)) });
      const avatarMedia = await describe(file);
      const thumbnailMedia = await describe(small);
      await setProfile({ avatar: avatarMedia, thumbnail: thumbnailMedia });
      state.profiles.set(session.user, { ...me, user: session.user, avatar: avatarMedia, thumbnail: thumbnailMedia });
      status.textContent = "Saved.";
      render();
    } catch (error) {
      status.textContent = "";
      showError(error);
    }
  });
  async function setDisplayName(name) {
    try {
      await setProfile({ displayName: name });
      state.profiles.set(session.user, { ...me, user: session.user, displayName: name });
      nameInput.value = name;
      status.textContent = name ? "Saved." : "The name is cleared.";
      render();
    } catch (error) {
      showError(error);
    }
  }
  openDialog(
    "Your profile",
    h("div", { class: "profile-head" }, avatar(session.user, me.displayName || session.user, "large"), h("p", { text: `Logged in as ${session.user}` })),
    h(
      "form",
      {
        class: "stack",
        onsubmit: async (event) => {
          event.preventDefault();
          // An empty field saves nothing: clearing the name is its own button, never a slip of Enter.
          const name = nameInput.value.trim();
          if (!name) {
            status.textContent = me.displayName ? "Type a name, or use “Clear the name”." : "Type a name to show beside yours.";
            return;
          }
          await setDisplayName(name);
        },
      },
      nameLabel,
      nameInput,
      h("button", { type: "submit", class: "primary" }, "Save name"),
      me.displayName
        ? h("button", { type: "button", class: "link", "data-action": "clear-name", onclick: () => setDisplayName("") }, "Clear the name")
        : null,
    ),
    h("label", { class: "stack" }, "Picture", picture),
    me.avatar
      ? h("button", { type: "button", class: "link", onclick: async () => { await setProfile({ removeAvatar: true }).catch(showError); state.profiles.delete(session.user); wantProfile(session.user); } }, "Remove the picture")
      : null,
    status,
    notificationSettings(),
    appearanceSettings(),
    deviceSettings(),
    passwordSettings(),
    deleteSettings(),
    h("button", { type: "button", class: "danger", "data-action": "logout", onclick: logOut }, "Log out"),
  );
}

// Notifications while the page is closed: asked for on a click, never on load; and whether they show who wrote what.
function notificationSettings() {
  const note = h("p", { class: "note", "aria-live": "polite" });
  const enabled = h("input", { type: "checkbox", "data-setting": "push", disabled: !pushSupported() });
  const previews = h("input", { type: "checkbox", "data-setting": "push-previews" });
  const me = state.profiles.get(session.user) ?? {};
  previews.checked = me.pushPreviews !== false;
  if (!pushSupported()) note.textContent = "This browser cannot notify you while the page is closed.";
  else pushEnabled().then((on) => { enabled.checked = on; }).catch(() => {});
  enabled.addEventListener("change", async () => {
    enabled.disabled = true;
    try {
      if (enabled.checked) {
        await enablePush(session.token);
        note.textContent = "On: this browser shows new messages while Courier is closed.";
      } else {
        await disablePush(session.token);
        note.textContent = "Off.";
      }
    } catch (error) {
      enabled.checked = false;
      note.textContent = error.message;
    } finally {
      enabled.disabled = false;
    }
  });
  previews.addEventListener("change", async () => {
    const on = previews.checked;
    try {
      await setProfile({ pushPreviews: on });
      state.profiles.set(session.user, { ...(state.profiles.get(session.user) ?? {}), user: session.user, pushPreviews: on });
      note.textContent = on ? "Notifications show who wrote and what." : "Notifications say only “New message”.";
    } catch (error) {
      previews.checked = !on;
      showError(error);
    }
  });
  return h(
    "fieldset",
    { class: "stack settings" },
    h("legend", { text: "Notifications" }),
    h("label", { class: "check" }, enabled, " Notify me when Courier is closed"),
    h("label", { class: "check" }, previews, " Show who wrote and what"),
    note,
  );
}
