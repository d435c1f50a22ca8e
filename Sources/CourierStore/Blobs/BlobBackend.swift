internal import Crypto
internal import Foundation
package import NIOCore

/// What a place that keeps media bytes gives the upload rules: uploads recorded, held one at a time, written, filed
/// under their digest, and blobs read. The rules (an upload's id, size and digest; where the next chunk starts; too
/// many bytes; a finish that is short, of other bytes, or of an upload started again meanwhile; ranges of a blob)
/// are written once, in the extension below, and every ``BlobStorage`` that is a backend follows them, as
/// ``StoreBackend`` does for rows. ``BlobStore`` keeps bytes in a folder of one server, `CourierStorePostgres`'s
/// `PostgresBlobStore` in the database every node shares.
package protocol BlobBackend: BlobStorage {
    associatedtype Hold: BlobHold

    /// Records `declared` (offset 0) unless an upload with its id is recorded, and returns the upload as recorded.
    /// With an `admission`, first gives it the owner's other uploads in progress (every one but this id), with no
    /// other start of that owner's between the check and the record, on any node.
    ///
    /// - Throws: What `admission` throws (nothing is recorded then), `storage-failed`.
    func record(_ declared: BlobUpload, admission: BlobAdmission?) async throws -> BlobUpload

    /// An upload as recorded, or nil.
    func recorded(_ id: String) async throws -> BlobUpload?

    /// Runs `body` with an upload held (``BlobHold/upload`` is nil when there is none): appends to it, its filing
    /// and its deletion, from anywhere, come one after the other. What `body` did through the hold stands when it
    /// returns; when it throws, a backend that can undo it (a database's transaction) does.
    func holding<T: Sendable>(
        upload id: String,
        doing: String,
        _ body: @escaping @Sendable (Hold) async throws -> T
    ) async throws -> T

    /// Streams `range` of an upload's stored bytes (its ``BlobUpload/content`` as recorded) to `body`, a piece of
    /// at most ``BlobStore/Configuration/readChunkBytes`` at a time.
    func readUpload(
        _ upload: BlobUpload,
        range: Range<Int64>,
        _ body: (ByteBuffer) async throws -> Void
    ) async throws

    /// A stored blob, or nil when there is none with that digest (a valid one).
    func blob(_ sha256: String) async throws -> StoredBlob?

    /// Streams `range` (inside the blob) of a stored blob to `body`, a piece of at most
    /// ``BlobStore/Configuration/readChunkBytes`` at a time; fewer bytes than asked when the blob ends early.
    func readBlob(_ blob: StoredBlob, range: Range<Int64>, _ body: (ByteBuffer) async throws -> Void) async throws
}

/// A blob filed under its digest.
package struct StoredBlob: Sendable, Hashable {
    package var sha256: String
    package var size: Int64
    /// The backend's name for its bytes, where it has one (``BlobUpload/content``).
    package var content: Int64?

    package init(sha256: String, size: Int64, content: Int64? = nil) {
        self.sha256 = sha256
        self.size = size
        self.content = content
    }
}

/// An upload held by ``BlobBackend/holding(upload:doing:_:)``.
package protocol BlobHold: Sendable {
    /// The upload as it stands, or nil when there is none by that id.
    var upload: BlobUpload? { get }
    /// Writes `bytes` at `offset`, where the upload stands, and moves it on by their count.
    func write(_ bytes: ByteBuffer, at offset: Int64) async throws
    /// Deletes the upload and its bytes.
    func delete() async throws
    /// Makes the upload's bytes durable and files them under `digest`, or drops them when a blob with that digest is
    /// stored already; either way the upload is gone.
    func file(as digest: String) async throws
}

extension BlobBackend {
    public func start(
        upload id: String,
        size: Int64,
        sha256: String?,
        admission: BlobAdmission?
    ) async throws -> BlobUpload {
        try self.validate(upload: id, size: size, sha256: sha256)
        let upload = try await self.record(
            BlobUpload(id: id, size: size, sha256: sha256, offset: 0),
            admission: admission
        )
        guard upload.size == size, upload.sha256 == sha256 else {
            throw CourierStoreError(.invalidRequest, "upload \(id) was started with another size or digest")
        }
        return upload
    }

    public func upload(_ id: String) async throws -> BlobUpload? {
        try Self.validate(uploadID: id)
        return try await self.recorded(id)
    }

    @discardableResult
    public func append(_ bytes: ByteBuffer, to id: String, at offset: Int64, content: Int64?) async throws -> Int64 {
        try Self.validate(uploadID: id)
        let count = Int64(bytes.readableBytes)
        let appended = try await self.holding(upload: id, doing: "store a chunk of media") { hold -> Appended in
            guard let upload = hold.upload else { throw CourierStoreError(.unknownUpload, "no upload \(id)") }
            guard content == nil || upload.content == nil || content == upload.content else {
                throw CourierStoreError(.invalidRequest, "upload \(id) was deleted and started again")
            }
            guard offset == upload.offset else {
                throw CourierStoreError(.invalidRequest, "upload \(id) continues at \(upload.offset), not \(offset)")
            }
            guard upload.offset + count <= upload.size else {
                // Deleted, and the refusal thrown once the deletion stands.
                try await hold.delete()
                return .tooMany(size: upload.size)
            }
            if count > 0 { try await hold.write(bytes, at: offset) }
            return .offset(offset + count)
        }
        switch appended {
        case .offset(let offset): return offset
        case .tooMany(let size):
            throw CourierStoreError(.mediaMismatch, "upload \(id) sent more than its \(size) bytes")
        }
    }

    public func finish(upload id: String, digest known: String?, content expected: Int64?) async throws -> String {
        try Self.validate(uploadID: id)
        guard let upload = try await self.recorded(id) else {
            throw CourierStoreError(.unknownUpload, "no upload \(id)")
        }
        guard expected == nil || upload.content == nil || expected == upload.content else {
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
            var read: Int64 = 0
            try await self.readUpload(upload, range: 0..<upload.size) { piece in
                piece.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
                read += Int64(piece.readableBytes)
            }
            guard read == upload.size else {
                throw CourierStoreError(.storageFailed, "upload \(id) ended early, at \(read)")
            }
            digest = SHA256Hex.string(hasher.finalize())
        }
        if let declared = upload.sha256, digest != declared {
            // Deleted only if it is still these bytes.
            _ = try? await self.holding(upload: id, doing: "delete an upload") { hold in
                if let current = hold.upload, current.content == upload.content { try await hold.delete() }
            }
            throw CourierStoreError(.mediaMismatch, "upload \(id) has sha256 \(digest), not \(declared)")
        }
        let finished = try await self.holding(upload: id, doing: "file an upload") { hold -> Finished in
            guard let current = hold.upload else { return .gone }
            // Deleted and started again while its bytes were hashed: what was hashed is gone.
            guard current.content == upload.content, current.offset == current.size else { return .changed }
            try await hold.file(as: digest)
            return .stored
        }
        switch finished {
        case .stored: return digest
        case .gone:
            // Finished meanwhile elsewhere (whose check of the same bytes passed): it is stored.
            if try await self.blob(digest)?.size == upload.size { return digest }
            throw CourierStoreError(.unknownUpload, "no upload \(id)")
        case .changed: throw CourierStoreError(.uploadBusy, "upload \(id) was started again while it was checked")
        }
    }

    public func abandon(upload id: String) async {
        guard (try? Self.validate(uploadID: id)) != nil else { return }
        _ = try? await self.holding(upload: id, doing: "delete an upload") { hold in
            if hold.upload != nil { try await hold.delete() }
        }
    }

    public func size(of sha256: String) async throws -> Int64? {
        guard SHA256Hex.isValid(sha256) else { return nil }
        return try await self.blob(sha256)?.size
    }

    public func read(_ sha256: String, range: Range<Int64>, _ body: (ByteBuffer) async throws -> Void) async throws {
        guard SHA256Hex.isValid(sha256), let blob = try await self.blob(sha256) else {
            throw CourierStoreError(.unknownMedia, "no media \(sha256)")
        }
        let size = blob.size
        guard range.lowerBound >= 0, range.upperBound <= size else {
            throw CourierStoreError(.invalidRequest, "\(range) is outside the \(size) bytes of \(sha256)")
        }
        var position = range.lowerBound
        try await self.readBlob(blob, range: range) { piece in
            position += Int64(piece.readableBytes)
            try await body(piece)
        }
        guard position == range.upperBound else {
            throw CourierStoreError(.storageFailed, "\(sha256) ended early, at \(position)")
        }
    }
}

private enum Appended: Sendable {
    case offset(Int64)
    case tooMany(size: Int64)
}

private enum Finished: Sendable {
    case stored
    case changed
    case gone
}
