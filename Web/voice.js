// Voice notes: 🎤 records the microphone until Send or Cancel, then sends it as a file (media.js) with the length
// timed here (a recorder's WebM has none in its header).

import { h } from "./text.js";
import { $, session } from "./state.js";
import { toast } from "./render.js";
import { mmss, sendFile } from "./media.js";

const maxMs = 15 * 60 * 1000; // then it stops, and waits for Send or Cancel: nothing goes out unasked
let rec = null; // {stream, recorder, chunks, stopped, at, ms, ticker, row}
const row = () => $("composer").querySelector(".composer-row");
const button = (label, text, onclick, c = "icon") =>
  h("button", { type: "button", class: c, "aria-label": label, title: label, onclick }, text);

// The microphone let go of (the tab's red dot goes).
function stop(r) {
  r.ms ??= Math.min(Date.now() - r.at, maxMs);
  if (r.recorder?.state === "recording") r.recorder.stop();
  r.stream?.getTracks().forEach((track) => track.stop());
}

async function start() {
  if (rec) return;
  const r = (rec = { chunks: [] });
  try {
    r.stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const mimeType = ["audio/webm;codecs=opus", "audio/ogg;codecs=opus"].find((t) => MediaRecorder.isTypeSupported(t));
    r.recorder = new MediaRecorder(r.stream, { mimeType });
  } catch (error) {
    rec = null;
    stop(r);
    return toast(error.name === "NotAllowedError" ? "The microphone is not allowed for this page." : `No recording: ${error.message}`);
  }
  if (rec !== r) return stop(r); // cancelled while the browser asked
  r.recorder.ondataavailable = (event) => r.chunks.push(event.data);
  r.stopped = new Promise((resolve) => (r.recorder.onstop = resolve));
  r.recorder.start();
  r.at = Date.now();
  const time = h("span", { role: "timer" }, "0:00");
  r.ticker = setInterval(() => {
    const ms = Math.min(Date.now() - r.at, maxMs);
    if (ms === maxMs) stop(r);
    time.textContent = mmss(ms);
  }, 250);
  r.row = h("div", { class: "composer-row", role: "group", "aria-label": "Recording a voice note" },
    button("Cancel the voice note", "✕", () => finish(false)),
    h("span", { class: "recording" }, "● ", time),
    button("Send the voice note", "➤", () => finish(true), "primary"));
  row().after(r.row);
  row().hidden = true;
  r.row.lastChild.focus();
}

async function finish(send) {
  const r = rec;
  if (!r) return;
  rec = null;
  clearInterval(r.ticker);
  stop(r);
  if (!r.row) return; // the browser still asking for the microphone
  r.row.remove();
  row().hidden = false;
  $("voice").focus();
  if (!send) return;
  await r.stopped;
  const type = r.recorder.mimeType.split(";")[0] || "audio/webm"; // the codec is in the file
  const t = new Date(r.at - new Date().getTimezoneOffset() * 60000).toISOString().replace(/\D/g, "");
  sendFile(new File(r.chunks, `voice-${t.slice(0, 8)}-${t.slice(8, 14)}.${type.split("/")[1]}`, { type }), { durationMs: r.ms });
}

// Another conversation opened, or signed out: a recording is dropped, never sent anywhere else.
export const cancelVoice = () => finish(false);

export function setUpVoice() {
  const mic = button("Record a voice note", "🎤", start);
  mic.id = "voice";
  mic.hidden = !window.MediaRecorder || !navigator.mediaDevices; // the microphone is for https and localhost only
  $("draft").before(mic);
  session.addEventListener("state", (event) => event.detail.state === "signedOut" && cancelVoice());
}
