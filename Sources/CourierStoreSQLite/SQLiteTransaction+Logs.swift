package import CourierStore
internal import GRDB

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
                rows[user] = UserRow(cursor: row["log_cursor"], removed: (row["removed_ms"] as Int64?) != nil)
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
    /// A user's row as the rules read it: its log's newest cursor (0 before its first entry) and whether it was
    /// removed.
    static let userRowSQL = """
        SELECT COALESCE((SELECT cursor FROM log_heads WHERE user_id = users.id), 0) AS log_cursor, removed_ms
        FROM users WHERE id = ?
        """

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
