// Uploads: the file's SHA-256, then its bytes as `mediaChunk` frames on a stream of the session, within the window the
// server grants (docs/PROTOCOL.md, "Media"). An upload survives a dropped connection: after the next welcome it asks
// again, and the server's `uploadReady.offset` says where to go on from.

import { END_STREAM, FrameKind, frame } from "./session.js";

// SHA-256 in script: the page may be served over plain HTTP from an address that is not a "secure context", where
// crypto.subtle does not exist; and it hashes a large file a slice at a time.
const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
  0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
  0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
  0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
  0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
  0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);

export class SHA256 {
  constructor() {
    this.state = new Uint32Array([
      0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
    ]);
    this.block = new Uint8Array(64);
    this.filled = 0;
    this.length = 0;
    this.w = new Uint32Array(64);
  }

  update(bytes) {
    this.length += bytes.length;
    let i = 0;
    while (this.filled === 0 && bytes.length - i >= 64) {
      this.compress(bytes, i);
      i += 64;
    }
    while (i < bytes.length) {
      const take = Math.min(64 - this.filled, bytes.length - i);
      this.block.set(bytes.subarray(i, i + take), this.filled);
      this.filled += take;
      i += take;
      if (this.filled === 64) {
        this.compress(this.block, 0);
        this.filled = 0;
      }
    }
  }

  compress(bytes, at) {
    const w = this.w;
    for (let t = 0; t < 16; t++) {
      const i = at + 4 * t;
      w[t] = (bytes[i] << 24) | (bytes[i + 1] << 16) | (bytes[i + 2] << 8) | bytes[i + 3];
    }
    for (let t = 16; t < 64; t++) {
      const a = w[t - 15];
      const b = w[t - 2];
      const s0 = ((a >>> 7) | (a << 25)) ^ ((a >>> 18) | (a << 14)) ^ (a >>> 3);
      const s1 = ((b >>> 17) | (b << 15)) ^ ((b >>> 19) | (b << 13)) ^ (b >>> 10);
      w[t] = (w[t - 16] + s0 + w[t - 7] + s1) | 0;
    }
    const s = this.state;
    let a = s[0], b = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], hh = s[7];
    for (let t = 0; t < 64; t++) {
      const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      const ch = (e & f) ^ (~e & g);
      const t1 = (hh + S1 + ch + K[t] + w[t]) | 0;
      const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      const maj = (a & b) ^ (a & c) ^ (b & c);
      const t2 = (S0 + maj) | 0;
      hh = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    s[0] += a;
    s[1] += b;
    s[2] += c;
    s[3] += d;
    s[4] += e;
    s[5] += f;
    s[6] += g;
    s[7] += hh;
  }

  hex() {
    const bits = this.length * 8;
    this.update(new Uint8Array([0x80]));
    while (this.filled !== 56) this.update(new Uint8Array([0]));
    const tail = new Uint8Array(8);
    const view = new DataView(tail.buffer);
    view.setUint32(0, Math.floor(bits / 2 ** 32));
    view.setUint32(4, bits >>> 0);
    this.update(tail);
    return Array.from(this.state, (word) => word.toString(16).padStart(8, "0")).join("");
  }
}

const slice = 4 * 1024 * 1024;

export async function sha256OfFile(file, onProgress = () => {}) {
  const hash = new SHA256();
  for (let at = 0; at < file.size; at += slice) {
    hash.update(new Uint8Array(await file.slice(at, at + slice).arrayBuffer()));
    onProgress(Math.min(file.size, at + slice));
  }
  return hash.hex();
}

export function mediaKind(type) {
  if (type.startsWith("image/") && type !== "image/svg+xml") return "KIND_IMAGE";
  if (type.startsWith("audio/")) return "KIND_VOICE";
  if (type.startsWith("video/")) return "KIND_VIDEO";
  return "KIND_FILE";
}

// The pixel size of an image, or nothing.
export async function imageSize(file) {
  try {
    const bitmap = await createImageBitmap(file);
    const size = { width: bitmap.width, height: bitmap.height };
    bitmap.close();
    return size;
  } catch {
    return {};
  }
}

// A JPEG of at most `edge` pixels a side, and under `maxBytes` (for an avatar's thumbnail).
export async function thumbnail(file, edge = 128, maxBytes = 60 * 1024) {
  const bitmap = await createImageBitmap(file);
  const scale = Math.min(1, edge / Math.max(bitmap.width, bitmap.height));
  const canvas = document.createElement("canvas");
  canvas.width = Math.max(1, Math.round(bitmap.width * scale));
  canvas.height = Math.max(1, Math.round(bitmap.height * scale));
  canvas.getContext("2d").drawImage(bitmap, 0, 0, canvas.width, canvas.height);
  bitmap.close();
  for (const quality of [0.85, 0.7, 0.5, 0.3]) {
    const blob = await new Promise((resolve) => canvas.toBlob(resolve, "image/jpeg", quality));
    if (blob && blob.size <= maxBytes) return new File([blob], "thumbnail.jpg", { type: "image/jpeg" });
  }
  throw new Error("the picture does not make a small enough thumbnail");
}

// One file's upload. `progress` (0…1) and `state` (hashing, waiting, sending, done, failed, cancelled) change as it
// goes; `done` resolves with the Media to send, or rejects.
export class Upload extends EventTarget {
  constructor(session, file) {
    super();
    this.session = session;
    this.file = file;
    this.state = "hashing";
    this.progress = 0;
    this.sha256 = "";
    this.stream = 0;
    this.done = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    this.done.catch(() => {});
    this.onWelcome = () => this.start();
    this.run();
  }

  changed() {
    this.dispatchEvent(new Event("change"));
  }

  async run() {
    try {
      this.sha256 = await sha256OfFile(this.file, (at) => {
        this.progress = (at / Math.max(1, this.file.size)) * 0.1;
        this.changed();
      });
    } catch (error) {
      return this.fail(error);
    }
    if (this.state === "cancelled") return;
    this.session.addEventListener("welcome", this.onWelcome);
    this.start();
  }

  // Asks the server where to start, and sends from there. Called again after each welcome until the upload ends.
  start() {
    if (this.state === "done" || this.state === "cancelled" || this.state === "failed") return;
    if (this.session.state !== "online") {
      this.state = "waiting";
      this.changed();
      return;
    }
    const stream = this.session.openStream((incoming) => this.onFrame(incoming));
    this.stream = stream;
    this.window = 0;
    this.sent = 0;
    this.confirmed = 0;
    this.session.request({ upload: { sha256: this.sha256, size: String(this.file.size), streamId: stream } }, (envelope) =>
      this.onAnswer(stream, envelope),
    );
  }

  onAnswer(stream, envelope) {
    if (stream !== this.stream) return true;
    if (envelope.uploadReady) {
      this.offset = Number(envelope.uploadReady.offset || 0);
      if (this.offset > 0) this.resumedFrom = this.offset;
      this.sent = this.offset;
      this.confirmed = this.offset;
      this.window = Number(envelope.uploadReady.windowBytes || 0);
      this.state = "sending";
      this.changed();
      this.pump();
      return false; // the second answer comes at the end
    }
    this.session.closeStream(stream);
    if (envelope.uploadDone) {
      this.state = "done";
      this.progress = 1;
      this.session.removeEventListener("welcome", this.onWelcome);
      this.changed();
      this.resolve(this.sha256);
      return true;
    }
    const error = envelope.error ?? { code: "unknown" };
    if (error.code === "disconnected") {
      this.state = "waiting";
      this.changed();
    } else if (error.code === "upload-busy") {
      this.state = "waiting";
      this.changed();
      setTimeout(() => this.start(), Math.max(500, Number(error.retryAfterMs || 1000)));
    } else {
      this.fail(new Error(error.message || error.code));
    }
    return true;
  }

  onFrame(incoming) {
    if (incoming.kind === FrameKind.windowUpdate && incoming.payload.length === 4) {
      const grant = new DataView(incoming.payload.buffer, incoming.payload.byteOffset, 4).getUint32(0);
      this.window += grant;
      this.confirmed += grant;
      this.progress = 0.1 + 0.9 * Math.min(1, this.confirmed / Math.max(1, this.file.size));
      this.changed();
      this.pump();
    } else if (incoming.kind === FrameKind.resetStream) {
      this.session.closeStream(this.stream);
    }
  }

  // Sends chunks while the window allows; reads each from the file as it goes.
  async pump() {
    if (this.pumping) return;
    this.pumping = true;
    const stream = this.stream;
    try {
      const chunkBytes = Number(this.session.limits.maxChunkBytes || 65536);
      while (this.state === "sending" && stream === this.stream && this.sent < this.file.size && this.window > 0) {
        const length = Math.min(chunkBytes, this.window, this.file.size - this.sent);
        const bytes = new Uint8Array(await this.file.slice(this.sent, this.sent + length).arrayBuffer());
        if (this.state !== "sending" || stream !== this.stream) break;
        const last = this.sent + length === this.file.size;
        if (!this.session.sendFrame(frame(FrameKind.mediaChunk, last ? END_STREAM : 0, stream, bytes))) break;
        this.sent += length;
        this.window -= length;
      }
    } finally {
      this.pumping = false;
    }
  }

  cancel() {
    if (this.state === "done" || this.state === "failed") return;
    const reset = new Uint8Array(4);
    new DataView(reset.buffer).setUint32(0, 5); // cancel
    if (this.stream) this.session.sendFrame(frame(FrameKind.resetStream, 0, this.stream, reset));
    this.session.closeStream(this.stream);
    this.stream = 0;
    this.state = "cancelled";
    this.session.removeEventListener("welcome", this.onWelcome);
    this.changed();
    this.reject(new Error("cancelled"));
  }

  fail(error) {
    this.state = "failed";
    this.error = error;
    this.session.removeEventListener("welcome", this.onWelcome);
    this.changed();
    this.reject(error);
  }
}
