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
        let columns = changes.map(\.columns)
        let kinds = columns.map(\.kind)
        let users = columns.map { $0.user?.rawValue ?? 0 }
        let devices = columns.map { $0.device?.rawValue ?? 0 }
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
