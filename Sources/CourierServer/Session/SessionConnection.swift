import CourierProtocol
import CourierStore
import CourierWire
import Logging
import NIOCore
import Synchronization

/// Serves one client connection over a transport: reads requests, runs them through the session state machine,
/// carries out its actions, and delivers the user's events and notices.
///
/// Three loops share the connection: the reader (requests in order; waits while too many writes are in flight),
/// the delivery loop (events from the store at the client's pace, and notices), and a ticker (deadlines, and a
/// write that a client which stopped reading has blocked for too long). Each write to the group commit runs as its
/// own child task, so sends from one connection share transactions.
struct SessionConnection<Transport: SessionTransport>: Sendable {
    let context: SessionContext
    let transport: Transport
    /// The client's address and port, for logs.
    let remoteAddress: String
    /// The client's IP address alone.
    let clientIP: String

    /// The key the client's address counts under in per-address limits.
    var addressKey: String { AddressKey.of(ip: self.clientIP) }

    /// Runs the connection until the client leaves or the session closes it. Never throws: one bad client ends
    /// only its own connection.
    func run(_ channel: NIOAsyncChannel<Transport.Inbound, Transport.Outbound>) async {
        let logger = self.logger
        if let refusal = self.context.admit(address: self.addressKey) {
            let message =
                switch refusal {
                case .serverFull: "the server is at its connection limit"
                case .addressFull: "too many connections from this address are not logged in"
                }
            try? await channel.executeThenClose { _, outbound in
                for frame in self.transport.closingFrames(code: ErrorCodes.serverFull, message: message) {
                    try await outbound.write(frame)
                }
            }
            logger.notice("refused a connection", metadata: ["reason": "\(message)"])
            return
        }
        let session = SessionShared(
            machine: SessionStateMachine(
                configuration: .init(
                    self.context.configuration.limits,
                    media: self.context.configuration.media,
                    store: self.context.store.limits
                ),
                now: .now
            ),
            channel: channel.channel,
            media: self.context.media,
            serializesWrites: self.transport.streamsMediaInline
        )
        do {
            try await channel.executeThenClose { inbound, outbound in
                try await withThrowingDiscardingTaskGroup { group in
                    group.addTask { await self.tick(session, outbound: outbound) }
                    group.addTask { await self.answer(session, outbound: outbound) }
                    defer { group.cancelAll() }
                    do {
                        try await self.read(inbound, outbound: outbound, session: session, group: &group)
                    } catch {
                        session.finishAnswers()
                        throw error
                    }
                    // Answer what is in flight before leaving (the ticker still closes a client that stopped reading).
                    session.finishAnswers()
                    await session.waitForWritesToFinish()
                }
            }
        } catch {
            logger.debug("connection ended", metadata: ["error": "\(error)"])
        }
        // The socket is closed: its slot is free. Then the bookkeeping (last seen, presence), however it ended.
        for upload in session.streams.closeAll() { await self.context.media.release(upload.upload) }
        if let inline = session.inlineUpload { await self.context.media.release(inline, discard: true) }
        self.context.release(address: self.addressKey, authenticated: session.handle != nil)
        if let handle = session.handle { await self.disconnected(handle) }
    }

    /// The longest prefix of `text` of at most `maxBytes` UTF-8 bytes that ends at a character boundary.
    static func prefix(_ text: String, maxBytes: Int) -> String {
        var count = 0
        var end = text.startIndex
        for index in text.indices {
            let size = text[index].utf8.count
            guard count + size <= maxBytes else { break }
            count += size
            end = text.index(after: index)
        }
        return String(text[..<end])
    }

    /// A name a client chose, made safe for a log line: at most 64 characters, control characters escaped.
    static func printable(_ text: String) -> String {
        String(text.prefix(64)).debugDescription
    }

    var logger: Logger {
        var logger = self.context.logger
        logger[metadataKey: "peer"] = "\(self.remoteAddress)"
        logger[metadataKey: "port"] = "\(self.transport.name)"
        return logger
    }

    // MARK: Reading requests

    private func read(
        _ inbound: NIOAsyncChannelInboundStream<Transport.Inbound>,
        outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>,
        session: SessionShared,
        group: inout ThrowingDiscardingTaskGroup<any Error>
    ) async throws {
        var iterator = inbound.makeAsyncIterator()
        // A compat media packet whose bytes are arriving.
        var inline: InlineUpload?
        while true {
            await session.waitForWriteSlot()
            let frame: Transport.Inbound?
            do {
                frame = try await iterator.next()
            } catch {
                // Bytes that break the framing: say which error where the transport can, then close. A peer that
                // left (inside a frame, or resetting the connection) is not an error worth more than a debug line.
                let wire = error as? CourierWireError
                if let wire, wire.code != .truncated {
                    self.logger.info("closing: framing error", metadata: ["error": "\(error)"])
                } else {
                    self.logger.debug(
                        wire == nil ? "the connection failed" : "the client left inside a frame",
                        metadata: ["error": "\(error)"]
                    )
                }
                session.withMachine { $0.close() }
                for frame in self.transport.closingFrames(framingError: error) {
                    try? await session.write(frame, to: outbound)
                }
                session.closeChannel()
                return
            }
            guard let frame else { return }
            session.withMachine { $0.receivedBytes(now: .now) }
            switch self.transport.interpret(frame) {
            case .envelope(let envelope):
                guard try await self.submit(envelope, outbound: outbound, session: session, group: &group) else {
                    return
                }
            case .streamChunk(let streamID, let bytes, let end):
                try await self.receive(
                    bytes,
                    on: streamID,
                    end: end,
                    outbound: outbound,
                    session: session,
                    group: &group
                )
            case .streamWindow(let streamID, let increment):
                session.streams.grant(streamID, increment: increment)
            case .streamReset(let streamID):
                if let upload = session.streams.close(streamID) { await self.context.media.release(upload.upload) }
            case .inlineMedia(let envelope, let size):
                guard let device = session.withMachine({ $0.session }) else {
                    try? await self.close(
                        outbound,
                        session: session,
                        code: ErrorCodes.notAuthenticated,
                        message: "the first request must be auth"
                    )
                    return
                }
                inline = try await self.beginInline(
                    envelope,
                    size: size,
                    user: device.user.id,
                    session: session,
                    outbound
                )
                session.inlineUpload = inline?.upload
            case .inlineBytes(let bytes, let isLast):
                guard var current = inline else { continue }
                inline = nil
                try await self.receiveInline(bytes, into: &current, session: session, outbound)
                session.inlineUpload = isLast ? nil : current.upload
                guard isLast else {
                    inline = current
                    continue
                }
                guard let upload = current.upload else { continue }
                guard
                    try await self.finishInline(
                        current.envelope,
                        upload: upload,
                        outbound: outbound,
                        session: session,
                        group: &group
                    )
                else { return }
            case .inlineAbandoned(let code, let message):
                let requestID = inline?.envelope.requestID ?? 0
                if let upload = inline?.upload { await self.context.media.release(upload, discard: true) }
                session.inlineUpload = nil
                inline = nil
                self.context.metrics.refusals.increment()
                try await session.write(
                    self.errorEnvelope(requestID, code: code, message: message, id: ""),
                    transport: self.transport,
                    to: outbound
                )
            case .reply(let frames):
                for frame in frames { try await session.write(frame, to: outbound) }
            case .ignore:
                continue
            case .refuse(let code, let message, let id):
                self.context.metrics.refusals.increment()
                try await session.write(
                    self.errorEnvelope(0, code: code, message: message, id: id),
                    transport: self.transport,
                    to: outbound
                )
            case .goodbye:
                return
            case .violation(let code, let message):
                self.logger.info("closing: protocol violation", metadata: ["code": "\(code)", "reason": "\(message)"])
                try? await self.close(outbound, session: session, code: code, message: message)
                return
            }
        }
    }

    /// Runs a request through the state machine and carries out what it says.
    ///
    /// - Returns: false when the connection must stop reading.
    func submit(
        _ envelope: ClientEnvelope,
        outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>,
        session: SessionShared,
        group: inout ThrowingDiscardingTaskGroup<any Error>
    ) async throws -> Bool {
        // Over the user's fan-out budget (all its connections together): hold its next send, reading nothing more,
        // until the budget has paid for what was sent.
        // The hold is the server's doing, not the client's silence: it does not count towards `idleTimeout`.
        if case .send? = envelope.body, let user = session.withMachine({ $0.session?.user.id }) {
            while let wait = self.context.fanoutWait(of: user) {
                try await Task.sleep(for: min(wait, .seconds(1)))
                // A connection closed meanwhile (the ticker, a revocation, shutdown) stops waiting at once.
                guard !session.withMachine({ $0.isClosed }), session.isOpen else { return false }
                session.withMachine { $0.receivedBytes(now: .now) }
            }
        }
        var action = session.withMachine { $0.received(envelope, now: .now) }
        // Over the send rate: hold the request (and read nothing more) until the rate allows it.
        while case .pause(let wait) = action {
            try await Task.sleep(for: wait)
            action = session.withMachine { $0.received(envelope, now: .now) }
        }
        return try await self.perform(action, outbound: outbound, session: session, group: &group)
    }

    /// Carries out one action of the state machine.
    ///
    /// - Returns: false when the connection must stop reading.
    private func perform(
        _ action: SessionStateMachine.Action,
        outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>,
        session: SessionShared,
        group: inout ThrowingDiscardingTaskGroup<any Error>
    ) async throws -> Bool {
        switch action {
        case .none, .pause:
            return true
        case .close(let code, let message):
            self.logger.info("closing", metadata: ["code": "\(code)"])
            try? await self.close(outbound, session: session, code: code, message: message)
            return false
        case .refuse(let requestID, let code, let message, let id, let retryAfter):
            self.context.metrics.refusals.increment()
            self.logger.debug("refused", metadata: ["code": "\(code)", "reason": "\(message)"])
            try await session.write(
                self.errorEnvelope(requestID, code: code, message: message, id: id, retryAfter: retryAfter),
                transport: self.transport,
                to: outbound
            )
            return true
        case .authenticate(let hello, let requestID):
            return try await self.authenticate(
                hello,
                requestID: requestID,
                outbound: outbound,
                session: session,
                group: &group
            )
        case .write(var request, let requestID, let answers):
            if case .send(var send) = request {
                self.context.metrics.messagesIn.increment()
                // The id is settled here, not in the store, so that this connection's delivery can tell the
                // message's event apart from its other connections' (it has the acknowledgement; they do not).
                if send.id.isEmpty {
                    send.id = WriteRequest.Send.assignedID()
                    request = .send(send)
                }
                session.handle?.willSend(id: send.id)
            }
            // Enqueued here, in arrival order; the answering loop awaits the outcomes in the same order, so answers
            // go out in the order the requests came while more requests are read meanwhile.
            // A send reserves what it is expected to cost from its sender's fan-out budget now, before its commit:
            // sends in flight count at once, so a flood is held after the budget's worth, not after
            // `maxUnackedSends` of them per connection. The commit settles the difference.
            var reserved = 0
            if case .send(let send) = request {
                reserved = self.context.fanoutEstimate(of: send.sender, to: send.to)
                self.context.chargeFanout(of: send.sender, deliveries: reserved)
            }
            let ticket = self.context.commits.enqueue(request)
            session.answer(
                SessionShared.Answer(
                    request: request,
                    ticket: ticket,
                    requestID: requestID,
                    answers: answers,
                    reservedFanout: reserved
                )
            )
            return true
        case .request(let request, let requestID):
            return try await self.handle(
                request,
                requestID: requestID,
                outbound: outbound,
                session: session,
                group: &group
            )
        }
    }

    // MARK: Authentication

    private func authenticate(
        _ hello: Courier_V1_Hello,
        requestID: UInt64,
        outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>,
        session: SessionShared,
        group: inout ThrowingDiscardingTaskGroup<any Error>
    ) async throws -> Bool {
        let store = self.context.store
        let userName: String? =
            switch hello.credentials {
            case .password(let password)?: password.user
            default: nil
            }
        // Checked and counted in one step, before any password is hashed.
        let ticket: LoginGate.Ticket
        switch self.context.logins.admit(user: userName, address: self.addressKey) {
        case .throttled(let wait):
            self.logger.notice("login throttled", metadata: ["user": "\(userName.map(Self.printable) ?? "(token)")"])
            self.context.metrics.refusals.increment()
            self.context.metrics.loginsThrottled.increment()
            let envelope = self.errorEnvelope(
                requestID,
                code: ErrorCodes.throttled,
                message: "too many failed logins; retry later",
                id: "",
                retryAfter: wait
            )
            try? await session.write(envelope, transport: self.transport, to: outbound)
            try? await self.close(outbound, session: session, code: ErrorCodes.throttled, message: "throttled")
            return false
        case .admitted(let admitted):
            ticket = admitted
        }
        let result: Result<DeviceSession, CourierStoreError>
        do {
            let now = SessionContext.nowMs()
            switch hello.credentials {
            case .password(let password)?:
                let deviceName = Self.prefix(hello.deviceName, maxBytes: store.limits.maxDeviceNameBytes)
                result = .success(
                    try await store.login(
                        user: password.user,
                        password: password.password,
                        deviceName: deviceName.isEmpty ? "device" : deviceName,
                        renewing: hello.renewToken.isEmpty ? nil : hello.renewToken,
                        nowMs: now
                    )
                )
            case .token(let token)?:
                result = .success(try await store.authenticate(token: token, nowMs: now))
            case nil:
                result = .failure(CourierStoreError(.authFailed, "no credentials"))
            }
        } catch let error as CourierStoreError {
            result = .failure(error)
        } catch {
            // Whatever else went wrong, the attempt ends here: its place in the gate is given back below.
            result = .failure(CourierStoreError(.storageFailed, "the login could not be checked; try again later"))
        }
        let failed = if case .failure(let error) = result { error.code == .authFailed } else { false }
        self.context.logins.finish(ticket, failed: failed)
        if userName != nil, failed || (try? result.get()) != nil { self.context.metrics.passwordChecks.increment() }

        let deviceSession: DeviceSession
        switch result {
        case .failure(let error):
            // Never the password or the token: the user name only, escaped.
            self.logger.notice(
                "login failed",
                metadata: ["code": "\(error.code)", "user": "\(userName.map(Self.printable) ?? "(token)")"]
            )
            if error.code == .throttled {
                // The password threads' queue is full: refused before any hashing, like the limits above.
                self.context.metrics.refusals.increment()
                self.context.metrics.loginsThrottled.increment()
                let envelope = self.errorEnvelope(
                    requestID,
                    code: ErrorCodes.throttled,
                    message: error.message,
                    id: "",
                    retryAfter: .seconds(1)
                )
                try? await session.write(envelope, transport: self.transport, to: outbound)
                try? await self.close(outbound, session: session, code: ErrorCodes.throttled, message: "throttled")
                return false
            }
            let action = session.withMachine { $0.authenticationFailed(code: "\(error.code)", message: error.message) }
            _ = try await self.perform(action, outbound: outbound, session: session, group: &group)
            return false
        case .success(let success):
            deviceSession = success
        }

        let handle: ConnectionHandle
        let first: Bool
        switch self.context.hub.register(
            user: deviceSession.user.id,
            device: deviceSession.device.id,
            ephemeral: hello.ephemeral,
            events: !hello.noEvents,
            maxOwnSends: 4 * self.context.configuration.limits.maxUnackedSends,
            maxHanded: self.context.configuration.limits.maxHandedEvents,
            maxPerUser: self.context.configuration.limits.maxConnectionsPerUser
        ) {
        case .registered(let registered, let firstForUser, let firstForDevice):
            handle = registered
            first = firstForUser
            if firstForDevice {
                self.context.activity.note(
                    registered.device,
                    of: registered.user,
                    connected: true,
                    ms: SessionContext.nowMs()
                )
            }
        case .shuttingDown:
            if deviceSession.renewed { try? await store.abandonRenewal(of: deviceSession.device.id) }
            try? await self.close(
                outbound,
                session: session,
                code: ErrorCodes.shuttingDown,
                message: "the server is stopping"
            )
            return false
        case .userFull:
            self.context.metrics.refusals.increment()
            let limit = self.context.configuration.limits.maxConnectionsPerUser
            // A password login made a device for this connection: it never gets to use it. One that renewed the
            // device the client held gives it its previous token back (the client never got the new one).
            if deviceSession.renewed {
                try? await store.abandonRenewal(of: deviceSession.device.id)
            } else if deviceSession.token != nil {
                try? await store.revokeDevice(
                    deviceSession.device.id,
                    of: deviceSession.user.name,
                    nowMs: SessionContext.nowMs()
                )
            }
            self.logger.notice("refused a login: the user is at its connection limit")
            try? await self.close(
                outbound,
                session: session,
                code: ErrorCodes.serverFull,
                message: "this user has \(limit) connections already"
            )
            return false
        }
        session.withMachine { $0.authenticated(deviceSession, now: .now, nowMs: SessionContext.nowMs()) }
        session.handle = handle
        self.context.authenticated(address: self.addressKey)
        self.logger.info(
            "authenticated",
            metadata: ["user": "\(deviceSession.user.name)", "device": "\(deviceSession.device.id.rawValue)"]
        )

        let latest = try await store.logCursor(of: deviceSession.user.id)
        let start = min(hello.resume ? hello.cursor : deviceSession.device.ackedCursor, latest)
        var welcome = ServerEnvelope()
        welcome.requestID = requestID
        welcome.welcome.user = deviceSession.user.name
        welcome.welcome.token = deviceSession.token ?? ""
        welcome.welcome.tokenExpiresMs = deviceSession.device.expiresMs
        welcome.welcome.cursor = start
        welcome.welcome.latestCursor = latest
        let limits = self.context.configuration.limits
        welcome.welcome.limits.maxTextBytes = UInt32(clamping: limits.maxTextBytes)
        welcome.welcome.limits.maxUnackedSends = UInt32(clamping: limits.maxUnackedSends)
        welcome.welcome.limits.heartbeatIntervalMs = UInt32(
            clamping: limits.heartbeatInterval.components.seconds * 1000
        )
        let media = self.context.configuration.media
        welcome.welcome.limits.maxMediaBytes = UInt64(media.maxMediaBytes)
        welcome.welcome.limits.mediaQuotaLeftBytes = UInt64(
            (try? await self.context.media.quotaLeft(for: deviceSession.user.id)) ?? 0
        )
        welcome.welcome.limits.uploadWindowBytes = UInt32(clamping: media.uploadWindowBytes)
        welcome.welcome.limits.maxChunkBytes = UInt32(clamping: media.maxChunkBytes)
        try await session.write(welcome, transport: self.transport, to: outbound)

        let user = deviceSession.user
        let ackedOnWrite = hello.ackedOnWrite
        group.addTask {
            await self.deliver(
                to: handle,
                user: user,
                from: start,
                latest: latest,
                ackedOnWrite: ackedOnWrite,
                session: session,
                outbound: outbound
            )
        }
        await self.announcePresence(of: user.id, named: user.name, online: true, first: first, handle: handle)
        return true
    }

    // MARK: Writes

    /// Awaits each write's outcome in order and sends its answer.
    private func answer(_ session: SessionShared, outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>) async {
        for await answer in session.answers {
            let reply = await self.commit(
                answer.request,
                ticket: answer.ticket,
                requestID: answer.requestID,
                reservedFanout: answer.reservedFanout,
                handle: session.handle
            )
            if answer.answers, let reply {
                try? await session.write(reply, transport: self.transport, to: outbound)
            }
            session.writeFinished()
        }
    }

    /// Submits a write to the group commit and makes its answer.
    private func commit(
        _ request: WriteRequest,
        ticket: CommitTicket,
        requestID: UInt64,
        reservedFanout: Int,
        handle: ConnectionHandle?
    ) async -> ServerEnvelope? {
        let outcome: WriteOutcome
        do {
            outcome = try await ticket.outcome()
        } catch {
            if case .send(let send) = request { handle?.forgetSend(id: send.id) }
            // Nothing was delivered: the reservation is given back.
            if case .send(let send) = request, reservedFanout > 0 {
                self.context.chargeFanout(of: send.sender, deliveries: -reservedFanout)
            }
            return self.failedWrite(request, requestID: requestID, error)
        }
        var envelope = ServerEnvelope()
        envelope.requestID = requestID
        switch outcome {
        case .sent(let receipt):
            if case .send(let send) = request {
                // The reservation becomes the real cost (none for a duplicate: it was delivered before).
                let cost = receipt.duplicate ? 0 : receipt.recipients
                self.context.chargeFanout(of: send.sender, deliveries: cost - reservedFanout)
                if receipt.duplicate {
                    handle?.forgetSend(id: send.id)
                } else {
                    self.context.learnFanout(of: send.sender, to: send.to, deliveries: receipt.recipients)
                }
            }
            envelope.sendAck.id = receipt.id
            envelope.sendAck.conversation = Courier_V1_Conversation(receipt.conversation)
            envelope.sendAck.seq = receipt.seq
            envelope.sendAck.timeMs = receipt.timeMs
            envelope.sendAck.duplicate = receipt.duplicate
        case .done:
            envelope.done = Courier_V1_Done()
        case .refused(let error):
            if case .send(let send) = request {
                handle?.forgetSend(id: send.id)
                if reservedFanout > 0 { self.context.chargeFanout(of: send.sender, deliveries: -reservedFanout) }
            }
            self.context.metrics.refusals.increment()
            return self.errorEnvelope(requestID, code: "\(error.code)", message: error.message, id: request.messageID)
        }
        return envelope
    }

    /// The answer to a write whose commit failed.
    private func failedWrite(_ request: WriteRequest, requestID: UInt64, _ error: any Error) -> ServerEnvelope {
        if let error = error as? CourierStoreError {
            self.logger.warning("write failed", metadata: ["code": "\(error.code)"])
            return self.errorEnvelope(requestID, code: "\(error.code)", message: error.message, id: request.messageID)
        }
        return self.errorEnvelope(requestID, code: ErrorCodes.internalError, message: "\(error)", id: request.messageID)
    }

    // MARK: Other requests

    private func handle(
        _ request: SessionStateMachine.Request,
        requestID: UInt64,
        outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>,
        session: SessionShared,
        group: inout ThrowingDiscardingTaskGroup<any Error>
    ) async throws -> Bool {
        guard let deviceSession = session.withMachine({ $0.session }) else { return true }
        let user = deviceSession.user
        var reply = ServerEnvelope()
        reply.requestID = requestID
        do {
            switch request {
            case .history(let address, let beforeSeq, let limit):
                let page = try await self.context.store.history(
                    for: user.id,
                    in: address,
                    beforeSeq: beforeSeq,
                    limit: limit
                )
                // Newest first: a page cut to the answer limit keeps the newest, and `more` sends the client on
                // from the oldest it got.
                let messages = page.messages.map(Courier_V1_Message.init)
                let fitting = Self.fitting(
                    sizes: messages.map { (try? $0.serializedBytes() as [UInt8])?.count ?? 0 },
                    within: self.context.configuration.limits.maxAnswerBytes
                )
                reply.history.messages = Array(messages.prefix(fitting))
                reply.history.more = page.more || fitting < messages.count
            case .unread(let offset):
                let counts = try await self.context.store.unreadCounts(for: user.id)
                let entries = counts.dropFirst(offset).map { count in
                    var entry = Courier_V1_UnreadCounts.Entry()
                    entry.conversation = Courier_V1_Conversation(count.conversation)
                    entry.unread = count.unread
                    entry.lastSeq = count.lastSeq
                    entry.readSeq = count.readSeq
                    return entry
                }
                let fitting = Self.fitting(
                    sizes: entries.map { (try? $0.serializedBytes() as [UInt8])?.count ?? 0 },
                    within: self.context.configuration.limits.maxAnswerBytes
                )
                reply.unread.entries = Array(entries.prefix(fitting))
                reply.unread.more = fitting < entries.count
                reply.unread.nextOffset = UInt32(clamping: min(counts.count, offset + fitting))
            case .typing(let address, let typing):
                let members = try await self.context.store.members(of: address, for: user.id)
                self.context.fanout.typing(
                    TypingHint(
                        user: user.id,
                        name: user.name,
                        conversation: address,
                        typing: typing,
                        fromConnection: session.handle?.id
                    ),
                    to: members
                )
                reply.done = Courier_V1_Done()
            case .manageGroup(let manage):
                let appended = try await self.manageGroup(manage, by: user)
                self.context.fanout.logsGrew(appended)
                reply.done = Courier_V1_Done()
            case .logout:
                try await self.context.store.revokeDevice(
                    deviceSession.device.id,
                    of: user.name,
                    nowMs: SessionContext.nowMs()
                )
                reply.done = Courier_V1_Done()
                try await session.write(reply, transport: self.transport, to: outbound)
                try? await self.close(outbound, session: session, code: ErrorCodes.tokenRevoked, message: "logged out")
                return false
            case .upload(let sha256, let size, let streamID):
                try await self.startUpload(
                    sha256: sha256,
                    size: size,
                    streamID: streamID,
                    requestID: requestID,
                    user: user.id,
                    outbound: outbound,
                    session: session,
                    group: &group
                )
                return true
            case .fetch(let sha256, let offset, let length, let streamID, let window):
                try await self.startFetch(
                    sha256: sha256,
                    range: (offset, length),
                    streamID: streamID,
                    window: window,
                    requestID: requestID,
                    user: user.id,
                    outbound: outbound,
                    session: session,
                    group: &group
                )
                return true
            }
        } catch let error as CourierStoreError {
            self.context.metrics.refusals.increment()
            reply = self.errorEnvelope(
                requestID,
                code: "\(error.code)",
                message: error.message,
                id: "",
                retryAfter: error.code == .uploadBusy ? .seconds(1) : nil
            )
        }
        try await session.write(reply, transport: self.transport, to: outbound)
        return true
    }

    /// How many items of these encoded sizes, from the first, fit in `limit` bytes of an answer (at least one,
    /// when there is one).
    static func fitting(sizes: [Int], within limit: Int) -> Int {
        var bytes = 0
        for (index, size) in sizes.enumerated() {
            // The field's tag and length prefix: a few bytes more than the item.
            bytes += size + 6
            if bytes > limit { return max(1, index) }
        }
        return sizes.count
    }

    private func manageGroup(_ manage: Courier_V1_ManageGroup, by user: User) async throws -> [UserID: UInt64] {
        let store = self.context.store
        let now = SessionContext.nowMs()
        switch manage.action {
        case .create(let members)?:
            return try await store.createGroup(
                name: manage.group,
                owner: user.name,
                members: members.users,
                byOwner: true,
                nowMs: now
            )
        case .add(let members)?:
            return try await store.changeMembers(
                of: manage.group,
                actor: user.id,
                add: members.users,
                remove: [],
                nowMs: now
            )
        case .remove(let members)?:
            return try await store.changeMembers(
                of: manage.group,
                actor: user.id,
                add: [],
                remove: members.users,
                nowMs: now
            )
        case .leave?:
            return try await store.changeMembers(
                of: manage.group,
                actor: user.id,
                add: [],
                remove: [user.name],
                nowMs: now
            )
        case nil:
            throw CourierStoreError(.invalidRequest, "manage_group needs an action")
        }
    }

    // MARK: Delivery

    /// Sends the user's events from a cursor on, then whatever the hub wakes the connection for, until the
    /// connection ends or is terminated.
    private func deliver(
        to handle: ConnectionHandle,
        user: User,
        from start: UInt64,
        latest: UInt64,
        ackedOnWrite: Bool,
        session: SessionShared,
        outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>
    ) async {
        let pageSize = self.context.configuration.limits.eventsPerPage
        var sent = start
        var caughtUp = false
        handle.delivered(upTo: start)
        do {
            if !handle.wantsEvents {
                // Asked for no events: only notices and the end reach this loop.
            } else if latest <= start {
                var envelope = ServerEnvelope()
                envelope.events.caughtUp = true
                try await session.write(envelope, transport: self.transport, to: outbound)
                caughtUp = true
            } else {
                handle.notify(cursor: latest)
            }
            while let wake = await withTaskCancellationHandler(
                operation: { await handle.next() },
                onCancel: { handle.interrupt() }
            ) {
                switch wake {
                case .terminate(let code, let message):
                    await session.waitForWritesToFinish()
                    try? await self.close(outbound, session: session, code: code, message: message)
                    return
                case .notices(let notices):
                    try await session.write(notices, transport: self.transport, to: outbound)
                case .events(let upTo):
                    while sent < upTo {
                        // Handed over at commit when this connection kept up; else read back from the store.
                        var events = handle.takeHanded(after: sent, limit: pageSize)
                        if events.isEmpty {
                            events = try await self.context.store.events(for: user.id, after: sent, limit: pageSize)
                        } else {
                            self.context.metrics.eventsHanded.increment(by: events.count)
                        }
                        guard let last = events.last else { break }
                        // The connection that sent a message has its acknowledgement; it does not get it again.
                        // Other connections of the same device do (another process of the same app).
                        let outgoing = events.compactMap { event -> Courier_V1_Event? in
                            if case .message(let message) = event.kind,
                                handle.isOwnSend(id: message.id, from: message.fromDevice)
                            {
                                return nil
                            }
                            return Courier_V1_Event(event)
                        }
                        let reachesLatest = !caughtUp && last.cursor >= latest
                        if reachesLatest { caughtUp = true }
                        // Envelopes of at most maxEventsBytes each, so that a page of large texts never makes a
                        // frame over the native limit.
                        var envelopes: [ServerEnvelope] = []
                        var current = ServerEnvelope()
                        var bytes = 0
                        for event in outgoing {
                            let size = event.message.body.text.utf8.count + 128
                            if bytes > 0, bytes + size > self.context.configuration.limits.maxEventsBytes {
                                envelopes.append(current)
                                current = ServerEnvelope()
                                bytes = 0
                            }
                            current.events.events.append(event)
                            bytes += size
                        }
                        current.events.caughtUp = reachesLatest
                        if !current.events.events.isEmpty || reachesLatest { envelopes.append(current) }
                        // One at a time: a page of large texts in several envelopes must not pass the write buffer's
                        // bound at once (a page of small ones is one envelope).
                        for envelope in envelopes {
                            try await session.write(envelope, transport: self.transport, to: outbound)
                        }
                        self.context.metrics.eventsOut.increment(by: events.count)
                        sent = last.cursor
                        handle.delivered(upTo: sent)
                        if ackedOnWrite {
                            _ = try? await self.context.commits.submit(
                                .ack(user: user.id, device: handle.device, cursor: sent)
                            )
                        }
                    }
                    handle.delivered(upTo: upTo)
                }
            }
        } catch {
            self.logger.debug("delivery ended", metadata: ["error": "\(error)"])
            session.closeChannel()
        }
    }

    private func disconnected(_ handle: ConnectionHandle) async {
        let last = self.context.hub.unregister(handle)
        let now = SessionContext.nowMs()
        if last.lastForDevice {
            self.context.activity.note(handle.device, of: handle.user, connected: false, ms: now)
        }
        guard last.lastForUser, let user = try? await self.context.store.userName(of: handle.user) else { return }
        await self.announcePresence(
            of: handle.user,
            named: user,
            online: false,
            first: true,
            handle: nil,
            lastSeenMs: now
        )
    }

    /// Tells the user's peers that it came online or went offline, and tells a new connection who is online.
    private func announcePresence(
        of user: UserID,
        named name: String,
        online: Bool,
        first: Bool,
        handle: ConnectionHandle?,
        lastSeenMs: Int64 = 0
    ) async {
        guard let peers = try? await self.context.store.peers(of: user) else { return }
        if first {
            self.context.fanout.presence(of: name, online: online, lastSeenMs: lastSeenMs, to: peers)
        }
        // A new connection that asked for notices learns who is online, and when the others were last seen.
        if let handle, handle.wantsEphemeral, !peers.isEmpty,
            let known = try? await self.context.store.namesAndLastSeen(of: peers)
        {
            for (peer, (name, lastSeenMs)) in known {
                let online = self.context.fanout.isOnline(peer)
                guard online || lastSeenMs != nil else { continue }
                var notice = Courier_V1_PresenceNotice()
                notice.user = name
                notice.online = online
                notice.lastSeenMs = online ? 0 : lastSeenMs ?? 0
                handle.post(presence: notice)
            }
        }
    }

    // MARK: Deadlines and closing

    private func tick(_ session: SessionShared, outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>) async {
        let limits = self.context.configuration.limits
        while (try? await Task.sleep(for: .milliseconds(250))) != nil {
            if session.writeBlocked(longerThan: limits.slowConsumerTimeout) {
                self.logger.notice(
                    "closing: the client stopped reading",
                    metadata: ["code": "\(ErrorCodes.slowConsumer)"]
                )
                session.closeChannel()
                return
            }
            let action = session.withMachine { $0.tick(now: .now) }
            if case .close(let code, let message) = action {
                self.logger.info("closing", metadata: ["code": "\(code)"])
                try? await self.close(outbound, session: session, code: code, message: message)
                return
            }
        }
    }

    /// Sends the closing frames and closes the connection.
    func close(
        _ outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>,
        session: SessionShared,
        code: String,
        message: String
    ) async throws {
        session.withMachine { $0.close() }
        defer { session.closeChannel() }
        for frame in self.transport.closingFrames(code: code, message: message) {
            try await session.write(frame, to: outbound)
        }
    }

    func errorEnvelope(
        _ requestID: UInt64,
        code: String,
        message: String,
        id: String,
        retryAfter: Duration? = nil
    ) -> ServerEnvelope {
        var envelope = ServerEnvelope()
        envelope.requestID = requestID
        envelope.error.code = code
        envelope.error.message = message
        envelope.error.id = id
        if let retryAfter {
            envelope.error.retryAfterMs = UInt32(clamping: retryAfter.wholeMilliseconds)
        }
        return envelope
    }
}

extension WriteRequest {
    /// The user who sent a message.
    var sender: UserID? {
        if case .send(let send) = self { send.sender } else { nil }
    }

    /// The message id a refusal is about.
    var messageID: String {
        switch self {
        case .send(let send): send.id
        case .recall(_, _, let id): id
        case .ack, .markRead: ""
        }
    }
}
