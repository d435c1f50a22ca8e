package import CourierStore
internal import Foundation
internal import GRDB

extension SQLiteTransaction {
    // MARK: Logs and history

    package func events(of user: UserID, after cursor: Int64, limit: Int) async throws -> [LogRead] {
        try await self.access { db in try Self.events(of: user, after: cursor, limit: limit, db) }
    }

    package func events(of logs: [UserID: (after: Int64, upTo: Int64)], limit: Int) async throws -> [UserID: [LogRead]]
    {
        try await self.access { db in
            try logs.reduce(into: [:]) { reads, log in
                let (after, upTo) = log.value
                reads[log.key] = try Self.events(
                    of: log.key,
                    after: after,
                    limit: Int(clamping: min(Int64(limit), upTo - after)),
                    db
                )
                .filter { $0.cursor <= upTo }
            }
        }
    }

    private static func events(of user: UserID, after cursor: Int64, limit: Int, _ db: Database) throws -> [LogRead] {
        // Decoded as the statement steps: a cursor's row is the statement's own, where fetching all would copy
        // every row (and its columns' names) first.
        var reads: [LogRead] = []
        reads.reserveCapacity(min(limit, 64))
        let rows = try Row.fetchCursor(
            db.cachedStatement(sql: SQLiteStore.eventsSQL),
            arguments: [user.rawValue, cursor, limit]
        )
        while let row = try rows.next() { reads.append(Self.logRead(row)) }
        return reads
    }

    /// The columns of ``SQLiteStore/eventsSQL``, in order: rows are decoded by position, which costs a fraction of
    /// GRDB's lookup by name (that lowercases the name on every access; the delivery path reads every event this
    /// way).
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
        static let editedMs = 14
        static let replySeq = 15
        static let replySender = 16
        static let replyClientID = 17
        static let replyBody = 18
        static let replyRecalled = 19
        static let joinedSeq = 20
        static let key = 21
    }

    private static func logRead(_ row: Row) -> LogRead {
        let seq: Int64 = row[EventColumn.seq]
        let message = row.optionalInt64(EventColumn.sender).map { sender in
            MessageRead(
                seq: seq,
                sender: UserID(rawValue: sender),
                senderDevice: row.optionalInt64(EventColumn.senderDevice).map(DeviceID.init(rawValue:)),
                clientID: row[EventColumn.clientID],
                timeMs: row[EventColumn.time],
                body: row.bytes(EventColumn.body),
                recalled: row[EventColumn.recalled],
                editedMs: row.optionalInt64(EventColumn.editedMs),
                replySeq: row.optionalInt64(EventColumn.replySeq),
                reply: row.optionalInt64(EventColumn.replySender).map { replySender in
                    ReplyRead(
                        sender: UserID(rawValue: replySender),
                        clientID: row[EventColumn.replyClientID],
                        body: row.bytes(EventColumn.replyBody),
                        recalled: row[EventColumn.replyRecalled]
                    )
                }
            )
        }
        return LogRead(
            cursor: row[EventColumn.cursor],
            kind: row[EventColumn.kind],
            seq: seq,
            actor: row.optionalInt64(EventColumn.actor).map(UserID.init(rawValue:)),
            detail: row.optionalInt64(EventColumn.detail),
            conversation: ConversationHeader(
                groupName: row.optionalString(EventColumn.groupName),
                userA: row.optionalInt64(EventColumn.userA).map(UserID.init(rawValue:)),
                userB: row.optionalInt64(EventColumn.userB).map(UserID.init(rawValue:))
            ),
            message: message,
            key: row.optionalString(EventColumn.key),
            joinedSeq: row.optionalInt64(EventColumn.joinedSeq)
        )
    }

    package func names(of users: Set<UserID>) async throws -> [UserID: String] {
        var names: [UserID: String] = [:]
        var missing: [UserID] = []
        self.store.names.withLock { cache in
            for user in users {
                if let name = cache[user] { names[user] = name } else { missing.append(user) }
            }
        }
        guard !missing.isEmpty else { return names }
        let asked = missing
        let store = self.store
        let found = try await self.access { db in
            var found: [UserID: String] = [:]
            for user in asked {
                do {
                    found[user] = try store.name(of: user, db)
                } catch let error as CourierStoreError where error.code == .unknownUser {
                    continue
                }
            }
            return found
        }
        return names.merging(found) { old, _ in old }
    }

    package func logCursors(of users: [UserID]) async throws -> [UserID: Int64] {
        try await self.access { db in
            var cursors: [UserID: Int64] = [:]
            let statement = try db.cachedStatement(
                sql: """
                    SELECT COALESCE((SELECT cursor FROM log_heads WHERE user_id = users.id), 0) FROM users
                    WHERE id = ?
                    """
            )
            for user in users {
                if let cursor = try Int64.fetchOne(statement, arguments: [user.rawValue]) { cursors[user] = cursor }
            }
            return cursors
        }
    }

    package func ackedCursor(of device: DeviceID) async throws -> Int64? {
        try await self.access { db in
            try Int64.fetchOne(db, sql: "SELECT acked_cursor FROM devices WHERE id = ?", arguments: [device.rawValue])
        }
    }

    package func joinedSeq(of user: UserID, in conversation: Int64) async throws -> Int64? {
        try await self.access { db in
            try Int64.fetchOne(
                db,
                sql: "SELECT joined_seq FROM members WHERE conversation_id = ? AND user_id = ?",
                arguments: [conversation, user.rawValue]
            )
        }
    }

    package func receiptMarks(
        in conversation: Int64,
        excluding user: UserID,
        from seq: Int64,
        limit: Int
    ) async throws -> [MarkRow] {
        try await self.access { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT * FROM (
                        SELECT user_id, joined_seq,
                            min(delivered_seq, COALESCE(blocked_delivered_seq, delivered_seq)) AS delivered_seq,
                            min(read_seq, COALESCE(blocked_at_seq, read_seq)) AS read_seq
                        FROM members WHERE conversation_id = ? AND user_id != ?
                    )
                    WHERE (delivered_seq >= ? OR read_seq >= ?) AND (delivered_seq > joined_seq OR read_seq > joined_seq)
                    ORDER BY read_seq DESC, delivered_seq DESC, user_id LIMIT ?
                    """,
                arguments: [conversation, user.rawValue, seq, seq, limit]
            ).map { row in
                MarkRow(
                    user: UserID(rawValue: row["user_id"]),
                    deliveredSeq: row["delivered_seq"],
                    readSeq: row["read_seq"],
                    joinedSeq: row["joined_seq"]
                )
            }
        }
    }

    package func directID(of pair: UserPair) async throws -> Int64? {
        try await self.access { db in
            try Int64.fetchOne(
                db,
                sql: "SELECT id FROM conversations WHERE user_a = ? AND user_b = ?",
                arguments: [pair.a.rawValue, pair.b.rawValue]
            )
        }
    }

    package func messages(
        in conversation: Int64,
        after: Int64,
        before: Int64,
        limit: Int,
        hiddenFrom reader: UserID
    ) async throws -> [MessageRead] {
        try await self.access { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT m.seq, m.sender_id, m.sender_device_id, m.client_id, m.time_ms, m.body, m.recalled,
                            m.edited_ms, m.reply_seq, r.sender_id AS r_sender, r.client_id AS r_client_id,
                            r.body AS r_body, r.recalled AS r_recalled
                        FROM messages m
                        LEFT JOIN messages r ON r.conversation_id = m.conversation_id AND r.seq = m.reply_seq
                            AND NOT EXISTS (
                                SELECT 1 FROM hidden h WHERE h.user_id = ?1 AND h.conversation_id = r.conversation_id
                                    AND h.seq = r.seq)
                        WHERE m.conversation_id = ?2 AND m.seq < ?3 AND m.seq > ?4 AND NOT EXISTS (
                            SELECT 1 FROM hidden h WHERE h.user_id = ?1 AND h.conversation_id = m.conversation_id
                                AND h.seq = m.seq)
                        ORDER BY m.seq DESC LIMIT ?5
                        """
                ),
                arguments: [reader.rawValue, conversation, before, after, limit]
            ).map { row in
                MessageRead(
                    seq: row["seq"],
                    sender: UserID(rawValue: row["sender_id"]),
                    senderDevice: (row["sender_device_id"] as Int64?).map(DeviceID.init(rawValue:)),
                    clientID: row["client_id"],
                    timeMs: row["time_ms"],
                    body: [UInt8](row["body"] as Data),
                    recalled: row["recalled"],
                    editedMs: row["edited_ms"],
                    replySeq: row["reply_seq"],
                    reply: (row["r_sender"] as Int64?).map {
                        ReplyRead(
                            sender: UserID(rawValue: $0),
                            clientID: row["r_client_id"],
                            body: [UInt8](row["r_body"] as Data),
                            recalled: row["r_recalled"]
                        )
                    }
                )
            }
        }
    }

    package func messages(
        withID id: String,
        from sender: UserID?,
        in conversation: Int64?,
        visibleTo user: UserID,
        limit: Int
    ) async throws -> [FoundMessage] {
        try await self.access { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: SQLiteStore.foundSQL + """
                        WHERE m.client_id = ? AND (? IS NULL OR m.sender_id = ?) AND (? IS NULL OR m.conversation_id = ?)
                        ORDER BY m.conversation_id, m.seq LIMIT ?
                        """
                ),
                arguments: [
                    user.rawValue, id, sender?.rawValue, sender?.rawValue, conversation, conversation, limit,
                ]
            ).map(Self.found)
        }
    }

    package func message(in conversation: Int64, seq: Int64, visibleTo user: UserID) async throws -> FoundMessage? {
        try await self.access { db in
            try Row.fetchOne(
                db.cachedStatement(sql: SQLiteStore.foundSQL + "WHERE m.conversation_id = ? AND m.seq = ?"),
                arguments: [user.rawValue, conversation, seq]
            ).map(Self.found)
        }
    }

    package func conversationIDs(of user: UserID) async throws -> [Int64] {
        try await self.access { db in
            try Int64.fetchAll(
                db.cachedStatement(
                    sql: "SELECT conversation_id FROM members WHERE user_id = ? ORDER BY conversation_id"
                ),
                arguments: [user.rawValue]
            )
        }
    }

    package func searchCandidates(
        _ tokens: [String],
        in conversations: [Int64]?,
        for user: UserID,
        before: Int64,
        limit: Int
    ) async throws -> [FoundMessage] {
        // Every token quoted, all of them required; one of the conversations' tokens.
        func quoted(_ token: String) -> String { "\"" + token.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }
        var expression = tokens.map(quoted).joined(separator: " AND ")
        if let conversations {
            expression +=
                " AND ("
                + conversations.map { quoted(SearchIndex.conversationToken($0)) }
                .joined(separator: " OR ") + ")"
        }
        let match = expression
        return try await self.access { db in
            // FTS5 first (CROSS JOIN keeps the order): it walks its matches from the highest position down and stops
            // at the limit.
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT f.rowid AS doc, m.conversation_id, m.seq, m.sender_id, m.sender_device_id, m.client_id,
                            m.time_ms, m.body, m.recalled, m.edited_ms, m.reply_seq, c.name AS group_name, c.user_a,
                            c.user_b
                        FROM message_fts f
                        CROSS JOIN message_search s ON s.doc = f.rowid
                        CROSS JOIN members j ON j.conversation_id = s.conversation_id AND j.user_id = ?
                        CROSS JOIN messages m ON m.conversation_id = s.conversation_id AND m.seq = s.seq
                        CROSS JOIN conversations c ON c.id = s.conversation_id
                        WHERE message_fts MATCH ? AND f.rowid < ? AND s.seq > j.joined_seq
                        ORDER BY f.rowid DESC LIMIT ?
                        """
                ),
                arguments: [user.rawValue, match, before, limit]
            ).map { row in
                var found = Self.found(row)
                found.doc = row["doc"]
                return found
            }
        }
    }

    private static func found(_ row: Row) -> FoundMessage {
        FoundMessage(
            conversation: row["conversation_id"],
            header: ConversationHeader(
                groupName: row["group_name"],
                userA: (row["user_a"] as Int64?).map(UserID.init(rawValue:)),
                userB: (row["user_b"] as Int64?).map(UserID.init(rawValue:))
            ),
            message: MessageRead(
                seq: row["seq"],
                sender: UserID(rawValue: row["sender_id"]),
                senderDevice: (row["sender_device_id"] as Int64?).map(DeviceID.init(rawValue:)),
                clientID: row["client_id"],
                timeMs: row["time_ms"],
                body: [UInt8](row["body"] as Data),
                recalled: row["recalled"],
                editedMs: row["edited_ms"],
                replySeq: row["reply_seq"]
            )
        )
    }

    package func reactionCounts(
        in conversation: Int64,
        from: Int64,
        to: Int64,
        reader: UserID
    ) async throws -> [Int64: [ReactionCount]] {
        try await self.access { db in
            var counts: [Int64: [ReactionCount]] = [:]
            for row in try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT seq, key, COUNT(*) AS count, MAX(user_id = ?) AS mine, MIN(time_ms) AS first
                        FROM reactions WHERE conversation_id = ? AND seq >= ? AND seq <= ?
                        GROUP BY seq, key ORDER BY seq, first, key
                        """
                ),
                arguments: [reader.rawValue, conversation, from, to]
            ) {
                counts[row["seq"], default: []].append(
                    ReactionCount(key: row["key"], count: row["count"], mine: row["mine"])
                )
            }
            return counts
        }
    }

    package func versions(in conversation: Int64, seq: Int64, limit: Int) async throws -> [MessageVersion] {
        try await self.access { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT version, body, replaced_ms FROM message_versions
                        WHERE conversation_id = ? AND seq = ? ORDER BY version LIMIT ?
                        """
                ),
                arguments: [conversation, seq, limit]
            ).map {
                MessageVersion(version: $0["version"], body: [UInt8]($0["body"] as Data), replacedMs: $0["replaced_ms"])
            }
        }
    }

    package func memberships(of user: UserID) async throws -> [Membership] {
        try await self.access { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT c.name AS group_name, c.user_a, c.user_b, c.last_seq, m.read_seq, m.joined_seq,
                        COALESCE(min(o.delivered_seq, COALESCE(o.blocked_delivered_seq, o.delivered_seq)), 0)
                            AS peer_delivered,
                        COALESCE(min(o.read_seq, COALESCE(o.blocked_at_seq, o.read_seq)), 0) AS peer_read,
                        CASE WHEN c.last_seq > max(m.read_seq, m.joined_seq) THEN (
                            SELECT COUNT(*) FROM hidden h
                            WHERE h.user_id = m.user_id AND h.conversation_id = m.conversation_id
                                AND h.seq > max(m.read_seq, m.joined_seq)
                        ) ELSE 0 END AS hidden_unread,
                        CASE WHEN EXISTS (
                            SELECT 1 FROM hidden h
                            WHERE h.user_id = m.user_id AND h.conversation_id = m.conversation_id AND h.seq = c.last_seq
                        ) THEN COALESCE((
                            SELECT x.seq FROM messages x
                            WHERE x.conversation_id = m.conversation_id AND x.seq > m.joined_seq AND NOT EXISTS (
                                SELECT 1 FROM hidden h
                                WHERE h.user_id = m.user_id AND h.conversation_id = x.conversation_id AND h.seq = x.seq)
                            ORDER BY x.seq DESC LIMIT 1
                        ), 0) END AS last_visible,
                        c.title, m.notify,
                        CASE WHEN c.kind = 2 AND c.last_seq > max(m.read_seq, m.joined_seq) THEN (
                            SELECT COUNT(DISTINCT x.seq) FROM mentions x
                            WHERE x.conversation_id = m.conversation_id AND x.user_id IN (m.user_id, 0)
                                AND x.seq > max(m.read_seq, m.joined_seq)
                        ) ELSE 0 END AS mentions
                    FROM members m JOIN conversations c ON c.id = m.conversation_id
                    LEFT JOIN members o
                        ON c.kind = 1 AND o.conversation_id = m.conversation_id AND o.user_id != m.user_id
                    WHERE m.user_id = ? ORDER BY c.last_ms DESC, c.id
                    """,
                arguments: [user.rawValue]
            ).map { row in
                var membership = Membership(
                    conversation: ConversationHeader(
                        groupName: row["group_name"],
                        userA: (row["user_a"] as Int64?).map(UserID.init(rawValue:)),
                        userB: (row["user_b"] as Int64?).map(UserID.init(rawValue:))
                    ),
                    lastSeq: row["last_seq"],
                    readSeq: row["read_seq"],
                    joinedSeq: row["joined_seq"],
                    peerDeliveredSeq: row["peer_delivered"],
                    peerReadSeq: row["peer_read"]
                )
                membership.title = row["title"]
                membership.notify = NotifyLevel(rawValue: row["notify"]) ?? .all
                membership.mentions = row["mentions"]
                membership.hiddenUnread = row["hidden_unread"]
                membership.lastVisibleSeq = row["last_visible"]
                return membership
            }
        }
    }

    package func namesAndLastSeen(of users: [UserID]) async throws -> [UserID: (name: String, lastSeenMs: Int64?)] {
        try await self.access { db in
            var result: [UserID: (name: String, lastSeenMs: Int64?)] = [:]
            let statement = try db.cachedStatement(
                sql: """
                    SELECT u.name, (SELECT MAX(d.last_seen_ms) FROM devices d WHERE d.user_id = u.id) AS seen
                    FROM users u WHERE u.id = ?
                    """
            )
            for user in users {
                if let row = try Row.fetchOne(statement, arguments: [user.rawValue]) {
                    result[user] = (row["name"], row["seen"])
                }
            }
            return result
        }
    }
}

extension SQLiteStore {
    /// A message a user can see, with its conversation (the user's id is the first argument).
    static let foundSQL = """
        SELECT m.conversation_id, m.seq, m.sender_id, m.sender_device_id, m.client_id, m.time_ms, m.body, m.recalled,
            m.edited_ms, m.reply_seq, c.name AS group_name, c.user_a, c.user_b
        FROM messages m
        JOIN members j ON j.conversation_id = m.conversation_id AND j.user_id = ? AND m.seq > j.joined_seq
            AND NOT EXISTS (
                SELECT 1 FROM hidden h WHERE h.user_id = j.user_id AND h.conversation_id = m.conversation_id
                    AND h.seq = m.seq)
        JOIN conversations c ON c.id = m.conversation_id

        """
}
