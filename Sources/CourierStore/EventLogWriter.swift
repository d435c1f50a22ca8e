internal import GRDB

/// Appends entries to users' event logs inside one SQLite write transaction (numbered by an ``EventLogBook`` from
/// the cursor stored in `users.log_cursor`), and stores the new cursors when the transaction's work is done.
struct EventLogWriter {
    typealias Kind = LogEventKind

    var book = EventLogBook()

    /// The newest cursor of each user whose log grew.
    var appended: [UserID: UInt64] { self.book.appended }
    /// The events appended (``EventLogBook/fresh``).
    var fresh: [UserID: [StoredEvent]] { self.book.fresh }

    mutating func append(
        to user: UserID,
        _ kind: Kind,
        conversation: Int64,
        seq: Int64,
        actor: UserID? = nil,
        detail: Int64? = nil,
        event: @autoclosure () -> StoredEvent.Kind? = nil,
        _ db: Database
    ) throws {
        if !self.book.knows(user) {
            let stored = try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT log_cursor FROM users WHERE id = ?"),
                arguments: [user.rawValue]
            )
            self.book.start(user, at: stored ?? 0)
        }
        let cursor = self.book.next(for: user, event: event())
        try db.cachedStatement(
            sql:
                "INSERT INTO events (user_id, cursor, kind, conversation_id, seq, actor_id, detail) VALUES (?, ?, ?, ?, ?, ?, ?)"
        ).execute(arguments: [user.rawValue, cursor, kind.rawValue, conversation, seq, actor?.rawValue, detail])
    }

    /// Stores every grown log's newest cursor.
    func finish(_ db: Database) throws {
        let update = try db.cachedStatement(sql: "UPDATE users SET log_cursor = ? WHERE id = ?")
        for (user, cursor) in self.book.grown {
            try update.execute(arguments: [cursor, user.rawValue])
        }
    }
}
