public import CourierStore
public import Foundation
public import Logging
package import NIOCore
internal import PostgresNIO

/// Media bytes in the database every node shares, so that a file uploaded through one node is served by any other,
/// and an upload broken off on one node resumes on another.
///
/// An upload is a row of `media_uploads` and its bytes are rows of `media_chunks` (of at most `mediaRowBytes`, 256 KiB;
/// an append, ``preferredAppendBytes`` or 4 MiB, writes several in one transaction that does not wait for the disk),
/// numbered by a content id. Finishing an upload checks its size
/// and digest and hands its content over to a row of `media_blobs` under its digest, in one transaction that
/// copies no bytes; when the same bytes are stored already, the upload's rows go instead. An append holds its
/// upload's row while it writes, and writes only at the offset the row says and into the content its writer
/// started on: two nodes writing one upload at once cannot interleave (the second is refused with
/// `invalid-request`), nor can an append land on an upload deleted meanwhile, or on the upload started again
/// after it (whose bytes a writer that hashed its own as it sent them would otherwise file under their digest).
///
/// Starts that name a ``BlobAdmission`` take turns per owner under an advisory lock held until their transaction
/// commits, on every node, so the owner's limits see every upload recorded before.
///
/// Reads fetch a range of one chunk at a time (`substring` of a column stored uncompressed, which PostgreSQL reads
/// without reading the rest of it), so that memory holds at most ``BlobStore/Configuration/readChunkBytes``
/// whatever the chunks' sizes.
public final class PostgresBlobStore: BlobBackend {
    public let configuration: BlobStore.Configuration
    public let preferredAppendBytes: Int
    public var isShared: Bool { true }

    private let store: PostgresStore
    private let logger: Logger

    /// The most bytes one chunk row holds: an append is cut into rows of this size.
    let maxRowBytes: Int

    init(store: PostgresStore, configuration: BlobStore.Configuration, logger: Logger) {
        self.store = store
        self.configuration = configuration
        self.maxRowBytes = max(1, store.configuration.mediaRowBytes)
        self.preferredAppendBytes = max(self.maxRowBytes, store.configuration.mediaAppendBytes)
        self.logger = logger
    }

    // MARK: Uploading

    /// The class of the advisory locks under which one owner's uploads start (`pg_advisory_xact_lock(class, owner)`).
    public static let admissionLockClass: Int32 = 0x4D45_4449

    package func record(_ declared: BlobUpload, admission: BlobAdmission?) async throws -> BlobUpload {
        let (id, size, sha256) = (declared.id, declared.size, declared.sha256)
        let now = Self.milliseconds(Date())
        let logger = self.logger
        let row = try await self.store.write(doing: "start an upload") { connection in
            if let admission {
                // The owner's starts take turns on every node until each commits: the check sees every upload
                // recorded before it, and the next sees this one.
                try await connection.run(
                    """
                    SELECT pg_advisory_xact_lock(\(Self.admissionLockClass), \(Int32(truncatingIfNeeded: admission.owner)))
                    """,
                    logger: logger
                )
                var others = try await Self.uploads(prefixes: admission.prefixes, connection, logger: logger)
                others[id] = nil
                try admission.admit(others)
            }
            // The row whether it is new or not, in one statement (a second start of the same id, on any node,
            // finds the first's row and leaves it as it was).
            return try await connection.row(
                """
                INSERT INTO media_uploads (id, size, sha256, received, content, changed_ms)
                VALUES (\(id), \(size), \(sha256), 0, nextval('media_contents'), \(now))
                ON CONFLICT (id) DO UPDATE SET changed_ms = media_uploads.changed_ms
                RETURNING size, sha256, received, content
                """,
                logger: logger
            )
        }
        guard let row else { throw CourierStoreError(.storageFailed, "upload \(id) was not recorded") }
        return try Self.upload(id, row)
    }

    package func recorded(_ id: String) async throws -> BlobUpload? {
        let logger = self.logger
        let row = try await self.store.read(doing: "read an upload") { connection in
            try await connection.row(
                "SELECT size, sha256, received, content FROM media_uploads WHERE id = \(id)",
                logger: logger
            )
        }
        return try row.map { try Self.upload(id, $0) }
    }

    /// An upload's row, locked until the transaction ends: appends to it (from any node), its filing and its
    /// deletion come one after the other.
    package struct Hold: BlobHold {
        let connection: PostgresConnection
        let logger: Logger
        /// The most bytes one chunk row holds.
        let rowLimit: Int
        package let upload: BlobUpload?

        /// Rows of at most ``PostgresBlobStore/maxRowBytes``, then the upload's new offset, committed without waiting
        /// for the write-ahead log to reach the disk: the finish commits its own transaction with that wait, and the
        /// log is written in order, so when an upload is filed every row of it is durable. A crash of the database
        /// before then loses the last appends and their offsets together: the client resumes from what remains.
        package func write(_ bytes: ByteBuffer, at offset: Int64) async throws {
            guard let upload, let content = upload.content else { return }
            try await self.connection.run("SET LOCAL synchronous_commit TO off", logger: self.logger)
            // A statement a row, each a slice of the bytes as received. (One statement of them all, through arrays,
            // was no faster here and made PostgresNIO build one message of the whole piece.)
            var position = 0
            while position < bytes.readableBytes {
                let end = min(bytes.readableBytes, position + self.rowLimit)
                let piece = bytes.getSlice(at: bytes.readerIndex + position, length: end - position)!
                try await self.connection.run(
                    """
                    INSERT INTO media_chunks (content, position, bytes)
                    VALUES (\(content), \(offset + Int64(position)), \(piece))
                    """,
                    logger: self.logger
                )
                position = end
            }
            let now = PostgresBlobStore.milliseconds(Date())
            try await self.connection.run(
                """
                UPDATE media_uploads SET received = \(offset + Int64(bytes.readableBytes)), changed_ms = \(now)
                WHERE id = \(upload.id)
                """,
                logger: self.logger
            )
        }

        package func delete() async throws {
            guard let upload else { return }
            try await PostgresBlobStore.delete(
                upload: upload.id,
                content: upload.content,
                self.connection,
                logger: self.logger
            )
        }

        /// Hands the upload's content over to a row of `media_blobs`, in the same transaction and copying no bytes;
        /// when the digest is stored already, the upload's chunks go instead.
        package func file(as digest: String) async throws {
            guard let upload, let content = upload.content else { return }
            let now = PostgresBlobStore.milliseconds(Date())
            try await self.connection.run("DELETE FROM media_uploads WHERE id = \(upload.id)", logger: self.logger)
            let filed = try await self.connection.value(
                """
                INSERT INTO media_blobs (sha256, size, content, created_ms)
                VALUES (\(digest), \(upload.size), \(content), \(now))
                ON CONFLICT (sha256) DO NOTHING RETURNING content
                """,
                as: Int64.self,
                logger: self.logger
            )
            if filed == nil {
                try await self.connection.run(
                    "DELETE FROM media_chunks WHERE content = \(content)",
                    logger: self.logger
                )
            }
        }
    }

    package func holding<T: Sendable>(
        upload id: String,
        doing: String,
        _ body: @escaping @Sendable (Hold) async throws -> T
    ) async throws -> T {
        let logger = self.logger
        let rowLimit = self.maxRowBytes
        return try await self.store.write(doing: doing) { connection in
            let row = try await connection.row(
                "SELECT size, sha256, received, content FROM media_uploads WHERE id = \(id) FOR UPDATE",
                logger: logger
            )
            let upload = try row.map { try Self.upload(id, $0) }
            return try await body(Hold(connection: connection, logger: logger, rowLimit: rowLimit, upload: upload))
        }
    }

    package func readUpload(
        _ upload: BlobUpload,
        range: Range<Int64>,
        _ body: (ByteBuffer) async throws -> Void
    ) async throws {
        guard let content = upload.content else { return }
        try await self.read(content: content, range: range, of: upload.id, body)
    }

    public func uploadsInProgress(prefixes: [String]?) async throws -> [String: Int64] {
        let logger = self.logger
        return try await self.store.read(doing: "list the uploads in progress") { connection in
            try await Self.uploads(prefixes: prefixes, connection, logger: logger)
        }
    }

    private static func uploads(
        prefixes: [String]?,
        _ connection: PostgresConnection,
        logger: Logger
    ) async throws -> [String: Int64] {
        var rows: [PostgresRandomAccessRow] = []
        if let prefixes {
            for prefix in Set(prefixes) {
                // Ids are ASCII, compared byte by byte: those with the prefix sort from it to it followed by DEL.
                rows += try await connection.rows(
                    "SELECT id, size FROM media_uploads WHERE id >= \(prefix) AND id < \(prefix + "\u{7F}")",
                    logger: logger
                )
            }
        } else {
            rows = try await connection.rows("SELECT id, size FROM media_uploads", logger: logger)
        }
        var sizes: [String: Int64] = [:]
        for row in rows { sizes[try row.get("id", as: String.self)] = try row.get("size", as: Int64.self) }
        return sizes
    }

    /// Uploads deleted per transaction by ``removeAbandoned(now:)``.
    static let abandonedPerTransaction = 64

    @discardableResult
    public func removeAbandoned(now: Date) async throws -> [String] {
        let limit = Self.milliseconds(now) - Int64(self.configuration.abandonedUploadAge.components.seconds) * 1000
        let logger = self.logger
        var removed: [String] = []
        while true {
            // A few at a time, so that no transaction grows with the backlog; the rows other nodes are deleting
            // now are theirs.
            let batch = try await self.store.write(doing: "delete abandoned uploads") { connection in
                let rows = try await connection.rows(
                    """
                    DELETE FROM media_uploads WHERE id IN (
                        SELECT id FROM media_uploads WHERE changed_ms < \(limit)
                        LIMIT \(Self.abandonedPerTransaction) FOR UPDATE SKIP LOCKED
                    ) RETURNING id, content
                    """,
                    logger: logger
                )
                guard !rows.isEmpty else { return [String]() }
                let contents = try rows.map { try $0.get("content", as: Int64.self) }
                try await connection.run("DELETE FROM media_chunks WHERE content = ANY(\(contents))", logger: logger)
                return try rows.map { try $0.get("id", as: String.self) }
            }
            removed += batch
            if batch.count < Self.abandonedPerTransaction { return removed.sorted() }
        }
    }

    // MARK: Reading

    package func blob(_ sha256: String) async throws -> StoredBlob? {
        let logger = self.logger
        let row = try await self.store.read(doing: "read media") { connection in
            try await connection.row(
                "SELECT size, content FROM media_blobs WHERE sha256 = \(sha256)",
                logger: logger
            )
        }
        guard let row else { return nil }
        return StoredBlob(
            sha256: sha256,
            size: try row.get("size", as: Int64.self),
            content: try row.get("content", as: Int64.self)
        )
    }

    package func readBlob(
        _ blob: StoredBlob,
        range: Range<Int64>,
        _ body: (ByteBuffer) async throws -> Void
    ) async throws {
        guard let content = blob.content else { return }
        try await self.read(content: content, range: range, of: blob.sha256, body)
    }

    /// Streams `range` of a content's chunks: one query for each piece, the piece of the chunk that holds its first
    /// byte, at most ``BlobStore/Configuration/readChunkBytes``.
    private func read(
        content: Int64,
        range: Range<Int64>,
        of name: String,
        _ body: (ByteBuffer) async throws -> Void
    ) async throws {
        let logger = self.logger
        let most = Int64(max(1, self.configuration.readChunkBytes))
        var position = range.lowerBound
        while position < range.upperBound {
            let (start, wanted) = (position, min(most, range.upperBound - position))
            let piece = try await self.store.read(doing: "read media") { connection -> ByteBuffer? in
                guard
                    let row = try await connection.row(
                        """
                        SELECT substring(bytes FROM (\(start) - position + 1)::integer FOR \(wanted)::integer)
                        FROM media_chunks WHERE content = \(content) AND position <= \(start)
                        ORDER BY position DESC LIMIT 1
                        """,
                        logger: logger
                    )
                else { return nil }
                return try row[0].decode(ByteBuffer.self)
            }
            guard let piece, piece.readableBytes > 0 else { return }
            position += Int64(piece.readableBytes)
            try await body(piece)
        }
    }

    // MARK: Collection

    public func blobs(after: String?, limit: Int) async throws -> [BlobInfo] {
        let logger = self.logger
        let after = after ?? ""
        return try await self.store.read(doing: "list media") { connection in
            try await connection.rows(
                """
                SELECT sha256, size, created_ms FROM media_blobs WHERE sha256 > \(after)
                ORDER BY sha256 LIMIT \(limit)
                """,
                logger: logger
            ).map { row in
                BlobInfo(
                    sha256: try row.get("sha256", as: String.self),
                    size: try row.get("size", as: Int64.self),
                    storedMs: try row.get("created_ms", as: Int64.self)
                )
            }
        }
    }

    @discardableResult
    public func deleteBlob(_ sha256: String) async throws -> Int64 {
        let logger = self.logger
        return try await self.store.write(doing: "delete media") { connection in
            guard
                let row = try await connection.row(
                    "DELETE FROM media_blobs WHERE sha256 = \(sha256) RETURNING size, content",
                    logger: logger
                )
            else { return 0 }
            let content = try row.get("content", as: Int64.self)
            try await connection.run("DELETE FROM media_chunks WHERE content = \(content)", logger: logger)
            return try row.get("size", as: Int64.self)
        }
    }

    /// Never: PostgreSQL's own backups see one moment of blobs and rows together.
    public func deletionPaused() async -> Bool { false }

    // MARK: Rows

    private static func upload(_ id: String, _ row: PostgresRandomAccessRow) throws -> BlobUpload {
        BlobUpload(
            id: id,
            size: try row.get("size", as: Int64.self),
            sha256: try row["sha256"].decode(String?.self),
            offset: try row.get("received", as: Int64.self),
            content: try row.get("content", as: Int64.self)
        )
    }

    /// Deletes an upload and its chunks (none when there is no such upload, or when it is no longer `content`).
    fileprivate static func delete(
        upload id: String,
        content expected: Int64? = nil,
        _ connection: PostgresConnection,
        logger: Logger
    ) async throws {
        guard
            let content = try await connection.value(
                """
                DELETE FROM media_uploads WHERE id = \(id) AND (\(expected)::bigint IS NULL OR content = \(expected))
                RETURNING content
                """,
                as: Int64.self,
                logger: logger
            )
        else { return }
        try await connection.run("DELETE FROM media_chunks WHERE content = \(content)", logger: logger)
    }

    fileprivate static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
    }
}

extension PostgresStore {
    /// Media is kept in the database, where every node reads it; `folder` is not used.
    public func blobStorage(
        folder: URL,
        configuration: BlobStore.Configuration,
        logger: Logger
    ) throws -> any BlobStorage {
        PostgresBlobStore(store: self, configuration: configuration, logger: logger)
    }
}
