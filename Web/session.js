// The page's connection to the server: the WebSocket gateway (/ws), the native session's envelopes as JSON, one per
// text message, and media streams as native frames in binary messages (docs/PROTOCOL.md, "The WebSocket gateway").
//
// A Session outlives its sockets: it keeps the device token in storage, heartbeats, and reconnects with backoff (0.5 s
// doubling to 30 s, jittered; at once when the browser is back online). Requests in flight when a socket drops fail
// with `disconnected`; the outbox and uploads send theirs again after the next welcome.

export const FrameKind = { mediaChunk: 2, windowUpdate: 4, resetStream: 7 };
export const END_STREAM = 1;

// A native frame: a 10-byte header (length, kind, flags, stream id; big-endian), then the payload.
export function frame(kind, flags, streamId, payload) {
  const bytes = new Uint8Array(10 + payload.byteLength);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, payload.byteLength);
  bytes[4] = kind;
  bytes[5] = flags;
  view.setUint32(6, streamId);
  bytes.set(payload, 10);
  return bytes;
}

export function parseFrame(buffer) {
  const view = new DataView(buffer);
  if (buffer.byteLength < 10 || view.getUint32(0) !== buffer.byteLength - 10) return null;
  return {
    kind: view.getUint8(4),
    flags: view.getUint8(5),
    streamId: view.getUint32(6),
    payload: new Uint8Array(buffer, 10),
  };
}

// Errors after which the stored token is of no more use: the page shows the login again.
const signedOutCodes = new Set(["auth-failed", "token-expired", "token-revoked"]);
const storageKey = "courier.session";
// An expired token, kept so that the next password login renews its device instead of making another.
const renewKey = "courier.renew";
// Tokens of devices logged out while the server could not be reached: revoked at the next chance.
const revokeKey = "courier.revoke";

export class RequestError extends Error {
  constructor(error) {
    super(error.message || error.code);
    this.code = error.code;
    this.retryAfterMs = Number(error.retryAfterMs || 0);
  }
}

export class Session extends EventTarget {
  constructor({ url, deviceName, storage = window.localStorage }) {
    super();
    this.url = url;
    this.deviceName = deviceName;
    this.storage = storage;
    this.state = "signedOut"; // signedOut, connecting, online, offline (waiting to retry)
    this.socket = null;
    this.requestId = 0;
    this.pending = new Map(); // request id -> function(envelope): true when it was the last answer
    this.attempt = 0;
    this.retryTimer = null;
    this.heartbeat = null;
    this.retryAt = 0;
    this.limits = {};
    this.nextStream = 1;
    this.streams = new Map(); // stream id -> function(frame)
    // The newest event cursor the page has applied: a reconnect resumes after it (`resume`), so two tabs sharing
    // a device each get every event, whatever the other acknowledged. 0 until the first welcome.
    this.cursor = 0;
    this.lastReceived = 0;
    const saved = this.load();
    this.user = saved?.user ?? "";
    this.token = saved?.token ?? "";
    window.addEventListener("online", () => this.retryNow());
  }

  load(key = storageKey) {
    try {
      return JSON.parse(this.storage.getItem(key) || "null");
    } catch {
      return null;
    }
  }

  get hasToken() {
    return this.token !== "";
  }

  setState(state, detail = {}) {
    this.state = state;
    this.dispatchEvent(new CustomEvent("state", { detail: { state, ...detail } }));
  }

  // Logs in with `credentials` ({password: {user, password}} or {signUp: {user, password, invite}}); resolves with
  // the welcome, or rejects with the server's error. Without credentials: with the stored token.
  logIn(credentials = null) {
    return new Promise((resolve, reject) => {
      this.closeSocket();
      clearTimeout(this.retryTimer);
      this.open(credentials, resolve, reject);
    });
  }

  open(credentials, resolve = null, reject = null) {
    this.setState("connecting");
    let socket;
    try {
      socket = new WebSocket(this.url);
    } catch (error) {
      reject?.(new RequestError({ code: "disconnected", message: String(error) }));
      return;
    }
    socket.binaryType = "arraybuffer";
    this.socket = socket;
    let welcomed = false;
    const hello = {
      deviceName: this.deviceName,
      ephemeral: true,
      ...(credentials ?? { token: this.token }),
    };
    if (!credentials && this.cursor > 0) {
      hello.cursor = String(this.cursor);
      hello.resume = true;
    }
    // A password login from this browser renews its device (the token it holds, or the expired one it kept) rather
    // than making another: the server keeps one device per browser, however often its user logs in.
    const renew = this.load(renewKey);
    const held = this.load(storageKey);
    if (credentials?.password && renew?.user === credentials.password.user) hello.renewToken = renew.token;
    else if (credentials?.password && held?.token && held.user === credentials.password.user) hello.renewToken = held.token;
    socket.onopen = () => {
      this.request({ hello }, (envelope) => {
        if (envelope.welcome) {
          welcomed = true;
          this.attempt = 0;
          // A token login's welcome may leave the token out when it did not change.
          this.user = envelope.welcome.user || this.user;
          this.token = envelope.welcome.token || this.token;
          this.limits = envelope.welcome.limits ?? {};
          this.storage.setItem(storageKey, JSON.stringify({ user: this.user, token: this.token }));
          this.storage.removeItem(renewKey);
          this.revokePending();
          this.startHeartbeat();
          this.setState("online");
          this.dispatchEvent(new CustomEvent("welcome", { detail: envelope.welcome }));
          resolve?.(envelope.welcome);
        } else if (envelope.error) {
          reject?.(new RequestError(envelope.error));
          if (!credentials && signedOutCodes.has(envelope.error.code)) this.signedOut(envelope.error.code);
        }
        return true;
      });
    };
    socket.onmessage = (message) => this.receive(message.data);
    // A server that neither answers nor refuses (its packets dropped) is given up on after 15 s.
    const giveUp = setTimeout(() => {
      if (!welcomed) this.abandon(socket);
    }, 15000);
    socket.onclose = (close) => {
      clearTimeout(giveUp);
      if (this.socket !== socket) return;
      this.socket = null;
      this.stopHeartbeat();
      // A refused login is answered with an error, then a close whose reason is the error's code.
      if (!welcomed) reject?.(new RequestError({ code: close.reason || "disconnected", message: "not connected" }));
      this.failPending();
      if (signedOutCodes.has(close.reason) || this.state === "signedOut") {
        this.signedOut(close.reason);
      } else if (this.hasToken) {
        this.scheduleRetry();
      } else {
        this.setState("signedOut");
      }
    };
  }

  receive(data) {
    this.lastReceived = Date.now();
    if (typeof data !== "string") {
      const parsed = parseFrame(data);
      if (parsed) this.streams.get(parsed.streamId)?.(parsed);
      return;
    }
    let envelope;
    try {
      envelope = JSON.parse(data);
    } catch {
      return;
    }
    const id = envelope.requestId ?? "0";
    if (id !== "0") {
      const handler = this.pending.get(id);
      if (handler && handler(envelope)) this.pending.delete(id);
      return;
    }
    if (Object.keys(envelope).length === 0) return; // the keep-alive's answer
    this.dispatchEvent(new CustomEvent("envelope", { detail: envelope }));
  }

  // Sends `body` with a new request id; `onAnswer` gets each answer and returns true at the last.
  request(body, onAnswer) {
    const id = String(++this.requestId);
    if (!this.socket || this.socket.readyState !== WebSocket.OPEN) {
      onAnswer({ requestId: id, error: { code: "disconnected", message: "not connected" } });
      return id;
    }
    this.pending.set(id, onAnswer);
    this.socket.send(JSON.stringify({ requestId: id, ...body }));
    return id;
  }

  // One answer, as a promise: the answer's body, or a RequestError.
  ask(body) {
    return new Promise((resolve, reject) => {
      this.request(body, (envelope) => {
        if (envelope.error) reject(new RequestError(envelope.error));
        else resolve(envelope);
        return true;
      });
    });
  }

  // Sends without waiting for an answer (acks, typing).
  post(body) {
    if (this.state === "online" && this.socket?.readyState === WebSocket.OPEN) this.socket.send(JSON.stringify(body));
  }

  sendFrame(bytes) {
    if (this.socket?.readyState !== WebSocket.OPEN) return false;
    this.socket.send(bytes);
    return true;
  }

  get bufferedAmount() {
    return this.socket?.bufferedAmount ?? 0;
  }

  openStream(onFrame) {
    const id = this.nextStream;
    this.nextStream += 2;
    this.streams.set(id, onFrame);
    return id;
  }

  closeStream(id) {
    this.streams.delete(id);
  }

  failPending() {
    const pending = [...this.pending.values()];
    this.pending.clear();
    this.streams.clear();
    for (const handler of pending) handler({ error: { code: "disconnected", message: "the connection dropped" } });
  }

  // `{}` every heartbeat interval; the server answers each. A connection that brought nothing for two and a half
  // intervals is taken for dead (a network that dropped it without a word) and replaced.
  startHeartbeat() {
    this.stopHeartbeat();
    const interval = Number(this.limits.heartbeatIntervalMs || 20000);
    this.lastReceived = Date.now();
    this.heartbeat = setInterval(() => {
      const socket = this.socket;
      if (socket?.readyState !== WebSocket.OPEN) return;
      if (Date.now() - this.lastReceived > interval * 2.5) {
        this.abandon(socket);
        return;
      }
      socket.send("{}");
    }, interval);
  }

  // Lets go of a socket without waiting for its close, which a dead network may never bring.
  abandon(socket) {
    if (this.socket !== socket) return;
    socket.onclose?.({ reason: "" });
    socket.onclose = null;
    socket.close();
  }

  stopHeartbeat() {
    clearInterval(this.heartbeat);
    this.heartbeat = null;
  }

  scheduleRetry() {
    const delay = Math.min(30000, 500 * 2 ** this.attempt) * (0.75 + Math.random() * 0.5);
    this.attempt = Math.min(this.attempt + 1, 6);
    this.retryAt = Date.now() + delay;
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.open(null), delay);
    this.setState("offline", { retryAt: this.retryAt });
  }

  retryNow() {
    if (this.state !== "offline") return;
    clearTimeout(this.retryTimer);
    this.open(null);
  }

  closeSocket() {
    const socket = this.socket;
    this.socket = null;
    this.stopHeartbeat();
    this.failPending();
    socket?.close(1000);
  }

  signedOut(reason) {
    this.closeSocket();
    clearTimeout(this.retryTimer);
    if (reason === "token-expired" && this.token) {
      this.storage.setItem(renewKey, JSON.stringify({ user: this.user, token: this.token }));
    }
    this.token = "";
    this.cursor = 0;
    this.storage.removeItem(storageKey);
    this.setState("signedOut", { reason });
  }

  // Logs this device out: the server revokes its token. Offline, the token is revoked at the next chance (the next
  // login on this browser), so a page closed on a shared computer does not leave a working token behind.
  async logOut() {
    const token = this.token;
    let revoked = false;
    try {
      if (this.state === "online") {
        await this.ask({ logout: {} });
        revoked = true;
      }
    } catch {
      // Kept for later, below.
    } finally {
      if (!revoked && token) {
        const pending = this.load(revokeKey) ?? [];
        this.storage.setItem(revokeKey, JSON.stringify([...pending, token].slice(-20)));
      }
      this.signedOut("logged-out");
    }
  }

  // Revokes the tokens logged out offline: each on a connection of its own, which logs in with it and logs out.
  revokePending() {
    const pending = this.load(revokeKey) ?? [];
    for (const token of pending) {
      const socket = new WebSocket(this.url);
      const done = () => {
        const left = (this.load(revokeKey) ?? []).filter((other) => other !== token);
        this.storage.setItem(revokeKey, JSON.stringify(left));
      };
      socket.onopen = () =>
        socket.send(JSON.stringify({ requestId: "1", hello: { token, noEvents: true, deviceName: this.deviceName } }));
      socket.onmessage = (message) => {
        const envelope = JSON.parse(message.data);
        if (envelope.welcome) socket.send(JSON.stringify({ requestId: "2", logout: {} }));
        else if (envelope.done || envelope.error) {
          done();
          socket.close(1000);
        }
      };
      socket.onclose = (close) => {
        // A token the server no longer takes needs no revoking.
        if (signedOutCodes.has(close.reason)) done();
      };
    }
  }
}
