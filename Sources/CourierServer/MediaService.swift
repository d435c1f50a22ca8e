import CourierProtocol
import CourierStore
import Crypto
import Foundation
import Logging
import NIOCore

/// The server's media: uploads into the blob store (size limit, quota, digest check), reads out of it, and the
/// clean-up of abandoned uploads. Both ports and the HTTP port use it.
final class MediaService: Sendable {
    let blobs: BlobStore
    let store: SQLiteStore
    let configuration: ServerConfiguration.Media
    let metrics: ServerMetrics
    let logger: Logger

    init(
        folder: URL,
        store: SQLiteStore,
        configuration: ServerConfiguration.Media,
        metrics: ServerMetrics,
        logger: Logger
    ) throws {
        var blobConfiguration = BlobStore.Configuration()
        blobConfiguration.maxBlobBytes = configuration.maxMediaBytes
        blobConfiguration.abandonedUploadAge = configuration.abandonedUploadAge
        blobConfiguration.readChunkBytes = configuration.maxChunkBytes
        self.blobs = try BlobStore(folder: folder, configuration: blobConfiguration)
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
        var offset: Int64
        var hasher: SHA256?

        var isComplete: Bool { self.offset == self.size }
    }

    /// The media bytes a user may still store.
    func quotaLeft(for user: UserID) async throws -> Int64 {
        max(0, self.configuration.quotaBytesPerUser - (try await self.store.mediaUsage(of: user)))
    }

    /// Starts (or resumes) an upload, after checking the size limit and the user's quota.
    ///
    /// - Parameters:
    ///   - id: The blob store's upload id.
    ///   - sha256: The digest the client declared, or nil (compat packets) to learn it from the bytes.
    /// - Throws: `media-too-large`, `quota-exceeded`, `invalid-request`, `storage-failed`.
    func begin(id: String, user: UserID, size: Int64, sha256: String?) async throws -> Upload {
        guard size <= self.configuration.maxMediaBytes else {
            throw CourierStoreError(
                .mediaTooLarge,
                "\(size) bytes is over the media limit of \(self.configuration.maxMediaBytes) bytes"
            )
        }
        let left = try await self.quotaLeft(for: user)
        guard size <= left else {
            throw CourierStoreError(
                .quotaExceeded,
                "\(size) bytes is more than the \(left) bytes left of this user's media quota"
            )
        }
        let started = try await self.blobs.start(upload: id, size: size, sha256: sha256)
        return Upload(
            id: id,
            user: user,
            size: size,
            offset: started.offset,
            hasher: started.offset == 0 ? SHA256() : nil
        )
    }

    /// Writes the next bytes of an upload.
    ///
    /// - Throws: `media-mismatch` (more bytes than declared: the upload is deleted), `storage-failed`.
    func write(_ bytes: ByteBuffer, to upload: inout Upload) async throws {
        guard bytes.readableBytes > 0 else { return }
        let data = Data(bytes.readableBytesView)
        // The write (on the blob store's queue) and the hashing (here) run at the same time, on two cores.
        async let written = self.blobs.append(data, to: upload.id, at: upload.offset)
        upload.hasher?.update(data: data)
        upload.offset = try await written
        self.metrics.mediaBytesIn.increment(by: bytes.readableBytes)
    }

    /// Finishes an upload: checks its size and digest, files it, and records it as the user's.
    ///
    /// - Returns: The digest, and the quota the user has left.
    /// - Throws: `media-mismatch` (nothing is stored), `quota-exceeded`, `storage-failed`.
    func finish(_ upload: Upload) async throws -> (sha256: String, quotaLeft: Int64) {
        let known = upload.hasher.map { hasher in hasher.finalize().map { String(format: "%02x", $0) }.joined() }
        let digest = try await self.blobs.finish(upload: upload.id, digest: known)
        let left = try await self.store.recordUpload(
            user: upload.user,
            sha256: digest,
            size: upload.size,
            quota: self.configuration.quotaBytesPerUser,
            nowMs: SessionContext.nowMs()
        )
        return (digest, max(0, left))
    }

    /// Reads `range` of a stored file, a chunk of at most ``ServerConfiguration/Media/maxChunkBytes`` at a time.
    func read(_ sha256: String, range: Range<Int64>, _ body: (ByteBuffer) async throws -> Void) async throws {
        try await self.blobs.read(sha256, range: range) { data in
            self.metrics.mediaBytesOut.increment(by: data.count)
            try await body(ByteBuffer(bytes: data))
        }
    }

    /// Deletes abandoned uploads every ``ServerConfiguration/Media/cleanupInterval`` until cancelled.
    func removeAbandonedUploads() async {
        repeat {
            do {
                let removed = try await self.blobs.removeAbandoned()
                if !removed.isEmpty {
                    self.logger.info("removed abandoned uploads", metadata: ["count": "\(removed.count)"])
                }
            } catch {
                self.logger.warning("removing abandoned uploads failed", metadata: ["error": "\(error)"])
            }
        } while (try? await Task.sleep(for: self.configuration.cleanupInterval)) != nil
    }
}
