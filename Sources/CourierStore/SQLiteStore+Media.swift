internal import GRDB

/// What a user may know of a stored media file: its size, and the type and name a message gave it.
public struct MediaAccess: Hashable, Sendable {
    public var size: Int64
    /// The MIME type of the newest message carrying it that the user may see (`application/octet-stream` when none
    /// was given, or when the user sees it only as its uploader).
    public var mime: String
    public var name: String

    public init(size: Int64, mime: String, name: String) {
        self.size = size
        self.mime = mime
        self.name = name
    }
}

extension MediaAccess {
    /// The MIME type served for media whose sender gave none.
    public static let defaultType = "application/octet-stream"
}

extension SQLiteStore {
    /// Records that a user finished uploading a file: it may now send it, and it counts against its quota (once,
    /// however often it is uploaded).
    ///
    /// - Parameter quota: The most bytes of media the user may have; checked in the same transaction.
    /// - Returns: The bytes of quota left.
    /// - Throws: `quota-exceeded` (nothing recorded), `storage-failed`.
    @discardableResult
    public func recordUpload(
        user: UserID,
        sha256: String,
        size: Int64,
        quota: Int64,
        nowMs: Int64
    ) async throws
        -> Int64
    {
        try await self.write { db in
            let usage = try Self.mediaUsage(of: user, db)
            let owned = try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT size FROM media_owners WHERE user_id = ? AND sha256 = ?"),
                arguments: [user.rawValue, sha256]
            )
            if owned != nil { return quota - usage }
            guard usage + size <= quota else {
                throw CourierStoreError(
                    .quotaExceeded,
                    "\(size) more bytes would put this user's media at \(usage + size) bytes; the quota is \(quota)"
                )
            }
            try db.cachedStatement(
                sql: "INSERT OR IGNORE INTO media_owners (user_id, sha256, size, created_ms) VALUES (?, ?, ?, ?)"
            ).execute(arguments: [user.rawValue, sha256, size, nowMs])
            return quota - usage - size
        }
    }

    /// The bytes of media a user has uploaded (each file once).
    public func mediaUsage(of user: UserID) async throws -> Int64 {
        try await self.read { db in try Self.mediaUsage(of: user, db) }
    }

    private static func mediaUsage(of user: UserID, _ db: Database) throws -> Int64 {
        try Int64.fetchOne(
            db.cachedStatement(sql: "SELECT COALESCE(SUM(size), 0) FROM media_owners WHERE user_id = ?"),
            arguments: [user.rawValue]
        ) ?? 0
    }

    /// The size of a file the user has uploaded, or nil when it has not.
    public func uploadedSize(by user: UserID, sha256: String) async throws -> Int64? {
        try await self.read { db in
            try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT size FROM media_owners WHERE user_id = ? AND sha256 = ?"),
                arguments: [user.rawValue, sha256]
            )
        }
    }

    /// Whether a user may fetch a media file, and what it may know of it: it may when a message carrying it is in one
    /// of its conversations, sent after it joined (and not recalled), or when it uploaded the file itself.
    ///
    /// - Returns: nil when the user may not see it, exactly as when there is no such media, so that ids cannot be
    ///   probed.
    public func mediaAccess(for user: UserID, sha256: String) async throws -> MediaAccess? {
        try await self.read { db in
            if let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT o.size, mm.mime, mm.name
                        FROM message_media mm
                        JOIN members m ON m.conversation_id = mm.conversation_id AND m.user_id = ?
                        JOIN messages msg ON msg.conversation_id = mm.conversation_id AND msg.seq = mm.seq
                        JOIN media_owners o ON o.user_id = msg.sender_id AND o.sha256 = mm.sha256
                        WHERE mm.sha256 = ? AND mm.seq > m.joined_seq
                        ORDER BY msg.time_ms DESC LIMIT 1
                        """
                ),
                arguments: [user.rawValue, sha256]
            ) {
                let mime: String = row[1]
                return MediaAccess(size: row[0], mime: mime.isEmpty ? MediaAccess.defaultType : mime, name: row[2])
            }
            guard
                let size = try Int64.fetchOne(
                    db.cachedStatement(sql: "SELECT size FROM media_owners WHERE user_id = ? AND sha256 = ?"),
                    arguments: [user.rawValue, sha256]
                )
            else { return nil }
            return MediaAccess(size: size, mime: MediaAccess.defaultType, name: "")
        }
    }
}
