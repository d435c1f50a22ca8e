public import Foundation
internal import Glibc
public import Logging
package import NIOCore

/// Media bytes on disk, addressed by their SHA-256: an upload is written chunk by chunk to `uploads/ID.part`
/// (never held in memory), checked against the size and digest it declared (``BlobBackend``'s rules), and only then
/// moved to `objects/AB/ABCDEF…`, where identical files are stored once. A broken upload resumes from the length of
/// its part file. File work runs on a Dispatch queue, off Swift's cooperative threads. One server owns the folder.
public final class BlobStore: BlobBackend {
    /// The limits of the blob store, with their defaults.
    public struct Configuration: Sendable, Hashable {
        /// The largest media file, in bytes; a larger declared size is refused with `media-too-large`.
        public var maxBlobBytes: Int64 = 2 * 1024 * 1024 * 1024
        /// An upload whose part file has not grown for this long is abandoned: ``removeAbandoned(now:)`` deletes it.
        public var abandonedUploadAge: Duration = .seconds(24 * 3600)
        /// The bytes read at a time when hashing a finished upload or streaming a blob out.
        public var readChunkBytes: Int = 1024 * 1024

        public init() {}
    }

    /// An upload in progress: what it declared, and how much of it is on disk.
    public typealias Upload = BlobUpload

    public let folder: URL
    public let configuration: Configuration
    /// A chunk is written where it lands in its part file, whatever its size.
    public var preferredAppendBytes: Int { 0 }
    /// The folder belongs to one server.
    public var isShared: Bool { false }
    private let queue = DispatchQueue(label: "courier.blobs", attributes: .concurrent)
    private let logger: Logger

    /// Opens (creating if needed) a blob store in `folder`.
    ///
    /// - Parameter logger: Where the details of storage failures go (clients get plain words).
    public init(
        folder: URL,
        configuration: Configuration = .init(),
        logger: Logger = Logger(label: "courier.blobs")
    ) throws {
        self.folder = folder
        self.configuration = configuration
        self.logger = logger
        for sub in ["", "objects", "uploads"] {
            do {
                try PrivateFiles.createFolder(sub.isEmpty ? folder : folder.appendingPathComponent(sub))
            } catch {
                throw CourierStoreError(.storageFailed, "cannot create \(folder.path)/\(sub): \(error)")
            }
        }
    }

    /// Copies the stored files (`objects/`, not uploads in progress) of the blob store in `folder` into the one in
    /// `destination`, each written aside and renamed into place, private. Files are stored once and never changed,
    /// and none is deleted while the folder is marked (``markBackup(of:)``), so a copy made after a database backup
    /// begun under the mark holds every file that backup names.
    ///
    /// - Returns: How many files were copied, and their bytes.
    /// - Throws: ``CourierStoreError`` with code `storage-failed`, naming the file.
    public static func copyObjects(from folder: URL, to destination: URL) throws -> (files: Int, bytes: Int64) {
        let objects = folder.appendingPathComponent("objects", isDirectory: true)
        var files = 0
        var bytes: Int64 = 0
        let manager = FileManager.default
        guard manager.fileExists(atPath: objects.path) else { return (0, 0) }
        for sub in ["", "objects"] {
            let target = sub.isEmpty ? destination : destination.appendingPathComponent(sub)
            do { try PrivateFiles.createFolder(target) } catch {
                throw CourierStoreError(.storageFailed, "cannot create \(target.path): \(error)")
            }
        }
        let prefixes = (try? manager.contentsOfDirectory(atPath: objects.path)) ?? []
        for prefix in prefixes.sorted() {
            let source = objects.appendingPathComponent(prefix, isDirectory: true)
            let target = destination.appendingPathComponent("objects/\(prefix)", isDirectory: true)
            for name in ((try? manager.contentsOfDirectory(atPath: source.path)) ?? []).sorted() {
                let file = target.appendingPathComponent(name)
                guard !manager.fileExists(atPath: file.path) else { continue }
                let aside = target.appendingPathComponent(".\(name).copy")
                do {
                    try PrivateFiles.createFolder(target)
                    try? manager.removeItem(at: aside)
                    try manager.copyItem(at: source.appendingPathComponent(name), to: aside)
                    try PrivateFiles.restrict(aside.path)
                    try manager.moveItem(at: aside, to: file)
                } catch {
                    try? manager.removeItem(at: aside)
                    throw CourierStoreError(.storageFailed, "cannot copy \(name) to \(target.path): \(error)")
                }
                files += 1
                bytes += Int64((try? manager.attributesOfItem(atPath: file.path)[.size] as? NSNumber)?.int64Value ?? 0)
            }
        }
        return (files, bytes)
    }

    // MARK: Uploading (the rules are ``BlobBackend``'s)

    /// Records an upload (its declaration in `uploads/ID.meta`, its bytes in `uploads/ID.part`) unless one is. The
    /// admission is checked against a listing of the uploads folder: starts of one owner must take turns in the
    /// caller (one server owns the folder).
    package func record(_ declared: BlobUpload, admission: BlobAdmission?) async throws -> BlobUpload {
        let id = declared.id
        if let admission {
            var others = try await self.uploadsInProgress(prefixes: admission.prefixes)
            others[id] = nil
            try admission.admit(others)
        }
        return try await self.run {
            if let existing = try self.readUpload(id) { return existing }
            try self.storage {
                try Data("\(declared.size) \(declared.sha256 ?? "-")".utf8).write(
                    to: self.metaFile(id),
                    options: .atomic
                )
                try PrivateFiles.restrict(self.metaFile(id).path)
                try PrivateFiles.createFile(atPath: self.partFile(id).path)
            }
            return Upload(id: id, size: declared.size, sha256: declared.sha256, offset: 0)
        }
    }

    package func recorded(_ id: String) async throws -> BlobUpload? {
        try await self.run { try self.readUpload(id) }
    }

    /// An upload of the folder's, held: the caller lets one writer at a time own an upload (one server owns the
    /// folder), so holding it takes no lock.
    package struct Hold: BlobHold {
        let store: BlobStore
        let id: String
        package let upload: BlobUpload?

        /// Writes the bytes where they go in the part file (`pwrite`, from the buffer as it is).
        package func write(_ bytes: ByteBuffer, at offset: Int64) async throws {
            let (store, id) = (self.store, self.id)
            try await store.run {
                try store.storage {
                    let descriptor = try Self.openFile(store.partFile(id), O_WRONLY)
                    defer { _ = Glibc.close(descriptor) }
                    try bytes.withUnsafeReadableBytes { buffer in
                        var done = 0
                        while done < buffer.count {
                            let written = pwrite(
                                descriptor,
                                buffer.baseAddress! + done,
                                buffer.count - done,
                                off_t(offset) + off_t(done)
                            )
                            if written < 0, errno == EINTR { continue }
                            guard written > 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
                            done += written
                        }
                    }
                }
            }
        }

        static func openFile(_ file: URL, _ flags: Int32) throws -> Int32 {
            let descriptor = Glibc.open(file.path, flags | O_CLOEXEC)
            guard descriptor >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            return descriptor
        }

        package func delete() async throws {
            let (store, id) = (self.store, self.id)
            try await store.run { store.discard(id) }
        }

        /// Syncs the part file and moves it to `objects/`, or removes it when the digest is stored already.
        package func file(as digest: String) async throws {
            let (store, id) = (self.store, self.id)
            try await store.run {
                let part = store.partFile(id)
                let object = store.objectFile(digest)
                try store.storage {
                    try Self.sync(part)
                    if FileManager.default.fileExists(atPath: object.path) {
                        try FileManager.default.removeItem(at: part)
                    } else {
                        try PrivateFiles.createFolder(object.deletingLastPathComponent())
                        try FileManager.default.moveItem(at: part, to: object)
                        Self.syncFolder(object.deletingLastPathComponent())
                    }
                    try? FileManager.default.removeItem(at: store.metaFile(id))
                }
            }
        }

        private static func sync(_ file: URL) throws {
            let handle = try FileHandle(forUpdating: file)
            defer { try? handle.close() }
            try handle.synchronize()
        }

        private static func syncFolder(_ folder: URL) {
            let descriptor = open(folder.path, O_RDONLY)
            guard descriptor >= 0 else { return }
            _ = fsync(descriptor)
            close(descriptor)
        }
    }

    package func holding<T: Sendable>(
        upload id: String,
        doing: String,
        _ body: @escaping @Sendable (Hold) async throws -> T
    ) async throws -> T {
        let upload = try await self.run { try self.readUpload(id) }
        return try await body(Hold(store: self, id: id, upload: upload))
    }

    package func readUpload(
        _ upload: BlobUpload,
        range: Range<Int64>,
        _ body: (ByteBuffer) async throws -> Void
    ) async throws {
        try await self.read(file: self.partFile(upload.id), range: range, body)
    }

    /// The uploads in progress with their declared sizes: the disk they may come to take. It lists the uploads
    /// folder: a caller keeps the answer and follows the changes itself rather than asking at every start.
    public func uploadsInProgress(prefixes: [String]?) async throws -> [String: Int64] {
        try await self.run {
            let uploads = self.folder.appendingPathComponent("uploads")
            let names = try self.storage { try FileManager.default.contentsOfDirectory(atPath: uploads.path) }
            var sizes: [String: Int64] = [:]
            for name in names where name.hasSuffix(".meta") {
                let id = String(name.dropLast(".meta".count))
                guard prefixes?.contains(where: { id.hasPrefix($0) }) ?? true,
                    let meta = try? String(contentsOf: self.metaFile(id), encoding: .utf8),
                    let size = meta.split(separator: " ").first.flatMap({ Int64($0) })
                else { continue }
                sizes[id] = size
            }
            return sizes
        }
    }

    /// Deletes the uploads whose part file has not changed for ``Configuration/abandonedUploadAge``.
    ///
    /// - Returns: The ids deleted.
    @discardableResult
    public func removeAbandoned(now: Date) async throws -> [String] {
        let age = self.configuration.abandonedUploadAge
        let limit = now.addingTimeInterval(-Double(age.components.seconds))
        return try await self.run {
            let uploads = self.folder.appendingPathComponent("uploads")
            let names = try self.storage { try FileManager.default.contentsOfDirectory(atPath: uploads.path) }
            var removed: [String] = []
            for name in names where name.hasSuffix(".part") {
                let id = String(name.dropLast(".part".count))
                let attributes = try? FileManager.default.attributesOfItem(atPath: self.partFile(id).path)
                guard let changed = attributes?[.modificationDate] as? Date, changed < limit else { continue }
                self.discard(id)
                removed.append(id)
            }
            return removed.sorted()
        }
    }

    // MARK: Reading

    package func blob(_ sha256: String) async throws -> StoredBlob? {
        let object = self.objectFile(sha256)
        return try await self.run {
            guard FileManager.default.fileExists(atPath: object.path) else { return nil }
            return StoredBlob(sha256: sha256, size: try self.length(of: object))
        }
    }

    package func readBlob(
        _ blob: StoredBlob,
        range: Range<Int64>,
        _ body: (ByteBuffer) async throws -> Void
    ) async throws {
        try await self.read(file: self.objectFile(blob.sha256), range: range, body)
    }

    /// Streams `range` of a file, a chunk of at most ``Configuration/readChunkBytes`` at a time, until it ends.
    ///
    /// (Reading with `pread` into buffers of the chunk's size, the file open throughout, was measured: no faster here,
    /// and a download to a reader that stalls on its own disk held more memory at its peaks; docs/BENCHMARKS.md.)
    private func read(file: URL, range: Range<Int64>, _ body: (ByteBuffer) async throws -> Void) async throws {
        var position = range.lowerBound
        while position < range.upperBound {
            let count = Int(min(Int64(self.configuration.readChunkBytes), range.upperBound - position))
            let start = position
            let chunk = try await self.run {
                try self.storage {
                    let handle = try FileHandle(forReadingFrom: file)
                    defer { try? handle.close() }
                    try handle.seek(toOffset: UInt64(start))
                    return try handle.read(upToCount: count) ?? Data()
                }
            }
            guard !chunk.isEmpty else { return }
            position += Int64(chunk.count)
            try await body(ByteBuffer(bytes: chunk))
        }
    }

    // MARK: Collection

    /// Lists `objects/`, one folder of 256 at a time, in order.
    public func blobs(after: String?, limit: Int) async throws -> [BlobInfo] {
        try await self.run {
            let objects = self.folder.appendingPathComponent("objects")
            let manager = FileManager.default
            var found: [BlobInfo] = []
            let folders = ((try? manager.contentsOfDirectory(atPath: objects.path)) ?? []).sorted()
            for prefix in folders where prefix.count == 2 && prefix >= String(after?.prefix(2) ?? "") {
                let names = ((try? manager.contentsOfDirectory(atPath: objects.path + "/" + prefix)) ?? []).sorted()
                for name in names where SHA256Hex.isValid(name) && name.hasPrefix(prefix) && name > (after ?? "") {
                    let path = objects.path + "/\(prefix)/\(name)"
                    guard let attributes = try? manager.attributesOfItem(atPath: path),
                        let size = (attributes[.size] as? NSNumber)?.int64Value,
                        let stored = attributes[.modificationDate] as? Date
                    else { continue }
                    found.append(
                        BlobInfo(sha256: name, size: size, storedMs: Int64(stored.timeIntervalSince1970 * 1000))
                    )
                    if found.count >= limit { return found }
                }
            }
            return found
        }
    }

    @discardableResult
    public func deleteBlob(_ sha256: String) async throws -> Int64 {
        guard SHA256Hex.isValid(sha256) else { return 0 }
        let object = self.objectFile(sha256)
        return try await self.run {
            guard let size = try? self.length(of: object) else { return 0 }
            try self.storage {
                do {
                    try FileManager.default.removeItem(at: object)
                } catch CocoaError.fileNoSuchFile {
                    return
                }
            }
            return size
        }
    }

    /// The file a backup leaves in the folder while it copies (`courier backup`): no blob is deleted meanwhile.
    static let backupMarker = "backup-in-progress"
    /// A marker older than this is a backup that died: it pauses nothing.
    static let backupMarkerLifetime: TimeInterval = 24 * 3600

    /// Marks the blob store in `folder` as being backed up: no blob is deleted until ``unmarkBackup(of:)`` (or a
    /// day, for a backup that died). A backup marks before it copies the database, so every file that copy names
    /// is still there when the files are copied.
    public static func markBackup(of folder: URL) throws {
        try PrivateFiles.createFolder(folder)
        let marker = folder.appendingPathComponent(Self.backupMarker)
        try Data("\(getpid())\n".utf8).write(to: marker, options: .atomic)
        try PrivateFiles.restrict(marker.path)
    }

    /// Ends ``markBackup(of:)``.
    public static func unmarkBackup(of folder: URL) {
        try? FileManager.default.removeItem(at: folder.appendingPathComponent(Self.backupMarker))
    }

    public func deletionPaused() async -> Bool {
        let marker = self.folder.appendingPathComponent(Self.backupMarker)
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: marker.path),
            let written = attributes[.modificationDate] as? Date
        else { return false }
        return Date().timeIntervalSince(written) < Self.backupMarkerLifetime
    }

    // MARK: Files

    private func partFile(_ id: String) -> URL {
        self.folder.appendingPathComponent("uploads/\(id).part")
    }

    private func metaFile(_ id: String) -> URL {
        self.folder.appendingPathComponent("uploads/\(id).meta")
    }

    private func objectFile(_ digest: String) -> URL {
        self.folder.appendingPathComponent("objects/\(digest.prefix(2))/\(digest)")
    }

    private func readUpload(_ id: String) throws -> Upload? {
        guard let meta = try? String(contentsOf: self.metaFile(id), encoding: .utf8) else { return nil }
        let fields = meta.split(separator: " ")
        guard fields.count == 2, let size = Int64(fields[0]) else {
            throw CourierStoreError(.storageFailed, "upload \(id) has a damaged record")
        }
        return Upload(
            id: id,
            size: size,
            sha256: fields[1] == "-" ? nil : String(fields[1]),
            offset: try self.length(of: self.partFile(id))
        )
    }

    private func discard(_ id: String) {
        try? FileManager.default.removeItem(at: self.partFile(id))
        try? FileManager.default.removeItem(at: self.metaFile(id))
    }

    private func length(of file: URL) throws -> Int64 {
        let attributes = try self.storage { try FileManager.default.attributesOfItem(atPath: file.path) }
        return (attributes[.size] as? NSNumber)?.int64Value ?? 0
    }

    /// A file operation's error as `storage-failed`.
    private func storage<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as CourierStoreError {
            throw error
        } catch {
            self.logger.error("media storage failed", metadata: ["error": "\(error)"])
            throw CourierStoreError.plain(error, doing: "store the media")
        }
    }

    /// Runs blocking file work on the store's Dispatch queue.
    private func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            self.queue.async { continuation.resume(with: Result(catching: body)) }
        }
    }
}
