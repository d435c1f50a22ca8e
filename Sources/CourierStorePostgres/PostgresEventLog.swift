internal import CourierStore
internal import Logging
internal import PostgresNIO

/// Appends entries to users' event logs inside one PostgreSQL transaction. A user's entries are numbered on from
/// its stored cursor (by an ``EventLogBook``), read with the user's row locked: until the transaction ends, no other
/// node appends to that log, so each log stays gap-free and its entries become visible in order. The rows are
/// written together at the end (``finish(_:)``), with the new cursors.
struct PostgresEventLog {
    var book = EventLogBook()
    let logger: Logger
    /// The cursor each locked user had when its row was locked: the newest of its events stored before this
    /// transaction (an acknowledgement covers no more).
    private(set) var stored: [UserID: Int64] = [:]
    /// The locked users that were removed, as their rows said under the lock.
    private(set) var removed: Set<UserID> = []
    private var users: [Int64] = []
    private var cursors: [Int64] = []
    private var kinds: [Int64] = []
    private var conversations: [Int64] = []
    private var seqs: [Int64] = []
    /// 0 for none (ids start at 1; details are 1 or 2), NULL in the table.
    private var actors: [Int64] = []
    private var details: [Int64] = []

    init(logger: Logger) {
        self.logger = logger
    }

    /// Locks users' rows, in the order of their ids, and reads their cursors (users locked already are skipped).
    ///
    /// - Parameter nowait: For a lock taken out of the batch's order: a row another transaction holds is not waited
    ///   for (PostgreSQL refuses at once with `lock_not_available`, and the write runs again from a new plan), so a
    ///   lock taken out of order can never close a circle of waiting transactions.
    /// - Throws: `storage-failed` when one of them does not exist.
    mutating func lock(
        _ users: some Sequence<UserID>,
        nowait: Bool = false,
        _ connection: PostgresConnection
    ) async throws {
        let ids = Set(users).filter { self.stored[$0] == nil }.map(\.rawValue).sorted()
        guard !ids.isEmpty else { return }
        let rows =
            nowait
            ? try await connection.rows(
                """
                SELECT id, log_cursor, removed_ms IS NOT NULL AS removed FROM users WHERE id = ANY(\(ids))
                ORDER BY id FOR UPDATE NOWAIT
                """,
                logger: self.logger
            )
            : try await connection.rows(
                """
                SELECT id, log_cursor, removed_ms IS NOT NULL AS removed FROM users WHERE id = ANY(\(ids))
                ORDER BY id FOR UPDATE
                """,
                logger: self.logger
            )
        for row in rows {
            let user = UserID(rawValue: try row.get("id"))
            let cursor: Int64 = try row.get("log_cursor")
            self.stored[user] = cursor
            if try row.get("removed", as: Bool.self) { self.removed.insert(user) }
            self.book.start(user, at: cursor)
        }
        if let missing = ids.first(where: { self.stored[UserID(rawValue: $0)] == nil }) {
            throw CourierStoreError(.storageFailed, "user \(missing) is missing")
        }
    }

    /// Locks the rows of every member of some conversations (whose rows the caller locked first), and of `others`.
    mutating func lockMembers(
        of conversations: [Int64],
        and others: [UserID] = [],
        _ connection: PostgresConnection
    ) async throws {
        let members =
            conversations.isEmpty
            ? []
            : try await connection.values(
                "SELECT DISTINCT user_id FROM members WHERE conversation_id = ANY(\(conversations))",
                as: Int64.self,
                logger: self.logger
            )
        try await self.lock(members.map(UserID.init(rawValue:)) + others, connection)
    }

    /// Appends an entry to a user's log. A user whose row is not locked yet is locked now, out of the ids' order
    /// and without waiting (`nowait`): this happens only for the members of a conversation a batch's plan did not
    /// foresee (itself locked out of order).
    mutating func append(
        to user: UserID,
        _ kind: LogEventKind,
        conversation: Int64,
        seq: Int64,
        actor: UserID? = nil,
        detail: Int64? = nil,
        event: @autoclosure () -> StoredEvent.Kind? = nil,
        _ connection: PostgresConnection
    ) async throws {
        if self.stored[user] == nil { try await self.lock([user], nowait: true, connection) }
        let cursor = self.book.next(for: user, event: event())
        self.users.append(user.rawValue)
        self.cursors.append(cursor)
        self.kinds.append(kind.rawValue)
        self.conversations.append(conversation)
        self.seqs.append(seq)
        self.actors.append(actor?.rawValue ?? 0)
        self.details.append(detail ?? 0)
    }

    /// Writes the entries and every grown log's newest cursor.
    func finish(_ connection: PostgresConnection) async throws {
        guard !self.users.isEmpty else { return }
        try await connection.run(
            """
            INSERT INTO events (user_id, cursor, kind, conversation_id, seq, actor_id, detail)
            SELECT user_id, cursor, kind, conversation_id, seq, NULLIF(actor_id, 0), NULLIF(detail, 0)
            FROM unnest(\(self.users)::bigint[], \(self.cursors)::bigint[], \(self.kinds)::smallint[],
                \(self.conversations)::bigint[], \(self.seqs)::bigint[], \(self.actors)::bigint[],
                \(self.details)::smallint[]) AS e(user_id, cursor, kind, conversation_id, seq, actor_id, detail)
            """,
            logger: self.logger
        )
        let grown = self.book.grown
        try await connection.run(
            """
            UPDATE users SET log_cursor = g.cursor
            FROM unnest(\(grown.map(\.user.rawValue))::bigint[], \(grown.map(\.cursor))::bigint[]) AS g(id, cursor)
            WHERE users.id = g.id
            """,
            logger: self.logger
        )
    }
}
