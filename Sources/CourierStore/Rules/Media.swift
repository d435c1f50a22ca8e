// The rules of media: who may send and fetch a file, and the upload quota.

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

extension StoreBackend {
    /// Records that a user finished uploading a file: it may now send it, and it counts against its quota (once,
    /// however often it is uploaded). Uploads finishing at once (on several nodes) are counted one after the other.
    ///
    /// - Parameter quota: The most bytes of media the user may have; checked in the same transaction.
    /// - Returns: The bytes of quota left.
    /// - Throws: `quota-exceeded` (nothing recorded), `upload-busy` (the file is being deleted as one nothing named:
    ///   MediaCollection.swift), `storage-failed`.
    @discardableResult
    public func recordUpload(
        user: UserID,
        sha256: String,
        size: Int64,
        quota: Int64,
        nowMs: Int64
    ) async throws -> Int64 {
        try await self.transaction(doing: "record an upload") { transaction in
            // The user's row first: its uploads are counted under its lock (and a group commit takes users' rows
            // before files' locks: the same order here).
            _ = try await transaction.lockUsers([user])
            // A file being deleted is not recorded: the bytes just uploaded may have been dropped for it.
            try await transaction.lockMedia([sha256], exclusive: false)
            if try await transaction.isDoomedMedia(sha256) {
                throw CourierStoreError(.uploadBusy, "the same file is being deleted just now; upload it again")
            }
            let usage = try await transaction.mediaUsage(of: user)
            if try await transaction.uploadedSize(by: user, sha256: sha256) != nil {
                // Uploaded again (or forwarded): young again, so the collection leaves it for the send that follows.
                try await transaction.touchUpload(user: user, sha256: sha256, nowMs: nowMs)
                return quota - usage
            }
            guard usage + size <= quota else {
                throw CourierStoreError(
                    .quotaExceeded,
                    "\(size) more bytes would put this user's media at \(usage + size) bytes; the quota is \(quota)"
                )
            }
            try await transaction.insertUpload(user: user, sha256: sha256, size: size, nowMs: nowMs)
            return quota - usage - size
        }
    }

    /// Takes back an upload recorded for a forward that did not go (refused, or a resend of a copy made before):
    /// the user no longer holds the file, nor counts it in its quota, unless a message it sent carries it.
    public func forgetUnsentUpload(user: UserID, sha256: String) async throws {
        try await self.transaction(doing: "take back an upload") { transaction in
            _ = try await transaction.lockUsers([user])
            try await transaction.deleteUnsentUpload(user: user, sha256: sha256)
        }
    }

    /// The bytes of media a user has uploaded (each file once).
    public func mediaUsage(of user: UserID) async throws -> Int64 {
        try await self.reading(doing: "read the media usage of \(user)") { transaction in
            try await transaction.mediaUsage(of: user)
        }
    }

    /// The size of a file the user has uploaded, or nil when it has not.
    public func uploadedSize(by user: UserID, sha256: String) async throws -> Int64? {
        try await self.reading(doing: "read an upload") { transaction in
            try await transaction.uploadedSize(by: user, sha256: sha256)
        }
    }

    /// Whether a user may fetch a media file, and what it may know of it: it may when a message carrying it is in one
    /// of its conversations, sent after it joined (and not recalled), or when it uploaded the file itself. The type
    /// and name are the newest such message's.
    ///
    /// - Returns: nil when the user may not see it, exactly as when there is no such media, so that ids cannot be
    ///   probed.
    public func mediaAccess(for user: UserID, sha256: String) async throws -> MediaAccess? {
        try await self.reading(doing: "check access to media") { transaction in
            let visible = try await transaction.mediaCarriers(of: sha256, for: user).filter { $0.seq > $0.joinedSeq }
            if let newest = visible.max(by: { $0.timeMs < $1.timeMs }) {
                return MediaAccess(
                    size: newest.size,
                    mime: newest.mime.isEmpty ? MediaAccess.defaultType : newest.mime,
                    name: newest.name
                )
            }
            if let size = try await transaction.uploadedSize(by: user, sha256: sha256) {
                return MediaAccess(size: size, mime: MediaAccess.defaultType, name: "")
            }
            // A profile's picture: every user may see it, as every user may find the profile.
            guard let picture = try await transaction.profileImage(sha256: sha256) else { return nil }
            return MediaAccess(size: picture.size, mime: picture.mime, name: "")
        }
    }
}
