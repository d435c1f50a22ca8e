public import Foundation
public import NIOCore

/// An upload in progress: what it declared, and how much of it is stored.
public struct BlobUpload: Sendable, Hashable {
    public var id: String
    public var size: Int64
    /// The declared digest, or nil for an upload whose digest is learnt from its bytes (the compat port's).
    public var sha256: String?
    /// The bytes stored: where the next chunk must start.
    public var offset: Int64
    /// Which bytes these are, where an upload can be deleted and started again under the same id while a writer
    /// still holds it (shared storage: another node): an append or a finish that names it is refused once the
    /// upload is another. Nil where that cannot happen (``BlobStore``: one server, which lets one stream own an
    /// upload).
    public var content: Int64?

    public init(id: String, size: Int64, sha256: String?, offset: Int64, content: Int64? = nil) {
        self.id = id
        self.size = size
        self.sha256 = sha256
        self.offset = offset
        self.content = content
    }
}

/// What an upload must fit in to start: checked by the storage against the other uploads in progress of the same
/// owner, at the moment it records the upload, with no other start of that owner's between (on any node).
public struct BlobAdmission: Sendable {
    /// Who the uploads belong to (a user's id): starts of the same owner take turns.
    public var owner: Int64
    /// The beginnings of the owner's upload ids.
    public var prefixes: [String]
    /// Given the owner's other uploads in progress (their ids and declared sizes), throws to refuse this one.
    public var admit: @Sendable (_ others: [String: Int64]) throws -> Void

    public init(owner: Int64, prefixes: [String], admit: @escaping @Sendable (_ others: [String: Int64]) throws -> Void)
    {
        self.owner = owner
        self.prefixes = prefixes
        self.admit = admit
    }
}

/// Where media bytes are kept, addressed by their SHA-256: uploads written chunk by chunk, checked against the size and
/// digest they declared, then filed once under their digest. ``BlobStore`` keeps them in a folder of one server;
/// `CourierStorePostgres`'s `PostgresBlobStore` in the database every node shares.
///
/// Every method checks its arguments itself (an upload id is 1 to 128 ASCII letters, digits, `-` or `_`): the caller
/// need not have.
public protocol BlobStorage: Sendable {
    /// The limits the store enforces.
    var configuration: BlobStore.Configuration { get }

    /// The fewest bytes ``append(_:to:at:)`` is best given at once (a caller gathers smaller pieces up to it first);
    /// 0 when any piece is as good as another.
    var preferredAppendBytes: Int { get }

    /// Whether others (the other nodes) start and finish uploads in this store too: a caller may then not keep its
    /// own index of the uploads in progress, and asks ``uploadsInProgress(prefixes:)`` each time.
    var isShared: Bool { get }

    /// Starts an upload, or finds it again to resume it.
    ///
    /// - Parameters:
    ///   - id: The upload's id.
    ///   - size: The file's size in bytes.
    ///   - sha256: Its SHA-256, 64 lowercase hex digits, or nil to accept whatever digest the bytes have.
    ///   - admission: What the upload must fit in, checked against the owner's other uploads (nil: nothing).
    /// - Returns: The upload, with the offset the next chunk must start at (0 when new).
    /// - Throws: `invalid-request` (a bad id or digest, or the same id declared with another size or digest),
    ///   `media-too-large`, `storage-failed`, or what `admission` throws (nothing is recorded then).
    func start(upload id: String, size: Int64, sha256: String?, admission: BlobAdmission?) async throws -> BlobUpload

    /// An upload in progress, or nil when there is none by that id.
    func upload(_ id: String) async throws -> BlobUpload?

    /// Writes a chunk of an upload at `offset`, which must be where the upload stands.
    ///
    /// - Parameter content: The upload's ``BlobUpload/content`` when it was started, or nil.
    /// - Returns: The new offset.
    /// - Throws: `unknown-upload`, `invalid-request` (another offset than the upload's, or another content: the
    ///   upload was deleted and started again), `media-mismatch` (more bytes than declared: the upload is deleted),
    ///   `storage-failed`.
    @discardableResult
    func append(_ bytes: ByteBuffer, to id: String, at offset: Int64, content: Int64?) async throws -> Int64

    /// Finishes an upload: checks its size and SHA-256, makes it durable, and files it under its digest (once: when
    /// the same bytes are stored already, the upload is dropped).
    ///
    /// - Parameters:
    ///   - digest: The SHA-256 of every byte of the upload, when the caller hashed them as they were appended (it
    ///     saw the upload from offset 0): they are then not read again. Nil: they are read back and hashed.
    ///   - content: The upload's ``BlobUpload/content`` when the caller started it, or nil.
    /// - Returns: The digest the blob is stored under.
    /// - Throws: `unknown-upload`, `media-mismatch` (nothing is stored; a short upload is kept to be resumed, one
    ///   with another digest is deleted), `upload-busy` (the upload was deleted and started again meanwhile: its
    ///   bytes are another's), `storage-failed`.
    func finish(upload id: String, digest: String?, content: Int64?) async throws -> String

    /// Deletes an upload that will not be finished (nothing happens when there is none).
    func abandon(upload id: String) async

    /// The uploads in progress whose ids begin with one of `prefixes` (every one when nil), with their declared
    /// sizes: the storage they may come to take.
    func uploadsInProgress(prefixes: [String]?) async throws -> [String: Int64]

    /// Deletes the uploads that have not grown for ``BlobStore/Configuration/abandonedUploadAge`` before `now`.
    ///
    /// - Returns: The ids deleted, sorted.
    @discardableResult
    func removeAbandoned(now: Date) async throws -> [String]

    /// The size of a stored blob, or nil when there is none with that digest.
    func size(of sha256: String) async throws -> Int64?

    /// Streams `range` of a stored blob to `body`, a piece of at most ``BlobStore/Configuration/readChunkBytes`` at
    /// a time.
    ///
    /// - Throws: `unknown-media` when there is no such blob, `invalid-request` for a range outside it,
    ///   `storage-failed`.
    func read(_ sha256: String, range: Range<Int64>, _ body: (ByteBuffer) async throws -> Void) async throws

    // MARK: Collection

    /// The stored blobs whose digests sort after `after` (from the first when nil), in order, at most `limit`.
    func blobs(after: String?, limit: Int) async throws -> [BlobInfo]

    /// Deletes a stored blob (nothing happens when there is none).
    ///
    /// - Returns: The bytes it held, 0 when there was none.
    @discardableResult
    func deleteBlob(_ sha256: String) async throws -> Int64

    /// Whether blobs must not be deleted now: a backup is copying them (``BlobStore/markBackup(of:)``).
    func deletionPaused() async -> Bool
}

/// A stored blob, as a listing shows it.
public struct BlobInfo: Sendable, Hashable {
    public var sha256: String
    public var size: Int64
    /// When its bytes were stored (milliseconds since 1970).
    public var storedMs: Int64

    public init(sha256: String, size: Int64, storedMs: Int64) {
        self.sha256 = sha256
        self.size = size
        self.storedMs = storedMs
    }
}

extension BlobStorage {
    /// Starts an upload with nothing to fit in.
    public func start(upload id: String, size: Int64, sha256: String?) async throws -> BlobUpload {
        try await self.start(upload: id, size: size, sha256: sha256, admission: nil)
    }

    /// Writes a chunk of an upload, whatever its content.
    @discardableResult
    public func append(_ bytes: Data, to id: String, at offset: Int64) async throws -> Int64 {
        try await self.append(ByteBuffer(bytes: bytes), to: id, at: offset, content: nil)
    }

    /// Writes a chunk of an upload given as `Data`.
    @discardableResult
    public func append(_ bytes: Data, to id: String, at offset: Int64, content: Int64?) async throws -> Int64 {
        try await self.append(ByteBuffer(bytes: bytes), to: id, at: offset, content: content)
    }

    /// Finishes an upload, whatever its content.
    public func finish(upload id: String, digest: String?) async throws -> String {
        try await self.finish(upload: id, digest: digest, content: nil)
    }

    /// Finishes an upload, reading its bytes back to hash them.
    public func finish(upload id: String) async throws -> String {
        try await self.finish(upload: id, digest: nil, content: nil)
    }

    /// Every upload in progress, with its declared size.
    public func uploadsInProgress() async throws -> [String: Int64] {
        try await self.uploadsInProgress(prefixes: nil)
    }

    /// Deletes the uploads abandoned by now.
    @discardableResult
    public func removeAbandoned() async throws -> [String] {
        try await self.removeAbandoned(now: Date())
    }

    /// Checks an upload id: 1 to 128 ASCII letters, digits, `-` or `_`.
    ///
    /// - Throws: `invalid-request`.
    public static func validate(uploadID id: String) throws {
        guard (1...128).contains(id.utf8.count),
            id.utf8.allSatisfy({ $0.isASCIILetterOrDigit || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") })
        else {
            throw CourierStoreError(.invalidRequest, "an upload id is 1 to 128 letters, digits, - or _")
        }
    }

    /// Checks what an upload declares against the limits.
    ///
    /// - Throws: `invalid-request` (a bad id, digest or size), `media-too-large`.
    public func validate(upload id: String, size: Int64, sha256: String?) throws {
        try Self.validate(uploadID: id)
        if let sha256, !SHA256Hex.isValid(sha256) {
            throw CourierStoreError(.invalidRequest, "sha256 must be 64 lowercase hex digits")
        }
        guard size >= 0 else { throw CourierStoreError(.invalidRequest, "a negative size") }
        guard size <= self.configuration.maxBlobBytes else {
            throw CourierStoreError(
                .mediaTooLarge,
                "\(size) bytes is over the limit of \(self.configuration.maxBlobBytes)"
            )
        }
    }
}

extension UInt8 {
    fileprivate var isASCIILetterOrDigit: Bool {
        (0x30...0x39).contains(self) || (0x41...0x5A).contains(self) || (0x61...0x7A).contains(self)
    }
}
