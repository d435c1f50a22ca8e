package import CourierStore
internal import PostgresNIO

extension PostgresTransaction {
    // MARK: Pins

    package func lockConversation(_ id: Int64) async throws {
        try await self.connection.run(
            "SELECT 1 FROM conversations WHERE id = \(id) FOR NO KEY UPDATE",
            logger: self.logger
        )
    }

    package func pins(in conversation: Int64) async throws -> [(seq: Int64, by: UserID, pinnedMs: Int64)] {
        try await self.connection.rows(
            """
            SELECT seq, pinned_by, pinned_ms FROM pins WHERE conversation_id = \(conversation)
            ORDER BY pinned_ms DESC, seq DESC
            """,
            logger: self.logger
        ).map {
            (
                seq: try $0.get("seq"), by: UserID(rawValue: try $0.get("pinned_by")),
                pinnedMs: try $0.get("pinned_ms")
            )
        }
    }

    package func setPin(in conversation: Int64, seq: Int64, by user: UserID, on: Bool, nowMs: Int64) async throws {
        if on {
            try await self.connection.run(
                """
                INSERT INTO pins (conversation_id, seq, pinned_by, pinned_ms)
                VALUES (\(conversation), \(seq), \(user.rawValue), \(nowMs)) ON CONFLICT DO NOTHING
                """,
                logger: self.logger
            )
        } else {
            try await self.connection.run(
                "DELETE FROM pins WHERE conversation_id = \(conversation) AND seq = \(seq)",
                logger: self.logger
            )
        }
    }
}
