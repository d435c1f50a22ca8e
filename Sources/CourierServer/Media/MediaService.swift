import CourierProtocol
import CourierStore
import Crypto
import Foundation
import Logging
import NIOCore
import Synchronization

/// The server's media: uploads into the blob storage (size limit, quota, digest check), reads out of it, and the
/// clean-up of abandoned uploads. Both ports and the HTTP port use it. The storage is the database's
/// (``CourierDatabase/blobStorage(folder:configuration:logger:)``): files in the data folder with SQLite, rows that
/// every node reads with PostgreSQL.
final class MediaService: Sendable {
    let blobs: any BlobStorage
    let store: any CourierDatabase
    let configuration: ServerConfiguration.Media
    let metrics: ServerMetrics
    let logger: Logger
    /// The uploads some stream is working on now: one stream at a time may own an upload, so that two connections
    /// of the same user can never write into the same part file.
    private let claims = Mutex<Set<String>>([])
    /// Uploads start one at a time: the quota check and the upload's record on disk (which later checks count) go
    /// together, so concurrent starts by one user cannot all pass the same check.
    private let starting = AsyncLock()
    /// The uploads in progress (started, neither finished nor deleted) of each user, with their declared sizes: what
    /// counts against the user's quota and upload count. Read from the blob store's folder once, then kept up to
    /// date, so that starting an upload never lists the whole folder (nil until the first start). Storage that other
    /// nodes change too is asked for the user's uploads at each start instead.
    private let inProgress = Mutex<[UserID: [String: Int64]]?>(nil)
    /// The bytes every upload holds in ``Upload/pending``, against ``ServerConfiguration/Media/maxPendingUploadBytes``.
    private let pendingBytes = Atomic<Int>(0)
    /// The first bytes of files served lately (``prefix(of:size:)``): a digest's bytes never change.
    private let prefixes = Mutex<[String: [UInt8]]>([:])
    /// The most files ``prefixes`` holds (it is emptied when full).
    static let maxRememberedPrefixes = 4096

    init(
        folder: URL,
        store: any CourierDatabase,
        configuration: ServerConfiguration.Media,
        metrics: ServerMetrics,
        logger: Logger
    ) throws {
        var blobConfiguration = BlobStore.Configuration()
        blobConfiguration.maxBlobBytes = configuration.maxMediaBytes
        blobConfiguration.abandonedUploadAge = configuration.abandonedUploadAge
        blobConfiguration.readChunkBytes = configuration.maxChunkBytes
        self.blobs = try store.blobStorage(folder: folder, configuration: blobConfiguration, logger: logger)
        self.store = store
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger
    }

    /// An upload being received: where it stands, and the digest of its bytes so far when it was seen from its first
    /// byte (then finishing it does not read the file again).
    struct Upload: Sendable {
        var id: String
        var user: UserID
        var size: Int64
        /// The bytes received: those stored, and those gathered for storage that takes larger pieces
        /// (``BlobStorage/preferredAppendBytes``).
        var offset: Int64
        var hasher: SHA256?
        /// Bytes received and not yet stored: fewer than the storage's preferred piece, until the last.
        var pending = ByteBuffer()
        /// The gathered piece being stored while the next one is received (at most one at a time, in order): the
        /// database writes one piece while the connection brings the next.
        var storing: Task<Void, any Error>?
        /// The storage's name for the upload's bytes (``BlobUpload/content``), named at each append: bytes of a
        /// connection that began an upload since deleted and started again elsewhere are refused.
        var content: Int64?

        var isComplete: Bool { self.offset == self.size }
        var stored: Int64 { self.offset - Int64(self.pending.readableBytes) }
    }

    /// The media bytes a user may still store.
    func quotaLeft(for user: UserID) async throws -> Int64 {
        max(0, self.configuration.quotaBytesPerUser - (try await self.store.mediaUsage(of: user)))
    }

    /// The upload id of a user's native upload of a file (the same on every connection, so that it resumes), and of
    /// a compat media packet (new for each: the compat framing cannot resume).
    static func nativeUploadID(user: UserID, sha256: String) -> String { "n\(user.rawValue)-\(sha256)" }
    static func compatUploadID(user: UserID) -> String { "c\(user.rawValue)-" + UUID().uuidString }

    /// Starts (or resumes) an upload, after checking the size limit and the user's quota, which counts the uploads
    /// the user has in progress at their declared sizes too. The caller owns the upload until ``release(_:)``.
    ///
    /// - Parameters:
    ///   - id: The blob store's upload id.
    ///   - sha256: The digest the client declared, or nil (compat packets) to learn it from the bytes.
    /// - Throws: `media-too-large`, `quota-exceeded`, `upload-busy` (another stream owns the upload now),
    ///   `invalid-request`, `storage-failed`.
    func begin(id: String, user: UserID, size: Int64, sha256: String?) async throws -> Upload {
        guard size <= self.configuration.maxMediaBytes else {
            throw CourierStoreError(
                .mediaTooLarge,
                "\(size) bytes is over the media limit of \(self.configuration.maxMediaBytes) bytes"
            )
        }
        guard self.claims.withLock({ $0.insert(id).inserted }) else {
            throw CourierStoreError(.uploadBusy, "this upload is in progress on another connection")
        }
        await self.starting.lock()
        defer { self.starting.unlock() }
        do {
            let maxUploads = self.configuration.maxUploadsPerUser
            let quotaLeft = try await self.quotaLeft(for: user)
            let admit: @Sendable ([String: Int64]) throws -> Void = { others in
                try Self.admit(size: size, others: others, quotaLeft: quotaLeft, maxUploads: maxUploads)
            }
            let admission: BlobAdmission?
            if self.blobs.isShared {
                // Checked by the storage as it records the upload, with the user's starts on other nodes waiting.
                admission = BlobAdmission(owner: user.rawValue, prefixes: Self.uploadPrefixes(of: user), admit: admit)
            } else {
                try admit(try await self.uploads(of: user).filter { $0.key != id })
                admission = nil
            }
            let upload = try await self.started(id: id, user: user, size: size, sha256: sha256, admission: admission)
            self.inProgress.withLock { $0?[user, default: [:]][id] = size }
            return upload
        } catch {
            self.claims.withLock { _ = $0.remove(id) }
            throw error
        }
    }

    /// Refuses an upload of `size` bytes beside a user's `others` in progress past the user's limits.
    ///
    /// - Throws: `quota-exceeded`.
    private static func admit(size: Int64, others: [String: Int64], quotaLeft: Int64, maxUploads: Int) throws {
        guard others.count < maxUploads else {
            throw CourierStoreError(
                .quotaExceeded,
                "\(others.count) uploads of this user are in progress (at most \(maxUploads)): "
                    + "finish them, or wait until the unfinished ones are removed"
            )
        }
        let pending = others.values.reduce(0, +)
        let left = quotaLeft - pending
        guard size <= left else {
            throw CourierStoreError(
                .quotaExceeded,
                "\(size) bytes is more than the \(max(0, left)) bytes left of this user's media quota"
                    + (pending > 0 ? " (\(pending) bytes are reserved by uploads in progress)" : "")
            )
        }
    }

    /// The stream that owned an upload is done with it (finished, failed, reset, or its connection closed).
    ///
    /// - Parameter discard: Whether to delete what was received (an upload that can never be resumed).
    func release(_ upload: Upload, discard: Bool = false) async {
        var upload = upload
        // The piece being stored behind goes first (or fails: what it held is not kept).
        try? await self.awaitStoring(&upload)
        if discard {
            _ = self.takePending(&upload)
            await self.blobs.abandon(upload: upload.id)
        } else {
            // What came is kept for a resume, as far as it can be.
            try? await self.flush(&upload)
        }
        // An upload the blob store dropped (discarded, or refused for its bytes) no longer counts.
        var gone = discard
        if !gone { gone = (try? await self.blobs.upload(upload.id)) == nil }
        if gone { self.forget(upload.id, of: upload.user) }
        self.claims.withLock { _ = $0.remove(upload.id) }
    }

    /// The uploads in progress of a user, with their declared sizes.
    private func uploads(of user: UserID) async throws -> [String: Int64] {
        if let known = self.inProgress.withLock({ $0 }) { return known[user] ?? [:] }
        var index: [UserID: [String: Int64]] = [:]
        for (id, size) in try await self.blobs.uploadsInProgress() {
            guard let owner = Self.owner(ofUpload: id) else { continue }
            index[owner, default: [:]][id] = size
        }
        return self.inProgress.withLock { state in
            if state == nil { state = index }
            return state?[user] ?? [:]
        }
    }

    private func forget(_ id: String, of user: UserID) {
        self.inProgress.withLock { state in
            state?[user]?[id] = nil
            if state?[user]?.isEmpty == true { state?[user] = nil }
        }
    }

    /// The beginnings of a user's upload ids (``nativeUploadID(user:sha256:)``, ``compatUploadID(user:)``).
    static func uploadPrefixes(of user: UserID) -> [String] { ["n\(user.rawValue)-", "c\(user.rawValue)-"] }

    /// The user an upload id belongs to (``nativeUploadID(user:sha256:)``, ``compatUploadID(user:)``).
    static func owner(ofUpload id: String) -> UserID? {
        guard let first = id.first, first == "n" || first == "c", let dash = id.firstIndex(of: "-"),
            let raw = Int64(id[id.index(after: id.startIndex)..<dash])
        else { return nil }
        return UserID(rawValue: raw)
    }

    private func started(
        id: String,
        user: UserID,
        size: Int64,
        sha256: String?,
        admission: BlobAdmission?
    ) async throws -> Upload {
        let started = try await self.blobs.start(upload: id, size: size, sha256: sha256, admission: admission)
        return Upload(
            id: id,
            user: user,
            size: size,
            offset: started.offset,
            hasher: started.offset == 0 ? SHA256() : nil,
            content: started.content
        )
    }

    /// Writes the next bytes of an upload, or gathers them until the storage's preferred piece is complete (or the
    /// upload is).
    ///
    /// - Throws: `media-mismatch` (more bytes than declared: the upload is deleted), `upload-busy` (the upload moved
    ///   on through another connection, on another node), `storage-failed`.
    func write(_ bytes: ByteBuffer, to upload: inout Upload) async throws {
        guard bytes.readableBytes > 0 else { return }
        let count = bytes.readableBytes
        let start = upload.offset
        upload.offset += Int64(count)
        let preferred = self.blobs.preferredAppendBytes
        if upload.pending.readableBytes == 0, count >= preferred || upload.offset >= upload.size {
            try await self.awaitStoring(&upload)
            // Straight to storage, from the bytes as received; the write (on the storage's threads) and the hashing
            // (here) run at the same time.
            async let written = self.append(bytes, to: upload.id, at: start, content: upload.content)
            bytes.withUnsafeReadableBytes { upload.hasher?.update(bufferPointer: $0) }
            _ = try await written
        } else {
            bytes.withUnsafeReadableBytes { upload.hasher?.update(bufferPointer: $0) }
            if upload.pending.readableBytes == 0 {
                upload.pending = ByteBufferAllocator().buffer(capacity: min(preferred, Int(upload.size - start)))
            }
            upload.pending.writeImmutableBuffer(bytes)
            // Held past the node's budget: stored now, in a smaller piece.
            let held = self.pendingBytes.add(count, ordering: .relaxed).newValue
            if upload.offset >= upload.size || held > self.configuration.maxPendingUploadBytes {
                try await self.flush(&upload)
            } else if upload.pending.readableBytes >= preferred {
                try await self.flushBehind(&upload)
            }
        }
        self.metrics.mediaBytesIn.increment(by: bytes.readableBytes)
    }

    /// Waits until the piece being stored behind is (its failure is the upload's).
    private func awaitStoring(_ upload: inout Upload) async throws {
        guard let storing = upload.storing else { return }
        upload.storing = nil
        try await storing.value
    }

    /// Stores the bytes an upload gathered while the next are received: the piece before must be stored first.
    /// They count against the node's budget of held bytes until they are.
    private func flushBehind(_ upload: inout Upload) async throws {
        try await self.awaitStoring(&upload)
        let stored = upload.stored
        let pending = upload.pending
        upload.pending = ByteBuffer()
        let (id, content) = (upload.id, upload.content)
        upload.storing = Task {
            defer { self.pendingBytes.subtract(pending.readableBytes, ordering: .relaxed) }
            try await self.append(pending, to: id, at: stored, content: content)
        }
    }

    /// Stores the bytes an upload gathered, after the piece being stored behind.
    private func flush(_ upload: inout Upload) async throws {
        try await self.awaitStoring(&upload)
        let stored = upload.stored
        // Whether or not they are stored, they are no longer pending: after a failure the upload is released.
        let pending = self.takePending(&upload)
        guard pending.readableBytes > 0 else { return }
        try await self.append(pending, to: upload.id, at: stored, content: upload.content)
    }

    /// Empties what an upload gathered, and takes it off the node's count.
    private func takePending(_ upload: inout Upload) -> ByteBuffer {
        let pending = upload.pending
        upload.pending = ByteBuffer()
        if pending.readableBytes > 0 { self.pendingBytes.subtract(pending.readableBytes, ordering: .relaxed) }
        return pending
    }

    /// One append. The service knows where each upload it owns stands: an offset or content the storage disagrees
    /// with means another node wrote (or deleted and started again) the upload meanwhile (a node's own connections
    /// take turns through ``begin(id:user:size:sha256:)``).
    private func append(_ data: ByteBuffer, to id: String, at offset: Int64, content: Int64?) async throws {
        do {
            try await self.blobs.append(data, to: id, at: offset, content: content)
        } catch let error as CourierStoreError where error.code == .invalidRequest {
            throw CourierStoreError(.uploadBusy, "this upload moved on through another connection (\(error.message))")
        }
    }

    /// Finishes an upload: checks its size and digest, files it, records it as the user's, and releases it.
    ///
    /// - Returns: The digest, and the quota the user has left.
    /// - Throws: `media-mismatch` (nothing is stored), `quota-exceeded`, `upload-busy` (another node deleted the
    ///   upload and started it again meanwhile), `storage-failed`.
    func finish(_ upload: Upload) async throws -> (sha256: String, quotaLeft: Int64) {
        defer { self.claims.withLock { _ = $0.remove(upload.id) } }
        let known = upload.hasher.map { hasher in SHA256Hex.string(hasher.finalize()) }
        let digest: String
        do {
            var upload = upload
            try await self.flush(&upload)
            digest = try await self.blobs.finish(upload: upload.id, digest: known, content: upload.content)
            self.forget(upload.id, of: upload.user)
        } catch let error as CourierStoreError where error.code == .mediaMismatch {
            // A digest that disagrees deletes the upload; one cut short keeps its bytes (it may be resumed) and so
            // stays counted against the user's uploads and quota until it is finished or abandoned.
            // (A store that cannot tell keeps it counted: the cleanup forgets it once it is gone.)
            if case .some(.none) = try? await self.blobs.upload(upload.id) { self.forget(upload.id, of: upload.user) }
            throw error
        }
        // The same bytes were stored already, as a file nothing named, and the collection deleted it between this
        // upload's finish (which dropped its own bytes for it) and the record: the client uploads again.
        let left = try await self.hold(digest, size: upload.size, for: upload.user, forgetting: true) {
            CourierStoreError(.uploadBusy, "the same file was deleted just now; upload it again")
        }
        return (digest, max(0, left))
    }

    /// Records that `user` holds a stored file (``CourierDatabase/recordUpload(user:sha256:size:quota:nowMs:)``),
    /// then checks that the file is still there: the collection may have deleted it between what made the caller
    /// sure of it and the record (Rules/MediaCollection.swift). If it is gone, the record is taken back (with
    /// `forgetting`: the caller made it) and `gone` is thrown.
    ///
    /// - Returns: The quota the user has left.
    func hold(
        _ sha256: String,
        size: Int64,
        for user: UserID,
        forgetting: Bool,
        gone: () -> CourierStoreError
    ) async throws -> Int64 {
        let left = try await self.store.recordUpload(
            user: user,
            sha256: sha256,
            size: size,
            quota: self.configuration.quotaBytesPerUser,
            nowMs: SessionClock.systemWallMs()
        )
        guard try await self.blobs.size(of: sha256) == size else {
            if forgetting { try? await self.store.forgetUnsentUpload(user: user, sha256: sha256) }
            throw gone()
        }
        return left
    }

    /// Reads `range` of a stored file, a chunk of at most ``ServerConfiguration/Media/maxChunkBytes`` at a time.
    func read(_ sha256: String, range: Range<Int64>, _ body: (ByteBuffer) async throws -> Void) async throws {
        try await self.blobs.read(sha256, range: range) { bytes in
            self.metrics.mediaBytesOut.increment(by: bytes.readableBytes)
            try await body(bytes)
        }
    }

    /// The first ``InlineMedia/prefixBytes`` bytes of a stored file of `size` bytes (all of a shorter one): what
    /// its type is checked against before it is served inline. Read from the file once, then remembered.
    func prefix(of sha256: String, size: Int64) async throws -> [UInt8] {
        if let known = self.prefixes.withLock({ $0[sha256] }) { return known }
        var bytes: [UInt8] = []
        let count = min(Int64(InlineMedia.prefixBytes), max(0, size))
        if count > 0 {
            try await self.blobs.read(sha256, range: 0..<count) { piece in
                bytes.append(contentsOf: piece.readableBytesView)
            }
        }
        self.prefixes.withLock { prefixes in
            if prefixes.count >= Self.maxRememberedPrefixes { prefixes.removeAll(keepingCapacity: true) }
            prefixes[sha256] = bytes
        }
        return bytes
    }

    /// What one collection did.
    struct Collection: Sendable, Equatable {
        /// The files deleted, and their bytes.
        var files = 0
        var bytes: Int64 = 0
        /// The stored files looked at.
        var looked = 0
    }

    /// Stored files a collection lists at once, and asks the store about at once.
    static let collectionListing = 4096
    static let collectionBatch = 256
    /// How old a doom must be for a collection to take it as left over (``collectUnreferenced(before:nowMs:)``).
    static let leftoverDoomAgeMs: Int64 = 3_600_000

    /// Deletes the stored files nothing names (Rules/MediaCollection.swift): those that neither a message, a profile
    /// picture, an upload record younger than ``ServerConfiguration/Media/unreferencedMediaAge``, nor an upload in
    /// progress of the same digest keeps, stored longer ago than that age. First finishes what a collection that
    /// stopped part way (a crash, another node's) left doomed.
    ///
    /// - Parameters:
    ///   - before: Files stored, and upload records made, before this time are old enough (by default
    ///     ``ServerConfiguration/Media/unreferencedMediaAge`` before `nowMs`; a test names one instead of waiting).
    ///   - nowMs: The time it runs at.
    @discardableResult
    func collectUnreferenced(before: Int64? = nil, nowMs: Int64) async throws -> Collection {
        var done = Collection()
        // A backup copying the files: nothing is deleted until it is done.
        guard await !self.blobs.deletionPaused() else { return done }
        // Left by a collection that stopped part way: doomed an hour ago or more (a younger doom may be another
        // node's collection, still deleting; deleting a file twice could take the bytes of a new upload of it).
        for sha256 in try await self.store.doomedMedia(beforeMs: nowMs - Self.leftoverDoomAgeMs) {
            guard await !self.blobs.deletionPaused() else { return done }
            done.bytes += try await self.blobs.deleteBlob(sha256)
            done.files += 1
            try await self.store.forgetDoomedMedia(sha256)
        }
        let age = self.configuration.unreferencedMediaAge
        let before =
            before ?? nowMs - Int64(age.components.seconds) * 1000 - age.components.attoseconds / 1_000_000_000_000_000
        // An upload in progress of the same bytes (a native upload declares them in its id). One started after this
        // listing finds the file doomed at its record, or gone after it (Rules/MediaCollection.swift).
        let uploading = Set(try await self.blobs.uploadsInProgress().keys.compactMap(Self.declaredDigest(ofUpload:)))
        var after: String?
        var batches: [ArraySlice<BlobInfo>] = []
        while true {
            if batches.isEmpty {
                let listed = try await self.blobs.blobs(after: after, limit: Self.collectionListing)
                guard let last = listed.last else { break }
                after = last.sha256
                done.looked += listed.count
                batches = stride(from: 0, to: listed.count, by: Self.collectionBatch).map {
                    listed[$0..<min(listed.count, $0 + Self.collectionBatch)]
                }
            }
            let old = batches.removeFirst().filter { $0.storedMs < before }
            guard !old.isEmpty else { continue }
            let kept = try await self.store.referencedMedia(old.map(\.sha256), ownedSinceMs: before)
            for blob in old where !kept.contains(blob.sha256) && !uploading.contains(blob.sha256) {
                guard try await self.store.doomMedia(blob.sha256, ownedSinceMs: before, nowMs: nowMs) else { continue }
                // A backup that began after the doom may have copied a database that names the file: it stays
                // doomed, and goes at a collection after the backup.
                guard await !self.blobs.deletionPaused() else { return done }
                done.bytes += try await self.blobs.deleteBlob(blob.sha256)
                done.files += 1
                try await self.store.forgetDoomedMedia(blob.sha256)
                self.prefixes.withLock { _ = $0.removeValue(forKey: blob.sha256) }
            }
        }
        return done
    }

    /// The digest a native upload's id declares (``nativeUploadID(user:sha256:)``), or nil.
    static func declaredDigest(ofUpload id: String) -> String? {
        guard id.hasPrefix("n"), let dash = id.firstIndex(of: "-") else { return nil }
        let digest = String(id[id.index(after: dash)...])
        return SHA256Hex.isValid(digest) ? digest : nil
    }

    /// Deletes abandoned uploads, then collects the files nothing names, every
    /// ``ServerConfiguration/Media/cleanupInterval`` until cancelled.
    func removeAbandonedUploads() async {
        repeat {
            do {
                let removed = try await self.blobs.removeAbandoned()
                for id in removed {
                    if let owner = Self.owner(ofUpload: id) { self.forget(id, of: owner) }
                }
                if !removed.isEmpty {
                    self.logger.info("removed abandoned uploads", metadata: ["count": "\(removed.count)"])
                }
            } catch {
                self.logger.warning("removing abandoned uploads failed", metadata: ["error": "\(error)"])
            }
            do {
                let collected = try await self.collectUnreferenced(nowMs: SessionClock.systemWallMs())
                if collected.files > 0 {
                    self.logger.info(
                        "deleted media nothing names",
                        metadata: ["files": "\(collected.files)", "bytes": "\(collected.bytes)"]
                    )
                }
            } catch {
                self.logger.warning("collecting media failed", metadata: ["error": "\(error)"])
            }
        } while (try? await Task.sleep(for: self.configuration.cleanupInterval)) != nil
    }
}
