package import CourierStore
internal import Logging
internal import PostgresNIO

extension PostgresTransaction {
    // MARK: Media

    package func mediaUsage(of user: UserID) async throws -> Int64 {
        try await self.connection.value(
            "SELECT COALESCE(SUM(size), 0)::bigint FROM media_owners WHERE user_id = \(user.rawValue)",
            as: Int64.self,
            logger: self.logger
        ) ?? 0
    }

    package func uploadedSize(by user: UserID, sha256: String) async throws -> Int64? {
        try await self.connection.value(
            "SELECT size FROM media_owners WHERE user_id = \(user.rawValue) AND sha256 = \(sha256)",
            as: Int64.self,
            logger: self.logger
        )
    }

    package func insertUpload(user: UserID, sha256: String, size: Int64, nowMs: Int64) async throws {
        try await self.connection.run(
            """
            INSERT INTO media_owners (user_id, sha256, size, created_ms)
            VALUES (\(user.rawValue), \(sha256), \(size), \(nowMs)) ON CONFLICT DO NOTHING
            """,
            logger: self.logger
        )
    }

    package func deleteUnsentUpload(user: UserID, sha256: String) async throws {
        try await self.connection.run(
            """
            DELETE FROM media_owners WHERE user_id = \(user.rawValue) AND sha256 = \(sha256) AND NOT EXISTS (
                SELECT 1 FROM message_media mm
                JOIN messages m ON m.conversation_id = mm.conversation_id AND m.seq = mm.seq
                WHERE mm.sha256 = \(sha256) AND m.sender_id = \(user.rawValue)
            )
            """,
            logger: self.logger
        )
    }

    package func mediaCarriers(of sha256: String, for user: UserID) async throws -> [MediaCarrier] {
        try await self.connection.rows(
            """
            SELECT mm.seq, m.joined_seq, msg.time_ms, o.size, mm.mime, mm.name
            FROM message_media mm
            JOIN members m ON m.conversation_id = mm.conversation_id AND m.user_id = \(user.rawValue)
            JOIN messages msg ON msg.conversation_id = mm.conversation_id AND msg.seq = mm.seq
            JOIN media_owners o ON o.user_id = msg.sender_id AND o.sha256 = mm.sha256
            WHERE mm.sha256 = \(sha256)
            """,
            logger: self.logger
        ).map { row in
            MediaCarrier(
                seq: try row.get("seq"),
                joinedSeq: try row.get("joined_seq"),
                timeMs: try row.get("time_ms"),
                size: try row.get("size"),
                mime: try row.get("mime"),
                name: try row.get("name")
            )
        }
    }
}
