import CourierProtocol
import CourierWire
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle

extension CourierClient {
    /// Connects, syncs, sends the outbox and delivers events; reconnects with a jittered exponential backoff after
    /// any failure, until ``stop()``, a graceful shutdown of the service group running it, or the cancellation of
    /// its task. Then it finishes ``events`` and returns, and the client's outbox messages not yet acknowledged go
    /// to the next client of the store that connects.
    public func run() async {
        await withGracefulShutdownHandler {
            await self.connectUntilStopped()
        } onGracefulShutdown: {
            self.stop()
        }
        await self.instance.releaseInBackground()
        self.emit(.disconnected(Disconnection(.stopped, "stopped")))
        self.finishEvents()
    }

    private func connectUntilStopped() async {
        await withDiscardingTaskGroup { group in
            group.addTask { await self.recordAcknowledgements() }
            var failures = 0
            // Until stopped, or until the task running it is cancelled.
            while !self.state.withLock({ $0.stopped }), !Task.isCancelled {
                var welcomed = false
                do {
                    try await self.session {
                        welcomed = true
                        failures = 0
                    }
                    if !self.state.withLock({ $0.stopped }) {
                        self.emit(.disconnected(Disconnection(.closed, "the server closed the connection")))
                    }
                } catch let refusal as LoginRefused {
                    self.emit(.loginRefused(code: refusal.code, message: refusal.message))
                    self.state.withLock { $0.stopped = true }
                    break
                } catch is StoredTokenRefused {
                    // Forgotten: log in again at once with the configured credentials.
                    continue
                } catch {
                    self.logger.debug("connection ended", metadata: ["error": "\(error)"])
                    if !self.state.withLock({ $0.stopped }) {
                        self.emit(.disconnected(self.disconnection(for: error, welcomed: welcomed)))
                    }
                }
                if self.state.withLock({ $0.stopped }) || Task.isCancelled { break }
                failures += 1
                let delay = self.backoff(after: failures)
                self.emit(.reconnecting(after: delay))
                await self.pause(delay)
            }
            self.acknowledgements.finish()
        }
    }

    /// What ended a connection (or kept it from starting), in plain words.
    func disconnection(for error: any Error, welcomed: Bool) -> Disconnection {
        let server = "\(self.configuration.host):\(self.configuration.port)"
        if let error = error as? CourierClientError {
            switch error.code {
            case ErrorCodes.serverFull, ErrorCodes.shuttingDown, ErrorCodes.authTimeout:
                return Disconnection(.refused(code: error.code), "the server at \(server) refused: \(error.message)")
            case CourierClientError.notConnected.code:
                return Disconnection(welcomed ? .closed : .unreachable, "the connection to \(server) broke")
            default:
                return Disconnection(
                    welcomed ? .closed : .unreachable,
                    "the server at \(server) ended the connection: \(error.code): \(error.message)"
                )
            }
        }
        if welcomed {
            return Disconnection(.closed, "the connection to \(server) broke (\(Self.plainWords(error)))")
        }
        return Disconnection(.unreachable, "cannot reach the server at \(server): \(Self.plainWords(error))")
    }

    /// A connection error as people say it.
    static func plainWords(_ error: any Error) -> String {
        if let error = error as? ChannelError, case .connectTimeout = error { return "no answer (timed out)" }
        if let error = error as? NIOConnectionError {
            return error.connectionErrors.first.map { Self.plainWords($0.error) } ?? "no address to connect to"
        }
        if let error = error as? IOError {
            switch error.errnoCode {
            case POSIXErrorCode.ECONNREFUSED.rawValue: return "connection refused (is the server running?)"
            case POSIXErrorCode.ENETUNREACH.rawValue, POSIXErrorCode.EHOSTUNREACH.rawValue: return "no route to it"
            case POSIXErrorCode.ECONNRESET.rawValue: return "the connection was reset"
            case POSIXErrorCode.ETIMEDOUT.rawValue: return "no answer (timed out)"
            default: return "\(error)"
            }
        }
        if error is NIOSSLError { return "the TLS handshake failed (\(error))" }
        if let error = error as? SocketAddressError, case .unknown(let host, _) = error {
            return "unknown host \(host)"
        }
        return "\(error)"
    }

    /// Moves acknowledged messages from the outbox to the messages, a batch per transaction (whatever arrived
    /// while the last one committed), then emits their `.sent` events.
    private func recordAcknowledgements() async {
        while let batch = await self.acknowledgements.takeAll() {
            let recorded: Bool
            do {
                try await self.store.acknowledged(batch)
                recorded = true
            } catch {
                // The messages stay in the outbox and are resent on the next connection; the server answers with
                // the original acknowledgements, and `.sent` follows then.
                self.logger.warning("recording acknowledgements failed", metadata: ["error": "\(error)"])
                recorded = false
            }
            let takenOver = self.state.withLock { state in
                state.recording.subtract(batch.map(\.id))
                return recorded ? batch.compactMap { state.takenOver.removeValue(forKey: $0.id) } : []
            }
            guard recorded else { continue }
            let byID = Dictionary(takenOver.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
            for acknowledgement in batch {
                if let entry = byID[acknowledgement.id] {
                    // Written by a client that is gone: a message of the user's, as another device's would be.
                    self.emit(
                        .message(
                            ChatMessage(
                                id: entry.id,
                                from: acknowledgement.from,
                                conversation: acknowledgement.conversation,
                                seq: acknowledgement.seq,
                                time: acknowledgement.time,
                                text: entry.text,
                                media: entry.media
                            )
                        )
                    )
                } else {
                    self.emit(
                        .sent(
                            id: acknowledgement.id,
                            conversation: acknowledgement.conversation,
                            seq: acknowledgement.seq,
                            time: acknowledgement.time
                        )
                    )
                }
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
                    try channel.pipeline.syncOperations.addNativeHandlers(
                        tls: try tls.map { try NIOSSLClientHandler(context: $0, serverHostname: serverName) }
                    )
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
            if self.configuration.receivesEvents {
                // Where this client's events start, when it knew of none (a new device: the present).
                let first = self.state.withLock { state -> Bool in
                    defer { state.cursor = state.cursor ?? welcome.cursor }
                    return state.cursor == nil
                }
                if first { try await self.store.setCursorIfAbsent(welcome.cursor) }
            }
            // Before `.connected`: from then on, `sendingMessageIDs()` includes what was taken over.
            let taken = try await self.takeOverOutboxes()
            self.emit(.connected(user: welcome.user))
            let heartbeat = Duration.milliseconds(Int64(max(1000, welcome.limits.heartbeatIntervalMs)))
            try await withThrowingTaskGroup(of: Void.self) { group in
                // Either failing ends the session (closing the link ends the reader below).
                group.addTask {
                    do {
                        while true {
                            try await Task.sleep(for: heartbeat)
                            try await link.write(frame: .ping(UInt64.random(in: 0...UInt64.max)))
                        }
                    } catch {
                        link.close()
                        throw error
                    }
                }
                group.addTask {
                    do {
                        try await self.sendOutbox(on: link, takenOver: taken)
                    } catch {
                        if !(error is CancellationError) {
                            self.logger.warning("sending the outbox failed", metadata: ["error": "\(error)"])
                        }
                        link.close()
                        throw error
                    }
                }
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
        hello.hello.noEvents = !self.configuration.receivesEvents
        let stored = try await self.store.value("token")
        // The password first (until a password login succeeds) when configured so: it renews the stored token's
        // device rather than making a new one.
        var passwordFirst = self.configuration.passwordFirst && !self.state.withLock { $0.passwordLoginDone }
        if case .token = self.configuration.credentials { passwordFirst = false }
        let storedToken = passwordFirst ? nil : stored
        if let storedToken {
            hello.hello.token = storedToken
        } else {
            switch self.configuration.credentials {
            case .password(let user, let password):
                hello.hello.password.user = user
                hello.hello.password.password = password
                // The device this store holds a token of (an expired one too) is renewed, not replaced.
                if let renewing = stored ?? self.state.withLock({ $0.expiredToken }) {
                    hello.hello.renewToken = renewing
                }
            case .token(let token):
                hello.hello.token = token
            }
        }
        // From where this client stands (where the store stood when it was made, then its own); knowing neither, the
        // server starts where the device acknowledged (a new device: at the present).
        if self.configuration.receivesEvents, let cursor = self.state.withLock({ $0.cursor }) {
            hello.hello.cursor = cursor
            hello.hello.resume = true
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
                if !welcome.token.isEmpty { try await self.store.setValue(welcome.token, for: "token") }
                if case .password = hello.hello.credentials { self.state.withLock { $0.passwordLoginDone = true } }
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
                if let storedToken, error.code != ErrorCodes.throttled {
                    // Unless another client of the store has put a new one there meanwhile (a login renewing the
                    // device): then the next attempt uses that.
                    try await self.store.forgetToken(storedToken)
                    if error.code == ErrorCodes.tokenExpired { self.state.withLock { $0.expiredToken = storedToken } }
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

    /// The most outbox rows read at a time.
    static let outboxBatch = 256

    /// Sends this client's outbox messages in the order written, each once per connection, then each new one as it
    /// is written; takes over the outbox of clients of the store that are gone (on connecting, then every
    /// `takeoverInterval`); sends again what the server refused with a retryable code, when it said, and nothing
    /// written after it before it.
    private func sendOutbox(on link: Link, takenOver: [ClientStore.OutboxRow]) async throws {
        let me = self.instance.id
        var position: Int64 = 0
        var nextTakeover = ContinuousClock.now + self.configuration.takeoverInterval
        for row in takenOver where self.willSend(row.entry.id, on: link) {
            try await link.send(row.entry)
        }
        while true {
            let stopped = self.state.withLock { state in
                state.outboxDirty = false
                return state.stopped
            }
            // Stopped: the connection is closing and the reader ends the session.
            if stopped { return }
            if ContinuousClock.now >= nextTakeover {
                for row in try await self.takeOverOutboxes() where self.willSend(row.entry.id, on: link) {
                    try await link.send(row.entry)
                }
                nextTakeover = .now + self.configuration.takeoverInterval
            }
            // Retries come due: the outbox is read again from its start, so that they go in the order written
            // (the server refuses, with the same retryable code, every send of a connection behind one it could not
            // store), and what was sent on this link already is skipped.
            let due = self.dueRetries()
            if !due.isEmpty {
                for id in due { link.forget(id) }
                position = 0
            }
            let rows = try await self.store.outbox(of: me, after: position, limit: Self.outboxBatch)
            var held = false
            for row in rows {
                // Nothing written later goes before a message waiting to be sent again.
                if self.isWaitingForRetry(row.entry.id) {
                    held = true
                    break
                }
                position = row.position
                if self.willSend(row.entry.id, on: link) { try await link.send(row.entry) }
            }
            if !held, rows.count == Self.outboxBatch { continue }
            let wake = self.state.withLock { state in state.retries.values.min() }.map { min($0, nextTakeover) }
            await self.waitForOutbox(until: wake ?? nextTakeover)
            try Task.checkCancellation()
        }
    }

    /// Whether an outbox message is due on this link: not sent on it yet, not waiting for a retry, not acknowledged
    /// already (its bookkeeping under way), not withdrawn. If so, it counts as sent by this client from now on
    /// (decided in one step with ``withdraw(id:)``).
    private func willSend(_ id: String, on link: Link) -> Bool {
        guard !link.wasSent(id) else { return false }
        return self.state.withLock { state in
            guard state.retries[id] == nil, !state.recording.contains(id), !state.withdrawn.contains(id) else {
                return false
            }
            state.sentByThisClient.insert(id)
            return true
        }
    }

    /// Whether a message waits to be sent again (a retryable refusal, until its time).
    private func isWaitingForRetry(_ id: String) -> Bool {
        self.state.withLock { $0.retries[id] != nil }
    }

    /// The retries whose time has come (taken out of the list).
    private func dueRetries() -> [String] {
        let now = ContinuousClock.now
        return self.state.withLock { state in
            let due = state.retries.filter { $0.value <= now }.map(\.key)
            for id in due { state.retries[id] = nil }
            return due
        }
    }

    /// Makes this client the sender of the outbox rows of the store's clients that are gone.
    ///
    /// - Returns: The rows taken over, in the order written.
    private func takeOverOutboxes() async throws -> [ClientStore.OutboxRow] {
        let others = try await self.store.otherInstances(than: self.instance.id)
        let alive = await InstanceLock.held(others.compactMap { $0 }, in: self.instancesFolder)
        let gone = others.filter { other in other.map { !alive.contains($0) } ?? true }
        // Marks of clients that are gone go too (those of commands killed with nothing left in the outbox).
        await InstanceLock.sweep(self.instancesFolder, keeping: self.instance.id)
        guard !gone.isEmpty else { return [] }
        let rows = try await self.store.takeOver(gone, for: self.instance.id)
        self.state.withLock { state in
            for row in rows { state.takenOver[row.entry.id] = row.entry }
        }
        if !rows.isEmpty {
            self.logger.debug(
                "took over outbox messages of clients that are gone",
                metadata: ["count": "\(rows.count)"]
            )
        }
        return rows
    }

    /// Waits until the outbox changes, the client stops, the task is cancelled, or `deadline`.
    private func waitForOutbox(until deadline: ContinuousClock.Instant) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitForOutboxSignal() }
            group.addTask { try? await Task.sleep(until: deadline) }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForOutboxSignal() async {
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
            try await self.handleSendAnswer(envelope, id: id, link: link, user: user)
            return
        case nil:
            break
        }
        switch envelope.body {
        case .events(let events):
            try await self.handle(events, link: link, user: user)
        case .typing(let notice):
            self.emit(
                .typing(
                    conversation: Conversation(received: notice.conversation),
                    user: notice.user,
                    typing: notice.typing
                )
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

    private func handleSendAnswer(_ envelope: ServerEnvelope, id: String, link: Link, user: String) async throws {
        switch envelope.body {
        case .sendAck(let ack):
            // Recorded in batches by recordAcknowledgements(), which then emits `.sent`.
            self.state.withLock { _ = $0.recording.insert(id) }
            self.acknowledgements.append(
                .init(
                    id: id,
                    conversation: Conversation(received: ack.conversation),
                    seq: ack.seq,
                    time: Date(timeIntervalSince1970: Double(ack.timeMs) / 1000),
                    from: user
                )
            )
        case .error(let error) where Self.retryableCodes.contains(error.code):
            // Sent again by the outbox loop when the server said (at least 100 ms on).
            let delay = Duration.milliseconds(Int64(max(error.retryAfterMs, 100)))
            self.state.withLock { $0.retries[id] = .now + delay }
            self.outboxChanged()
        case .error(let error):
            try await self.store.remove(id: id)
            self.state.withLock { _ = $0.takenOver.removeValue(forKey: id) }
            self.emit(.sendFailed(id: id, code: error.code, message: error.message))
        default:
            break
        }
    }

    /// Stores a page of events, then acknowledges it, and reports each.
    private func handle(_ events: Courier_V1_Events, link: Link, user: String) async throws {
        if let last = events.events.last {
            var messages: [ChatMessage] = []
            var recalls: [(Conversation, UInt64)] = []
            var others: [ClientEvent] = []
            for event in events.events {
                switch event.kind {
                case .message(let message)?:
                    messages.append(ChatMessage(message))
                case .recall(let recall)?:
                    let conversation = Conversation(received: recall.conversation)
                    recalls.append((conversation, recall.seq))
                    others.append(.recalled(conversation: conversation, seq: recall.seq, id: recall.id, by: recall.by))
                case .receipt(let receipt)?:
                    others.append(
                        .receipt(
                            conversation: Conversation(received: receipt.conversation),
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
            try await self.store.store(messages, recalls: recalls, cursor: last.cursor)
            self.state.withLock { $0.cursor = max($0.cursor ?? 0, last.cursor) }
            // Every message is new to this client (the page follows its own cursor), even where another client of
            // the store stored it first; one this client sent, which the server passes back when it has lost track
            // of it (a later connection, a resend), is reported by `.sent` instead.
            let own = self.state.withLock { state in
                Set(
                    messages.filter {
                        $0.from.lowercased() == user.lowercased() && state.sentByThisClient.contains($0.id)
                    }
                    .map(\.id)
                )
            }
            for message in messages where !own.contains(message.id) {
                self.emit(.message(message))
            }
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
