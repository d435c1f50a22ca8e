// The rules of accounts, for every database.

extension StoreBackend {
    /// Creates a user.
    ///
    /// - Parameters:
    ///   - name: The user's name (see ``Names``): never one another user has or had, in any case.
    ///   - password: The password; only its slow hash is stored.
    ///   - nowMs: The creation time, in milliseconds since 1970.
    /// - Throws: `invalid-name`, `name-taken`, `storage-failed`.
    public func addUser(name: String, password: String, nowMs: Int64) async throws -> User {
        try Names.validateNew(userName: name)
        let hash = try await self.passwords.hash(password)
        return try await self.transaction(doing: "add user \(name)") { transaction in
            let id = try await Self.insertUser(name: name, passwordHash: hash, nowMs: nowMs, transaction)
            return User(id: id, name: name, createdMs: nowMs, removedMs: nil)
        }
    }

    /// Adds a user whose name no user has or had, in any case, and whose name does not read as one
    /// (``NameSkeleton``).
    ///
    /// - Throws: `name-taken`.
    static func insertUser(
        name: String,
        passwordHash: String,
        nowMs: Int64,
        _ transaction: Transaction
    ) async throws -> UserID {
        guard let id = try await transaction.insertUser(name: name, passwordHash: passwordHash, nowMs: nowMs) else {
            throw CourierStoreError(.nameTaken, "a user named \(name) exists or existed")
        }
        guard try await transaction.claimSkeleton(NameSkeleton.of(name), for: id) else {
            throw CourierStoreError(.nameTaken, "\(name) reads as the name of another user: choose another")
        }
        return id
    }

    /// Every user, removed ones included, by name.
    public func users() async throws -> [User] {
        try await self.reading(doing: "list users") { transaction in try await transaction.users() }
    }

    /// A user by name (without regard to case), removed or not; nil when there is none.
    public func user(named name: String) async throws -> User? {
        try await self.reading(doing: "read user \(name)") { transaction in
            try await Self.user(named: name, transaction)
        }
    }

    /// A user by name. A string that breaks the naming rule names nobody, and never reaches the database (SQLite
    /// would read a string with a NUL only up to the NUL, PostgreSQL refuses it outright).
    static func user(named name: String, _ transaction: Transaction) async throws -> User? {
        guard Names.isValid(name) else { return nil }
        return try await transaction.user(named: name)
    }

    /// A user by name that was not removed.
    ///
    /// - Throws: `unknown-user`.
    static func activeUser(named name: String, _ transaction: Transaction) async throws -> User {
        guard let user = try await self.user(named: name, transaction), user.removedMs == nil else {
            throw CourierStoreError(.unknownUser, "no user named \(name)")
        }
        return user
    }

    /// Sets a user's password and revokes all its devices: every session must log in again.
    ///
    /// - Throws: `unknown-user`, `storage-failed`.
    public func setPassword(user name: String, password: String, nowMs: Int64) async throws {
        let hash = try await self.passwords.hash(password)
        try await self.transaction(doing: "set the password of \(name)") { transaction in
            let user = try await Self.activeUser(named: name, transaction)
            try await transaction.setPasswordHash(hash, of: user.id)
            let revoked = try await transaction.revokeDevices(nil, of: user.id, nowMs: nowMs)
            try await transaction.recordChanges(revoked.map(StoreChange.deviceRevoked), nowMs: nowMs)
        }
    }

    /// A user's devices, revoked ones included, oldest first.
    ///
    /// - Throws: `unknown-user`, `storage-failed`.
    public func devices(of name: String) async throws -> [Device] {
        try await self.reading(doing: "list the devices of \(name)") { transaction in
            guard let user = try await Self.user(named: name, transaction) else {
                throw CourierStoreError(.unknownUser, "no user named \(name)")
            }
            return try await transaction.devices(of: user.id)
        }
    }

    /// Revokes one device's token; a server holding a connection of that device closes it within a second.
    ///
    /// - Throws: `unknown-user`, `invalid-request` (no such active device of that user), `storage-failed`.
    public func revokeDevice(_ device: DeviceID, of name: String, nowMs: Int64) async throws {
        try await self.transaction(doing: "revoke a device of \(name)") { transaction in
            let user = try await Self.activeUser(named: name, transaction)
            guard try await transaction.revokeDevices([device], of: user.id, nowMs: nowMs) == [device] else {
                throw CourierStoreError(.invalidRequest, "\(name) has no active device \(device.rawValue)")
            }
            try await transaction.recordChanges([.deviceRevoked(device)], nowMs: nowMs)
        }
    }

    // MARK: Changes for a running server

    /// The id of the newest recorded change: a server starts watching after it.
    public func latestChangeID() async throws -> Int64 {
        try await self.reading(doing: "read the newest change") { transaction in
            try await transaction.latestChangeID()
        }
    }

    /// Changes recorded after an id, oldest first (at most 10,000), with the id to ask after next time.
    public func changes(after id: Int64) async throws -> (changes: [StoreChange], latest: Int64) {
        try await self.reading(doing: "read changes") { transaction in
            let rows = try await transaction.changes(after: id, limit: 10_000)
            return (rows.compactMap(\.change), rows.last?.id ?? id)
        }
    }

    /// Deletes recorded changes older than a time: a server that started later reads current state instead.
    public func pruneChanges(olderThanMs: Int64) async throws {
        try await self.transaction(doing: "prune changes") { transaction in
            try await transaction.pruneChanges(olderThanMs: olderThanMs)
        }
    }
}
