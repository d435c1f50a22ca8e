internal import Foundation
internal import GRDB

extension SQLiteStore {
    /// The events of a user's log after a cursor, oldest first.
    ///
    /// The cost is that of the rows returned: the log is keyed by (user, cursor), so neither the user's history nor
    /// the number of its conversations matters.
    ///
    /// - Parameters:
    ///   - user: Whose log.
    ///   - cursor: Events after this cursor.
    ///   - limit: At most this many (capped by ``Configuration/maxEventsPerRead``).
    public func events(for user: UserID, after cursor: UInt64, limit: Int) async throws -> [StoredEvent] {
        let limit = max(1, min(limit, self.limits.maxEventsPerRead))
        return try await self.read { db in
            let rows = try Row.fetchAll(
                db.cachedStatement(sql: Self.eventsSQL),
                arguments: [user.rawValue, Int64(clamping: cursor), limit]
            )
            return try rows.map { row in try self.event(row, for: user, db) }
        }
    }

    static let eventsSQL = """
        SELECT e.cursor, e.kind, e.seq AS event_seq, e.actor_id, e.detail,
               c.name AS group_name, c.user_a, c.user_b,
               m.sender_id, m.sender_device_id, m.client_id, m.time_ms, m.body, m.recalled
        FROM events e
        JOIN conversations c ON c.id = e.conversation_id
        LEFT JOIN messages m ON e.kind IN (1, 2) AND m.conversation_id = e.conversation_id AND m.seq = e.seq
        WHERE e.user_id = ? AND e.cursor > ?
        ORDER BY e.cursor LIMIT ?
        """

    /// SQLite's plan for the sync query, one line per step (for the test that holds the sync's cost down).
    package func explainEventsQuery() async throws -> [String] {
        try await self.read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + Self.eventsSQL, arguments: [1, 0, 10]).map {
                $0["detail"] as String
            }
        }
    }

    /// The columns of ``eventsSQL``, in order: rows are decoded by position, which costs a fraction of GRDB's
    /// lookup by name (that lowercases the name on every access; the delivery path reads every event this way).
    private enum EventColumn {
        static let cursor = 0
        static let kind = 1
        static let seq = 2
        static let actor = 3
        static let detail = 4
        static let groupName = 5
        static let userA = 6
        static let userB = 7
        static let sender = 8
        static let senderDevice = 9
        static let clientID = 10
        static let time = 11
        static let body = 12
        static let recalled = 13
    }

    private func event(_ row: Row, for user: UserID, _ db: Database) throws -> StoredEvent {
        let cursor = UInt64(row[EventColumn.cursor] as Int64)
        let conversation = try self.address(
            groupName: row[EventColumn.groupName],
            userA: row[EventColumn.userA],
            userB: row[EventColumn.userB],
            for: user,
            db
        )
        let seq = UInt64(row[EventColumn.seq] as Int64)
        switch EventLogWriter.Kind(rawValue: row[EventColumn.kind]) {
        case .message:
            let recalled: Bool = row[EventColumn.recalled]
            return StoredEvent(
                cursor: cursor,
                kind: .message(
                    StoredMessage(
                        id: row[EventColumn.clientID],
                        from: try self.name(of: UserID(rawValue: row[EventColumn.sender]), db),
                        fromDevice: (row[EventColumn.senderDevice] as Int64?).map(DeviceID.init(rawValue:)),
                        conversation: conversation,
                        seq: seq,
                        timeMs: row[EventColumn.time],
                        body: recalled ? [] : [UInt8](row[EventColumn.body] as Data),
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
                    id: row[EventColumn.clientID],
                    by: try self.name(of: UserID(rawValue: row[EventColumn.actor]), db)
                )
            )
        case .receipt:
            return StoredEvent(
                cursor: cursor,
                kind: .receipt(
                    conversation: conversation,
                    user: try self.name(of: UserID(rawValue: row[EventColumn.actor]), db),
                    kind: ReceiptKind(rawValue: row[EventColumn.detail]) ?? .delivered,
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
                    user: try self.name(of: UserID(rawValue: row[EventColumn.actor]), db),
                    change: MembershipChange(rawValue: row[EventColumn.detail]) ?? .joined,
                    seq: seq
                )
            )
        case nil:
            throw CourierStoreError(.storageFailed, "an event of unknown kind at cursor \(cursor)")
        }
    }

    /// A message of a history page.
    private func message(_ row: Row, in conversation: Conversation, _ db: Database) throws -> StoredMessage {
        let seq: Int64 = row["seq"]
        return StoredMessage(
            id: row["client_id"],
            from: try self.name(of: UserID(rawValue: row["sender_id"]), db),
            fromDevice: (row["sender_device_id"] as Int64?).map(DeviceID.init(rawValue:)),
            conversation: conversation,
            seq: UInt64(seq),
            timeMs: row["time_ms"],
            body: row["recalled"] as Bool ? [] : [UInt8](row["body"] as Data),
            recalled: row["recalled"]
        )
    }

    private func address(
        groupName: String?,
        userA: Int64?,
        userB: Int64?,
        for user: UserID,
        _ db: Database
    ) throws -> Conversation {
        if let groupName { return .group(groupName) }
        guard let userA, let userB else {
            throw CourierStoreError(.storageFailed, "a direct conversation without users")
        }
        return .user(try self.name(of: UserID(rawValue: userA == user.rawValue ? userB : userA), db))
    }

    /// The newest cursor of a user's log.
    public func logCursor(of user: UserID) async throws -> UInt64 {
        try await self.read { db in
            UInt64(
                try Int64.fetchOne(db, sql: "SELECT log_cursor FROM users WHERE id = ?", arguments: [user.rawValue])
                    ?? 0
            )
        }
    }

    /// The newest cursors of several users' logs.
    public func logCursors(of users: [UserID]) async throws -> [UserID: UInt64] {
        let ids = users.map(\.rawValue)
        guard !ids.isEmpty else { return [:] }
        return try await self.read { db in
            var cursors: [UserID: UInt64] = [:]
            // In slices, within SQLite's limit on parameters.
            for start in stride(from: 0, to: ids.count, by: 500) {
                let slice = Array(ids[start..<min(ids.count, start + 500)])
                let marks = slice.map { _ in "?" }.joined(separator: ",")
                for row in try Row.fetchAll(
                    db,
                    sql: "SELECT id, log_cursor FROM users WHERE id IN (\(marks))",
                    arguments: StatementArguments(slice)
                ) {
                    cursors[UserID(rawValue: row[0])] = UInt64(row[1] as Int64)
                }
            }
            return cursors
        }
    }

    /// The cursor a device last acknowledged.
    public func ackedCursor(of device: DeviceID) async throws -> UInt64 {
        try await self.read { db in
            UInt64(
                try Int64.fetchOne(
                    db,
                    sql: "SELECT acked_cursor FROM devices WHERE id = ?",
                    arguments: [device.rawValue]
                ) ?? 0
            )
        }
    }

    /// A page of a conversation's history, newest first, limited to what the reader may see: a group member sees
    /// the messages after it joined.
    ///
    /// - Parameters:
    ///   - user: The reader; must be a member.
    ///   - conversation: The conversation, as the reader names it.
    ///   - beforeSeq: Messages with a sequence number below this; 0 for the newest.
    ///   - limit: At most this many (at least 1).
    /// - Throws: `unknown-group`, `unknown-user`, `not-member`, `storage-failed`.
    public func history(
        for user: UserID,
        in conversation: Conversation,
        beforeSeq: UInt64,
        limit: Int
    ) async throws -> HistoryPage {
        let limit = max(1, limit)
        return try await self.read { db in
            guard let (key, joinedSeq) = try self.membership(of: user, in: conversation, db) else {
                return HistoryPage(messages: [], more: false)
            }
            let before = beforeSeq == 0 ? Int64.max : Int64(clamping: beforeSeq)
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT seq, sender_id, sender_device_id, client_id, time_ms, body, recalled FROM messages
                        WHERE conversation_id = ? AND seq < ? AND seq > ? ORDER BY seq DESC LIMIT ?
                        """
                ),
                arguments: [key, before, joinedSeq, limit + 1]
            )
            let messages = try rows.prefix(limit).map { try self.message($0, in: conversation, db) }
            return HistoryPage(messages: messages, more: rows.count > limit)
        }
    }

    /// The conversation an address names for a user and the sequence number the user joined at; nil for a direct
    /// conversation that has no message yet.
    private func membership(of user: UserID, in address: Conversation, _ db: Database) throws -> (Int64, Int64)? {
        try address.checkNames()
        switch address {
        case .group(let name):
            guard
                let key = try Int64.fetchOne(
                    db,
                    sql: "SELECT id FROM conversations WHERE kind = 2 AND name = ?",
                    arguments: [name]
                )
            else { throw CourierStoreError(.unknownGroup, "no group named \(name)") }
            guard
                let joined = try Int64.fetchOne(
                    db,
                    sql: "SELECT joined_seq FROM members WHERE conversation_id = ? AND user_id = ?",
                    arguments: [key, user.rawValue]
                )
            else { throw CourierStoreError(.notMember, "you are not a member of \(name)") }
            return (key, joined)
        case .user(let name):
            guard let peer = try Self.user(named: name, db) else {
                throw CourierStoreError(.unknownUser, "no user named \(name)")
            }
            let (a, b) = (min(user, peer.id), max(user, peer.id))
            guard
                let key = try Int64.fetchOne(
                    db,
                    sql: "SELECT id FROM conversations WHERE user_a = ? AND user_b = ?",
                    arguments: [a.rawValue, b.rawValue]
                )
            else { return nil }
            return (key, 0)
        }
    }

    /// Unread counts of every conversation the user is in: the messages after the newer of its read mark and its
    /// joining. Sending counts as reading everything before the message sent.
    public func unreadCounts(for user: UserID) async throws -> [UnreadCount] {
        try await self.read { db in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT c.name AS group_name, c.user_a, c.user_b, c.last_seq, m.read_seq, m.joined_seq
                    FROM members m JOIN conversations c ON c.id = m.conversation_id
                    WHERE m.user_id = ? ORDER BY c.last_ms DESC, c.id
                    """,
                arguments: [user.rawValue]
            )
            return try rows.map { row in
                let lastSeq: Int64 = row["last_seq"]
                let readSeq = max(row["read_seq"] as Int64, row["joined_seq"] as Int64)
                return UnreadCount(
                    conversation: try self.address(
                        groupName: row["group_name"],
                        userA: row["user_a"],
                        userB: row["user_b"],
                        for: user,
                        db
                    ),
                    unread: UInt64(max(0, lastSeq - readSeq)),
                    lastSeq: UInt64(lastSeq),
                    readSeq: UInt64(readSeq)
                )
            }
        }
    }

    /// Who sees a user's presence (and last seen): its contacts (``contacts(of:)``) and the members of its groups.
    /// A message nobody answered makes no one a peer.
    public func peers(of user: UserID) async throws -> Set<UserID> {
        try await self.read { db in
            Set(
                try Int64.fetchAll(
                    db,
                    sql: """
                        SELECT other.user_id FROM members mine
                        JOIN conversations c ON c.id = mine.conversation_id
                        JOIN members other ON other.conversation_id = mine.conversation_id
                        WHERE mine.user_id = ? AND other.user_id != ? AND (c.kind = 2 OR (mine.sent AND other.sent))
                        """,
                    arguments: [user.rawValue, user.rawValue]
                ).map(UserID.init(rawValue:))
            )
        }
    }

    /// A user's contacts: the users with whom it has a direct conversation in which both have written. Only a
    /// contact may add a user to a group.
    public func contacts(of user: UserID) async throws -> Set<UserID> {
        try await self.read { db in try Self.contacts(of: user, db) }
    }

    static func contacts(of user: UserID, _ db: Database) throws -> Set<UserID> {
        Set(
            try Int64.fetchAll(
                db,
                sql: """
                    SELECT other.user_id FROM members mine
                    JOIN conversations c ON c.id = mine.conversation_id AND c.kind = 1
                    JOIN members other ON other.conversation_id = mine.conversation_id AND other.user_id != mine.user_id
                    WHERE mine.user_id = ? AND mine.sent AND other.sent
                    """,
                arguments: [user.rawValue]
            ).map(UserID.init(rawValue:))
        )
    }

    /// Who a user's typing in a conversation reaches: the members of a group it is in; in a direct conversation, the
    /// other user only when the two are peers (``peers(of:)``: contacts, or members of one group), else the user's
    /// own devices only.
    ///
    /// - Throws: `unknown-group`, `unknown-user`, `not-member`, `storage-failed`.
    public func members(of address: Conversation, for user: UserID) async throws -> [UserID] {
        try await self.read { db in
            switch address {
            case .group:
                guard let (key, _) = try self.membership(of: user, in: address, db) else { return [user] }
                return try Self.memberIDs(of: key, db)
            case .user(let name):
                try address.checkNames()
                guard let peer = try Self.user(named: name, db) else {
                    throw CourierStoreError(.unknownUser, "no user named \(name)")
                }
                let shared = try Bool.fetchOne(
                    db,
                    sql: """
                        SELECT EXISTS (
                            SELECT 1 FROM members mine
                            JOIN conversations c ON c.id = mine.conversation_id
                            JOIN members other ON other.conversation_id = mine.conversation_id
                            WHERE mine.user_id = ? AND other.user_id = ? AND (c.kind = 2 OR (mine.sent AND other.sent))
                        )
                        """,
                    arguments: [user.rawValue, peer.id.rawValue]
                )
                return shared == true ? [user, peer.id] : [user]
            }
        }
    }
}

extension SQLiteStore {
    /// A user's name by id.
    ///
    /// - Throws: `unknown-user`, `storage-failed`.
    public func userName(of id: UserID) async throws -> String {
        try await self.read { db in try self.name(of: id, db) }
    }

    /// Users' names, and when each was last seen: the latest disconnect of any of its devices (nil if never).
    public func namesAndLastSeen(
        of users: some Collection<UserID>
    ) async throws -> [UserID: (
        name: String, lastSeenMs: Int64?
    )] {
        let ids = users.map(\.rawValue)
        return try await self.read { db in
            var result: [UserID: (name: String, lastSeenMs: Int64?)] = [:]
            // In slices, within SQLite's limit on parameters.
            for start in stride(from: 0, to: ids.count, by: 500) {
                let slice = Array(ids[start..<min(ids.count, start + 500)])
                let marks = slice.map { _ in "?" }.joined(separator: ",")
                for row in try Row.fetchAll(
                    db,
                    sql: """
                        SELECT u.id, u.name, MAX(d.last_seen_ms) AS seen FROM users u
                        LEFT JOIN devices d ON d.user_id = u.id
                        WHERE u.id IN (\(marks)) GROUP BY u.id
                        """,
                    arguments: StatementArguments(slice)
                ) {
                    result[UserID(rawValue: row["id"])] = (row["name"], row["seen"])
                }
            }
            return result
        }
    }
}
