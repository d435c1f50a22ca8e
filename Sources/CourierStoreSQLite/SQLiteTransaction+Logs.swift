package import CourierStore
internal import GRDB
internal import GRDBSQLite

extension SQLiteTransaction {
    // MARK: Logs

    package func lockUsers(_ users: [UserID]) async throws -> [UserID: UserRow] {
        try await self.access { db in
            var rows: [UserID: UserRow] = [:]
            let statement = try db.cachedStatement(sql: SQLiteStore.userRowSQL)
            for user in users {
                guard let row = try Row.fetchOne(statement, arguments: [user.rawValue]) else {
                    throw CourierStoreError(.storageFailed, "user \(user.rawValue) is missing")
                }
                rows[user] = UserRow(
                    cursor: row["log_cursor"],
                    removed: (row["removed_ms"] as Int64?) != nil,
                    pushable: row["push_targets"] > 0
                )
            }
            return rows
        }
    }

    package func writeLog(_ log: inout LogWrites) async throws {
        let unwritten = log
        log = try await self.update { db in
            var log = unwritten
            try SQLiteStore.writeLog(&log, db)
            return log
        }
    }
}

extension SQLiteStore {
    /// A user's row as the rules read it: its log's newest cursor (0 before its first entry), whether it was
    /// removed, and whether it has somewhere to be pushed.
    static let userRowSQL = """
        SELECT COALESCE((SELECT cursor FROM log_heads WHERE user_id = users.id), 0) AS log_cursor, removed_ms,
            push_targets
        FROM users WHERE id = ?
        """

    /// A message event's message (and an edit's, a recall's, a reaction's), and for a reply, what it answers and
    /// where the log's user joined.
    static let eventsSQL = """
        SELECT e.cursor, e.kind, e.seq AS event_seq, e.actor_id, e.detail,
               c.name AS group_name, c.user_a, c.user_b,
               m.sender_id, m.sender_device_id, m.client_id, m.time_ms, m.body, m.recalled,
               m.edited_ms, m.reply_seq, r.sender_id, r.client_id, r.body, r.recalled,
               CASE WHEN r.seq IS NOT NULL THEN COALESCE(e.joined_seq, (SELECT joined_seq FROM members j
                   WHERE j.conversation_id = e.conversation_id AND j.user_id = e.user_id)) END,
               e.key
        FROM (\(LogEventKind.userLogSQL(user: "?1", after: "?2", limit: "?3")) ORDER BY cursor LIMIT ?3) e
        LEFT JOIN conversations c ON c.id = e.conversation_id
        LEFT JOIN messages m ON e.kind IN (1, 2, 5, 6, 11) AND m.conversation_id = e.conversation_id AND m.seq = e.seq
        LEFT JOIN messages r ON e.kind = 1 AND r.conversation_id = m.conversation_id AND r.seq = m.reply_seq
            AND NOT EXISTS (
                SELECT 1 FROM hidden h WHERE h.user_id = e.user_id AND h.conversation_id = r.conversation_id
                    AND h.seq = r.seq)
        ORDER BY e.cursor
        """

    /// How many of SQLite's virtual machine steps one page of a user's log takes to read: the work the read does,
    /// counted by SQLite whatever the machine's speed (for the test that a page's cost does not grow with a
    /// group's backlog).
    package func eventsQuerySteps(for user: UserID, after cursor: Int64, limit: Int) async throws -> Int {
        try await self.read { db in
            let statement = try db.makeStatement(sql: Self.eventsSQL)
            let rows = try Row.fetchCursor(statement, arguments: [user.rawValue, cursor, limit])
            while try rows.next() != nil {}
            return Int(sqlite3_stmt_status(statement.sqliteStatement, SQLITE_STMTSTATUS_VM_STEP, 0))
        }
    }

    /// SQLite's plan for the sync query, one line per step (for the test that holds the sync's cost down).
    package func explainEventsQuery() async throws -> [String] {
        try await self.read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + Self.eventsSQL, arguments: [1, 0, 10]).map {
                $0["detail"] as String
            }
        }
    }

    /// Takes the entries' positions from the counter, then writes them and the grown logs' newest cursors. One
    /// writer at a time: positions are taken in commit order.
    static func writeLog(_ log: inout LogWrites, _ db: Database) throws {
        guard log.count > 0 else {
            log.positions(after: 0)
            return
        }
        guard
            let last = try Int64.fetchOne(
                db.cachedStatement(sql: "UPDATE log_positions SET last = last + ? RETURNING last"),
                arguments: [log.count]
            )
        else { throw CourierStoreError(.storageFailed, "the log's counter is missing") }
        log.positions(after: last - log.count)
        let insert = try db.cachedStatement(
            sql: """
                INSERT INTO events (user_id, cursor, kind, conversation_id, seq, actor_id, detail, key)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                """
        )
        for event in log.events {
            try insert.execute(arguments: [
                event.user.rawValue, event.cursor, event.kind.rawValue, event.conversation, event.seq,
                event.actor?.rawValue, event.detail, event.key,
            ])
        }
        if !log.groupEvents.isEmpty {
            let shared = try db.cachedStatement(
                sql: "INSERT INTO group_events (conversation_id, cursor, seq, sender_id) VALUES (?, ?, ?, ?)"
            )
            for event in log.groupEvents {
                try shared.execute(arguments: [event.conversation, event.cursor, event.seq, event.sender.rawValue])
            }
        }
        let cursorUpdate = try db.cachedStatement(
            sql: """
                INSERT INTO log_heads (user_id, cursor) VALUES (?, ?)
                ON CONFLICT (user_id) DO UPDATE SET cursor = excluded.cursor
                """
        )
        for (user, cursor) in log.book.grown {
            try cursorUpdate.execute(arguments: [user.rawValue, cursor])
        }
    }
}
