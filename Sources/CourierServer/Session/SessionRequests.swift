import CourierProtocol
import CourierStore
import CourierWire
import Logging
import NIOCore

/// The async work of a session: what needs the store, the hub or the blob store (logging in, history and the other
/// requests, media, a connection's end). Each function runs as a task of ``SessionShared`` for one request of the
/// connection's ``SessionHandler``, writes through a ``SessionWriter``, and tells the handler how to go on.
struct SessionRequests<Transport: SessionTransport>: Sendable {
    let context: SessionContext
    let transport: Transport
    /// The client's address and port, for logs.
    let remoteAddress: String
    /// The client's IP address alone.
    let clientIP: String

    /// The key the client's address counts under in per-address limits.
    var addressKey: String { AddressKey.of(ip: self.clientIP) }

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

    // MARK: Authentication

    func authenticate(
        _ hello: Courier_V1_Hello,
        requestID: UInt64,
        session: SessionShared,
        writer: SessionWriter<Transport>
    ) async throws -> SessionHandler<Transport>.StepEnd {
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
            try await writer.write(envelope)
            writer.close(code: ErrorCodes.throttled, message: "throttled")
            return .stop
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
                try await writer.write(envelope)
                writer.close(code: ErrorCodes.throttled, message: "throttled")
                return .stop
            }
            let action = session.withMachine { $0.authenticationFailed(code: "\(error.code)", message: error.message) }
            if case .close(let code, let message) = action {
                self.logger.info("closing", metadata: ["code": "\(code)"])
                writer.close(code: code, message: message)
            }
            return .stop
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
            writer.close(code: ErrorCodes.shuttingDown, message: "the server is stopping")
            return .stop
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
            writer.close(code: ErrorCodes.serverFull, message: "this user has \(limit) connections already")
            return .stop
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
        try await writer.write(welcome)

        let user = deviceSession.user
        await self.announcePresence(of: user.id, named: user.name, online: true, first: first, handle: handle)
        return .authenticated(
            handle: handle,
            user: user,
            start: start,
            latest: latest,
            ackedOnWrite: hello.ackedOnWrite
        )
    }

    // MARK: Writes

    /// The answer to a write whose outcome came back from the group commit (nil for one that is not answered),
    /// after settling what the write had reserved: its sender's fan-out budget and the connection's own-send list.
    func answer(
        _ write: SessionWrites.Pending,
        result: Result<WriteOutcome, any Error>,
        handle: ConnectionHandle?
    ) -> ServerEnvelope? {
        let (request, requestID, reservedFanout) = (write.request, write.requestID, write.reservedFanout)
        let outcome: WriteOutcome
        switch result {
        case .success(let success):
            outcome = success
        case .failure(let error):
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
        return write.answers ? envelope : nil
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

    func handle(
        _ request: SessionStateMachine.Request,
        requestID: UInt64,
        session: SessionShared,
        writer: SessionWriter<Transport>
    ) async throws -> SessionHandler<Transport>.StepEnd {
        guard let deviceSession = session.withMachine({ $0.session }) else { return .goOn }
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
                let messages = page.messages.map { Courier_V1_Message($0, rawBody: self.transport.sendsRawBodies) }
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
                try await writer.write(reply)
                writer.close(code: ErrorCodes.tokenRevoked, message: "logged out")
                return .stop
            case .upload(let sha256, let size, let streamID):
                try await self.startUpload(
                    sha256: sha256,
                    size: size,
                    streamID: streamID,
                    requestID: requestID,
                    user: user.id,
                    session: session,
                    writer: writer
                )
                return .goOn
            case .fetch(let sha256, let offset, let length, let streamID, let window):
                try await self.startFetch(
                    sha256: sha256,
                    range: (offset, length),
                    streamID: streamID,
                    window: window,
                    requestID: requestID,
                    user: user.id,
                    session: session,
                    writer: writer
                )
                return .goOn
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
        try await writer.write(reply)
        return .goOn
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

    /// The connection has closed and its work has ended: its uploads are released, its slot given back, and its
    /// user's peers told if it was the user's last.
    func connectionEnded(_ session: SessionShared) async {
        for upload in session.streams.closeAll() { await self.context.media.release(upload.upload) }
        if let inline = session.inline?.upload { await self.context.media.release(inline, discard: true) }
        session.inline = nil
        let handle = session.handle
        self.context.release(address: self.addressKey, authenticated: handle != nil)
        if let handle { await self.disconnected(handle) }
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

    /// Envelopes for a page of events: at most `maxEventsBytes` of text each, so that a page of large texts never
    /// makes a frame over the native limit. The connection that sent a message has its acknowledgement and does not
    /// get it again; other connections of the same device do (another process of the same app).
    func envelopes(for events: [StoredEvent], handle: ConnectionHandle, caughtUp: Bool) -> [ServerEnvelope] {
        let limit = self.context.configuration.limits.maxEventsBytes
        var envelopes: [ServerEnvelope] = []
        var current = ServerEnvelope()
        var bytes = 0
        for event in events {
            if case .message(let message) = event.kind, handle.isOwnSend(id: message.id, from: message.fromDevice) {
                continue
            }
            let outgoing = Courier_V1_Event(event, rawBody: self.transport.sendsRawBodies)
            let size = if case .message(let message) = event.kind { message.body.count + 128 } else { 128 }
            if bytes > 0, bytes + size > limit {
                envelopes.append(current)
                current = ServerEnvelope()
                bytes = 0
            }
            current.events.events.append(outgoing)
            bytes += size
        }
        current.events.caughtUp = caughtUp
        if !current.events.events.isEmpty || caughtUp { envelopes.append(current) }
        return envelopes
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
