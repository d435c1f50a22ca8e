public import CourierStore
internal import PostgresNIO

// What of accounts is not written once yet over ``PostgresTransaction`` (removing a user, device activity), and
// the helpers the group changes share; what is said here is how the rules hold with several writers.
extension PostgresStore {
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
}
