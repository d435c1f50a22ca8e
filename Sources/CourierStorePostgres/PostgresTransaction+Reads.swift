package import CourierStore
internal import Logging
internal import PostgresNIO

extension PostgresTransaction {
    // MARK: Logs and history

    package func events(of user: UserID, after cursor: Int64, limit: Int) async throws -> [LogRead] {
        try await self.connection.rows(
            """
            SELECT \(unescaped: Self.logColumns)
            FROM (
                \(unescaped: LogEventKind.userLogSQL(
                    user: "\(user.rawValue)", after: "\(cursor)", limit: "\(limit)"))
                ORDER BY cursor LIMIT \(Int64(limit))
            ) e \(unescaped: Self.logJoins)
            ORDER BY e.cursor
            """,
            logger: self.logger
        ).map(Self.logRead)
    }

    package func events(of logs: [UserID: (after: Int64, upTo: Int64)], limit: Int) async throws -> [UserID: [LogRead]]
    {
        let logs = Array(logs)
        var reads: [UserID: [LogRead]] = [:]
        // One query for every log: each user's span through a lateral join on the log's own order (sorted again
        // below: SQL promises no order without an ORDER BY over the whole, which would sort the wide rows).
        for row in try await self.connection.rows(
            """
            SELECT a.u AS log_user, x.* FROM unnest(\(logs.map(\.key.rawValue))::bigint[],
                \(logs.map(\.value.after))::bigint[], \(logs.map(\.value.upTo))::bigint[]) AS a(u, o, t)
            CROSS JOIN LATERAL (
                SELECT \(unescaped: Self.logColumns)
                FROM (
                    \(unescaped: LogEventKind.userLogSQL(
                        user: "a.u", after: "a.o", upTo: "a.t", limit: "\(limit)"))
                    ORDER BY cursor LIMIT \(Int64(limit))
                ) e \(unescaped: Self.logJoins)
            ) x
            """,
            logger: self.logger
        ) {
            reads[UserID(rawValue: try row.get("log_user")), default: []].append(try Self.logRead(row))
        }
        return reads.mapValues { $0.sorted { $0.cursor < $1.cursor } }
    }

    /// The columns of a log read (``logRead(_:)``), over ``logJoins``.
    static let logColumns = """
        e.cursor, e.kind, e.seq AS event_seq, e.actor_id, e.detail,
               c.name AS group_name, c.user_a, c.user_b,
               m.sender_id, m.sender_device_id, m.client_id, m.time_ms, m.body, m.recalled,
               m.edited_ms, m.reply_seq, r.sender_id AS r_sender, r.client_id AS r_client_id, r.body AS r_body,
               r.recalled AS r_recalled,
               CASE WHEN r.seq IS NOT NULL THEN COALESCE(e.joined_seq, (SELECT joined_seq FROM members j
                   WHERE j.conversation_id = e.conversation_id AND j.user_id = e.user_id)) END AS reader_joined,
               e.key
        """

    /// What a log read joins its entries to: the conversation, the message, and the message it answers.
    static let logJoins = """
        LEFT JOIN conversations c ON c.id = e.conversation_id
        LEFT JOIN messages m ON e.kind IN (1, 2, 5, 6, 11) AND m.conversation_id = e.conversation_id AND m.seq = e.seq
        LEFT JOIN messages r ON e.kind = 1 AND r.conversation_id = m.conversation_id AND r.seq = m.reply_seq
            AND NOT EXISTS (
                SELECT 1 FROM hidden h WHERE h.user_id = e.user_id AND h.conversation_id = r.conversation_id
                    AND h.seq = r.seq)
        """

    /// A log entry of a row of ``logColumns``.
    static func logRead(_ row: PostgresRandomAccessRow) throws -> LogRead {
        let seq: Int64 = try row.get("event_seq")
        let message = try row.get("sender_id", as: Int64?.self).map { sender in
            var message = try Self.messageRead(row, seq: seq, sender: sender)
            message.reply = try Self.replyRead(row)
            return message
        }
        return LogRead(
            cursor: try row.get("cursor"),
            kind: try row.get("kind", as: Int64.self),
            seq: seq,
            actor: try row.get("actor_id", as: Int64?.self).map(UserID.init(rawValue:)),
            detail: try row.get("detail", as: Int64?.self),
            conversation: try Self.header(row),
            message: message,
            key: try row.get("key", as: String?.self),
            joinedSeq: try row.get("reader_joined", as: Int64?.self)
        )
    }

    /// A message's columns of a row (its seq and sender read already).
    static func messageRead(_ row: PostgresRandomAccessRow, seq: Int64, sender: Int64) throws -> MessageRead {
        MessageRead(
            seq: seq,
            sender: UserID(rawValue: sender),
            senderDevice: try row.get("sender_device_id", as: Int64?.self).map(DeviceID.init(rawValue:)),
            clientID: try row.get("client_id"),
            timeMs: try row.get("time_ms"),
            body: try row.bytes("body"),
            recalled: try row.get("recalled"),
            editedMs: try row.get("edited_ms", as: Int64?.self),
            replySeq: try row.get("reply_seq", as: Int64?.self)
        )
    }

    /// What a reply answers, from a row's `r_` columns.
    static func replyRead(_ row: PostgresRandomAccessRow) throws -> ReplyRead? {
        try row.get("r_sender", as: Int64?.self).map {
            ReplyRead(
                sender: UserID(rawValue: $0),
                clientID: try row.get("r_client_id"),
                body: try row.bytes("r_body"),
                recalled: try row.get("r_recalled")
            )
        }
    }

    static func header(_ row: PostgresRandomAccessRow) throws -> ConversationHeader {
        ConversationHeader(
            groupName: try row.get("group_name"),
            userA: try row.get("user_a", as: Int64?.self).map(UserID.init(rawValue:)),
            userB: try row.get("user_b", as: Int64?.self).map(UserID.init(rawValue:))
        )
    }

    package func names(of users: Set<UserID>) async throws -> [UserID: String] {
        var names: [UserID: String] = [:]
        var missing: [Int64] = []
        self.store.names.withLock { cache in
            for user in users {
                if let name = cache[user] { names[user] = name } else { missing.append(user.rawValue) }
            }
        }
        guard !missing.isEmpty else { return names }
        var found: [UserID: String] = [:]
        for row in try await self.connection.rows(
            "SELECT id, name FROM users WHERE id = ANY(\(missing.sorted()))",
            logger: self.logger
        ) {
            found[UserID(rawValue: try row.get("id"))] = try row.get("name", as: String.self)
        }
        // Names never change and users are never deleted.
        self.store.names.withLock { $0.merge(found) { old, _ in old } }
        return names.merging(found) { old, _ in old }
    }

    package func logCursors(of users: [UserID]) async throws -> [UserID: Int64] {
        var cursors: [UserID: Int64] = [:]
        for row in try await self.connection.rows(
            """
            SELECT u.id, COALESCE(h.cursor, 0) AS log_cursor FROM users u LEFT JOIN log_heads h ON h.user_id = u.id
            WHERE u.id = ANY(\(users.map(\.rawValue)))
            """,
            logger: self.logger
        ) {
            cursors[UserID(rawValue: try row.get("id"))] = try row.get("log_cursor", as: Int64.self)
        }
        return cursors
    }

    package func ackedCursor(of device: DeviceID) async throws -> Int64? {
        try await self.connection.value(
            "SELECT acked_cursor FROM devices WHERE id = \(device.rawValue)",
            as: Int64.self,
            logger: self.logger
        )
    }

    package func joinedSeq(of user: UserID, in conversation: Int64) async throws -> Int64? {
        try await self.connection.value(
            "SELECT joined_seq FROM members WHERE conversation_id = \(conversation) AND user_id = \(user.rawValue)",
            as: Int64.self,
            logger: self.logger
        )
    }

    package func receiptMarks(
        in conversation: Int64,
        excluding user: UserID,
        from seq: Int64,
        limit: Int
    ) async throws -> [MarkRow] {
        try await self.connection.rows(
            """
            SELECT * FROM (
                SELECT user_id, joined_seq, LEAST(delivered_seq, blocked_delivered_seq) AS delivered_seq,
                    LEAST(read_seq, blocked_at_seq) AS read_seq
                FROM members WHERE conversation_id = \(conversation) AND user_id <> \(user.rawValue)
            ) marks
            WHERE (delivered_seq >= \(seq) OR read_seq >= \(seq))
                AND (delivered_seq > joined_seq OR read_seq > joined_seq)
            ORDER BY read_seq DESC, delivered_seq DESC, user_id LIMIT \(limit)
            """,
            logger: self.logger
        ).map { row in
            MarkRow(
                user: UserID(rawValue: try row.get("user_id")),
                deliveredSeq: try row.get("delivered_seq"),
                readSeq: try row.get("read_seq"),
                joinedSeq: try row.get("joined_seq")
            )
        }
    }

    package func directID(of pair: UserPair) async throws -> Int64? {
        try await self.connection.value(
            "SELECT id FROM conversations WHERE user_a = \(pair.a.rawValue) AND user_b = \(pair.b.rawValue)",
            as: Int64.self,
            logger: self.logger
        )
    }

    package func messages(
        in conversation: Int64,
        after: Int64,
        before: Int64,
        limit: Int,
        hiddenFrom reader: UserID
    ) async throws -> [MessageRead] {
        try await self.connection.rows(
            """
            SELECT m.seq, m.sender_id, m.sender_device_id, m.client_id, m.time_ms, m.body, m.recalled, m.edited_ms,
                m.reply_seq, r.sender_id AS r_sender, r.client_id AS r_client_id, r.body AS r_body,
                r.recalled AS r_recalled
            FROM messages m
            LEFT JOIN messages r ON r.conversation_id = m.conversation_id AND r.seq = m.reply_seq
                AND NOT EXISTS (
                    SELECT 1 FROM hidden h WHERE h.user_id = \(reader.rawValue) AND h.conversation_id = r.conversation_id
                        AND h.seq = r.seq)
            WHERE m.conversation_id = \(conversation) AND m.seq < \(before) AND m.seq > \(after) AND NOT EXISTS (
                SELECT 1 FROM hidden h WHERE h.user_id = \(reader.rawValue) AND h.conversation_id = m.conversation_id
                    AND h.seq = m.seq)
            ORDER BY m.seq DESC LIMIT \(Int64(limit))
            """,
            logger: self.logger
        ).map { row in
            var message = try Self.messageRead(row, seq: try row.get("seq"), sender: try row.get("sender_id"))
            message.reply = try Self.replyRead(row)
            return message
        }
    }

    package func messages(
        withID id: String,
        from sender: UserID?,
        in conversation: Int64?,
        visibleTo user: UserID,
        limit: Int
    ) async throws -> [FoundMessage] {
        // PostgreSQL refuses a NUL in text: no stored id has one.
        guard !id.utf8.contains(0) else { return [] }
        return try await self.connection.rows(
            """
            SELECT m.conversation_id, m.seq, m.sender_id, m.sender_device_id, m.client_id, m.time_ms, m.body,
                m.recalled, m.edited_ms, m.reply_seq, c.name AS group_name, c.user_a, c.user_b
            FROM messages m
            JOIN members j ON j.conversation_id = m.conversation_id AND j.user_id = \(user.rawValue)
                AND m.seq > j.joined_seq AND NOT EXISTS (
                    SELECT 1 FROM hidden h WHERE h.user_id = j.user_id AND h.conversation_id = m.conversation_id
                        AND h.seq = m.seq)
            JOIN conversations c ON c.id = m.conversation_id
            WHERE m.client_id = \(id) AND (\(sender?.rawValue)::bigint IS NULL OR m.sender_id = \(sender?.rawValue))
                AND (\(conversation)::bigint IS NULL OR m.conversation_id = \(conversation))
            ORDER BY m.conversation_id, m.seq LIMIT \(Int64(limit))
            """,
            logger: self.logger
        ).map(Self.found)
    }

    package func message(in conversation: Int64, seq: Int64, visibleTo user: UserID) async throws -> FoundMessage? {
        try await self.connection.rows(
            """
            SELECT m.conversation_id, m.seq, m.sender_id, m.sender_device_id, m.client_id, m.time_ms, m.body,
                m.recalled, m.edited_ms, m.reply_seq, c.name AS group_name, c.user_a, c.user_b
            FROM messages m
            JOIN members j ON j.conversation_id = m.conversation_id AND j.user_id = \(user.rawValue)
                AND m.seq > j.joined_seq AND NOT EXISTS (
                    SELECT 1 FROM hidden h WHERE h.user_id = j.user_id AND h.conversation_id = m.conversation_id
                        AND h.seq = m.seq)
            JOIN conversations c ON c.id = m.conversation_id
            WHERE m.conversation_id = \(conversation) AND m.seq = \(seq)
            """,
            logger: self.logger
        ).map(Self.found).first
    }

    package func conversationIDs(of user: UserID) async throws -> [Int64] {
        try await self.connection.values(
            "SELECT conversation_id FROM members WHERE user_id = \(user.rawValue) ORDER BY conversation_id",
            as: Int64.self,
            logger: self.logger
        )
    }

    package func searchCandidates(
        _ tokens: [String],
        in conversations: [Int64]?,
        for user: UserID,
        before: Int64,
        limit: Int
    ) async throws -> [FoundMessage] {
        // A few conversations: each one's newest matches, looked for in that conversation alone, in two steps. First
        // down its newest ``searchWindow`` rows (its (conversation, seq) index, where a conversation's seq goes, its
        // index position goes too), checking each one's tokens: a cost bounded by the window, whatever the query.
        // Only where that finds too few (a query rare in the newest messages) the rest of the conversation, through
        // the GIN index. The union is read in order and stops at the limit: the second step runs only when the first
        // fell short. (The GIN index's bitmap of a common token holds much of the whole table; and with two tokens
        // or more, left to itself, the planner reads the conversation's rows in a bitmap and sorts them, whatever
        // the page needs: docs/BENCHMARKS.md, "Search", says what each cost.)
        if let conversations, conversations.count <= Self.maxWalkedConversations {
            return try await self.connection.rows(
                """
                SELECT s.doc, m.conversation_id, m.seq, m.sender_id, m.sender_device_id, m.client_id, m.time_ms,
                    m.body, m.recalled, m.edited_ms, m.reply_seq, c.name AS group_name, c.user_a, c.user_b
                FROM members j
                CROSS JOIN LATERAL (
                    SELECT u.doc, u.conversation_id, u.seq FROM (
                        (SELECT w.doc, w.conversation_id, w.seq FROM (
                            SELECT r.doc, r.conversation_id, r.seq, r.tokens FROM message_search r
                            WHERE r.conversation_id = j.conversation_id AND r.seq > j.joined_seq
                                AND r.doc < \(before)
                            ORDER BY r.seq DESC LIMIT \(Int64(Self.searchWindow))
                        ) w
                        WHERE w.tokens @> \(tokens)::text[]
                        ORDER BY w.seq DESC LIMIT \(Int64(limit)))
                        UNION ALL
                        (SELECT o.doc, o.conversation_id, o.seq FROM message_search o
                        WHERE o.conversation_id = j.conversation_id AND o.seq > j.joined_seq AND o.doc < \(before)
                            AND o.tokens @> \(tokens)::text[]
                            AND o.seq < (
                                SELECT f.seq FROM message_search f
                                WHERE f.conversation_id = j.conversation_id AND f.seq > j.joined_seq
                                    AND f.doc < \(before)
                                ORDER BY f.seq DESC OFFSET \(Int64(Self.searchWindow - 1)) LIMIT 1
                            )
                        ORDER BY o.seq DESC LIMIT \(Int64(limit)))
                    ) u
                    LIMIT \(Int64(limit))
                ) s
                JOIN messages m ON m.conversation_id = s.conversation_id AND m.seq = s.seq
                JOIN conversations c ON c.id = s.conversation_id
                WHERE j.user_id = \(user.rawValue) AND j.conversation_id = ANY(\(conversations)::bigint[])
                ORDER BY s.doc DESC LIMIT \(Int64(limit))
                """,
                logger: self.logger
            ).map { row in
                var found = try Self.found(row)
                found.doc = try row.get("doc")
                return found
            }
        }
        let scope = conversations?.map(SearchIndex.conversationToken) ?? []
        return try await self.connection.rows(
            """
            SELECT s.doc, m.conversation_id, m.seq, m.sender_id, m.sender_device_id, m.client_id, m.time_ms, m.body,
                m.recalled, m.edited_ms, m.reply_seq, c.name AS group_name, c.user_a, c.user_b
            FROM message_search s
            JOIN members j ON j.conversation_id = s.conversation_id AND j.user_id = \(user.rawValue)
            JOIN messages m ON m.conversation_id = s.conversation_id AND m.seq = s.seq
            JOIN conversations c ON c.id = s.conversation_id
            WHERE s.tokens @> \(tokens)::text[] AND (cardinality(\(scope)::text[]) = 0 OR s.tokens && \(scope)::text[])
                AND s.doc < \(before) AND s.seq > j.joined_seq
            ORDER BY s.doc DESC LIMIT \(Int64(limit))
            """,
            logger: self.logger
        ).map { row in
            var found = try Self.found(row)
            found.doc = try row.get("doc")
            return found
        }
    }

    /// The most conversations a search walks one by one; a user in more is searched through the GIN index.
    static let maxWalkedConversations = 64

    /// The newest rows of a conversation a search checks one by one before it turns to the GIN index for the rest.
    static let searchWindow = 1_000

    private static func found(_ row: PostgresRandomAccessRow) throws -> FoundMessage {
        FoundMessage(
            conversation: try row.get("conversation_id"),
            header: try Self.header(row),
            message: try Self.messageRead(row, seq: try row.get("seq"), sender: try row.get("sender_id"))
        )
    }

    package func reactionCounts(
        in conversation: Int64,
        from: Int64,
        to: Int64,
        reader: UserID
    ) async throws -> [Int64: [ReactionCount]] {
        var counts: [Int64: [ReactionCount]] = [:]
        for row in try await self.connection.rows(
            """
            SELECT seq, key, COUNT(*) AS count, bool_or(user_id = \(reader.rawValue)) AS mine
            FROM reactions WHERE conversation_id = \(conversation) AND seq >= \(from) AND seq <= \(to)
            GROUP BY seq, key ORDER BY seq, MIN(time_ms), key
            """,
            logger: self.logger
        ) {
            counts[try row.get("seq", as: Int64.self), default: []].append(
                ReactionCount(
                    key: try row.get("key"),
                    count: Int(try row.get("count", as: Int64.self)),
                    mine: try row.get("mine")
                )
            )
        }
        return counts
    }

    package func versions(in conversation: Int64, seq: Int64, limit: Int) async throws -> [MessageVersion] {
        try await self.connection.rows(
            """
            SELECT version, body, replaced_ms FROM message_versions
            WHERE conversation_id = \(conversation) AND seq = \(seq) ORDER BY version LIMIT \(Int64(limit))
            """,
            logger: self.logger
        ).map {
            MessageVersion(
                version: Int(try $0.get("version", as: Int32.self)),
                body: try $0.bytes("body"),
                replacedMs: try $0.get("replaced_ms")
            )
        }
    }

    package func memberships(of user: UserID) async throws -> [Membership] {
        try await self.connection.rows(
            """
            SELECT c.name AS group_name, c.user_a, c.user_b, c.last_seq, m.read_seq, m.joined_seq,
                COALESCE(LEAST(o.delivered_seq, o.blocked_delivered_seq), 0) AS peer_delivered,
                COALESCE(LEAST(o.read_seq, o.blocked_at_seq), 0) AS peer_read,
                CASE WHEN c.last_seq > GREATEST(m.read_seq, m.joined_seq) THEN (
                    SELECT COUNT(*) FROM hidden h
                    WHERE h.user_id = m.user_id AND h.conversation_id = m.conversation_id
                        AND h.seq > GREATEST(m.read_seq, m.joined_seq)
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
                c.title, m.notify::BIGINT AS notify,
                CASE WHEN c.kind = 2 AND c.last_seq > GREATEST(m.read_seq, m.joined_seq) THEN (
                    SELECT COUNT(DISTINCT x.seq) FROM mentions x
                    WHERE x.conversation_id = m.conversation_id AND x.user_id IN (m.user_id, 0)
                        AND x.seq > GREATEST(m.read_seq, m.joined_seq)
                ) ELSE 0 END AS mentions
            FROM members m JOIN conversations c ON c.id = m.conversation_id
            LEFT JOIN members o ON c.kind = 1 AND o.conversation_id = m.conversation_id AND o.user_id <> m.user_id
            WHERE m.user_id = \(user.rawValue) ORDER BY c.last_ms DESC, c.id
            """,
            logger: self.logger
        ).map { row in
            var membership = Membership(
                conversation: try Self.header(row),
                lastSeq: try row.get("last_seq"),
                readSeq: try row.get("read_seq"),
                joinedSeq: try row.get("joined_seq"),
                peerDeliveredSeq: try row.get("peer_delivered"),
                peerReadSeq: try row.get("peer_read")
            )
            membership.title = try row.get("title", as: String?.self)
            membership.notify = NotifyLevel(rawValue: try row.get("notify", as: Int64.self)) ?? .all
            membership.mentions = try row.get("mentions", as: Int64.self)
            membership.hiddenUnread = try row.get("hidden_unread", as: Int64.self)
            membership.lastVisibleSeq = try row.get("last_visible", as: Int64?.self)
            return membership
        }
    }

    package func namesAndLastSeen(of users: [UserID]) async throws -> [UserID: (name: String, lastSeenMs: Int64?)] {
        var result: [UserID: (name: String, lastSeenMs: Int64?)] = [:]
        for row in try await self.connection.rows(
            """
            SELECT u.id, u.name, MAX(d.last_seen_ms) AS seen FROM users u
            LEFT JOIN devices d ON d.user_id = u.id
            WHERE u.id = ANY(\(users.map(\.rawValue))) GROUP BY u.id
            """,
            logger: self.logger
        ) {
            result[UserID(rawValue: try row.get("id"))] = (try row.get("name"), try row.get("seen"))
        }
        return result
    }
}
