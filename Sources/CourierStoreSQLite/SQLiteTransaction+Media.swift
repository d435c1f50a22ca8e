package import CourierStore
internal import Foundation
internal import GRDB

extension SQLiteTransaction {
    // MARK: Media

    package func mediaUsage(of user: UserID) async throws -> Int64 {
        try await self.access { db in
            try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT COALESCE(SUM(size), 0) FROM media_owners WHERE user_id = ?"),
                arguments: [user.rawValue]
            ) ?? 0
        }
    }

    package func uploadedSize(by user: UserID, sha256: String) async throws -> Int64? {
        try await self.access { db in
            try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT size FROM media_owners WHERE user_id = ? AND sha256 = ?"),
                arguments: [user.rawValue, sha256]
            )
        }
    }

    package func insertUpload(user: UserID, sha256: String, size: Int64, nowMs: Int64) async throws {
        try await self.update { db in
            try db.cachedStatement(
                sql: "INSERT OR IGNORE INTO media_owners (user_id, sha256, size, created_ms) VALUES (?, ?, ?, ?)"
            ).execute(arguments: [user.rawValue, sha256, size, nowMs])
        }
    }

    package func deleteUnsentUpload(user: UserID, sha256: String) async throws {
        try await self.update { db in
            try db.cachedStatement(
                sql: """
                    DELETE FROM media_owners WHERE user_id = ? AND sha256 = ? AND NOT EXISTS (
                        SELECT 1 FROM message_media mm
                        JOIN messages m ON m.conversation_id = mm.conversation_id AND m.seq = mm.seq
                        WHERE mm.sha256 = ? AND m.sender_id = ?
                    )
                    """
            ).execute(arguments: [user.rawValue, sha256, sha256, user.rawValue])
        }
    }

    /// Nothing: one writer at a time.
    package func lockMedia(_ sha256s: [String], exclusive: Bool) async throws {}

    package func referencedMedia(_ sha256s: [String], ownedSinceMs: Int64) async throws -> Set<String> {
        guard !sha256s.isEmpty else { return [] }
        return try await self.access { db in
            let list = "(" + Array(repeating: "?", count: sha256s.count).joined(separator: ",") + ")"
            let found = try String.fetchAll(
                db,
                sql: """
                    SELECT sha256 FROM message_media WHERE sha256 IN \(list)
                    UNION SELECT p.avatar_sha256 FROM profiles p JOIN users u ON u.id = p.user_id
                        WHERE u.removed_ms IS NULL AND p.avatar_sha256 IN \(list)
                    UNION SELECT p.thumb_sha256 FROM profiles p JOIN users u ON u.id = p.user_id
                        WHERE u.removed_ms IS NULL AND p.thumb_sha256 IN \(list)
                    UNION SELECT sha256 FROM media_owners WHERE sha256 IN \(list) AND created_ms >= ?
                    """,
                arguments: StatementArguments(sha256s + sha256s + sha256s + sha256s) + [ownedSinceMs]
            )
            return Set(found)
        }
    }

    package func deleteMediaOwners(of sha256: String) async throws {
        try await self.update { db in
            try db.execute(sql: "DELETE FROM media_owners WHERE sha256 = ?", arguments: [sha256])
        }
    }

    package func insertDoomedMedia(_ sha256: String, nowMs: Int64) async throws -> Bool {
        try await self.update { db in
            try db.execute(
                sql: "INSERT OR IGNORE INTO media_doomed (sha256, since_ms) VALUES (?, ?)",
                arguments: [sha256, nowMs]
            )
            return db.changesCount > 0
        }
    }

    package func touchUpload(user: UserID, sha256: String, nowMs: Int64) async throws {
        try await self.update { db in
            try db.execute(
                sql: "UPDATE media_owners SET created_ms = ? WHERE user_id = ? AND sha256 = ? AND created_ms < ?",
                arguments: [nowMs, user.rawValue, sha256, nowMs]
            )
        }
    }

    package func isDoomedMedia(_ sha256: String) async throws -> Bool {
        try await self.access { db in
            try Bool.fetchOne(db, sql: "SELECT 1 FROM media_doomed WHERE sha256 = ?", arguments: [sha256]) ?? false
        }
    }

    package func doomedMedia(beforeMs: Int64) async throws -> [String] {
        try await self.access { db in
            try String.fetchAll(
                db,
                sql: "SELECT sha256 FROM media_doomed WHERE since_ms < ? ORDER BY sha256",
                arguments: [beforeMs]
            )
        }
    }

    package func deleteDoomedMedia(_ sha256: String) async throws {
        try await self.update { db in
            try db.execute(sql: "DELETE FROM media_doomed WHERE sha256 = ?", arguments: [sha256])
        }
    }

    package func mediaCarriers(of sha256: String, for user: UserID) async throws -> [MediaCarrier] {
        try await self.access { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT mm.seq, m.joined_seq, msg.time_ms, o.size, mm.mime, mm.name
                        FROM message_media mm
                        JOIN members m ON m.conversation_id = mm.conversation_id AND m.user_id = ?
                        JOIN messages msg ON msg.conversation_id = mm.conversation_id AND msg.seq = mm.seq
                        JOIN media_owners o ON o.user_id = msg.sender_id AND o.sha256 = mm.sha256
                        WHERE mm.sha256 = ?
                        """
                ),
                arguments: [user.rawValue, sha256]
            ).map { row in
                MediaCarrier(
                    seq: row[0],
                    joinedSeq: row[1],
                    timeMs: row[2],
                    size: row[3],
                    mime: row[4],
                    name: row[5]
                )
            }
        }
    }
}
