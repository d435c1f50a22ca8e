import CourierProtocol
import CourierWire
import Foundation
import NIOCore
import NIOPosix
import NIOSSL

extension CourierClient {
    /// Connects, syncs, sends the outbox and delivers events; reconnects with a jittered exponential backoff after
    /// any failure, until ``stop()`` (or the task running it is cancelled). Then it finishes ``events`` and returns.
    public func run() async {
        await withDiscardingTaskGroup { group in
            group.addTask { await self.recordAcknowledgements() }
            var failures = 0
            // Until stopped, or until the task running it is cancelled.
            while !self.state.withLock({ $0.stopped }), !Task.isCancelled {
                do {
                    try await self.session { failures = 0 }
                    self.emit(.disconnected(reason: "the server closed the connection"))
                } catch let refusal as LoginRefused {
                    self.emit(.loginRefused(code: refusal.code, message: refusal.message))
                    self.state.withLock { $0.stopped = true }
                    break
                } catch is StoredTokenRefused {
                    // Forgotten: log in again at once with the configured credentials.
                    continue
                } catch {
                    self.logger.debug("connection ended", metadata: ["error": "\(error)"])
                    self.emit(.disconnected(reason: "\(error)"))
                }
                if self.state.withLock({ $0.stopped }) || Task.isCancelled { break }
                failures += 1
                await self.pause(self.backoff(after: failures))
            }
            self.acknowledgements.finish()
        }
        self.emit(.disconnected(reason: "stopped"))
        self.finishEvents()
    }

    /// Moves acknowledged messages from the outbox to the messages, a batch per transaction (whatever arrived
    /// while the last one committed), then emits their `.sent` events.
    private func recordAcknowledgements() async {
        while let batch = await self.acknowledgements.takeAll() {
            do {
                for acknowledgement in try self.store.acknowledged(batch) {
                    self.emit(
                        .sent(
                            id: acknowledgement.id,
                            conversation: acknowledgement.conversation,
                            seq: acknowledgement.seq,
                            time: acknowledgement.time
                        )
                    )
                }
            } catch {
                // The messages stay in the outbox and are resent on the next connection; the server answers with
                // the original acknowledgements.
                self.logger.warning("recording acknowledgements failed", metadata: ["error": "\(error)"])
            }
        }
    }

    /// A random delay between zero and min(maxBackoff, minBackoff × 2^(failures - 1)).
    func backoff(after failures: Int) -> Duration {
        let base = self.configuration.minBackoff * (1 << min(failures - 1, 20))
        let ceiling = min(base, self.configuration.maxBackoff)
        let nanoseconds = ceiling.components.seconds * 1_000_000_000 + ceiling.components.attoseconds / 1_000_000_000
        return .nanoseconds(Int64.random(in: 0...max(1, nanoseconds)))
    }

    /// Sleeps, or returns early (within 50 ms) when stopped or cancelled.
    private func pause(_ delay: Duration) async {
        let deadline = ContinuousClock.now + delay
        while !self.state.withLock({ $0.stopped }), !Task.isCancelled {
            let left = deadline - .now
            guard left > .zero else { return }
            try? await Task.sleep(for: min(left, .milliseconds(50)))
        }
    }

    private func session(onWelcome: () -> Void) async throws {
        let tls = self.tls
        let serverName = self.tlsServerName
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.nanoseconds(Int64(self.configuration.connectTimeout.components.seconds) * 1_000_000_000))
            .connect(host: self.configuration.host, port: self.configuration.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls {
                        try channel.pipeline.syncOperations.addHandler(
                            NIOSSLClientHandler(context: tls, serverHostname: serverName)
                        )
                    }
                    try channel.pipeline.syncOperations.addHandler(NativePrefaceHandler())
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(NativeFrameDecoder()))
                    try channel.pipeline.syncOperations.addHandler(MessageToByteHandler(NativeFrameEncoder()))
                    return try NIOAsyncChannel<NativeFrame, NativeFrame>(wrappingChannelSynchronously: channel)
                }
            }
        try await channel.executeThenClose { inbound, outbound in
            var iterator = inbound.makeAsyncIterator()
            let welcome = try await self.authenticate(&iterator, outbound: outbound)
            onWelcome()
            let link = Link(
                outbound: outbound,
                channel: channel.channel,
                maxInFlight: Int(welcome.limits.maxUnackedSends == 0 ? 64 : welcome.limits.maxUnackedSends),
                maxChunkBytes: Int(welcome.limits.maxChunkBytes == 0 ? 256 * 1024 : welcome.limits.maxChunkBytes)
            )
            let stopped = self.state.withLock { state -> Bool in
                state.link = link
                state.user = welcome.user
                state.outboxDirty = true
                return state.stopped
            }
            defer {
                self.state.withLock { $0.link = nil }
                link.failAll()
            }
            if stopped { return }
            self.emit(.connected(user: welcome.user))
            let heartbeat = Duration.milliseconds(Int64(max(1000, welcome.limits.heartbeatIntervalMs)))
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    while true {
                        try await Task.sleep(for: heartbeat)
                        try await link.write(frame: .ping(UInt64.random(in: 0...UInt64.max)))
                    }
                }
                group.addTask { try await self.sendOutbox(on: link) }
                defer {
                    // Wake a send waiting for a slot on this dead link before waiting for the tasks.
                    link.failAll()
                    group.cancelAll()
                }
                try await self.read(&iterator, link: link, user: welcome.user)
            }
        }
    }

    /// The name to verify and send as SNI: none for an IP address (the certificate must then list the address).
    private var tlsServerName: String? {
        if let name = self.configuration.tlsServerName { return name }
        let host = self.configuration.host
        return (try? SocketAddress(ipAddress: host, port: 0)) == nil ? host : nil
    }

    /// Sends hello with the stored token (or the configured credentials) and waits for the welcome.
    private func authenticate(
        _ iterator: inout NIOAsyncChannelInboundStream<NativeFrame>.AsyncIterator,
        outbound: NIOAsyncChannelOutboundWriter<NativeFrame>
    ) async throws -> Courier_V1_Welcome {
        var hello = ClientEnvelope()
        hello.requestID = 1
        hello.hello.deviceName = self.configuration.deviceName
        hello.hello.ephemeral = self.configuration.ephemeral
        let storedToken = try self.store.value("token")
        if let storedToken {
            hello.hello.token = storedToken
            hello.hello.cursor = try self.store.cursor
            hello.hello.resume = true
        } else {
            switch self.configuration.credentials {
            case .password(let user, let password):
                hello.hello.password.user = user
                hello.hello.password.password = password
            case .token(let token):
                hello.hello.token = token
            }
            if let cursor = try self.store.value("cursor"), let value = UInt64(cursor) {
                hello.hello.cursor = value
                hello.hello.resume = true
            }
        }
        do {
            try await outbound.write(try NativeFrame(envelope: hello))
        } catch {
            // A failed TLS handshake closes the channel; its reason is in the inbound stream, and it says more
            // than "I/O on closed channel".
            _ = try await iterator.next()
            throw error
        }
        while let frame = try await iterator.next() {
            guard frame.kind == .message else { continue }
            let answer = try frame.envelope(as: ServerEnvelope.self)
            switch answer.body {
            case .welcome(let welcome):
                if !welcome.token.isEmpty { try self.store.setValue(welcome.token, for: "token") }
                return welcome
            case .error(let error):
                let refused = [
                    ErrorCodes.tokenExpired, ErrorCodes.tokenRevoked, ErrorCodes.authFailed, ErrorCodes.throttled,
                ]
                guard refused.contains(error.code) else {
                    throw CourierClientError(code: error.code, message: error.message)
                }
                // A stored token that stopped working: forget it, so the next attempt logs in with the configured
                // credentials. The configured credentials refused: give up.
                if storedToken != nil, error.code != ErrorCodes.throttled {
                    try self.store.setValue(nil, for: "token")
                    self.logger.notice(
                        "the stored token was refused; logging in again",
                        metadata: ["code": "\(error.code)"]
                    )
                    throw StoredTokenRefused()
                }
                // A throttled login says when it may be tried again (the server's retry_after_ms).
                var message = error.message
                if error.code == ErrorCodes.throttled, error.retryAfterMs > 0 {
                    message += "; try again in \((error.retryAfterMs + 999) / 1000) s"
                }
                throw LoginRefused(code: error.code, message: message)
            default:
                continue
            }
        }
        throw CourierClientError(code: "not-connected", message: "the server closed the connection before welcoming")
    }

    /// Sends every outbox message not yet sent on this connection, in order, and waits for more.
    private func sendOutbox(on link: Link) async throws {
        while true {
            let (dirty, stopped) = self.state.withLock { state in
                defer { state.outboxDirty = false }
                return (state.outboxDirty, state.stopped)
            }
            // Stopped: the connection is closing and the reader ends the session.
            if stopped { return }
            if dirty {
                for entry in try self.store.outbox() where !link.wasSent(entry.id) {
                    try await link.send(entry)
                }
                continue
            }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    // Checked under the lock the cancellation handler takes: a cancellation either is seen here or
                    // finds the stored continuation.
                    let now = self.state.withLock { state -> Bool in
                        if state.outboxDirty || state.stopped || Task.isCancelled { return true }
                        state.outboxSignal = continuation
                        return false
                    }
                    if now { continuation.resume() }
                }
            } onCancel: {
                let signal = self.state.withLock { state in
                    defer { state.outboxSignal = nil }
                    return state.outboxSignal
                }
                signal?.resume()
            }
            try Task.checkCancellation()
        }
    }

    /// Reads frames until the connection ends.
    private func read(
        _ iterator: inout NIOAsyncChannelInboundStream<NativeFrame>.AsyncIterator,
        link: Link,
        user: String
    ) async throws {
        while let frame = try await iterator.next() {
            switch frame.kind {
            case .ping:
                try await link.write(frame: .pong(frame.pingData ?? 0))
            case .goaway:
                return
            case .message:
                let envelope = try frame.envelope(as: ServerEnvelope.self)
                try await self.handle(envelope, link: link, user: user)
            case .mediaChunk:
                link.deliver(frame.payload, on: frame.streamID, end: frame.flags.contains(.endStream))
            case .windowUpdate where frame.streamID != 0:
                link.grant(frame.streamID, Int(frame.windowIncrement ?? 0))
            case .resetStream:
                link.closeStream(frame.streamID, reset: true)
            default:
                continue
            }
        }
    }

    private func handle(_ envelope: ServerEnvelope, link: Link, user: String) async throws {
        switch link.route(envelope) {
        case .request?:
            return
        case .send(let id)?:
            try self.handleSendAnswer(envelope, id: id, link: link, user: user)
            return
        case nil:
            break
        }
        switch envelope.body {
        case .events(let events):
            try await self.handle(events, link: link)
        case .typing(let notice):
            self.emit(
                .typing(conversation: Conversation(notice.conversation), user: notice.user, typing: notice.typing)
            )
        case .presence(let notice):
            self.emit(
                .presence(
                    user: notice.user,
                    online: notice.online,
                    lastSeen: notice.lastSeenMs > 0
                        ? Date(timeIntervalSince1970: Double(notice.lastSeenMs) / 1000) : nil
                )
            )
        case .error(let error):
            self.logger.notice(
                "the server reported an error",
                metadata: ["code": "\(error.code)", "reason": "\(error.message)"]
            )
        default:
            break
        }
    }

    /// Codes after which resending the same message later can succeed.
    static let retryableCodes: Set<String> = [ErrorCodes.storageFailed, ErrorCodes.internalError]

    private func handleSendAnswer(_ envelope: ServerEnvelope, id: String, link: Link, user: String) throws {
        switch envelope.body {
        case .sendAck(let ack):
            // Recorded in batches by recordAcknowledgements(), which then emits `.sent`.
            self.acknowledgements.append(
                .init(
                    id: id,
                    conversation: Conversation(ack.conversation),
                    seq: ack.seq,
                    time: Date(timeIntervalSince1970: Double(ack.timeMs) / 1000),
                    from: user
                )
            )
        case .error(let error) where Self.retryableCodes.contains(error.code):
            let delay = Duration.milliseconds(Int64(max(error.retryAfterMs, 100)))
            Task {
                try? await Task.sleep(for: delay)
                link.forget(id)
                self.outboxChanged()
            }
        case .error(let error):
            try self.store.remove(id: id)
            self.emit(.sendFailed(id: id, code: error.code, message: error.message))
        default:
            break
        }
    }

    /// Stores a page of events, then acknowledges it.
    private func handle(_ events: Courier_V1_Events, link: Link) async throws {
        if let last = events.events.last {
            var messages: [ChatMessage] = []
            var recalls: [(Conversation, UInt64)] = []
            var others: [ClientEvent] = []
            for event in events.events {
                switch event.kind {
                case .message(let message)?:
                    messages.append(ChatMessage(message))
                case .recall(let recall)?:
                    let conversation = Conversation(recall.conversation)
                    recalls.append((conversation, recall.seq))
                    others.append(.recalled(conversation: conversation, seq: recall.seq, id: recall.id, by: recall.by))
                case .receipt(let receipt)?:
                    others.append(
                        .receipt(
                            conversation: Conversation(receipt.conversation),
                            user: receipt.user,
                            read: receipt.kind == .read,
                            upToSeq: receipt.upToSeq
                        )
                    )
                case .membership(let change)?:
                    others.append(.membership(group: change.group, user: change.user, joined: change.change == .joined))
                case nil:
                    break
                }
            }
            // Durably stored first, then acknowledged: an event is never acked before it is on this disk.
            let new = try self.store.store(messages, recalls: recalls, cursor: last.cursor)
            for message in new { self.emit(.message(message)) }
            for event in others { self.emit(event) }
            var ack = ClientEnvelope()
            ack.ack.cursor = last.cursor
            try await link.write(ack)
        }
        if events.caughtUp { self.emit(.caughtUp) }
    }
}

/// The server refused the stored token: it is forgotten, and the client logs in with its configured credentials.
struct StoredTokenRefused: Error {}

/// The server refused the configured credentials: `run()` ends.
struct LoginRefused: Error {
    var code: String
    var message: String
}
