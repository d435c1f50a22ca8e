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

    /// The class of the advisory locks files are taken under (`pg_advisory_xact_lock(class, hashtext(sha256))`).
    static let mediaLockClass: Int32 = 0x4D47_4343

    /// Advisory locks on the files' digests (two digests that hash alike share one: they only wait for each other
    /// more), taken in order.
    package func lockMedia(_ sha256s: [String], exclusive: Bool) async throws {
        try await Self.lockMedia(sha256s, exclusive: exclusive, self.connection, logger: self.logger)
    }

    static func lockMedia(
        _ sha256s: [String],
        exclusive: Bool,
        _ connection: PostgresConnection,
        logger: Logger
    ) async throws {
        let sorted = Array(Set(sha256s)).sorted()
        guard !sorted.isEmpty else { return }
        if exclusive {
            try await connection.run(
                """
                SELECT pg_advisory_xact_lock(\(Self.mediaLockClass), hashtext(s))
                FROM unnest(\(sorted)::text[]) AS s ORDER BY hashtext(s)
                """,
                logger: logger
            )
        } else {
            try await connection.run(
                """
                SELECT pg_advisory_xact_lock_shared(\(Self.mediaLockClass), hashtext(s))
                FROM unnest(\(sorted)::text[]) AS s ORDER BY hashtext(s)
                """,
                logger: logger
            )
        }
    }

    package func referencedMedia(_ sha256s: [String], ownedSinceMs: Int64) async throws -> Set<String> {
        guard !sha256s.isEmpty else { return [] }
        let rows = try await self.connection.rows(
            """
            SELECT sha256 FROM message_media WHERE sha256 = ANY(\(sha256s))
            UNION SELECT p.avatar_sha256 FROM profiles p JOIN users u ON u.id = p.user_id
                WHERE u.removed_ms IS NULL AND p.avatar_sha256 = ANY(\(sha256s))
            UNION SELECT p.thumb_sha256 FROM profiles p JOIN users u ON u.id = p.user_id
                WHERE u.removed_ms IS NULL AND p.thumb_sha256 = ANY(\(sha256s))
            UNION SELECT sha256 FROM media_owners WHERE sha256 = ANY(\(sha256s)) AND created_ms >= \(ownedSinceMs)
            """,
            logger: self.logger
        )
        return Set(try rows.map { try $0.get("sha256", as: String.self) })
    }

    package func deleteMediaOwners(of sha256: String) async throws {
        try await self.connection.run("DELETE FROM media_owners WHERE sha256 = \(sha256)", logger: self.logger)
    }

    package func insertDoomedMedia(_ sha256: String, nowMs: Int64) async throws -> Bool {
        try await self.connection.value(
            """
            INSERT INTO media_doomed (sha256, since_ms) VALUES (\(sha256), \(nowMs)) ON CONFLICT DO NOTHING
            RETURNING 1::integer
            """,
            as: Int32.self,
            logger: self.logger
        ) != nil
    }

    package func touchUpload(user: UserID, sha256: String, nowMs: Int64) async throws {
        try await self.connection.run(
            """
            UPDATE media_owners SET created_ms = \(nowMs)
            WHERE user_id = \(user.rawValue) AND sha256 = \(sha256) AND created_ms < \(nowMs)
            """,
            logger: self.logger
        )
    }

    package func isDoomedMedia(_ sha256: String) async throws -> Bool {
        try await self.connection.value(
            "SELECT 1::integer FROM media_doomed WHERE sha256 = \(sha256)",
            as: Int32.self,
            logger: self.logger
        ) != nil
    }

    package func doomedMedia(beforeMs: Int64) async throws -> [String] {
        try await self.connection.rows(
            "SELECT sha256 FROM media_doomed WHERE since_ms < \(beforeMs) ORDER BY sha256",
            logger: self.logger
        ).map { try $0.get("sha256", as: String.self) }
    }

    package func deleteDoomedMedia(_ sha256: String) async throws {
        try await self.connection.run("DELETE FROM media_doomed WHERE sha256 = \(sha256)", logger: self.logger)
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
