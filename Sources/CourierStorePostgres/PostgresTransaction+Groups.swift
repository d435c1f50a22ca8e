package import CourierStore
internal import Logging
internal import PostgresNIO

extension PostgresTransaction {
    // MARK: Logs

    package func lockUsers(_ users: [UserID]) async throws -> [UserID: UserRow] {
        try await Self.users(users.map(\.rawValue).sorted(), lock: .wait, self.connection, logger: self.logger)
    }

    /// How a batch takes rows (users' in ``users(_:lock:_:logger:)``, conversations' in a group commit).
    enum RowLock {
        /// Locked, waiting for another transaction that holds one.
        case wait
        /// Locked, for a lock taken out of a batch's order: a row another transaction holds is not waited for
        /// (PostgreSQL refuses at once with `lock_not_available`, and the write runs again from a new plan), so a
        /// lock taken out of order can never close a circle of waiting transactions.
        case nowait
        /// Read without a lock: a user whose log only grows (its entries take their positions under the counter),
        /// or a conversation only acknowledgements deliver into (they write only their users' member rows).
        case none

        /// The clause that takes the lock, of the rows of `table` (an alias in the query) or of every table in it.
        ///
        /// `FOR NO KEY UPDATE`: the lockers wait for each other, but not a foreign key's check, which only shares
        /// the key (a message's insert checks its sender's row). A batch holding its acknowledging users' rows
        /// would otherwise wait for another node's batch that inserts their messages while that one waits for the
        /// first's (each node commits the messages of the conversations it owns, whoever sends them).
        func clause(of table: String? = nil) -> String {
            let of = table.map { " OF \($0)" } ?? ""
            return switch self {
            case .wait: "FOR NO KEY UPDATE\(of)"
            case .nowait: "FOR NO KEY UPDATE\(of) NOWAIT"
            case .none: ""
            }
        }
    }

    /// Reads users' rows, in the order of their ids, locking them as asked: their logs' newest cursors
    /// (``UserRow/cursor``: another transaction may append to a log meanwhile, without the user's lock) and whether
    /// they were removed.
    ///
    /// - Throws: `storage-failed` when one of them does not exist.
    static func users(
        _ ids: [Int64],
        lock: RowLock,
        _ connection: PostgresConnection,
        logger: Logger
    ) async throws -> [UserID: UserRow] {
        guard !ids.isEmpty else { return [:] }
        let clause = lock.clause(of: "u")
        let rows = try await connection.rows(
            """
            SELECT u.id, COALESCE(h.cursor, 0) AS log_cursor, u.removed_ms IS NOT NULL AS removed,
                u.push_targets > 0 AS pushable
            FROM users u LEFT JOIN log_heads h ON h.user_id = u.id WHERE u.id = ANY(\(ids))
            ORDER BY u.id \(unescaped: clause)
            """,
            logger: logger
        )
        var found: [UserID: UserRow] = [:]
        for row in rows {
            found[UserID(rawValue: try row.get("id"))] = UserRow(
                cursor: try row.get("log_cursor"),
                removed: try row.get("removed", as: Bool.self),
                pushable: try row.get("pushable", as: Bool.self)
            )
        }
        if let missing = ids.first(where: { found[UserID(rawValue: $0)] == nil }) {
            throw CourierStoreError(.storageFailed, "user \(missing) is missing")
        }
        return found
    }

    package func writeLog(_ log: inout LogWrites) async throws {
        try await Self.writeLog(&log, self.connection, logger: self.logger)
    }

    /// Takes the entries' positions from the counter, then, in one statement, writes the entries and the grown logs'
    /// newest cursors (`log_heads`) and reads the cursors they had, which each user's fresh events follow.
    ///
    /// The counter's row stays locked until the transaction ends, so every log's positions are committed in the
    /// order they are taken, on every node, with no horizon to track. A log's head is written only under the
    /// counter, and no user's row is needed: a batch appends to a member's log without locking the member, and the
    /// cursor it read for the member earlier may be behind by then (another node may have appended since); the head
    /// read here, under the counter, is exact. What the counter costs: the transactions of every node that append
    /// take turns for these two statements and their commits (docs/BENCHMARKS.md, "Step 9").
    ///
    /// Nothing here waits for a row another transaction may hold while it waits for the counter: `events` and
    /// `log_heads` have no foreign keys, and only holders of the counter write them.
    static func writeLog(_ log: inout LogWrites, _ connection: PostgresConnection, logger: Logger) async throws {
        guard log.count > 0 else {
            log.positions(after: 0)
            return
        }
        guard
            let last = try await connection.value(
                "UPDATE log_positions SET last = last + \(log.count) RETURNING last",
                as: Int64.self,
                logger: logger
            )
        else { throw CourierStoreError(.storageFailed, "the log's counter is missing") }
        log.positions(after: last - log.count)
        let events = log.events
        let shared = log.groupEvents
        let grown = log.book.grown
        // One snapshot, taken after the counter's lock was granted: `old` sees every head committed before.
        var heads: [UserID: Int64] = [:]
        for row in try await connection.rows(
            """
            WITH old AS (
                SELECT user_id, cursor FROM log_heads WHERE user_id = ANY(\(grown.map(\.user.rawValue))::bigint[])
            ), entries AS (
                INSERT INTO events (user_id, cursor, kind, conversation_id, seq, actor_id, detail, key)
                SELECT user_id, cursor, kind, conversation_id, seq, NULLIF(actor_id, 0), NULLIF(detail, 0),
                    NULLIF(key, '')
                FROM unnest(\(events.map(\.user.rawValue))::bigint[], \(events.map(\.cursor))::bigint[],
                    \(events.map(\.kind.rawValue))::smallint[], \(events.map(\.conversation))::bigint[],
                    \(events.map(\.seq))::bigint[], \(events.map { $0.actor?.rawValue ?? 0 })::bigint[],
                    \(events.map { $0.detail ?? 0 })::smallint[], \(events.map { $0.key ?? "" })::text[])
                    AS e(user_id, cursor, kind, conversation_id, seq, actor_id, detail, key)
            ), shared AS (
                INSERT INTO group_events (conversation_id, cursor, seq, sender_id)
                SELECT * FROM unnest(\(shared.map(\.conversation))::bigint[], \(shared.map(\.cursor))::bigint[],
                    \(shared.map(\.seq))::bigint[], \(shared.map(\.sender.rawValue))::bigint[])
            ), heads AS (
                INSERT INTO log_heads (user_id, cursor)
                SELECT * FROM unnest(\(grown.map(\.user.rawValue))::bigint[], \(grown.map(\.cursor))::bigint[])
                ON CONFLICT (user_id) DO UPDATE SET cursor = excluded.cursor
            )
            SELECT user_id, cursor FROM old
            """,
            logger: logger
        ) {
            heads[UserID(rawValue: try row.get("user_id"))] = try row.get("cursor", as: Int64.self)
        }
        log.book.follow(heads)
    }

    // MARK: Groups and members

    package func insertGroup(name: String, owner: UserID, madeBy maker: UserID?, nowMs: Int64) async throws -> Int64? {
        // Two nodes making the name at once: the unique index on lower(name) lets one in.
        try await self.connection.value(
            """
            INSERT INTO conversations (kind, name, owner_id, creator_id, created_ms)
            VALUES (2, \(name), \(owner.rawValue), \(maker?.rawValue)::bigint, \(nowMs)) ON CONFLICT DO NOTHING RETURNING id
            """,
            as: Int64.self,
            logger: self.logger
        )
    }

    package func group(named name: String, locking: Bool) async throws -> GroupRow? {
        let row =
            locking
            ? try await self.connection.row(
                """
                SELECT id, owner_id, last_seq, title FROM conversations WHERE kind = 2 AND lower(name) = lower(\(name))
                FOR UPDATE
                """,
                logger: self.logger
            )
            : try await self.connection.row(
                "SELECT id, owner_id, last_seq, title FROM conversations WHERE kind = 2 AND lower(name) = lower(\(name))",
                logger: self.logger
            )
        return try row.map(Self.group)
    }

    package func groups(of user: UserID, locking: Bool) async throws -> [GroupRow] {
        let rows =
            locking
            ? try await self.connection.rows(
                """
                SELECT c.id, c.owner_id, c.last_seq, c.title FROM conversations c JOIN members m ON m.conversation_id = c.id
                WHERE m.user_id = \(user.rawValue) AND c.kind = 2 ORDER BY c.id FOR UPDATE OF c
                """,
                logger: self.logger
            )
            : try await self.connection.rows(
                """
                SELECT c.id, c.owner_id, c.last_seq, c.title FROM conversations c JOIN members m ON m.conversation_id = c.id
                WHERE m.user_id = \(user.rawValue) AND c.kind = 2 ORDER BY c.id
                """,
                logger: self.logger
            )
        return try rows.map(Self.group)
    }

    static func group(_ row: PostgresRandomAccessRow) throws -> GroupRow {
        GroupRow(
            id: try row.get("id"),
            owner: try row.get("owner_id", as: Int64?.self).map(UserID.init(rawValue:)),
            lastSeq: try row.get("last_seq"),
            title: try row.get("title", as: String?.self)
        )
    }

    package func members(of conversations: [Int64]) async throws -> [Int64: [UserID]] {
        guard !conversations.isEmpty else { return [:] }
        var members: [Int64: [UserID]] = Dictionary(uniqueKeysWithValues: conversations.map { ($0, []) })
        for row in try await self.connection.rows(
            """
            SELECT conversation_id, user_id FROM members WHERE conversation_id = ANY(\(conversations))
            ORDER BY conversation_id, user_id
            """,
            logger: self.logger
        ) {
            members[try row.get("conversation_id"), default: []].append(UserID(rawValue: try row.get("user_id")))
        }
        return members
    }

    package func insertMembers(
        _ users: [UserID],
        into conversation: Int64,
        atSeq seq: Int64,
        addedBy: UserID?
    ) async throws {
        guard !users.isEmpty else { return }
        try await self.connection.run(
            """
            INSERT INTO members (conversation_id, user_id, joined_seq, read_seq, delivered_seq, added_by)
            SELECT \(conversation), user_id, \(seq), \(seq), \(seq), \(addedBy?.rawValue)::bigint
            FROM unnest(\(users.map(\.rawValue))::bigint[]) AS m(user_id)
            """,
            logger: self.logger
        )
        // Each member's span in the group opens at the seq it joined at, and at the log's counter as the last commit
        // left it (a rejoin at the seq it left at reopens the span, from where it began): the group's row is
        // locked, so its messages up to the seq have their positions, and later ones take theirs after this commits.
        try await self.connection.run(
            """
            INSERT INTO group_spans (user_id, conversation_id, from_seq, to_seq, from_cursor, to_cursor)
            SELECT user_id, \(conversation), \(seq), 9223372036854775807, (SELECT last FROM log_positions),
                9223372036854775807
            FROM unnest(\(users.map(\.rawValue))::bigint[]) AS m(user_id)
            ON CONFLICT (user_id, conversation_id, from_seq) DO UPDATE SET to_seq = excluded.to_seq,
                to_cursor = excluded.to_cursor
            """,
            logger: self.logger
        )
    }

    package func groups(
        of member: UserID,
        addedBy: UserID,
        locking: Bool
    ) async throws -> [(row: GroupRow, name: String)] {
        let rows = try await self.connection.rows(
            """
            SELECT c.id, c.owner_id, c.last_seq, c.title, c.name FROM conversations c
            JOIN members m ON m.conversation_id = c.id
            WHERE m.user_id = \(member.rawValue) AND m.added_by = \(addedBy.rawValue) AND c.kind = 2 ORDER BY c.id
            \(unescaped: locking ? "FOR UPDATE OF c" : "")
            """,
            logger: self.logger
        )
        return try rows.map { (try Self.group($0), try $0.get("name", as: String.self)) }
    }

    package func groupsMade(by user: UserID) async throws -> Int {
        Int(
            try await self.connection.value(
                """
                SELECT count(*) FROM conversations c WHERE c.kind = 2 AND c.creator_id = \(user.rawValue)
                AND EXISTS (SELECT 1 FROM members m WHERE m.conversation_id = c.id)
                """,
                as: Int64.self,
                logger: self.logger
            ) ?? 0
        )
    }

    package func deleteMember(_ user: UserID, from conversation: Int64) async throws {
        try await self.connection.run(
            "DELETE FROM members WHERE conversation_id = \(conversation) AND user_id = \(user.rawValue)",
            logger: self.logger
        )
        // The open span closes at the group's last seq as the member leaves, and at the log's counter as the last
        // commit left it: the conversation's row is locked, so every message of the group up to that seq has
        // committed its position, and any later one takes its position after this transaction commits.
        try await self.connection.run(
            """
            UPDATE group_spans SET to_seq = (SELECT last_seq FROM conversations WHERE id = \(conversation)),
                to_cursor = (SELECT last FROM log_positions)
            WHERE conversation_id = \(conversation) AND user_id = \(user.rawValue) AND to_seq = 9223372036854775807
            """,
            logger: self.logger
        )
    }

    package func companions(of user: UserID, directOnly: Bool, with peer: UserID?) async throws -> [Companion] {
        try await self.connection.rows(
            """
            SELECT other.user_id, c.kind, mine.sent AS mine_sent, other.sent AS theirs_sent,
                mine.read_seq > 0 AS mine_read, other.read_seq > 0 AS theirs_read FROM members mine
            JOIN conversations c ON c.id = mine.conversation_id
            JOIN members other ON other.conversation_id = mine.conversation_id AND other.user_id <> mine.user_id
            WHERE mine.user_id = \(user.rawValue) AND (c.kind = 1 OR NOT \(directOnly))
                AND (other.user_id = \(peer?.rawValue) OR \(peer?.rawValue)::bigint IS NULL)
            """,
            logger: self.logger
        ).map { row in
            Companion(
                user: UserID(rawValue: try row.get("user_id")),
                inGroup: try row.get("kind", as: Int64.self) == 2,
                mineSent: try row.get("mine_sent"),
                theirsSent: try row.get("theirs_sent"),
                mineRead: try row.get("mine_read"),
                theirsRead: try row.get("theirs_read")
            )
        }
    }

    package func groupWithMembers(named name: String) async throws -> Group? {
        guard
            let row = try await self.connection.row(
                """
                SELECT c.id, c.name, c.last_seq, u.name AS owner FROM conversations c
                LEFT JOIN users u ON u.id = c.owner_id WHERE c.kind = 2 AND lower(c.name) = lower(\(name))
                """,
                logger: self.logger
            )
        else { return nil }
        let id: Int64 = try row.get("id")
        let members = try await self.connection.values(
            """
            SELECT u.name FROM members m JOIN users u ON u.id = m.user_id WHERE m.conversation_id = \(id)
            ORDER BY lower(u.name) COLLATE "C"
            """,
            as: String.self,
            logger: self.logger
        )
        return Group(
            name: try row.get("name"),
            owner: try row.get("owner"),
            members: members,
            lastSeq: UInt64(try row.get("last_seq", as: Int64.self))
        )
    }

    package func groupNames() async throws -> [String] {
        try await self.connection.values(
            "SELECT name FROM conversations WHERE kind = 2 ORDER BY lower(name) COLLATE \"C\"",
            as: String.self,
            logger: self.logger
        )
    }
}

extension PostgresTransaction {
    // MARK: Roles

    package func memberRoles(of group: Int64) async throws -> [MemberRole] {
        try await self.connection.rows(
            """
            SELECT user_id, role::BIGINT AS role, joined_seq FROM members WHERE conversation_id = \(group)
            ORDER BY joined_seq, user_id
            """,
            logger: self.logger
        ).map {
            MemberRole(
                user: UserID(rawValue: try $0.get("user_id")),
                role: GroupRole(rawValue: try $0.get("role", as: Int64.self)) ?? .member,
                joinedSeq: try $0.get("joined_seq")
            )
        }
    }

    package func setRole(_ role: GroupRole, of user: UserID, in group: Int64) async throws {
        try await self.connection.run(
            """
            UPDATE members SET role = \(Int16(role.rawValue)) WHERE conversation_id = \(group) AND user_id = \(user.rawValue)
            """,
            logger: self.logger
        )
    }

    package func setOwner(_ owner: UserID, of group: Int64) async throws {
        try await self.connection.run(
            "UPDATE conversations SET owner_id = \(owner.rawValue) WHERE id = \(group)",
            logger: self.logger
        )
    }

    package func setTitle(_ title: String?, of group: Int64) async throws {
        try await self.connection.run(
            "UPDATE conversations SET title = \(title) WHERE id = \(group)",
            logger: self.logger
        )
    }

    package func setNotify(_ level: NotifyLevel, of user: UserID, in conversation: Int64) async throws -> NotifyLevel? {
        // The level before: the row as it was, under the lock the update takes.
        try await self.connection.value(
            """
            UPDATE members m SET notify = \(Int16(level.rawValue)) FROM members o
            WHERE m.conversation_id = \(conversation) AND m.user_id = \(user.rawValue)
                AND o.conversation_id = m.conversation_id AND o.user_id = m.user_id
            RETURNING o.notify::BIGINT
            """,
            as: Int64.self,
            logger: self.logger
        ).map { NotifyLevel(rawValue: $0) ?? .all }
    }

    package func claimSkeleton(_ skeleton: String, for user: UserID) async throws -> Bool {
        // Two nodes claiming one skeleton at once: its key lets one in.
        try await self.connection.value(
            """
            INSERT INTO name_skeletons (skeleton, user_id) VALUES (\(skeleton), \(user.rawValue))
            ON CONFLICT DO NOTHING RETURNING user_id
            """,
            as: Int64.self,
            logger: self.logger
        ) != nil
    }

    package func skeletonTaken(_ skeleton: String) async throws -> Bool {
        try await self.connection.value(
            "SELECT EXISTS (SELECT 1 FROM name_skeletons WHERE skeleton = \(skeleton))",
            as: Bool.self,
            logger: self.logger
        ) ?? false
    }
}
