internal import GRDB

/// Appends entries to users' event logs inside one write transaction, numbering each user's entries from the
/// cursor stored in `users.log_cursor`, and stores the new cursors when the transaction's work is done.
struct EventLogWriter {
    enum Kind: Int64 {
        case message = 1
        case recall = 2
        case receipt = 3
        case membership = 4
    }

    /// The newest cursor of each user whose log grew.
    private(set) var appended: [UserID: UInt64] = [:]
    private var cursors: [UserID: Int64] = [:]

    mutating func append(
        to user: UserID,
        _ kind: Kind,
        conversation: Int64,
        seq: Int64,
        actor: UserID? = nil,
        detail: Int64? = nil,
        _ db: Database
    ) throws {
        let current: Int64
        if let cached = self.cursors[user] {
            current = cached
        } else {
            current =
                try Int64.fetchOne(
                    db.cachedStatement(sql: "SELECT log_cursor FROM users WHERE id = ?"),
                    arguments: [user.rawValue]
                ) ?? 0
        }
        let cursor = current + 1
        self.cursors[user] = cursor
        self.appended[user] = UInt64(cursor)
        try db.cachedStatement(
            sql:
                "INSERT INTO events (user_id, cursor, kind, conversation_id, seq, actor_id, detail) VALUES (?, ?, ?, ?, ?, ?, ?)"
        ).execute(arguments: [user.rawValue, cursor, kind.rawValue, conversation, seq, actor?.rawValue, detail])
    }

    /// Stores every grown log's newest cursor.
    func finish(_ db: Database) throws {
        let update = try db.cachedStatement(sql: "UPDATE users SET log_cursor = ? WHERE id = ?")
        for (user, cursor) in self.cursors {
            try update.execute(arguments: [cursor, user.rawValue])
        }
    }
}
