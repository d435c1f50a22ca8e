// The rules of signing up and of what a user does with its own account, for every database.

extension StoreBackend {
    /// Makes an invitation to sign up.
    ///
    /// - Parameters:
    ///   - maxUses: How many accounts it may make (at least 1).
    ///   - expiresMs: When it stops working; nil: never.
    /// - Returns: The invitation and its token, which is shown here only: the store keeps its SHA-256.
    /// - Throws: `invalid-request` (fewer than one use, an expiry not after `nowMs`), `storage-failed`.
    public func createInvite(
        maxUses: Int,
        expiresMs: Int64?,
        nowMs: Int64
    ) async throws -> (invite: Invite, token: String) {
        guard maxUses >= 1 else { throw CourierStoreError(.invalidRequest, "an invitation has at least one use") }
        if let expiresMs, expiresMs <= nowMs {
            throw CourierStoreError(.invalidRequest, "an invitation expires after it is made")
        }
        let token = SessionToken.make(prefix: "ci_")
        let id = try await self.transaction(doing: "make an invitation") { transaction in
            try await transaction.insertInvite(
                tokenHash: SessionToken.digest(token),
                maxUses: maxUses,
                expiresMs: expiresMs,
                nowMs: nowMs
            )
        }
        let invite = Invite(id: id, createdMs: nowMs, expiresMs: expiresMs, maxUses: maxUses, uses: 0, revokedMs: nil)
        return (invite, token)
    }

    /// Every invitation, oldest first, without tokens (the store has none).
    public func invites() async throws -> [Invite] {
        try await self.reading(doing: "list invitations") { transaction in try await transaction.invites() }
    }

    /// Revokes an invitation: no account is made with it from now on.
    ///
    /// - Throws: `invalid-request` (no such invitation, or revoked already), `storage-failed`.
    public func revokeInvite(_ id: Int64, nowMs: Int64) async throws {
        try await self.transaction(doing: "revoke an invitation") { transaction in
            guard try await transaction.revokeInvite(id, nowMs: nowMs) else {
                throw CourierStoreError(.invalidRequest, "there is no invitation \(id) to revoke")
            }
        }
    }

    /// Checks an invitation without using it: what a sign-up with it would be told of it now.
    ///
    /// - Throws: `invite-invalid` (none given, unknown, revoked), `invite-expired`, `invite-used-up`, `storage-failed`.
    public func checkInvite(_ token: String?, nowMs: Int64) async throws {
        guard let token else {
            throw CourierStoreError(.inviteInvalid, "this server takes new users by invitation only")
        }
        let hash = SessionToken.digest(token)
        try await self.reading(doing: "check an invitation") { transaction in
            try Self.check(try await transaction.invite(holding: hash, locking: false), nowMs: nowMs)
        }
    }

    /// Makes an account and its first device, as a login would: the new user's first session.
    ///
    /// What is wrong is said in this order, each before any password is hashed: the invitation (first, so that
    /// someone without one learns nothing else: not which names exist, not the password rules), the password, the
    /// name. The invitation's use is counted in
    /// the account's transaction, under its row's lock: two sign-ups with the last use of one cannot both make an
    /// account.
    ///
    /// - Parameters:
    ///   - name: The user name (``Names``): never one another user has or had, in any case.
    ///   - invite: The invitation's token; used (and counted) only when `requiresInvite`.
    ///   - requiresInvite: Whether the server's registration takes invitations only.
    /// - Throws: `weak-password`, `invite-invalid`, `invite-expired`, `invite-used-up`, `invalid-name`, `name-taken`,
    ///   `invalid-request` (a device name with control characters), `throttled` (too many password jobs waiting),
    ///   `storage-failed`.
    public func signUp(
        user name: String,
        password: String,
        invite: String?,
        requiresInvite: Bool,
        deviceName: String,
        nowMs: Int64
    ) async throws -> DeviceSession {
        try StoreText.check(deviceName, what: "device name", maxBytes: self.limits.maxDeviceNameBytes)
        let inviteHash: [UInt8]? = requiresInvite ? invite.map(SessionToken.digest) : nil
        if requiresInvite { try await self.checkInvite(invite, nowMs: nowMs) }
        try self.checkChosen(password: password)
        try Names.validateNew(userName: name)
        let (taken, confusable) = try await self.reading(doing: "check a user name") { transaction in
            (
                try await transaction.user(named: name) != nil,
                try await transaction.skeletonTaken(NameSkeleton.of(name))
            )
        }
        if taken { throw CourierStoreError(.nameTaken, "a user named \(name) exists or existed") }
        if confusable {
            throw CourierStoreError(.nameTaken, "\(name) reads as the name of another user: choose another")
        }
        let hash = try await self.passwords.hash(password)
        let token = SessionToken.make()
        let expiresMs = nowMs + self.limits.tokenLifetime.wholeMilliseconds
        let (user, device) = try await self.transaction(doing: "sign \(name) up") { transaction in
            if let inviteHash {
                let invite = try await transaction.invite(holding: inviteHash, locking: true)
                try Self.check(invite, nowMs: nowMs)
                if let invite { try await transaction.useInvite(invite.id) }
            }
            let id = try await Self.insertUser(name: name, passwordHash: hash, nowMs: nowMs, transaction)
            let user = User(id: id, name: name, createdMs: nowMs, removedMs: nil)
            let device = try await Self.addDevice(
                of: user,
                named: deviceName,
                tokenHash: SessionToken.digest(token),
                expiresMs: expiresMs,
                nowMs: nowMs,
                transaction
            )
            return (user, device)
        }
        return DeviceSession(user: user, device: device, token: token)
    }

    /// Changes a user's password, given its present one. Every other device of the user is revoked (its sessions
    /// end, and must log in with the new password) unless `keepDevices`; the device asking stays.
    ///
    /// - Throws: `weak-password` (the new one), `wrong-password` (the present one), `token-revoked` (the user was
    ///   removed meanwhile), `throttled` (too many password jobs waiting), `storage-failed`.
    public func changePassword(
        of user: UserID,
        from device: DeviceID,
        old: String,
        new: String,
        keepDevices: Bool,
        nowMs: Int64
    ) async throws {
        try self.checkChosen(password: new)
        let verified = try await self.verifyOwnPassword(of: user, old)
        let hash = try await self.passwords.hash(new)
        try await self.transaction(doing: "change a password") { transaction in
            // The row locked: a removal or another change waits, or went first.
            guard try await transaction.lockUsers([user])[user]?.removed == false else {
                throw CourierStoreError(.tokenRevoked, CourierStoreError.accountRemovedMessage)
            }
            // What was checked is still the password, and the device asking still logged in: a change from
            // another device that went first (and logged this one out) is not undone by this one.
            try await Self.checkUnchanged(verified, of: user, transaction)
            let devices = try await transaction.devices(of: user)
            guard devices.contains(where: { $0.id == device && $0.revokedMs == nil }) else {
                throw CourierStoreError(.tokenRevoked, "this device was logged out")
            }
            try await transaction.setPasswordHash(hash, of: user)
            guard !keepDevices else { return }
            let others = devices.map(\.id).filter { $0 != device }
            let revoked = try await transaction.revokeDevices(others, of: user, nowMs: nowMs)
            try await transaction.recordChanges(revoked.map(StoreChange.deviceRevoked), nowMs: nowMs)
        }
    }

    /// Deletes a user's own account, given its password: as ``removeUser(named:nowMs:)`` does (its devices revoked,
    /// out of every group, its name never given out again), and its messages stay in the history of those it wrote
    /// to, under its name.
    ///
    /// - Throws: `wrong-password`, `throttled` (too many password jobs waiting), `storage-failed`.
    public func deleteAccount(_ user: UserID, password: String, nowMs: Int64) async throws {
        let verified = try await self.verifyOwnPassword(of: user, password)
        guard let name = try await self.reading(doing: "read a user", { try await $0.name(of: user) }) else {
            throw CourierStoreError(.tokenRevoked, CourierStoreError.accountRemovedMessage)
        }
        do {
            try await self.removeUser(named: name, nowMs: nowMs) { transaction in
                try await Self.checkUnchanged(verified, of: user, transaction)
            }
        } catch let error as CourierStoreError where error.code == .unknownUser {
            // Removed meanwhile.
            throw CourierStoreError(.tokenRevoked, CourierStoreError.accountRemovedMessage)
        }
    }

    // MARK: The rules' parts

    /// Refuses a password a user chose that is too short or too long.
    ///
    /// - Throws: `weak-password`.
    func checkChosen(password: String) throws {
        let limits = self.limits
        // The length in bytes first, without copying: a hostile one may be a megabyte long.
        guard password.utf8.count <= limits.maxPasswordBytes else {
            throw CourierStoreError(.weakPassword, "a password has at most \(limits.maxPasswordBytes) bytes")
        }
        guard password.count >= limits.minPasswordCharacters else {
            throw CourierStoreError(.weakPassword, "a password has at least \(limits.minPasswordCharacters) characters")
        }
    }

    /// Checks a user's present password, at the hash's full price.
    ///
    /// - Returns: The hash it was checked against.
    /// - Throws: `wrong-password`, `throttled`.
    private func verifyOwnPassword(of user: UserID, _ password: String) async throws -> String {
        let stored = try await self.reading(doing: "read a password") { transaction in
            try await transaction.passwordHash(of: user)
        }
        guard try await self.passwords.verify(password, against: stored), let stored else {
            throw CourierStoreError(.wrongPassword, "that is not your present password")
        }
        return stored
    }

    /// Refuses a write decided on a password that has changed since it was checked (the user's row locked).
    ///
    /// - Throws: `wrong-password`.
    static func checkUnchanged(_ verified: String, of user: UserID, _ transaction: Transaction) async throws {
        guard try await transaction.passwordHash(of: user) == verified else {
            throw CourierStoreError(.wrongPassword, "the password was changed meanwhile")
        }
    }

    /// Refuses an invitation that cannot make an account now.
    ///
    /// - Throws: `invite-invalid`, `invite-expired`, `invite-used-up`.
    static func check(_ invite: Invite?, nowMs: Int64) throws {
        guard let invite, invite.revokedMs == nil else {
            throw CourierStoreError(.inviteInvalid, "no such invitation (or it was revoked)")
        }
        if let expiresMs = invite.expiresMs, expiresMs <= nowMs {
            throw CourierStoreError(.inviteExpired, "the invitation expired")
        }
        guard invite.uses < invite.maxUses else {
            throw CourierStoreError(.inviteUsedUp, "the invitation was used as many times as it allows")
        }
    }

    /// Adds a device of a user with a fresh token, starting at the user's present cursor.
    static func addDevice(
        of user: User,
        named name: String,
        tokenHash: [UInt8],
        expiresMs: Int64,
        nowMs: Int64,
        _ transaction: Transaction
    ) async throws -> Device {
        let cursor = try await transaction.logCursor(of: user.id)
        let id = try await transaction.insertDevice(
            NewDevice(
                user: user.id,
                name: name,
                tokenHash: tokenHash,
                createdMs: nowMs,
                expiresMs: expiresMs,
                ackedCursor: cursor
            )
        )
        return Device(
            id: id,
            userID: user.id,
            userName: user.name,
            name: name,
            createdMs: nowMs,
            expiresMs: expiresMs,
            revokedMs: nil,
            lastSeenMs: nil,
            ackedCursor: UInt64(cursor)
        )
    }
}
