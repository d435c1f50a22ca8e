// The rules of logins, tokens and their renewal, for every database.

extension StoreBackend {
    /// Checks a user's password and makes a new device with a fresh token; or, given the token a client held
    /// (`renewing`, expired or not), gives that device of the user's the fresh token instead, unless it was revoked.
    /// The token it held stays good for ``StoreLimits/renewalGrace`` (never past its own expiry) unless the new one
    /// is used first; a renewal offering that previous token (the client never got the new one) keeps it as it was.
    /// A new device starts at the user's present cursor: it receives what happens from now on, and reads older
    /// messages through history.
    ///
    /// The password check costs the hash's full price whether or not the user exists (and whether or not the name
    /// is a valid one), so timing does not tell which names exist. It runs on the store's password threads, never
    /// on the caller's.
    ///
    /// A client that holds no token may name the device to take over instead (`reuse`, ``DeviceReuse``). Past
    /// ``StoreLimits/maxDevicesPerUser`` devices that can connect, the login logs out the device used longest ago
    /// (one with no open connection first, one of the new one's name before others): the limit bounds the devices
    /// that can connect, and never locks a password out.
    ///
    /// - Throws: `auth-failed` (unknown user, removed user or wrong password: one code for all), `invalid-request`
    ///   (a device name with control characters), `throttled` (too many password checks waiting),
    ///   `storage-failed`.
    public func login(
        user name: String,
        password: String,
        deviceName: String,
        renewing previous: String?,
        reusing reuse: DeviceReuse?,
        nowMs: Int64
    ) async throws -> DeviceSession {
        try StoreText.check(deviceName, what: "device name", maxBytes: self.limits.maxDeviceNameBytes)
        let candidate = try await self.reading(doing: "log \(name) in") { transaction -> (User, String)? in
            guard let user = try await Self.user(named: name, transaction), user.removedMs == nil,
                let hash = try await transaction.passwordHash(of: user.id)
            else { return nil }
            return (user, hash)
        }
        let verified = try await self.passwords.verify(password, against: candidate?.1)
        guard verified, let (user, _) = candidate else {
            throw CourierStoreError(.authFailed, "wrong user name or password")
        }
        let token = SessionToken.make()
        let tokenHash = SessionToken.digest(token)
        let offered = previous.map(SessionToken.digest)
        let expiresMs = nowMs + self.limits.tokenLifetime.wholeMilliseconds
        let graceUntilMs = nowMs + self.limits.renewalGrace.wholeMilliseconds
        let (device, renewed) = try await self.transaction(doing: "log \(name) in") { transaction -> (Device, Bool) in
            // The user may have been removed between the read and this write.
            let current = try await Self.activeUser(named: user.name, transaction)
            // Its row locked (before any device's, the order of the group commit) while its devices are counted:
            // two logins at once cannot both take the last place.
            _ = try await transaction.lockUsers([current.id])
            // The password checked is still the user's: a login that checked the one a change replaced meanwhile
            // makes no device (the change logged the others out).
            guard try await transaction.passwordHash(of: current.id) == candidate?.1 else {
                throw CourierStoreError(.authFailed, "wrong user name or password")
            }
            let maxDevices = self.limits.maxDevicesPerUser
            if let offered,
                let held = try await transaction.device(holding: offered, nowMs: nowMs, locking: true),
                held.device.userID == current.id, held.device.revokedMs == nil
            {
                // An expired device renewed can connect again: one more, as a new one would be.
                if held.device.expiresMs <= nowMs {
                    try await Self.makeRoom(
                        of: current.id,
                        max: maxDevices,
                        named: held.device.name,
                        nowMs: nowMs,
                        transaction
                    )
                }
                let tokens = held.tokens.renewed(
                    offering: offered,
                    with: tokenHash,
                    expiresMs: expiresMs,
                    graceUntilMs: graceUntilMs
                )
                try await transaction.setTokens(tokens, of: held.device.id)
                var device = held.device
                device.expiresMs = expiresMs
                return (device, true)
            }
            // A client that holds no token but names its device (or the compat port's oldest idle one): that
            // device again, with a new token (the one it had is lost to it), not another.
            if let reuse, var device = try await Self.reusable(reuse, of: current.id, transaction) {
                if device.expiresMs <= nowMs {
                    try await Self.makeRoom(
                        of: current.id,
                        max: maxDevices,
                        named: device.name,
                        nowMs: nowMs,
                        transaction
                    )
                }
                try await transaction.setTokens(DeviceTokens(tokenHash: tokenHash, expiresMs: expiresMs), of: device.id)
                device.expiresMs = expiresMs
                return (device, true)
            }
            // A new device. The user keeps at most the limit that can connect (not revoked, not expired), so that
            // logins, a thief's among them, cannot fill the store with devices; but the limit never locks a
            // password out: past it, the device used longest ago is logged out.
            try await Self.makeRoom(of: current.id, max: maxDevices, named: deviceName, nowMs: nowMs, transaction)
            let device = try await Self.addDevice(
                of: current,
                named: deviceName,
                tokenHash: tokenHash,
                expiresMs: expiresMs,
                nowMs: nowMs,
                transaction
            )
            return (device, false)
        }
        return DeviceSession(user: user, device: device, token: token, renewed: renewed)
    }

    /// The device a login takes over for a client that holds no token, or nil for a new one.
    static func reusable(_ reuse: DeviceReuse, of user: UserID, _ transaction: Transaction) async throws -> Device? {
        let devices = try await transaction.devices(of: user).filter { $0.revokedMs == nil }
        switch reuse {
        case .named(let name):
            return devices.filter { $0.name == name }.max { $0.id < $1.id }
        case .idle(let name):
            return devices.filter { $0.name == name && $0.connectedSinceMs == nil }.min { $0.id < $1.id }
        }
    }

    /// Makes room for one more device that can connect when the user has `max` already: logs out those used
    /// longest ago, recorded as revocations for the running servers. Devices with no open connection go first, and
    /// among them those of the new one's name (`named`: the same program logging in again, such as a script that
    /// keeps no token), so that a phone put away is the last to go.
    static func makeRoom(
        of user: UserID,
        max: Int,
        named: String,
        nowMs: Int64,
        _ transaction: Transaction
    ) async throws {
        let count = try await transaction.usableDevices(of: user, nowMs: nowMs)
        guard count >= max else { return }
        let usable = try await transaction.devices(of: user).filter { $0.revokedMs == nil && $0.expiresMs > nowMs }
        func rank(_ device: Device) -> (Int, Int, Int64, Int64) {
            (
                device.connectedSinceMs == nil ? 0 : 1, device.name == named ? 0 : 1,
                device.lastSeenMs ?? device.createdMs, device.id.rawValue
            )
        }
        let oldest = usable.sorted { rank($0) < rank($1) }
        let revoked = try await transaction.revokeDevices(
            oldest.prefix(count - max + 1).map(\.id),
            of: user,
            nowMs: nowMs
        )
        try await transaction.recordChanges(revoked.map(StoreChange.deviceRevoked), nowMs: nowMs)
    }

    /// Finds the device a token belongs to. The first use of a renewed device's new token ends its previous one.
    ///
    /// - Throws: `auth-failed` (unknown token), `token-expired`, `token-revoked` (also when its user was removed),
    ///   `storage-failed`.
    public func authenticate(token: String, nowMs: Int64) async throws -> DeviceSession {
        let hash = SessionToken.digest(token)
        let (session, replacesPrevious) = try await self.reading(doing: "check a token") {
            transaction -> (DeviceSession, Bool) in
            guard let held = try await transaction.device(holding: hash, nowMs: nowMs, locking: false) else {
                throw CourierStoreError(.authFailed, "unknown token")
            }
            let current = held.tokens.tokenHash == hash
            var device = held.device
            // The previous token of a renewed device: its own expiry applies.
            device.expiresMs = current ? held.tokens.expiresMs : held.tokens.previousExpiresMs ?? 0
            if held.user.removedMs != nil {
                throw CourierStoreError(.tokenRevoked, CourierStoreError.accountRemovedMessage)
            }
            if device.revokedMs != nil {
                throw CourierStoreError(.tokenRevoked, "the token was revoked")
            }
            if device.expiresMs <= nowMs {
                throw CourierStoreError(.tokenExpired, "the token expired")
            }
            return (
                DeviceSession(user: held.user, device: device, token: nil), current && held.tokens.previousHash != nil
            )
        }
        if replacesPrevious {
            // The renewed token in use: the one it replaced stops working now (unless the device was renewed again).
            try await self.transaction(doing: "retire a renewed token") { transaction in
                guard var tokens = try await transaction.tokens(of: session.device.id, locking: true),
                    tokens.tokenHash == hash
                else { return }
                tokens.previousHash = nil
                tokens.previousUntilMs = nil
                tokens.previousExpiresMs = nil
                try await transaction.setTokens(tokens, of: session.device.id)
            }
        }
        return session
    }

    /// A renewal whose new token never reached its client (the login was refused after it, for a full server or a
    /// shutdown): the device's previous token is its token again.
    public func abandonRenewal(of device: DeviceID) async throws {
        try await self.transaction(doing: "abandon a renewal") { transaction in
            guard let tokens = try await transaction.tokens(of: device, locking: true),
                let previous = tokens.previousHash, let previousExpiresMs = tokens.previousExpiresMs
            else { return }
            try await transaction.setTokens(DeviceTokens(tokenHash: previous, expiresMs: previousExpiresMs), of: device)
        }
    }
}

extension DeviceTokens {
    /// The tokens after a renewal that offered `offered` and gives the device `new`: the current token offered
    /// becomes the previous one, good until `graceUntilMs` (and its own expiry); a previous token offered (the
    /// client never got the last new one) stays as it was.
    package func renewed(offering offered: [UInt8], with new: [UInt8], expiresMs: Int64, graceUntilMs: Int64) -> Self {
        var next = self
        if self.tokenHash == offered {
            next.previousHash = self.tokenHash
            next.previousUntilMs = graceUntilMs
            next.previousExpiresMs = self.expiresMs
        }
        next.tokenHash = new
        next.expiresMs = expiresMs
        return next
    }
}
