public import CourierStore
internal import Logging
internal import PostgresNIO

extension PostgresStore {
    public func events(for user: UserID, after cursor: UInt64, limit: Int) async throws -> [StoredEvent] {
        let limit = max(1, min(limit, self.limits.maxEventsPerRead))
        let logger = self.logger
        return try await self.read(doing: "read the log of \(user)") { connection in
            let rows = try await connection.rows(
                """
                SELECT e.cursor, e.kind, e.seq AS event_seq, e.actor_id, e.detail,
                       c.name AS group_name, c.user_a, c.user_b,
                       m.sender_id, m.sender_device_id, m.client_id, m.time_ms, m.body, m.recalled
                FROM events e
                JOIN conversations c ON c.id = e.conversation_id
                LEFT JOIN messages m ON e.kind IN (1, 2) AND m.conversation_id = e.conversation_id AND m.seq = e.seq
                WHERE e.user_id = \(user.rawValue) AND e.cursor > \(Int64(clamping: cursor))
                ORDER BY e.cursor LIMIT \(Int64(limit))
                """,
                logger: logger
            )
            var events: [StoredEvent] = []
            events.reserveCapacity(rows.count)
            for row in rows { events.append(try await self.event(row, for: user, connection)) }
            return events
        }
    }

    private func event(
        _ row: PostgresRandomAccessRow,
        for user: UserID,
        _ connection: PostgresConnection
    ) async throws -> StoredEvent {
        let cursor = UInt64(try row.get("cursor", as: Int64.self))
        let conversation = try await self.address(
            groupName: try row.get("group_name"),
            userA: try row.get("user_a"),
            userB: try row.get("user_b"),
            for: user,
            connection
        )
        let seq = UInt64(try row.get("event_seq", as: Int64.self))
        switch LogEventKind(rawValue: try row.get("kind")) {
        case .message:
            let recalled: Bool = try row.get("recalled")
            return StoredEvent(
                cursor: cursor,
                kind: .message(
                    StoredMessage(
                        id: try row.get("client_id"),
                        from: try await self.name(of: UserID(rawValue: try row.get("sender_id")), connection),
                        fromDevice: try row.get("sender_device_id", as: Int64?.self).map(DeviceID.init(rawValue:)),
                        conversation: conversation,
                        seq: seq,
                        timeMs: try row.get("time_ms"),
                        body: recalled ? [] : try row.bytes("body"),
                        recalled: recalled
                    )
                )
            )
        case .recall:
            return StoredEvent(
                cursor: cursor,
                kind: .recall(
                    conversation: conversation,
                    seq: seq,
                    id: try row.get("client_id"),
                    by: try await self.name(of: UserID(rawValue: try row.get("actor_id")), connection)
                )
            )
        case .receipt:
            return StoredEvent(
                cursor: cursor,
                kind: .receipt(
                    conversation: conversation,
                    user: try await self.name(of: UserID(rawValue: try row.get("actor_id")), connection),
                    kind: ReceiptKind(rawValue: try row.get("detail")) ?? .delivered,
                    upToSeq: seq
                )
            )
        case .membership:
            guard case .group(let group) = conversation else {
                throw CourierStoreError(.storageFailed, "a membership event outside a group at cursor \(cursor)")
            }
            return StoredEvent(
                cursor: cursor,
                kind: .membership(
                    group: group,
                    user: try await self.name(of: UserID(rawValue: try row.get("actor_id")), connection),
                    change: MembershipChange(rawValue: try row.get("detail")) ?? .joined,
                    seq: seq
                )
            )
        case nil:
            throw CourierStoreError(.storageFailed, "an event of unknown kind at cursor \(cursor)")
        }
    }

    private func address(
        groupName: String?,
        userA: Int64?,
        userB: Int64?,
        for user: UserID,
        _ connection: PostgresConnection
    ) async throws -> Conversation {
        if let groupName { return .group(groupName) }
        guard let userA, let userB else {
            throw CourierStoreError(.storageFailed, "a direct conversation without users")
        }
        return .user(try await self.name(of: UserID(rawValue: userA == user.rawValue ? userB : userA), connection))
    }

    public func logCursor(of user: UserID) async throws -> UInt64 {
        let logger = self.logger
        return try await self.read(doing: "read the cursor of \(user)") { connection in
            UInt64(
                try await connection.value(
                    "SELECT log_cursor FROM users WHERE id = \(user.rawValue)",
                    as: Int64.self,
                    logger: logger
                ) ?? 0
            )
        }
    }

    public func logCursors(of users: [UserID]) async throws -> [UserID: UInt64] {
        let ids = users.map(\.rawValue)
        guard !ids.isEmpty else { return [:] }
        let logger = self.logger
        return try await self.read(doing: "read the cursors of \(ids.count) users") { connection in
            var cursors: [UserID: UInt64] = [:]
            for row in try await connection.rows(
                "SELECT id, log_cursor FROM users WHERE id = ANY(\(ids))",
                logger: logger
            ) {
                cursors[UserID(rawValue: try row.get("id"))] = UInt64(try row.get("log_cursor", as: Int64.self))
            }
            return cursors
        }
    }

    public func ackedCursor(of device: DeviceID) async throws -> UInt64 {
        let logger = self.logger
        return try await self.read(doing: "read the cursor of \(device)") { connection in
            UInt64(
                try await connection.value(
                    "SELECT acked_cursor FROM devices WHERE id = \(device.rawValue)",
                    as: Int64.self,
                    logger: logger
                ) ?? 0
            )
        }
    }

    public func history(
        for user: UserID,
        in conversation: Conversation,
        beforeSeq: UInt64,
        limit: Int
    ) async throws -> HistoryPage {
        let limit = max(1, limit)
        let logger = self.logger
        return try await self.read(doing: "read history") { connection in
            guard let (key, joinedSeq) = try await self.membership(of: user, in: conversation, connection) else {
                return HistoryPage(messages: [], more: false)
            }
            let before = beforeSeq == 0 ? Int64.max : Int64(clamping: beforeSeq)
            let rows = try await connection.rows(
                """
                SELECT seq, sender_id, sender_device_id, client_id, time_ms, body, recalled FROM messages
                WHERE conversation_id = \(key) AND seq < \(before) AND seq > \(joinedSeq)
                ORDER BY seq DESC LIMIT \(Int64(limit) + 1)
                """,
                logger: logger
            )
            var messages: [StoredMessage] = []
            for row in rows.prefix(limit) {
                let recalled: Bool = try row.get("recalled")
                messages.append(
                    StoredMessage(
                        id: try row.get("client_id"),
                        from: try await self.name(of: UserID(rawValue: try row.get("sender_id")), connection),
                        fromDevice: try row.get("sender_device_id", as: Int64?.self).map(DeviceID.init(rawValue:)),
                        conversation: conversation,
                        seq: UInt64(try row.get("seq", as: Int64.self)),
                        timeMs: try row.get("time_ms"),
                        body: recalled ? [] : try row.bytes("body"),
                        recalled: recalled
                    )
                )
            }
            return HistoryPage(messages: messages, more: rows.count > limit)
        }
    }

    /// The conversation an address names for a user and the sequence number the user joined at; nil for a direct
    /// conversation that has no message yet.
    private func membership(
        of user: UserID,
        in address: Conversation,
        _ connection: PostgresConnection
    ) async throws -> (Int64, Int64)? {
        try address.checkNames()
        switch address {
        case .group(let name):
            guard
                let key = try await connection.value(
                    "SELECT id FROM conversations WHERE kind = 2 AND lower(name) = lower(\(name))",
                    as: Int64.self,
                    logger: self.logger
                )
            else { throw CourierStoreError(.unknownGroup, "no group named \(name)") }
            guard
                let joined = try await connection.value(
                    "SELECT joined_seq FROM members WHERE conversation_id = \(key) AND user_id = \(user.rawValue)",
                    as: Int64.self,
                    logger: self.logger
                )
            else { throw CourierStoreError(.notMember, "you are not a member of \(name)") }
            return (key, joined)
        case .user(let name):
            guard let peer = try await Self.user(named: name, connection, logger: self.logger) else {
                throw CourierStoreError(.unknownUser, "no user named \(name)")
            }
            let (a, b) = (min(user, peer.id), max(user, peer.id))
            guard
                let key = try await connection.value(
                    "SELECT id FROM conversations WHERE user_a = \(a.rawValue) AND user_b = \(b.rawValue)",
                    as: Int64.self,
                    logger: self.logger
                )
            else { return nil }
            return (key, 0)
        }
    }

    public func unreadCounts(for user: UserID) async throws -> [UnreadCount] {
        let logger = self.logger
        return try await self.read(doing: "read unread counts") { connection in
            let rows = try await connection.rows(
                """
                SELECT c.name AS group_name, c.user_a, c.user_b, c.last_seq, m.read_seq, m.joined_seq
                FROM members m JOIN conversations c ON c.id = m.conversation_id
                WHERE m.user_id = \(user.rawValue) ORDER BY c.last_ms DESC, c.id
                """,
                logger: logger
            )
            var counts: [UnreadCount] = []
            for row in rows {
                let lastSeq: Int64 = try row.get("last_seq")
                let readSeq = max(try row.get("read_seq", as: Int64.self), try row.get("joined_seq", as: Int64.self))
                counts.append(
                    UnreadCount(
                        conversation: try await self.address(
                            groupName: try row.get("group_name"),
                            userA: try row.get("user_a"),
                            userB: try row.get("user_b"),
                            for: user,
                            connection
                        ),
                        unread: UInt64(max(0, lastSeq - readSeq)),
                        lastSeq: UInt64(lastSeq),
                        readSeq: UInt64(readSeq)
                    )
                )
            }
            return counts
        }
    }

    public func peers(of user: UserID) async throws -> Set<UserID> {
        let logger = self.logger
        return try await self.read(doing: "read the peers of \(user)") { connection in
            Set(
                try await connection.values(
                    """
                    SELECT other.user_id FROM members mine
                    JOIN conversations c ON c.id = mine.conversation_id
                    JOIN members other ON other.conversation_id = mine.conversation_id
                    WHERE mine.user_id = \(user.rawValue) AND other.user_id != \(user.rawValue)
                    AND (c.kind = 2 OR (mine.sent AND other.sent))
                    """,
                    as: Int64.self,
                    logger: logger
                ).map(UserID.init(rawValue:))
            )
        }
    }

    public func contacts(of user: UserID) async throws -> Set<UserID> {
        let logger = self.logger
        return try await self.read(doing: "read the contacts of \(user)") { connection in
            try await Self.contacts(of: user, connection, logger: logger)
        }
    }

    static func contacts(of user: UserID, _ connection: PostgresConnection, logger: Logger) async throws -> Set<UserID>
    {
        Set(
            try await connection.values(
                """
                SELECT other.user_id FROM members mine
                JOIN conversations c ON c.id = mine.conversation_id AND c.kind = 1
                JOIN members other ON other.conversation_id = mine.conversation_id AND other.user_id != mine.user_id
                WHERE mine.user_id = \(user.rawValue) AND mine.sent AND other.sent
                """,
                as: Int64.self,
                logger: logger
            ).map(UserID.init(rawValue:))
        )
    }

    public func members(of address: Conversation, for user: UserID) async throws -> [UserID] {
        let logger = self.logger
        return try await self.read(doing: "read members") { connection in
            switch address {
            case .group:
                guard let (key, _) = try await self.membership(of: user, in: address, connection) else {
                    return [user]
                }
                return try await Self.memberIDs(of: key, connection, logger: logger)
            case .user(let name):
                try address.checkNames()
                guard let peer = try await Self.user(named: name, connection, logger: logger) else {
                    throw CourierStoreError(.unknownUser, "no user named \(name)")
                }
                let shared = try await connection.value(
                    """
                    SELECT EXISTS (
                        SELECT 1 FROM members mine
                        JOIN conversations c ON c.id = mine.conversation_id
                        JOIN members other ON other.conversation_id = mine.conversation_id
                        WHERE mine.user_id = \(user.rawValue) AND other.user_id = \(peer.id.rawValue)
                        AND (c.kind = 2 OR (mine.sent AND other.sent))
                    )
                    """,
                    as: Bool.self,
                    logger: logger
                )
                return shared == true ? [user, peer.id] : [user]
            }
        }
    }

    public func userName(of id: UserID) async throws -> String {
        try await self.read(doing: "read the name of \(id)") { connection in
            try await self.name(of: id, connection)
        }
    }

    public func namesAndLastSeen(
        of users: some Collection<UserID>
    ) async throws -> [UserID: (name: String, lastSeenMs: Int64?)] {
        let ids = users.map(\.rawValue)
        guard !ids.isEmpty else { return [:] }
        let logger = self.logger
        return try await self.read(doing: "read names and last seen") { connection in
            var result: [UserID: (name: String, lastSeenMs: Int64?)] = [:]
            for row in try await connection.rows(
                """
                SELECT u.id, u.name, MAX(d.last_seen_ms) AS seen FROM users u
                LEFT JOIN devices d ON d.user_id = u.id
                WHERE u.id = ANY(\(ids)) GROUP BY u.id
                """,
                logger: logger
            ) {
                result[UserID(rawValue: try row.get("id"))] = (try row.get("name"), try row.get("seen"))
            }
            return result
        }
    }
}
