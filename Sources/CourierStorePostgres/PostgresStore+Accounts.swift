public import CourierStore
internal import PostgresNIO

// The rules of each method are ``SQLiteStore``'s; what is said here is how they hold with several writers.
extension PostgresStore {
    public func addUser(name: String, password: String, nowMs: Int64) async throws -> User {
        try Names.validate(name, what: "user name")
        let hash = try await self.passwords.hash(password)
        let logger = self.logger
        return try await self.write(doing: "add user \(name)") { connection in
            // Two nodes adding the name at once: the unique index on lower(name) lets one in.
            guard
                let id = try await connection.value(
                    """
                    INSERT INTO users (name, password_hash, created_ms) VALUES (\(name), \(hash), \(nowMs))
                    ON CONFLICT DO NOTHING RETURNING id
                    """,
                    as: Int64.self,
                    logger: logger
                )
            else { throw CourierStoreError(.nameTaken, "a user named \(name) exists or existed") }
            return User(id: UserID(rawValue: id), name: name, createdMs: nowMs, removedMs: nil)
        }
    }

    public func users() async throws -> [User] {
        let logger = self.logger
        return try await self.read(doing: "list users") { connection in
            try await connection.rows(
                "SELECT id, name, created_ms, removed_ms FROM users ORDER BY lower(name) COLLATE \"C\"",
                logger: logger
            ).map(Self.user)
        }
    }

    public func user(named name: String) async throws -> User? {
        let logger = self.logger
        return try await self.read(doing: "read user \(name)") { connection in
            try await Self.user(named: name, connection, logger: logger)
        }
    }

    static func user(named name: String, _ connection: PostgresConnection, logger: Logger) async throws -> User? {
        // A string that breaks the naming rule names nobody (PostgreSQL refuses a NUL in text outright).
        guard Names.isValid(name) else { return nil }
        return try await connection.row(
            "SELECT id, name, created_ms, removed_ms FROM users WHERE lower(name) = lower(\(name))",
            logger: logger
        ).map(Self.user)
    }

    static func user(_ row: PostgresRandomAccessRow) throws -> User {
        User(
            id: UserID(rawValue: try row.get("id")),
            name: try row.get("name"),
            createdMs: try row.get("created_ms"),
            removedMs: try row.get("removed_ms")
        )
    }

    static func activeUser(named name: String, _ connection: PostgresConnection, logger: Logger) async throws -> User {
        guard let user = try await self.user(named: name, connection, logger: logger), user.removedMs == nil else {
            throw CourierStoreError(.unknownUser, "no user named \(name)")
        }
        return user
    }

    public func setPassword(user name: String, password: String, nowMs: Int64) async throws {
        let hash = try await self.passwords.hash(password)
        let logger = self.logger
        try await self.write(doing: "set the password of \(name)") { connection in
            let user = try await Self.activeUser(named: name, connection, logger: logger)
            try await connection.run(
                "UPDATE users SET password_hash = \(hash) WHERE id = \(user.id.rawValue)",
                logger: logger
            )
            let revoked = try await Self.revokeAll(of: user.id, nowMs: nowMs, connection, logger: logger)
            try await Self.recordChanges(
                revoked.map(StoreChange.deviceRevoked),
                nowMs: nowMs,
                connection,
                logger: logger
            )
        }
    }

    public func removeUser(named name: String, nowMs: Int64) async throws {
        let logger = self.logger
        try await self.write(doing: "remove user \(name)") { connection in
            let user = try await Self.activeUser(named: name, connection, logger: logger)
            // Its groups first, then their members, then its devices: the order every write locks in.
            let groups = try await connection.values(
                """
                SELECT c.id FROM conversations c JOIN members m ON m.conversation_id = c.id
                WHERE m.user_id = \(user.id.rawValue) AND c.kind = 2 ORDER BY c.id FOR UPDATE OF c
                """,
                as: Int64.self,
                logger: logger
            )
            var log = PostgresEventLog(logger: logger)
            // The user's own row with its groups' members: it is written below.
            try await log.lockMembers(of: groups, and: [user.id], connection)
            for group in groups {
                try await Self.removeMember(user.id, from: group, log: &log, connection)
            }
            // A group that took the user in a transaction that committed after the list above was read: with the
            // user's row locked now, no other can (adding a member locks its row and finds it removed).
            var handled = Set(groups)
            while true {
                let more = try await connection.values(
                    """
                    SELECT c.id FROM conversations c JOIN members m ON m.conversation_id = c.id
                    WHERE m.user_id = \(user.id.rawValue) AND c.kind = 2 ORDER BY c.id
                    """,
                    as: Int64.self,
                    logger: logger
                ).filter { !handled.contains($0) }
                guard !more.isEmpty else { break }
                try await connection.run(
                    "SELECT id FROM conversations WHERE id = ANY(\(more)) ORDER BY id FOR UPDATE",
                    logger: logger
                )
                try await log.lockMembers(of: more, connection)
                for group in more {
                    try await Self.removeMember(user.id, from: group, log: &log, connection)
                }
                handled.formUnion(more)
            }
            try await log.finish(connection)
            let revoked = try await Self.revokeAll(of: user.id, nowMs: nowMs, connection, logger: logger)
            try await connection.run(
                "UPDATE users SET removed_ms = \(nowMs), password_hash = NULL WHERE id = \(user.id.rawValue)",
                logger: logger
            )
            try await Self.recordChanges(
                revoked.map(StoreChange.deviceRevoked) + [.userRemoved(user.id)]
                    + log.book.appended.keys.sorted().map(StoreChange.logAppended),
                nowMs: nowMs,
                connection,
                logger: logger
            )
        }
    }

    /// Refuses users removed meanwhile: called with their rows locked (a removal holds the row until it commits,
    /// so what this reads is current).
    ///
    /// - Throws: `unknown-user`.
    static func checkNotRemoved(_ users: [UserID], _ connection: PostgresConnection, logger: Logger) async throws {
        guard !users.isEmpty else { return }
        if let removed = try await connection.value(
            "SELECT name FROM users WHERE id = ANY(\(users.map(\.rawValue))) AND removed_ms IS NOT NULL LIMIT 1",
            as: String.self,
            logger: logger
        ) {
            throw CourierStoreError(.unknownUser, "no user named \(removed)")
        }
    }

    /// Revokes every device of a user still active.
    ///
    /// - Returns: The devices revoked.
    private static func revokeAll(
        of user: UserID,
        nowMs: Int64,
        _ connection: PostgresConnection,
        logger: Logger
    ) async throws -> [DeviceID] {
        try await connection.values(
            """
            UPDATE devices SET revoked_ms = \(nowMs) WHERE id IN (
                SELECT id FROM devices WHERE user_id = \(user.rawValue) AND revoked_ms IS NULL ORDER BY id FOR UPDATE
            ) RETURNING id
            """,
            as: Int64.self,
            logger: logger
        ).sorted().map(DeviceID.init(rawValue:))
    }

    // MARK: Devices and sessions

    public func login(
        user name: String,
        password: String,
        deviceName: String,
        renewing previous: String?,
        nowMs: Int64
    ) async throws -> DeviceSession {
        try StoreText.check(deviceName, what: "device name", maxBytes: self.limits.maxDeviceNameBytes)
        let logger = self.logger
        let candidate = try await self.read(doing: "log \(name) in") { connection -> (User, String)? in
            guard let user = try await Self.user(named: name, connection, logger: logger), user.removedMs == nil,
                let hash = try await connection.value(
                    "SELECT password_hash FROM users WHERE id = \(user.id.rawValue)",
                    as: String.self,
                    logger: logger
                )
            else { return nil }
            return (user, hash)
        }
        let verified = try await self.passwords.verify(password, against: candidate?.1)
        guard verified, let (user, _) = candidate else {
            throw CourierStoreError(.authFailed, "wrong user name or password")
        }
        let token = SessionToken.make()
        let tokenHash = ByteBuffer(bytes: SessionToken.digest(token))
        let previousHash = previous.map { ByteBuffer(bytes: SessionToken.digest($0)) }
        let expiresMs = nowMs + self.limits.tokenLifetime.wholeMilliseconds
        let graceMs = self.limits.renewalGrace.wholeMilliseconds
        let device = try await self.write(doing: "log \(name) in") { connection -> (Device, Bool) in
            // The user may have been removed between the read and this write.
            let current = try await Self.activeUser(named: user.name, connection, logger: logger)
            if let previousHash,
                let row = try await connection.row(
                    """
                    SELECT d.*, u.name AS user_name FROM devices d JOIN users u ON u.id = d.user_id
                    WHERE (d.token_hash = \(previousHash)
                        OR (d.previous_token_hash = \(previousHash) AND d.previous_token_until_ms > \(nowMs)))
                    AND d.user_id = \(current.id.rawValue) AND d.revoked_ms IS NULL
                    FOR UPDATE OF d
                    """,
                    logger: logger
                )
            {
                var device = try Self.device(row)
                try await connection.run(
                    """
                    UPDATE devices SET
                    previous_token_until_ms = CASE WHEN token_hash = \(previousHash) THEN \(nowMs + graceMs)
                        ELSE previous_token_until_ms END,
                    previous_expires_ms = CASE WHEN token_hash = \(previousHash) THEN expires_ms
                        ELSE previous_expires_ms END,
                    previous_token_hash = CASE WHEN token_hash = \(previousHash) THEN token_hash
                        ELSE previous_token_hash END,
                    token_hash = \(tokenHash), expires_ms = \(expiresMs) WHERE id = \(device.id.rawValue)
                    """,
                    logger: logger
                )
                device.expiresMs = expiresMs
                return (device, true)
            }
            let row = try await connection.row(
                """
                INSERT INTO devices (user_id, name, token_hash, created_ms, expires_ms, acked_cursor)
                SELECT id, \(deviceName), \(tokenHash), \(nowMs), \(expiresMs), log_cursor FROM users
                WHERE id = \(current.id.rawValue)
                RETURNING id, acked_cursor
                """,
                logger: logger
            )
            guard let row else { throw CourierStoreError(.unknownUser, "no user named \(name)") }
            let device = Device(
                id: DeviceID(rawValue: try row.get("id")),
                userID: current.id,
                userName: current.name,
                name: deviceName,
                createdMs: nowMs,
                expiresMs: expiresMs,
                revokedMs: nil,
                lastSeenMs: nil,
                ackedCursor: UInt64(try row.get("acked_cursor", as: Int64.self))
            )
            return (device, false)
        }
        return DeviceSession(user: user, device: device.0, token: token, renewed: device.1)
    }

    public func authenticate(token: String, nowMs: Int64) async throws -> DeviceSession {
        let hash = ByteBuffer(bytes: SessionToken.digest(token))
        let logger = self.logger
        let (session, replacesPrevious) = try await self.read(doing: "check a token") {
            connection -> (DeviceSession, Bool) in
            guard
                let row = try await connection.row(
                    """
                    SELECT d.*, u.name AS user_name, u.created_ms AS user_created_ms,
                    u.removed_ms AS user_removed_ms, d.token_hash = \(hash) AS current
                    FROM devices d JOIN users u ON u.id = d.user_id
                    WHERE d.token_hash = \(hash)
                        OR (d.previous_token_hash = \(hash) AND d.previous_token_until_ms > \(nowMs))
                    """,
                    logger: logger
                )
            else { throw CourierStoreError(.authFailed, "unknown token") }
            let current: Bool = try row.get("current")
            var device = try Self.device(row)
            if !current {
                device.expiresMs = try row.get("previous_expires_ms")
            }
            if try row.get("user_removed_ms", as: Int64?.self) != nil {
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
                name: try row.get("user_name"),
                createdMs: try row.get("user_created_ms"),
                removedMs: nil
            )
            let pending = try row.get("previous_token_hash", as: ByteBuffer?.self) != nil
            return (DeviceSession(user: user, device: device, token: nil), current && pending)
        }
        if replacesPrevious {
            try await self.write(doing: "retire a renewed token") { connection in
                try await connection.run(
                    """
                    UPDATE devices SET previous_token_hash = NULL, previous_token_until_ms = NULL,
                    previous_expires_ms = NULL WHERE id = \(session.device.id.rawValue) AND token_hash = \(hash)
                    """,
                    logger: logger
                )
            }
        }
        return session
    }

    public func abandonRenewal(of device: DeviceID) async throws {
        let logger = self.logger
        try await self.write(doing: "abandon a renewal") { connection in
            try await connection.run(
                """
                UPDATE devices SET token_hash = previous_token_hash, expires_ms = previous_expires_ms,
                previous_token_hash = NULL, previous_token_until_ms = NULL, previous_expires_ms = NULL
                WHERE id = \(device.rawValue) AND previous_token_hash IS NOT NULL
                """,
                logger: logger
            )
        }
    }

    static func device(_ row: PostgresRandomAccessRow) throws -> Device {
        var device = Device(
            id: DeviceID(rawValue: try row.get("id")),
            userID: UserID(rawValue: try row.get("user_id")),
            userName: try row.get("user_name"),
            name: try row.get("name"),
            createdMs: try row.get("created_ms"),
            expiresMs: try row.get("expires_ms"),
            revokedMs: try row.get("revoked_ms"),
            lastSeenMs: try row.get("last_seen_ms"),
            ackedCursor: UInt64(try row.get("acked_cursor", as: Int64.self))
        )
        device.connectedSinceMs = try row.get("connected_since_ms")
        return device
    }

    public func devices(of name: String) async throws -> [Device] {
        let logger = self.logger
        return try await self.read(doing: "list the devices of \(name)") { connection in
            guard let user = try await Self.user(named: name, connection, logger: logger) else {
                throw CourierStoreError(.unknownUser, "no user named \(name)")
            }
            return try await connection.rows(
                """
                SELECT d.*, u.name AS user_name FROM devices d JOIN users u ON u.id = d.user_id
                WHERE d.user_id = \(user.id.rawValue) ORDER BY d.id
                """,
                logger: logger
            ).map(Self.device)
        }
    }

    public func revokeDevice(_ device: DeviceID, of name: String, nowMs: Int64) async throws {
        let logger = self.logger
        try await self.write(doing: "revoke a device of \(name)") { connection in
            let user = try await Self.activeUser(named: name, connection, logger: logger)
            let revoked = try await connection.values(
                """
                UPDATE devices SET revoked_ms = \(nowMs)
                WHERE id = \(device.rawValue) AND user_id = \(user.id.rawValue) AND revoked_ms IS NULL RETURNING id
                """,
                as: Int64.self,
                logger: logger
            )
            guard revoked.count == 1 else {
                throw CourierStoreError(.invalidRequest, "\(name) has no active device \(device.rawValue)")
            }
            try await Self.recordChanges([.deviceRevoked(device)], nowMs: nowMs, connection, logger: logger)
        }
    }

    public func recordDeviceActivity(_ changes: [DeviceActivityChange]) async throws {
        guard !changes.isEmpty else { return }
        let logger = self.logger
        // One statement; the last change of a device wins, as applying them one by one would. A device's last
        // connection ending here leaves it connected if it has since connected through another node.
        var last: [DeviceID: DeviceActivityChange] = [:]
        for change in changes { last[change.device] = change }
        let ordered = last.values.sorted { $0.device < $1.device }
        let ids = ordered.map(\.device.rawValue)
        let connected = ordered.map(\.connected)
        let times = ordered.map(\.ms)
        let node = self.configuration.node
        try await self.write(doing: "record device activity") { connection in
            try await connection.run(
                """
                UPDATE devices d SET
                connected_since_ms = CASE WHEN c.connected THEN c.ms
                    WHEN d.connected_node <> \(node) THEN d.connected_since_ms ELSE NULL END,
                connected_node = CASE WHEN c.connected THEN \(node)
                    WHEN d.connected_node <> \(node) THEN d.connected_node ELSE NULL END,
                last_seen_ms = CASE WHEN c.connected THEN d.last_seen_ms ELSE c.ms END
                FROM unnest(\(ids)::bigint[], \(connected)::boolean[], \(times)::bigint[]) AS c(id, connected, ms)
                WHERE d.id = c.id
                """,
                logger: logger
            )
        }
    }

    /// No device is connected through this node (it is starting): what it left when it stopped without saying
    /// so, goes. The devices other nodes hold stay as they are.
    public func clearConnectedDevices() async throws {
        let logger = self.logger
        let node = self.configuration.node
        try await self.write(doing: "clear connected devices") { connection in
            try await connection.run(
                """
                UPDATE devices SET last_seen_ms = GREATEST(COALESCE(last_seen_ms, 0), connected_since_ms),
                connected_since_ms = NULL, connected_node = NULL
                WHERE connected_since_ms IS NOT NULL AND (connected_node = \(node) OR connected_node IS NULL)
                """,
                logger: logger
            )
        }
    }

    // MARK: Changes for running servers

    /// Records changes that running servers must notice. The table is locked against other writers of changes
    /// first, so that ids become visible in the order they are given: a server reading after the newest id it saw
    /// never skips one that an older transaction commits later. Every write records its changes last, after its
    /// row locks.
    static func recordChanges(
        _ changes: [StoreChange],
        nowMs: Int64,
        _ connection: PostgresConnection,
        logger: Logger
    ) async throws {
        guard !changes.isEmpty else { return }
        // 0 for none (ids start at 1), NULL in the table.
        var kinds: [Int64] = []
        var users: [Int64] = []
        var devices: [Int64] = []
        for change in changes {
            switch change {
            case .logAppended(let user):
                kinds.append(1)
                users.append(user.rawValue)
                devices.append(0)
            case .deviceRevoked(let device):
                kinds.append(2)
                users.append(0)
                devices.append(device.rawValue)
            case .userRemoved(let user):
                kinds.append(3)
                users.append(user.rawValue)
                devices.append(0)
            }
        }
        try await connection.run("LOCK TABLE changes IN SHARE ROW EXCLUSIVE MODE", logger: logger)
        try await connection.run(
            """
            INSERT INTO changes (kind, user_id, device_id, time_ms)
            SELECT kind, NULLIF(user_id, 0), NULLIF(device_id, 0), \(nowMs)
            FROM unnest(\(kinds)::smallint[], \(users)::bigint[], \(devices)::bigint[]) WITH ORDINALITY
                AS c(kind, user_id, device_id, n)
            ORDER BY n
            """,
            logger: logger
        )
    }

    public func latestChangeID() async throws -> Int64 {
        let logger = self.logger
        return try await self.read(doing: "read the newest change") { connection in
            try await connection.value("SELECT MAX(id) FROM changes", as: Int64.self, logger: logger) ?? 0
        }
    }

    public func changes(after id: Int64) async throws -> (changes: [StoreChange], latest: Int64) {
        let logger = self.logger
        return try await self.read(doing: "read changes") { connection in
            var latest = id
            var changes: [StoreChange] = []
            for row in try await connection.rows(
                "SELECT id, kind, user_id, device_id FROM changes WHERE id > \(id) ORDER BY id LIMIT 10000",
                logger: logger
            ) {
                latest = try row.get("id")
                switch try row.get("kind", as: Int64.self) {
                case 1: changes.append(.logAppended(UserID(rawValue: try row.get("user_id"))))
                case 2: changes.append(.deviceRevoked(DeviceID(rawValue: try row.get("device_id"))))
                case 3: changes.append(.userRemoved(UserID(rawValue: try row.get("user_id"))))
                default: continue
                }
            }
            return (changes, latest)
        }
    }

    public func pruneChanges(olderThanMs: Int64) async throws {
        let logger = self.logger
        try await self.write(doing: "prune changes") { connection in
            try await connection.run("DELETE FROM changes WHERE time_ms < \(olderThanMs)", logger: logger)
        }
    }
}
