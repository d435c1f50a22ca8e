import CourierProtocol
import CourierStore

/// Logging in: the login gate, the credentials, the hub's registration, the welcome and presence.
extension SessionRequests {
    func authenticate(
        _ hello: Courier_V1_Hello,
        requestID: UInt64,
        session: SessionWork,
        writer: SessionWriter<Transport>
    ) async throws -> SessionStateMachine.WorkEnd {
        let userName: String? =
            switch hello.credentials {
            case .password(let password)?: password.user
            default: nil
            }
        let shown =
            switch hello.credentials {
            case .password(let password)?: Self.printable(password.user)
            case .signUp(let signUp)?: Self.printable(signUp.user) + " (signing up)"
            default: "(token)"
            }
        let gate: AttemptGate
        if case .signUp? = hello.credentials {
            if self.context.configuration.accounts.registration == .closed {
                self.logger.notice("sign-up refused: registration is closed", metadata: ["user": "\(shown)"])
                return .close(
                    code: ErrorCodes.registrationClosed,
                    message: "this server does not take sign-ups: ask its administrator for an account"
                )
            }
            if let refusal = try await self.checkInvitation(hello, requestID: requestID, writer: writer) {
                return refusal
            }
            gate = .signUp
        } else {
            gate = .login(user: userName)
        }
        let result: Result<DeviceSession, CourierStoreError>
        let counts: (Result<DeviceSession, CourierStoreError>) -> Bool = { result in
            // A sign-up always counts; a login when it failed on its credentials.
            if case .failure(let error) = result {
                gate == .signUp || error.code == .authFailed
            } else {
                gate == .signUp
            }
        }
        switch await self.limited(gate, counts: counts, { await self.check(hello) }) {
        case .throttled(let wait):
            let what = gate == .signUp ? "too many sign-ups" : "too many failed logins"
            self.logger.notice("login throttled", metadata: ["user": "\(shown)"])
            return try await self.throttled(requestID, "\(what); retry later", retryAfter: wait, writer)
        case .unchecked:
            return try await self.storageFailed(requestID, "the login could not be checked; try again later", writer)
        case .checked(let checked):
            result = checked
        }
        // A password hashed or checked: a login's that succeeded or failed on it, a sign-up that made an account.
        let hashed =
            switch result {
            case .success: userName != nil || gate == .signUp
            case .failure(let error): userName != nil && error.code == .authFailed
            }
        if hashed { self.context.metrics.passwordChecks.increment() }

        let deviceSession: DeviceSession
        switch result {
        case .failure(let error):
            // Never the password or the token: the user name only, escaped.
            self.logger.notice("login failed", metadata: ["code": "\(error.code)", "user": "\(shown)"])
            if error.code == .throttled {
                // The password threads' queue is full: refused before any hashing, like the limits above.
                return try await self.throttled(requestID, error.message, retryAfter: .seconds(1), writer)
            }
            if error.code == .storageFailed {
                return try await self.storageFailed(requestID, error.message, writer)
            }
            return .close(code: "\(error.code)", message: error.message)
        case .success(let success):
            deviceSession = success
        }

        let handle: ConnectionHandle
        let first: Bool
        switch try await self.register(deviceSession, hello: hello) {
        case .registered(let registered, let firstForUser):
            (handle, first) = (registered, firstForUser)
        case .refused(let code, let message) where code == ErrorCodes.storageFailed:
            return try await self.storageFailed(requestID, message, writer)
        case .refused(let code, let message):
            return .close(code: code, message: message)
        }
        // On the books of the connection's end from here: however the login ends, the handle is unregistered.
        session.handle = handle
        self.context.authenticated(session.ticket)
        // Active from here: the welcome goes to a session whose deadlines are its token's and its silence's.
        await writer.activate(deviceSession)
        self.logger.info(
            "authenticated",
            metadata: ["user": "\(deviceSession.user.name)", "device": "\(deviceSession.device.id.rawValue)"]
        )

        let latest = try await self.context.store.logCursor(of: deviceSession.user.id)
        let start = min(hello.resume ? hello.cursor : deviceSession.device.ackedCursor, latest)
        try await writer.write(
            await self.welcome(deviceSession, requestID: requestID, start: start, latest: latest)
        )
        let user = deviceSession.user
        await self.announcePresence(of: user.id, named: user.name, online: true, first: first, handle: handle)
        return .authenticated(
            deviceSession,
            handle: handle,
            start: start,
            latest: latest,
            ackedOnWrite: hello.ackedOnWrite
        )
    }

    /// Where new users come by invitation: a sign-up's invitation is looked up first (no hash), a bad one refused and
    /// counted against its address alone, before the sign-up counts against the limits every address shares: who
    /// guesses at invitations cannot use up the sign-ups of those who hold one. Nil: go on.
    private func checkInvitation(
        _ hello: Courier_V1_Hello,
        requestID: UInt64,
        writer: SessionWriter<Transport>
    ) async throws -> SessionStateMachine.WorkEnd? {
        guard self.context.configuration.accounts.registration == .invite, case .signUp(let signUp)? = hello.credentials
        else { return nil }
        let ticket: LoginGate.Ticket
        switch self.context.badInvites.admit(user: nil, address: self.addressKey) {
        case .throttled(let wait):
            self.logger.notice("sign-up throttled: too many bad invitations from the address")
            return try await self.throttled(requestID, "too many sign-ups; retry later", retryAfter: wait, writer)
        case .admitted(let admitted):
            ticket = admitted
        }
        do {
            try await self.context.store.checkInvite(
                signUp.invite.isEmpty ? nil : signUp.invite,
                nowMs: self.context.clock.wallMs
            )
            self.context.badInvites.finish(ticket, failed: false)
            return nil
        } catch let error as CourierStoreError where error.code != .storageFailed {
            self.context.badInvites.finish(ticket, failed: true)
            self.logger.notice("sign-up refused", metadata: ["code": "\(error.code)"])
            return .close(code: "\(error.code)", message: error.message)
        } catch {
            self.context.badInvites.finish(ticket, failed: false)
            return try await self.storageFailed(requestID, "the sign-up could not be checked; try again later", writer)
        }
    }

    /// Which limits an attempt counts against: a login's (a password's under its user name and its address; a
    /// token's under its address's failed tokens), or a sign-up's (every one, in all and per address).
    enum AttemptGate: Equatable {
        case login(user: String?)
        case signUp
    }

    enum Limited<T: Sendable>: Sendable {
        /// Refused before any work: the client may try again after this long.
        case throttled(Duration)
        /// The count across nodes could not be asked: nothing was done.
        case unchecked
        case checked(Result<T, CourierStoreError>)
    }

    /// Runs a check that hashes or verifies a password under the limits of its gate, on this node and then on
    /// every node sharing the database: the attempt is admitted and counted in flight in one step, before any
    /// work, and counted for the window (as a failed login is) when `counts` says so.
    func limited<T: Sendable>(
        _ gate: AttemptGate,
        counts: (Result<T, CourierStoreError>) -> Bool,
        _ body: () async -> Result<T, CourierStoreError>
    ) async -> Limited<T> {
        let throttle: LoginThrottle
        let key: String?
        switch gate {
        case .login(let user): (throttle, key) = (self.context.logins, user)
        case .signUp: (throttle, key) = (self.context.signUps, "*")
        }
        let ticket: LoginGate.Ticket
        switch throttle.admit(user: key, address: self.addressKey) {
        case .throttled(let wait): return .throttled(wait)
        case .admitted(let admitted): ticket = admitted
        }
        var attempt: PasswordAttempt?
        do {
            let admission: PasswordAdmission? =
                switch gate {
                case .login(let user?):
                    try await self.context.cluster.admitPassword(user: user, address: self.addressKey)
                case .login(nil): nil
                case .signUp: try await self.context.cluster.admitSignUp(address: self.addressKey)
                }
            switch admission {
            case .throttled(let wait)?:
                throttle.finish(ticket, failed: false)
                return .throttled(wait)
            case .admitted(let admitted)?:
                attempt = admitted
            case nil:
                break
            }
        } catch {
            throttle.finish(ticket, failed: false)
            return .unchecked
        }
        let result = await body()
        let counted = counts(result)
        throttle.finish(ticket, failed: counted)
        if let attempt {
            // Not cancelled with the request (its client may have left): the attempt's end is counted all the same.
            let cluster = self.context.cluster
            await Task { await cluster.finish(attempt, failed: counted) }.value
        }
        return .checked(result)
    }

    /// Tells the client to retry later, then closes.
    private func throttled(
        _ requestID: UInt64,
        _ message: String,
        retryAfter: Duration,
        _ writer: SessionWriter<Transport>
    ) async throws -> SessionStateMachine.WorkEnd {
        self.context.metrics.refusals.increment()
        self.context.metrics.loginsThrottled.increment()
        try await writer.write(
            self.errorEnvelope(requestID, code: ErrorCodes.throttled, message: message, id: "", retryAfter: retryAfter)
        )
        return .close(code: ErrorCodes.throttled, message: "throttled")
    }

    /// Tells the client the database could not be reached and when to try again, then closes.
    private func storageFailed(
        _ requestID: UInt64,
        _ message: String,
        _ writer: SessionWriter<Transport>
    ) async throws -> SessionStateMachine.WorkEnd {
        let retryAfter = self.context.configuration.limits.storageRetryAfter
        try await writer.write(
            self.errorEnvelope(
                requestID,
                code: ErrorCodes.storageFailed,
                message: message,
                id: "",
                retryAfter: retryAfter
            )
        )
        return .close(code: ErrorCodes.storageFailed, message: message)
    }

    /// The device name of a compat-port password login: `compat`, or `compat/ID` for a client that names itself.
    static func compatDeviceName(client: String, maxBytes: Int) -> String {
        client.isEmpty ? "compat" : Self.prefix("compat/" + client, maxBytes: maxBytes)
    }

    /// Checks a hello's credentials with the store: a password (with a renewal of the device's token, if asked) or
    /// a token.
    private func check(_ hello: Courier_V1_Hello) async -> Result<DeviceSession, CourierStoreError> {
        let store = self.context.store
        do {
            let now = self.context.clock.wallMs
            switch hello.credentials {
            case .password(let password)?:
                var deviceName = Self.prefix(hello.deviceName, maxBytes: store.limits.maxDeviceNameBytes)
                var reuse: DeviceReuse?
                if self.transport.name == "compat" {
                    // The notes' clients keep no token: each login would make a device. One that names itself
                    // (`device`) gets its device again; one that does not, the oldest idle one of the port's.
                    let named = Self.compatDeviceName(client: deviceName, maxBytes: store.limits.maxDeviceNameBytes)
                    reuse = deviceName.isEmpty ? .idle(named: named) : .named(named)
                    deviceName = named
                }
                return .success(
                    try await store.login(
                        user: password.user,
                        password: password.password,
                        deviceName: deviceName.isEmpty ? "device" : deviceName,
                        renewing: hello.renewToken.isEmpty ? nil : hello.renewToken,
                        reusing: reuse,
                        nowMs: now
                    )
                )
            case .token(let token)?:
                return .success(try await store.authenticate(token: token, nowMs: now))
            case .signUp(let signUp)?:
                let deviceName = Self.prefix(hello.deviceName, maxBytes: store.limits.maxDeviceNameBytes)
                return .success(
                    try await store.signUp(
                        user: signUp.user,
                        password: signUp.password,
                        invite: signUp.invite,
                        requiresInvite: self.context.configuration.accounts.registration == .invite,
                        deviceName: deviceName.isEmpty ? "device" : deviceName,
                        nowMs: now
                    )
                )
            case nil:
                return .failure(CourierStoreError(.authFailed, "no credentials"))
            }
        } catch let error as CourierStoreError {
            return .failure(error)
        } catch {
            // Whatever else went wrong, the attempt ends here: its place in the gate is given back.
            return .failure(CourierStoreError(.storageFailed, "the login could not be checked; try again later"))
        }
    }

    private enum Registration {
        case registered(ConnectionHandle, firstForUser: Bool)
        case refused(code: String, message: String)
    }

    /// Registers the connection in the hub (and, where nodes share the database, counts it on all of them); a
    /// refusal (the user's connection limit, the server stopping) undoes what the login made. A password login is
    /// the user's own: where the user is at its connection limit, its oldest connections yield; a token login is
    /// refused there (a stolen token cannot keep the owner out).
    private func register(_ deviceSession: DeviceSession, hello: Courier_V1_Hello) async throws -> Registration {
        let limits = self.context.configuration.limits
        let yielding = deviceSession.token != nil
        let full = Registration.refused(
            code: ErrorCodes.serverFull,
            message: "this user has \(limits.maxConnectionsPerUser) connections already"
        )
        var lease: Int64?
        do {
            switch try await self.context.cluster.open(
                user: deviceSession.user.id,
                maxPerUser: limits.maxConnectionsPerUser,
                yielding: yielding
            ) {
            case .full?:
                await self.refuseLogin(deviceSession)
                return full
            case .opened(let opened, let yielded)?:
                lease = opened
                // This node's own close at once; the other nodes' when they next look.
                self.context.hub.terminate(leases: Set(yielded))
            case nil:
                break
            }
        } catch {
            await self.refuseLogin(deviceSession, counted: false)
            return .refused(code: ErrorCodes.storageFailed, message: "the login could not be counted; try again later")
        }
        switch self.context.hub.register(
            user: deviceSession.user.id,
            device: deviceSession.device.id,
            ephemeral: hello.ephemeral,
            events: !hello.noEvents,
            // Checked: the limit may be as large as an Int holds.
            maxOwnSends: limits.maxUnackedSends.multipliedReportingOverflow(by: 4).overflow
                ? Int.max : limits.maxUnackedSends * 4,
            maxHanded: limits.maxHandedEvents,
            maxHandedBytes: limits.maxHandedBytes,
            // Where the nodes count together, they have decided.
            maxPerUser: lease == nil ? limits.maxConnectionsPerUser : .max,
            yielding: yielding,
            lease: lease
        ) {
        case .registered(let registered, let firstForUser, let firstForDevice):
            if firstForDevice {
                self.context.activity.note(
                    registered.device,
                    of: registered.user,
                    connected: true,
                    ms: self.context.clock.wallMs
                )
            }
            return .registered(registered, firstForUser: firstForUser)
        case .shuttingDown:
            await self.refuseLogin(deviceSession, counted: false, lease: lease)
            return .refused(code: ErrorCodes.shuttingDown, message: "the server is stopping")
        case .userFull:
            await self.refuseLogin(deviceSession, lease: lease)
            return full
        }
    }

    /// A login refused for its user's connection limit (or because it could not be counted): a password login made
    /// a device for this connection, which it never gets to use; one that renewed the device the client held gives
    /// it its previous token back (the client never got the new one).
    ///
    /// Not cancelled with the login (its client may have left): a device nobody holds is not left behind.
    private func refuseLogin(_ deviceSession: DeviceSession, counted: Bool = true, lease: Int64? = nil) async {
        let store = self.context.store
        let cluster = self.context.cluster
        if counted {
            self.context.metrics.refusals.increment()
            self.logger.notice("refused a login: the user is at its connection limit")
        }
        await Task {
            if let lease { await cluster.close(lease: lease) }
            if deviceSession.renewed {
                try? await store.abandonRenewal(of: deviceSession.device.id)
            } else if deviceSession.token != nil {
                try? await store.revokeDevice(
                    deviceSession.device.id,
                    of: deviceSession.user.name,
                    nowMs: self.context.clock.wallMs
                )
            }
        }.value
    }

    /// The welcome: who the client is, its token, where its delivery starts, and the limits it must keep.
    private func welcome(
        _ deviceSession: DeviceSession,
        requestID: UInt64,
        start: UInt64,
        latest: UInt64
    ) async -> ServerEnvelope {
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
        let store = self.context.store.limits
        welcome.welcome.limits.recallWindowMs = UInt64(max(0, store.recallWindow.wholeMilliseconds))
        welcome.welcome.limits.editWindowMs = UInt64(max(0, store.editWindow.wholeMilliseconds))
        return welcome
    }
}
