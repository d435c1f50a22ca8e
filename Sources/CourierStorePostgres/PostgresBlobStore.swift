public import CourierStore
internal import Crypto
public import Foundation
public import Logging
internal import NIOCore
internal import PostgresNIO

/// Media bytes in the database every node shares, so that a file uploaded through one node is served by any other,
/// and an upload broken off on one node resumes on another.
///
/// An upload is a row of `media_uploads` and its bytes are rows of `media_chunks` (one per append, which
/// ``preferredAppendBytes`` makes a few hundred KiB), numbered by a content id. Finishing an upload checks its size
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
public final class PostgresBlobStore: BlobStorage {
    public let configuration: BlobStore.Configuration
    public let preferredAppendBytes: Int
    public var isShared: Bool { true }

    private let store: PostgresStore
    private let logger: Logger

    /// The most bytes one chunk row holds (four preferred appends): a longer append is cut into several.
    var maxRowBytes: Int { 4 * self.preferredAppendBytes }

    init(store: PostgresStore, configuration: BlobStore.Configuration, logger: Logger) {
        self.store = store
        self.configuration = configuration
        self.preferredAppendBytes = max(1, store.configuration.mediaRowBytes)
        self.logger = logger
    }

    // MARK: Uploading

    /// The class of the advisory locks under which one owner's uploads start (`pg_advisory_xact_lock(class, owner)`).
    public static let admissionLockClass: Int32 = 0x4D45_4449

    public func start(
        upload id: String,
        size: Int64,
        sha256: String?,
        admission: BlobAdmission?
    ) async throws
        -> BlobUpload
    {
        try self.validate(upload: id, size: size, sha256: sha256)
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
        let upload = try Self.upload(id, row)
        guard upload.size == size, upload.sha256 == sha256 else {
            throw CourierStoreError(.invalidRequest, "upload \(id) was started with another size or digest")
        }
        return upload
    }

    public func upload(_ id: String) async throws -> BlobUpload? {
        try Self.validate(uploadID: id)
        let logger = self.logger
        let row = try await self.store.read(doing: "read an upload") { connection in
            try await connection.row(
                "SELECT size, sha256, received, content FROM media_uploads WHERE id = \(id)",
                logger: logger
            )
        }
        return try row.map { try Self.upload(id, $0) }
    }

    private enum Appended: Sendable {
        case offset(Int64)
        case tooMany(size: Int64)
    }

    @discardableResult
    public func append(_ bytes: Data, to id: String, at offset: Int64, content expected: Int64?) async throws -> Int64 {
        try Self.validate(uploadID: id)
        let now = Self.milliseconds(Date())
        let logger = self.logger
        let count = Int64(bytes.count)
        let rowLimit = self.maxRowBytes
        let appended = try await self.store.write(doing: "store a chunk of media") { connection in
            // The upload's row is held until the commit: appends to it (from any node), its completion and its
            // deletion come one after the other.
            guard
                let row = try await connection.row(
                    "SELECT size, received, content FROM media_uploads WHERE id = \(id) FOR UPDATE",
                    logger: logger
                )
            else { throw CourierStoreError(.unknownUpload, "no upload \(id)") }
            let size = try row.get("size", as: Int64.self)
            let received = try row.get("received", as: Int64.self)
            let content = try row.get("content", as: Int64.self)
            guard expected == nil || expected == content else {
                throw CourierStoreError(.invalidRequest, "upload \(id) was deleted and started again")
            }
            guard offset == received else {
                throw CourierStoreError(.invalidRequest, "upload \(id) continues at \(received), not \(offset)")
            }
            guard received + count <= size else {
                try await Self.delete(upload: id, content: content, connection, logger: logger)
                return Appended.tooMany(size: size)
            }
            guard count > 0 else { return .offset(received) }
            var position = 0
            while position < bytes.count {
                let end = min(bytes.count, position + rowLimit)
                let piece = ByteBuffer(bytes: bytes[bytes.startIndex + position..<bytes.startIndex + end])
                try await connection.run(
                    """
                    INSERT INTO media_chunks (content, position, bytes)
                    VALUES (\(content), \(received + Int64(position)), \(piece))
                    """,
                    logger: logger
                )
                position = end
            }
            try await connection.run(
                "UPDATE media_uploads SET received = \(received + count), changed_ms = \(now) WHERE id = \(id)",
                logger: logger
            )
            return .offset(received + count)
        }
        switch appended {
        case .offset(let offset): return offset
        case .tooMany(let size):
            throw CourierStoreError(.mediaMismatch, "upload \(id) sent more than its \(size) bytes")
        }
    }

    private enum Finished: Sendable {
        case stored
        case changed
        case gone
    }

    public func finish(upload id: String, digest known: String?, content expected: Int64?) async throws -> String {
        try Self.validate(uploadID: id)
        let logger = self.logger
        let found = try await self.store.read(doing: "read an upload") { connection in
            try await connection.row(
                "SELECT size, sha256, received, content FROM media_uploads WHERE id = \(id)",
                logger: logger
            )
        }
        guard let found else { throw CourierStoreError(.unknownUpload, "no upload \(id)") }
        let upload = try Self.upload(id, found)
        let content = try found.get("content", as: Int64.self)
        guard expected == nil || expected == content else {
            throw CourierStoreError(.uploadBusy, "upload \(id) was deleted and started again")
        }
        guard upload.offset == upload.size else {
            throw CourierStoreError(.mediaMismatch, "upload \(id) has \(upload.offset) of \(upload.size) bytes")
        }
        let digest: String
        if let known {
            digest = known
        } else {
            var hasher = SHA256()
            try await self.read(content: content, range: 0..<upload.size, of: id) { hasher.update(data: $0) }
            digest = SHA256Hex.string(hasher.finalize())
        }
        if let declared = upload.sha256, digest != declared {
            // Deleted only if it is still these bytes.
            _ = try? await self.store.write(doing: "delete an upload") { connection in
                try await Self.delete(upload: id, content: content, connection, logger: logger)
            }
            throw CourierStoreError(.mediaMismatch, "upload \(id) has sha256 \(digest), not \(declared)")
        }
        let now = Self.milliseconds(Date())
        let finished = try await self.store.write(doing: "file an upload") { connection in
            guard
                let row = try await connection.row(
                    "SELECT size, received, content FROM media_uploads WHERE id = \(id) FOR UPDATE",
                    logger: logger
                )
            else { return Finished.gone }
            let size = try row.get("size", as: Int64.self)
            let received = try row.get("received", as: Int64.self)
            let current = try row.get("content", as: Int64.self)
            // Deleted and started again while its bytes were hashed: what was hashed is gone.
            guard current == content, received == size else { return .changed }
            try await connection.run("DELETE FROM media_uploads WHERE id = \(id)", logger: logger)
            let filed = try await connection.value(
                """
                INSERT INTO media_blobs (sha256, size, content, created_ms) VALUES (\(digest), \(size), \(content), \(now))
                ON CONFLICT (sha256) DO NOTHING RETURNING content
                """,
                as: Int64.self,
                logger: logger
            )
            // The same bytes were stored before: this copy goes.
            if filed == nil {
                try await connection.run("DELETE FROM media_chunks WHERE content = \(content)", logger: logger)
            }
            return .stored
        }
        switch finished {
        case .stored: return digest
        case .gone:
            // Finished meanwhile through another node (whose check of the same bytes passed): it is stored.
            if try await self.size(of: digest) == upload.size { return digest }
            throw CourierStoreError(.unknownUpload, "no upload \(id)")
        case .changed: throw CourierStoreError(.uploadBusy, "upload \(id) was started again while it was checked")
        }
    }

    public func abandon(upload id: String) async {
        guard (try? Self.validate(uploadID: id)) != nil else { return }
        let logger = self.logger
        _ = try? await self.store.write(doing: "delete an upload") { connection in
            try await Self.delete(upload: id, connection, logger: logger)
        }
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

    public func size(of sha256: String) async throws -> Int64? {
        guard SHA256Hex.isValid(sha256) else { return nil }
        let logger = self.logger
        return try await self.store.read(doing: "read the size of media") { connection in
            try await connection.value(
                "SELECT size FROM media_blobs WHERE sha256 = \(sha256)",
                as: Int64.self,
                logger: logger
            )
        }
    }

    public func read(_ sha256: String, range: Range<Int64>, _ body: (Data) async throws -> Void) async throws {
        let logger = self.logger
        let row =
            SHA256Hex.isValid(sha256)
            ? try await self.store.read(doing: "read media") { connection in
                try await connection.row(
                    "SELECT size, content FROM media_blobs WHERE sha256 = \(sha256)",
                    logger: logger
                )
            } : nil
        guard let row else { throw CourierStoreError(.unknownMedia, "no media \(sha256)") }
        let size = try row.get("size", as: Int64.self)
        let content = try row.get("content", as: Int64.self)
        guard range.lowerBound >= 0, range.upperBound <= size else {
            throw CourierStoreError(.invalidRequest, "\(range) is outside the \(size) bytes of \(sha256)")
        }
        try await self.read(content: content, range: range, of: sha256, body)
    }

    /// Streams `range` of a content's chunks: one query for each piece, the piece of the chunk that holds its first
    /// byte, at most ``BlobStore/Configuration/readChunkBytes``.
    private func read(
        content: Int64,
        range: Range<Int64>,
        of name: String,
        _ body: (Data) async throws -> Void
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
            guard let piece, piece.readableBytes > 0 else {
                throw CourierStoreError(.storageFailed, "\(name) ended early, at \(position)")
            }
            position += Int64(piece.readableBytes)
            try await body(Data(piece.readableBytesView))
        }
    }

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
    private static func delete(
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

    private static func milliseconds(_ date: Date) -> Int64 {
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
