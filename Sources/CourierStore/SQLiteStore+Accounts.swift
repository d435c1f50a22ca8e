internal import GRDB

extension SQLiteStore {
    /// Creates a user.
    ///
    /// - Parameters:
    ///   - name: The user's name (see ``Names``).
    ///   - password: The password; only its slow hash is stored.
    ///   - nowMs: The creation time, in milliseconds since 1970.
    /// - Throws: `invalid-name`, `name-taken`, `storage-failed`.
    public func addUser(name: String, password: String, nowMs: Int64) async throws -> User {
        try Names.validate(name, what: "user name")
        let hash = try await self.passwords.hash(password)
        return try await self.write { db in
            if try Int64.fetchOne(db, sql: "SELECT id FROM users WHERE name = ?", arguments: [name]) != nil {
                throw CourierStoreError(.nameTaken, "a user named \(name) exists or existed")
            }
            try db.execute(
                sql: "INSERT INTO users (name, password_hash, created_ms) VALUES (?, ?, ?)",
                arguments: [name, hash, nowMs]
            )
            return User(id: UserID(rawValue: db.lastInsertedRowID), name: name, createdMs: nowMs, removedMs: nil)
        }
    }

    /// Every user, removed ones included, by name.
    public func users() async throws -> [User] {
        try await self.read { db in
            try Row.fetchAll(db, sql: "SELECT id, name, created_ms, removed_ms FROM users ORDER BY name").map(Self.user)
        }
    }

    /// A user by name (case-insensitive), or nil.
    public func user(named name: String) async throws -> User? {
        try await self.read { db in try Self.user(named: name, db) }
    }

    static func user(named name: String, _ db: Database) throws -> User? {
        // A string that breaks the naming rule names nobody: checked before SQLite sees it, which would read a
        // string with a NUL only up to the NUL ("alice\0x" would find alice).
        guard Names.isValid(name) else { return nil }
        return try Row.fetchOne(
            db,
            sql: "SELECT id, name, created_ms, removed_ms FROM users WHERE name = ?",
            arguments: [name]
        )
        .map(Self.user)
    }

    static func user(_ row: Row) -> User {
        User(
            id: UserID(rawValue: row["id"]),
            name: row["name"],
            createdMs: row["created_ms"],
            removedMs: row["removed_ms"]
        )
    }

    /// Sets a user's password and revokes all its devices: every session must log in again.
    ///
    /// - Throws: `unknown-user`, `storage-failed`.
    public func setPassword(user name: String, password: String, nowMs: Int64) async throws {
        let hash = try await self.passwords.hash(password)
        try await self.write { db in
            let user = try Self.activeUser(named: name, db)
            try db.execute(sql: "UPDATE users SET password_hash = ? WHERE id = ?", arguments: [hash, user.id.rawValue])
            try Self.revokeAll(of: user.id, nowMs: nowMs, db)
        }
    }

    /// Removes a user: its devices are revoked, it leaves every group, and it can no longer log in. Its messages
    /// stay in history under its name, which is never given out again.
    ///
    /// - Throws: `unknown-user`, `storage-failed`.
    public func removeUser(named name: String, nowMs: Int64) async throws {
        try await self.write { db in
            let user = try Self.activeUser(named: name, db)
            try Self.revokeAll(of: user.id, nowMs: nowMs, db)
            let groups = try Int64.fetchAll(
                db,
                sql: """
                    SELECT m.conversation_id FROM members m JOIN conversations c ON c.id = m.conversation_id
                    WHERE m.user_id = ? AND c.kind = 2
                    """,
                arguments: [user.id.rawValue]
            )
            var log = EventLogWriter()
            for group in groups {
                try Self.removeMember(user.id, from: group, log: &log, db)
            }
            try log.finish(db)
            try db.execute(
                sql: "UPDATE users SET removed_ms = ?, password_hash = NULL WHERE id = ?",
                arguments: [nowMs, user.id.rawValue]
            )
            try Self.recordChange(.userRemoved(user.id), nowMs: nowMs, db)
            for user in log.appended.keys { try Self.recordChange(.logAppended(user), nowMs: nowMs, db) }
        }
    }

    static func activeUser(named name: String, _ db: Database) throws -> User {
        guard let user = try user(named: name, db), user.removedMs == nil else {
            throw CourierStoreError(.unknownUser, "no user named \(name)")
        }
        return user
    }

    private static func revokeAll(of user: UserID, nowMs: Int64, _ db: Database) throws {
        let devices = try Int64.fetchAll(
            db,
            sql: "SELECT id FROM devices WHERE user_id = ? AND revoked_ms IS NULL",
            arguments: [user.rawValue]
        )
        for device in devices {
            try db.execute(sql: "UPDATE devices SET revoked_ms = ? WHERE id = ?", arguments: [nowMs, device])
            try recordChange(.deviceRevoked(DeviceID(rawValue: device)), nowMs: nowMs, db)
        }
    }

    // MARK: Devices and sessions

    /// Checks a user's password and makes a new device with a fresh token; or, given the token a client held
    /// (`renewing`, expired or not), gives that device of the user's the fresh token instead, unless it was revoked.
    ///
    /// The password check costs the hash's full price whether or not the user exists (and whether or not the name
    /// is a valid one), so timing does not tell which names exist. It runs on the store's password threads
    /// (``Configuration/passwordThreads``), never on the caller's.
    ///
    /// - Throws: `auth-failed` (unknown user, removed user or wrong password: one code for all), `invalid-request`
    ///   (a device name with control characters), `throttled` (too many password checks waiting), `storage-failed`.
    public func login(
        user name: String,
        password: String,
        deviceName: String,
        renewing previous: String?,
        nowMs: Int64
    ) async throws -> DeviceSession {
        try StoreText.check(deviceName, what: "device name", maxBytes: self.limits.maxDeviceNameBytes)
        let candidate = try await self.read { db -> (User, String)? in
            guard let user = try Self.user(named: name, db), user.removedMs == nil,
                let hash = try String.fetchOne(
                    db,
                    sql: "SELECT password_hash FROM users WHERE id = ?",
                    arguments: [user.id.rawValue]
                )
            else { return nil }
            return (user, hash)
        }
        let verified = try await self.passwords.verify(password, against: candidate?.1)
        guard verified, let (user, _) = candidate else {
            throw CourierStoreError(.authFailed, "wrong user name or password")
        }
        let token = SessionToken.make()
        let expiresMs = nowMs + self.limits.tokenLifetime.wholeMilliseconds
        let device = try await self.write { db -> (Device, Bool) in
            // The user may have been removed between the read and this write.
            let current = try Self.activeUser(named: user.name, db)
            // The device the client held a token of, if it is this user's and not revoked (expired is fine): it gets
            // the new token (the old one stops working), and stays the same device.
            if let previous,
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT d.*, u.name AS user_name FROM devices d JOIN users u ON u.id = d.user_id
                        WHERE (d.token_hash = ? OR (d.previous_token_hash = ? AND d.previous_token_until_ms > ?))
                        AND d.user_id = ? AND d.revoked_ms IS NULL
                        """,
                    arguments: [
                        SessionToken.hash(previous), SessionToken.hash(previous), nowMs, current.id.rawValue,
                    ]
                )
            {
                var device = Self.device(row)
                // The token it held stays good for a while (see the previous_token_hash column), until its own
                // expiry at the latest. A renewal offering the previous token (the client never got the last new
                // one) keeps that previous token as it was.
                let graceMs = self.limits.renewalGrace.wholeMilliseconds
                try db.execute(
                    sql: """
                        UPDATE devices SET
                        previous_token_until_ms = CASE WHEN token_hash = ? THEN ? ELSE previous_token_until_ms END,
                        previous_expires_ms = CASE WHEN token_hash = ? THEN expires_ms ELSE previous_expires_ms END,
                        previous_token_hash = CASE WHEN token_hash = ? THEN token_hash ELSE previous_token_hash END,
                        token_hash = ?, expires_ms = ? WHERE id = ?
                        """,
                    arguments: [
                        SessionToken.hash(previous), nowMs + graceMs, SessionToken.hash(previous),
                        SessionToken.hash(previous), SessionToken.hash(token), expiresMs, device.id.rawValue,
                    ]
                )
                device.expiresMs = expiresMs
                return (device, true)
            }
            // A new device starts at the present: it receives what happens from now on, and reads older
            // messages through history, rather than replaying the user's whole log.
            let cursor =
                try Int64.fetchOne(
                    db,
                    sql: "SELECT log_cursor FROM users WHERE id = ?",
                    arguments: [current.id.rawValue]
                )
                ?? 0
            try db.execute(
                sql: """
                    INSERT INTO devices (user_id, name, token_hash, created_ms, expires_ms, acked_cursor)
                    VALUES (?, ?, ?, ?, ?, ?)
                    """,
                arguments: [current.id.rawValue, deviceName, SessionToken.hash(token), nowMs, expiresMs, cursor]
            )
            let device = Device(
                id: DeviceID(rawValue: db.lastInsertedRowID),
                userID: current.id,
                userName: current.name,
                name: deviceName,
                createdMs: nowMs,
                expiresMs: expiresMs,
                revokedMs: nil,
                lastSeenMs: nil,
                ackedCursor: UInt64(cursor)
            )
            return (device, false)
        }
        return DeviceSession(user: user, device: device.0, token: token, renewed: device.1)
    }

    /// Finds the device a token belongs to.
    ///
    /// - Throws: `auth-failed` (unknown token), `token-expired`, `token-revoked` (also when its user was removed),
    ///   `storage-failed`.
    public func authenticate(token: String, nowMs: Int64) async throws -> DeviceSession {
        let hash = SessionToken.hash(token)
        let (session, replacesPrevious) = try await self.read { db -> (DeviceSession, Bool) in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT d.*, u.name AS user_name, u.created_ms AS user_created_ms, u.removed_ms AS user_removed_ms,
                        d.token_hash = ? AS current
                        FROM devices d JOIN users u ON u.id = d.user_id
                        WHERE d.token_hash = ? OR (d.previous_token_hash = ? AND d.previous_token_until_ms > ?)
                        """,
                    arguments: [hash, hash, hash, nowMs]
                )
            else { throw CourierStoreError(.authFailed, "unknown token") }
            let current: Bool = row["current"]
            var device = Self.device(row)
            if !current {
                // The previous token of a renewed device: its own expiry applies.
                device.expiresMs = row["previous_expires_ms"]
            }
            if row["user_removed_ms"] as Int64? != nil {
                throw CourierStoreError(.tokenRevoked, CourierStoreError.accountRemovedMessage)
            }
            if device.revokedMs != nil {
                throw CourierStoreError(.tokenRevoked, "the token was revoked")
            }
            if device.expiresMs <= nowMs {
                throw CourierStoreError(.tokenExpired, "the token expired")
            }
            let user = User(
                id: device.userID,
                name: row["user_name"],
                createdMs: row["user_created_ms"],
                removedMs: nil
            )
            let pending = !((row["previous_token_hash"] as DatabaseValue?)?.isNull ?? true)
            return (DeviceSession(user: user, device: device, token: nil), current && pending)
        }
        // The renewed token in use: the one it replaced stops working now.
        if replacesPrevious {
            try await self.write { db in
                try db.execute(
                    sql: """
                        UPDATE devices SET previous_token_hash = NULL, previous_token_until_ms = NULL,
                        previous_expires_ms = NULL WHERE id = ? AND token_hash = ?
                        """,
                    arguments: [session.device.id.rawValue, hash]
                )
            }
        }
        return session
    }

    /// A renewal whose new token never reached its client (the login was refused after it, for a full server or a
    /// shutdown): the device's previous token is its token again.
    public func abandonRenewal(of device: DeviceID) async throws {
        try await self.write { db in
            try db.execute(
                sql: """
                    UPDATE devices SET token_hash = previous_token_hash, expires_ms = previous_expires_ms,
                    previous_token_hash = NULL, previous_token_until_ms = NULL, previous_expires_ms = NULL
                    WHERE id = ? AND previous_token_hash IS NOT NULL
                    """,
                arguments: [device.rawValue]
            )
        }
    }

    static func device(_ row: Row) -> Device {
        var device = Device(
            id: DeviceID(rawValue: row["id"]),
            userID: UserID(rawValue: row["user_id"]),
            userName: row["user_name"],
            name: row["name"],
            createdMs: row["created_ms"],
            expiresMs: row["expires_ms"],
            revokedMs: row["revoked_ms"],
            lastSeenMs: row["last_seen_ms"],
            ackedCursor: UInt64(row["acked_cursor"] as Int64)
        )
        device.connectedSinceMs = row["connected_since_ms"]
        return device
    }

    /// A user's devices, revoked ones included, oldest first.
    public func devices(of name: String) async throws -> [Device] {
        try await self.read { db in
            guard let user = try Self.user(named: name, db) else {
                throw CourierStoreError(.unknownUser, "no user named \(name)")
            }
            return try Row.fetchAll(
                db,
                sql:
                    "SELECT d.*, u.name AS user_name FROM devices d JOIN users u ON u.id = d.user_id WHERE d.user_id = ? ORDER BY d.id",
                arguments: [user.id.rawValue]
            ).map(Self.device)
        }
    }

    /// Revokes one device's token; a server holding a connection of that device closes it within a second.
    ///
    /// - Throws: `unknown-user` (no such device of that user), `storage-failed`.
    public func revokeDevice(_ device: DeviceID, of name: String, nowMs: Int64) async throws {
        try await self.write { db in
            let user = try Self.activeUser(named: name, db)
            try db.execute(
                sql: "UPDATE devices SET revoked_ms = ? WHERE id = ? AND user_id = ? AND revoked_ms IS NULL",
                arguments: [nowMs, device.rawValue, user.id.rawValue]
            )
            guard db.changesCount == 1 else {
                throw CourierStoreError(.invalidRequest, "\(name) has no active device \(device.rawValue)")
            }
            try Self.recordChange(.deviceRevoked(device), nowMs: nowMs, db)
        }
    }

    /// Devices whose first connection came (`connected`), or whose last one ended, in one transaction: `user
    /// devices` shows each connected since then, or when it was last seen.
    public func recordDeviceActivity(_ changes: [DeviceActivityChange]) async throws {
        try await self.write { db in
            for change in changes {
                if change.connected {
                    try db.execute(
                        sql: "UPDATE devices SET connected_since_ms = ? WHERE id = ?",
                        arguments: [change.ms, change.device.rawValue]
                    )
                } else {
                    try db.execute(
                        sql: "UPDATE devices SET connected_since_ms = NULL, last_seen_ms = ? WHERE id = ?",
                        arguments: [change.ms, change.device.rawValue]
                    )
                }
            }
        }
    }

    /// No device is connected (a server starting): what a server that stopped without saying so left, goes.
    public func clearConnectedDevices() async throws {
        try await self.write { db in
            try db.execute(
                sql: """
                    UPDATE devices SET last_seen_ms = MAX(COALESCE(last_seen_ms, 0), connected_since_ms),
                    connected_since_ms = NULL WHERE connected_since_ms IS NOT NULL
                    """
            )
        }
    }

    // MARK: Changes for a running server

    static func recordChange(_ change: StoreChange, nowMs: Int64, _ db: Database) throws {
        let (kind, user, device): (Int64, Int64?, Int64?) =
            switch change {
            case .logAppended(let user): (1, user.rawValue, nil)
            case .deviceRevoked(let device): (2, nil, device.rawValue)
            case .userRemoved(let user): (3, user.rawValue, nil)
            }
        try db.execute(
            sql: "INSERT INTO changes (kind, user_id, device_id, time_ms) VALUES (?, ?, ?, ?)",
            arguments: [kind, user, device, nowMs]
        )
    }

    /// The id of the newest recorded change: a server starts watching after it.
    public func latestChangeID() async throws -> Int64 {
        try await self.read { db in try Int64.fetchOne(db, sql: "SELECT MAX(id) FROM changes") ?? 0 }
    }

    /// Changes recorded after an id, oldest first, with the id to ask after next time.
    public func changes(after id: Int64) async throws -> (changes: [StoreChange], latest: Int64) {
        try await self.read { db in
            let rows = try Row.fetchAll(
                db,
                sql: "SELECT id, kind, user_id, device_id FROM changes WHERE id > ? ORDER BY id LIMIT 10000",
                arguments: [id]
            )
            var latest = id
            var changes: [StoreChange] = []
            for row in rows {
                latest = row["id"]
                switch row["kind"] as Int64 {
                case 1: changes.append(.logAppended(UserID(rawValue: row["user_id"])))
                case 2: changes.append(.deviceRevoked(DeviceID(rawValue: row["device_id"])))
                case 3: changes.append(.userRemoved(UserID(rawValue: row["user_id"])))
                default: continue
                }
            }
            return (changes, latest)
        }
    }

    /// Deletes recorded changes older than a time: a server that started later reads current state instead.
    public func pruneChanges(olderThanMs: Int64) async throws {
        try await self.write { db in
            try db.execute(sql: "DELETE FROM changes WHERE time_ms < ?", arguments: [olderThanMs])
        }
    }
}
