package import CourierStore
internal import GRDB

extension SQLiteTransaction {
    // MARK: Pins

    /// Nothing to lock: SQLite has one writer.
    package func lockConversation(_ id: Int64) async throws {}

    package func pins(in conversation: Int64) async throws -> [(seq: Int64, by: UserID, pinnedMs: Int64)] {
        try await self.access { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT seq, pinned_by, pinned_ms FROM pins WHERE conversation_id = ?
                        ORDER BY pinned_ms DESC, seq DESC
                        """
                ),
                arguments: [conversation]
            ).map { (seq: $0["seq"], by: UserID(rawValue: $0["pinned_by"]), pinnedMs: $0["pinned_ms"]) }
        }
    }

    package func setPin(in conversation: Int64, seq: Int64, by user: UserID, on: Bool, nowMs: Int64) async throws {
        try await self.update { db in
            if on {
                try db.execute(
                    sql: """
                        INSERT OR IGNORE INTO pins (conversation_id, seq, pinned_by, pinned_ms) VALUES (?, ?, ?, ?)
                        """,
                    arguments: [conversation, seq, user.rawValue, nowMs]
                )
            } else {
                try db.execute(
                    sql: "DELETE FROM pins WHERE conversation_id = ? AND seq = ?",
                    arguments: [conversation, seq]
                )
            }
        }
    }
}
