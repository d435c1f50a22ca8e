internal import CourierStore
internal import Logging
internal import NIOCore
internal import PostgresNIO

/// The work on rows that some migrations do beyond their statements (``PostgresSchema/Migration/rows``).
extension PostgresSchema {
    /// Migration `v12-skeletons`, as SQLite's: every name's skeleton by today's ``NameSkeleton``, the oldest of names
    /// that read alike keeping it.
    static func workOutSkeletons(on connection: PostgresConnection, logger: Logger) async throws {
        let users = try await connection.rows("SELECT id, name FROM users ORDER BY id", logger: logger)
        var ids: [Int64] = []
        var skeletons: [String] = []
        for user in users {
            ids.append(try user.get("id"))
            skeletons.append(NameSkeleton.of(try user.get("name", as: String.self)))
        }
        try await connection.run(
            """
            INSERT INTO name_skeletons (skeleton, user_id)
            SELECT DISTINCT ON (skeleton) skeleton, id FROM unnest(\(skeletons)::text[], \(ids)::bigint[])
                AS u(skeleton, id)
            ORDER BY skeleton, id
            """,
            logger: logger
        )
    }

    /// Migration `v11-media-types`, as SQLite's (Sources/CourierStoreSQLite/Schema.swift): stored media types in
    /// their one spelling (``MediaTypeRepair``), in `message_media` and in the bodies that carry them.
    @Sendable
    static func repairMediaTypes(on connection: PostgresConnection, logger: Logger) async throws {
        // Streamed, keeping only the rows to change: the table may be large, and few need it.
        var changed: [(sha256: String, conversation: Int64, seq: Int64, repaired: String)] = []
        let rows = try await connection.query(
            "SELECT sha256, conversation_id, seq, mime FROM message_media",
            logger: logger
        )
        for try await (sha256, conversation, seq, stored) in rows.decode((String, Int64, Int64, String).self) {
            let repaired = MediaTypeRepair.type(stored)
            if repaired != stored { changed.append((sha256, conversation, seq, repaired)) }
        }
        for (sha256, conversation, seq, repaired) in changed {
            try await connection.run(
                """
                UPDATE message_media SET mime = \(repaired)
                WHERE sha256 = \(sha256) AND conversation_id = \(conversation) AND seq = \(seq)
                """,
                logger: logger
            )
            let bodies = try await connection.rows(
                "SELECT body FROM messages WHERE conversation_id = \(conversation) AND seq = \(seq)",
                logger: logger
            )
            if let body = try bodies.first?.bytes("body"), let repairedBody = MediaTypeRepair.body(body) {
                try await connection.run(
                    """
                    UPDATE messages SET body = \(ByteBuffer(bytes: repairedBody))
                    WHERE conversation_id = \(conversation) AND seq = \(seq)
                    """,
                    logger: logger
                )
            }
            let versions = try await connection.rows(
                "SELECT version, body FROM message_versions WHERE conversation_id = \(conversation) AND seq = \(seq)",
                logger: logger
            )
            for version in versions {
                guard let repairedBody = MediaTypeRepair.body(try version.bytes("body")) else { continue }
                let number: Int64 = try version.get("version")
                try await connection.run(
                    """
                    UPDATE message_versions SET body = \(ByteBuffer(bytes: repairedBody))
                    WHERE conversation_id = \(conversation) AND seq = \(seq) AND version = \(number)
                    """,
                    logger: logger
                )
            }
        }
    }
}
