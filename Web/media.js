// Media: pictures and files fetched with the token in a header, players given tickets, the picture viewer, uploads.

import { Upload, imageSize, mediaKind } from "./upload.js";
import { h, byteSize } from "./text.js";
import { $, conversation, fill, num, queue, session, state } from "./state.js";
import { showError, toast } from "./render.js";

export const isDigest = (sha256) => typeof sha256 === "string" && /^[0-9a-f]{64}$/.test(sha256);

// Audio, video and large downloads stream from `/media`, which only a URL gives a player: the URL carries a ticket
// for that one file, minutes long, never the token. Kept until a minute (or half its life) before it ends.
const tickets = new Map(); // sha256 -> Promise of { url, expires }
function ticketURL(sha256, fresh) {
  const kept = tickets.get(sha256);
  if (!fresh && kept) return kept.then((t) => (t.expires - Date.now() > t.margin ? t.url : ticketURL(sha256, true)));
  const made = fetch(`/media/${sha256}/ticket`, { method: "POST", headers: { Authorization: `Bearer ${session.token}` } })
    .then((answer) => {
      if (!answer.ok) throw new Error(`media: ${answer.status}`);
      return answer.json();
    })
    .then((t) => ({ url: t.url, expires: Date.now() + t.expires_in * 1000, margin: Math.min(60000, t.expires_in * 500) }));
  made.catch(() => tickets.delete(sha256));
  tickets.set(sha256, made);
  return made.then((t) => t.url);
}

// A player given its ticket; one whose ticket ended (a seek long after) asks for another and goes on where it was.
function player(tag, sha256, attributes) {
  const element = h(tag, attributes);
  let renewed = 0;
  const load = (fresh) => ticketURL(sha256, fresh).then((url) => (element.src = url), () => element.classList.add("broken"));
  element.addEventListener("error", () => {
    if (!element.src || Date.now() - renewed < 30000) return;
    renewed = Date.now();
    const [at, playing] = [element.currentTime, !element.paused];
    load(true).then(() => {
      element.currentTime = at;
      if (playing) element.play().catch(() => {});
    });
  });
  load(false);
  return element;
}

// Pictures and files are fetched with the token in a header and shown from `blob:` URLs, so no link on the page
// (copied, opened in a tab, kept in the history) carries the token. Dropped at sign-out.
const blobs = new Map(); // sha256 -> Promise of a blob: URL
function blobURL(sha256) {
  if (!blobs.has(sha256)) {
    const url = fetch(`/media/${sha256}`, { headers: { Authorization: `Bearer ${session.token}` } })
      .then((answer) => {
        if (!answer.ok) throw new Error(`media: ${answer.status}`);
        return answer.blob();
      })
      .then((blob) => URL.createObjectURL(blob));
    url.catch(() => blobs.delete(sha256));
    blobs.set(sha256, url);
  }
  return blobs.get(sha256);
}

export function dropBlobs() {
  for (const url of blobs.values()) url.then(URL.revokeObjectURL, () => {});
  blobs.clear();
  tickets.clear();
  mediaNodes.clear();
}

export function picture(sha256, attributes) {
  const image = h("img", attributes);
  if (isDigest(sha256)) blobURL(sha256).then((url) => (image.src = url), () => image.classList.add("broken"));
  return image;
}

// One media element a message, kept across redraws: a video goes on playing, a picture is not fetched again.
const mediaNodes = new Map();

export function mediaElement(c, message, media) {
  const sha = media.sha256;
  const key = `${c.key}:${message.seq ?? message.id}:${sha}`;
  const cached = mediaNodes.get(key);
  if (cached) return cached;
  if (!isDigest(sha)) return h("p", { class: "text recalled", text: "(media this page cannot show)" });
  let element;
  if (media.kind === "KIND_IMAGE") {
    const image = picture(sha, { class: "image", alt: media.name || "picture" });
    if (media.width && media.height) {
      image.width = Math.min(280, num(media.width));
      image.style.aspectRatio = `${num(media.width)} / ${num(media.height)}`;
    }
    element = h("button", { type: "button", class: "image-link", "aria-label": `Open ${media.name || "the picture"}`, onclick: () => openViewer(sha, media.name) }, image);
  } else if (media.kind === "KIND_VOICE") {
    // The metadata only (a range of the file's start): its length shows before it is played. A recorder's WebM
    // tells none: the sender's timing shows under it.
    const audio = player("audio", sha, { controls: true, preload: "metadata", class: "voice" });
    element = media.durationMs ? h("div", {}, audio, h("span", { class: "time voice-length", text: mmss(num(media.durationMs)) })) : audio;
  } else if (media.kind === "KIND_VIDEO") {
    element = player("video", sha, { controls: true, preload: "metadata", playsinline: true, class: "video" });
  } else {
    element = h(
      "a",
      {
        class: "file",
        href: "#",
        "data-sha256": sha,
        download: media.name || "file",
        onclick: (event) => {
          event.preventDefault();
          // A large file goes to the browser's downloads straight from /media (a ticket in the URL), not through
          // this page's memory.
          const large = num(media.size) > 32 * 1024 * 1024;
          (large ? ticketURL(sha) : blobURL(sha)).then(
            (url) => h("a", { href: url, download: media.name || "file" }).click(),
            (error) => showError(error),
          );
        },
      },
      `📄 ${media.name || "file"} · ${byteSize(media.size)}`,
    );
  }
  mediaNodes.set(key, element);
  return element;
}

// A picture opens here, in the page, as an <img>: never as a document of its own (a `blob:` or `/media` address in a
// tab would be a page on this origin built from bytes a user uploaded, whatever type the server gave them).
function openViewer(sha256, name) {
  const viewer = $("viewer");
  const image = picture(sha256, { class: "viewer-image", alt: name || "picture" });
  fill(viewer,
    h("div", { class: "viewer-bar" },
      h("span", { class: "viewer-name", dir: "auto", text: name || "" }),
      h("button", { type: "button", class: "icon", "aria-label": "Close", title: "Close", onclick: () => viewer.close() }, "×")),
    h("button", { type: "button", class: "viewer-body", "aria-label": "Close the picture", onclick: () => viewer.close() }, image),
  );
  if (!viewer.open) viewer.showModal();
  viewer.querySelector(".viewer-bar button").focus();
}

// The longest start of `text` within `bytes` UTF-8 bytes, cut between characters.
function cutToBytes(text, bytes) {
  const encoder = new TextEncoder();
  let cut = "";
  for (const character of text) {
    if (encoder.encode(cut + character).length > bytes) break;
    cut += character;
  }
  return cut;
}

// 65000 ms: "1:05".
export const mmss = (ms) => `${Math.floor(ms / 60000)}:${String(Math.floor(ms / 1000) % 60).padStart(2, "0")}`;

export const uploads = new Set(); // under way, cancelled at sign-out

// `extra`: Media fields the file does not tell (a voice note's durationMs).
export function sendFile(file, extra = {}) {
  const c = state.open && conversation(state.open);
  if (!c) return;
  const maxBytes = num(session.limits.maxMediaBytes);
  if (maxBytes && file.size > maxBytes) {
    toast(`${file.name} is larger than this server takes (${byteSize(maxBytes)}).`);
    return;
  }
  if (file.size === 0) {
    toast(`${file.name} is empty.`);
    return;
  }
  const upload = new Upload(session, file);
  uploads.add(upload);
  upload.done.finally(() => uploads.delete(upload)).catch(() => {});
  const bar = h("progress", { max: "1", value: "0", "aria-label": `Uploading ${file.name}` });
  const label = h("span", { class: "upload-state", text: "preparing" });
  const cancel = h("button", { type: "button", class: "link", onclick: () => upload.cancel() }, "Cancel");
  const row = h("div", { class: "upload", "data-name": file.name, "data-state": "hashing" }, h("span", { class: "upload-name", dir: "auto", text: file.name }), bar, label, cancel);
  $("uploads").append(row);
  upload.addEventListener("change", () => {
    bar.value = upload.progress;
    row.dataset.state = upload.state;
    if (upload.resumedFrom) row.dataset.resumedFrom = String(upload.resumedFrom);
    label.textContent = {
      hashing: "preparing",
      waiting: "waiting for the connection",
      sending: `${Math.round(upload.progress * 100)}%`,
      done: "sent",
      failed: `failed: ${upload.error?.message ?? ""}`,
      cancelled: "cancelled",
    }[upload.state];
    if (upload.state === "failed") cancel.textContent = "Dismiss";
    if (upload.state === "failed") cancel.onclick = () => row.remove();
  });
  upload.done.then(
    async (sha256) => {
      setTimeout(() => row.remove(), 1500);
      const type = file.type || "application/octet-stream";
      const media = { kind: mediaKind(type), sha256, size: String(file.size), mime: type, name: cutToBytes(file.name, 255), ...extra };
      if (media.kind === "KIND_IMAGE") Object.assign(media, await imageSize(file));
      queue(c.key, { media });
    },
    (error) => {
      if (error.message === "cancelled") setTimeout(() => row.remove(), 1500);
    },
  );
}
