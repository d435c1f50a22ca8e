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
    /// transaction.
    private(set) var stored: [UserID: Int64] = [:]
    /// The locked users that were removed, as their rows said under the lock.
    private(set) var removed: Set<UserID> = []
    private var events: [EventRow] = []

    init(logger: Logger) {
        self.logger = logger
    }

    /// Locks users' rows, in the order of their ids, and reads their cursors (users locked already are skipped).
    ///
    /// - Throws: `storage-failed` when one of them does not exist.
    mutating func lock(_ users: some Sequence<UserID>, _ connection: PostgresConnection) async throws {
        let ids = Set(users).filter { self.stored[$0] == nil }.map(\.rawValue).sorted()
        for (user, row) in try await Self.lockRows(ids, nowait: false, connection, logger: self.logger) {
            self.stored[user] = row.cursor
            if row.removed { self.removed.insert(user) }
            self.book.start(user, at: row.cursor)
        }
    }

    /// Locks users' rows, in the order of their ids, and reads their cursors and whether they were removed.
    ///
    /// - Parameter nowait: For a lock taken out of a batch's order: a row another transaction holds is not waited
    ///   for (PostgreSQL refuses at once with `lock_not_available`, and the write runs again from a new plan), so a
    ///   lock taken out of order can never close a circle of waiting transactions.
    /// - Throws: `storage-failed` when one of them does not exist.
    static func lockRows(
        _ ids: [Int64],
        nowait: Bool,
        _ connection: PostgresConnection,
        logger: Logger
    ) async throws -> [UserID: UserRow] {
        guard !ids.isEmpty else { return [:] }
        let rows =
            nowait
            ? try await connection.rows(
                """
                SELECT id, log_cursor, removed_ms IS NOT NULL AS removed FROM users WHERE id = ANY(\(ids))
                ORDER BY id FOR UPDATE NOWAIT
                """,
                logger: logger
            )
            : try await connection.rows(
                """
                SELECT id, log_cursor, removed_ms IS NOT NULL AS removed FROM users WHERE id = ANY(\(ids))
                ORDER BY id FOR UPDATE
                """,
                logger: logger
            )
        var found: [UserID: UserRow] = [:]
        for row in rows {
            found[UserID(rawValue: try row.get("id"))] = UserRow(
                cursor: try row.get("log_cursor"),
                removed: try row.get("removed", as: Bool.self)
            )
        }
        if let missing = ids.first(where: { found[UserID(rawValue: $0)] == nil }) {
            throw CourierStoreError(.storageFailed, "user \(missing) is missing")
        }
        return found
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

    /// Appends an entry to a user's log, whose row must be locked.
    mutating func append(
        to user: UserID,
        _ kind: LogEventKind,
        conversation: Int64,
        seq: Int64,
        actor: UserID? = nil,
        detail: Int64? = nil,
        event: @autoclosure () -> StoredEvent.Kind? = nil
    ) {
        let cursor = self.book.next(for: user, event: event())
        self.events.append(
            EventRow(
                user: user,
                cursor: cursor,
                kind: kind,
                conversation: conversation,
                seq: seq,
                actor: actor,
                detail: detail
            )
        )
    }

    /// Writes the entries and every grown log's newest cursor.
    func finish(_ connection: PostgresConnection) async throws {
        try await Self.insert(self.events, grown: self.book.grown, connection, logger: self.logger)
    }

    /// Writes log entries, in one statement, and the grown logs' newest cursors, in another.
    static func insert(
        _ events: [EventRow],
        grown: [(user: UserID, cursor: Int64)],
        _ connection: PostgresConnection,
        logger: Logger
    ) async throws {
        guard !events.isEmpty else { return }
        try await connection.run(
            """
            INSERT INTO events (user_id, cursor, kind, conversation_id, seq, actor_id, detail)
            SELECT user_id, cursor, kind, conversation_id, seq, NULLIF(actor_id, 0), NULLIF(detail, 0)
            FROM unnest(\(events.map(\.user.rawValue))::bigint[], \(events.map(\.cursor))::bigint[],
                \(events.map(\.kind.rawValue))::smallint[], \(events.map(\.conversation))::bigint[],
                \(events.map(\.seq))::bigint[], \(events.map { $0.actor?.rawValue ?? 0 })::bigint[],
                \(events.map { $0.detail ?? 0 })::smallint[])
                AS e(user_id, cursor, kind, conversation_id, seq, actor_id, detail)
            """,
            logger: logger
        )
        try await connection.run(
            """
            UPDATE users SET log_cursor = g.cursor
            FROM unnest(\(grown.map(\.user.rawValue))::bigint[], \(grown.map(\.cursor))::bigint[]) AS g(id, cursor)
            WHERE users.id = g.id
            """,
            logger: logger
        )
    }
}
