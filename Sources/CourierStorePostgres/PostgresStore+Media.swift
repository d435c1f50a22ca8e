public import CourierStore
internal import Logging
internal import PostgresNIO

extension PostgresStore {
    @discardableResult
    public func recordUpload(
        user: UserID,
        sha256: String,
        size: Int64,
        quota: Int64,
        nowMs: Int64
    ) async throws -> Int64 {
        let logger = self.logger
        return try await self.write(doing: "record an upload") { connection in
            // The user's row is locked first: two uploads finishing on two nodes at once are counted one after the
            // other against the quota.
            try await connection.run("SELECT id FROM users WHERE id = \(user.rawValue) FOR UPDATE", logger: logger)
            let usage = try await Self.mediaUsage(of: user, connection, logger: logger)
            let owned = try await connection.value(
                "SELECT size FROM media_owners WHERE user_id = \(user.rawValue) AND sha256 = \(sha256)",
                as: Int64.self,
                logger: logger
            )
            if owned != nil { return quota - usage }
            guard usage + size <= quota else {
                throw CourierStoreError(
                    .quotaExceeded,
                    "\(size) more bytes would put this user's media at \(usage + size) bytes; the quota is \(quota)"
                )
            }
            try await connection.run(
                """
                INSERT INTO media_owners (user_id, sha256, size, created_ms)
                VALUES (\(user.rawValue), \(sha256), \(size), \(nowMs)) ON CONFLICT DO NOTHING
                """,
                logger: logger
            )
            return quota - usage - size
        }
    }

    public func mediaUsage(of user: UserID) async throws -> Int64 {
        let logger = self.logger
        return try await self.read(doing: "read the media usage of \(user)") { connection in
            try await Self.mediaUsage(of: user, connection, logger: logger)
        }
    }

    private static func mediaUsage(
        of user: UserID,
        _ connection: PostgresConnection,
        logger: Logger
    ) async throws
        -> Int64
    {
        try await connection.value(
            "SELECT COALESCE(SUM(size), 0)::bigint FROM media_owners WHERE user_id = \(user.rawValue)",
            as: Int64.self,
            logger: logger
        ) ?? 0
    }

    public func uploadedSize(by user: UserID, sha256: String) async throws -> Int64? {
        let logger = self.logger
        return try await self.read(doing: "read an upload") { connection in
            try await connection.value(
                "SELECT size FROM media_owners WHERE user_id = \(user.rawValue) AND sha256 = \(sha256)",
                as: Int64.self,
                logger: logger
            )
        }
    }

    public func mediaAccess(for user: UserID, sha256: String) async throws -> MediaAccess? {
        let logger = self.logger
        return try await self.read(doing: "check access to media") { connection in
            if let row = try await connection.row(
                """
                SELECT o.size, mm.mime, mm.name
                FROM message_media mm
                JOIN members m ON m.conversation_id = mm.conversation_id AND m.user_id = \(user.rawValue)
                JOIN messages msg ON msg.conversation_id = mm.conversation_id AND msg.seq = mm.seq
                JOIN media_owners o ON o.user_id = msg.sender_id AND o.sha256 = mm.sha256
                WHERE mm.sha256 = \(sha256) AND mm.seq > m.joined_seq
                ORDER BY msg.time_ms DESC LIMIT 1
                """,
                logger: logger
            ) {
                let mime: String = try row.get("mime")
                return MediaAccess(
                    size: try row.get("size"),
                    mime: mime.isEmpty ? MediaAccess.defaultType : mime,
                    name: try row.get("name")
                )
            }
            guard
                let size = try await connection.value(
                    "SELECT size FROM media_owners WHERE user_id = \(user.rawValue) AND sha256 = \(sha256)",
                    as: Int64.self,
                    logger: logger
                )
            else { return nil }
            return MediaAccess(size: size, mime: MediaAccess.defaultType, name: "")
        }
    }
}
