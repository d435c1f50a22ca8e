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
