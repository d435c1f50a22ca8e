internal import Crypto
public import Foundation
internal import Glibc
public import Logging

/// Media bytes on disk, addressed by their SHA-256: an upload is written chunk by chunk to `uploads/ID.part`
/// (never held in memory), checked against the size and digest it declared, and only then moved to
/// `objects/AB/ABCDEF…`, where identical files are stored once. A broken upload resumes from the length of its
/// part file. File work runs on a Dispatch queue, off Swift's cooperative threads. One server owns the folder.
public final class BlobStore: BlobStorage {
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
    /// `destination`, each written aside and renamed into place, private. Files are stored once and never changed
    /// or deleted, so a copy made after a database backup holds every file that backup names.
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

    // MARK: Uploading

    /// Starts an upload, or finds it again to resume it (``BlobStorage/start(upload:size:sha256:admission:)``). The
    /// admission is checked against a listing of the uploads folder: starts of one owner must take turns in the
    /// caller (one server owns the folder).
    public func start(
        upload id: String,
        size: Int64,
        sha256: String?,
        admission: BlobAdmission?
    ) async throws
        -> Upload
    {
        try self.validate(upload: id, size: size, sha256: sha256)
        let digest = sha256
        if let admission {
            var others = try await self.uploadsInProgress(prefixes: admission.prefixes)
            others[id] = nil
            try admission.admit(others)
        }
        return try await self.run {
            let declaration = "\(size) \(digest ?? "-")"
            let meta = self.metaFile(id)
            if let existing = try? String(contentsOf: meta, encoding: .utf8) {
                guard existing == declaration else {
                    throw CourierStoreError(.invalidRequest, "upload \(id) was started with another size or digest")
                }
            } else {
                try self.storage {
                    try Data(declaration.utf8).write(to: meta, options: .atomic)
                    try PrivateFiles.restrict(meta.path)
                    try PrivateFiles.createFile(atPath: self.partFile(id).path)
                }
            }
            return Upload(id: id, size: size, sha256: digest, offset: try self.length(of: self.partFile(id)))
        }
    }

    /// An upload in progress, or nil when there is none by that id.
    public func upload(_ id: String) async throws -> Upload? {
        try Self.validate(uploadID: id)
        return try await self.run { try self.readUpload(id) }
    }

    /// Writes a chunk of an upload at `offset` (``BlobStorage/append(_:to:at:content:)``; `content` is not used: the
    /// caller lets one writer at a time own an upload).
    @discardableResult
    public func append(_ bytes: Data, to id: String, at offset: Int64, content: Int64?) async throws -> Int64 {
        try Self.validate(uploadID: id)
        return try await self.run {
            guard let upload = try self.readUpload(id) else {
                throw CourierStoreError(.unknownUpload, "no upload \(id)")
            }
            guard offset == upload.offset else {
                throw CourierStoreError(.invalidRequest, "upload \(id) continues at \(upload.offset), not \(offset)")
            }
            guard upload.offset + Int64(bytes.count) <= upload.size else {
                self.discard(id)
                throw CourierStoreError(.mediaMismatch, "upload \(id) sent more than its \(upload.size) bytes")
            }
            try self.storage {
                let handle = try FileHandle(forWritingTo: self.partFile(id))
                defer { try? handle.close() }
                try handle.seek(toOffset: UInt64(offset))
                try handle.write(contentsOf: bytes)
            }
            return offset + Int64(bytes.count)
        }
    }

    /// Finishes an upload (``BlobStorage/finish(upload:digest:content:)``): checks its size and SHA-256, makes the part
    /// file durable, and moves it under its digest, or drops it when the same bytes are stored already.
    public func finish(upload id: String, digest known: String?, content: Int64?) async throws -> String {
        try Self.validate(uploadID: id)
        return try await self.run {
            guard let upload = try self.readUpload(id) else {
                throw CourierStoreError(.unknownUpload, "no upload \(id)")
            }
            guard upload.offset == upload.size else {
                throw CourierStoreError(.mediaMismatch, "upload \(id) has \(upload.offset) of \(upload.size) bytes")
            }
            let part = self.partFile(id)
            let digest = try self.storage {
                if let known {
                    try Self.sync(part)
                    return known
                }
                return try self.hash(part, sync: true)
            }
            if let declared = upload.sha256, digest != declared {
                self.discard(id)
                throw CourierStoreError(.mediaMismatch, "upload \(id) has sha256 \(digest), not \(declared)")
            }
            let object = self.objectFile(digest)
            try self.storage {
                if FileManager.default.fileExists(atPath: object.path) {
                    try FileManager.default.removeItem(at: part)
                } else {
                    try PrivateFiles.createFolder(object.deletingLastPathComponent())
                    try FileManager.default.moveItem(at: part, to: object)
                    Self.syncFolder(object.deletingLastPathComponent())
                }
                try? FileManager.default.removeItem(at: self.metaFile(id))
            }
            return digest
        }
    }

    /// Deletes an upload that will not be finished (nothing happens when there is none).
    public func abandon(upload id: String) async {
        guard (try? Self.validate(uploadID: id)) != nil else { return }
        _ = try? await self.run { self.discard(id) }
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

    /// The size of a stored blob, or nil when there is none with that digest.
    public func size(of sha256: String) async throws -> Int64? {
        guard let object = SHA256Hex.isValid(sha256) ? self.objectFile(sha256) : nil else { return nil }
        return try await self.run {
            FileManager.default.fileExists(atPath: object.path) ? try self.length(of: object) : nil
        }
    }

    /// Streams `range` of a stored blob to `body`, a chunk of at most ``Configuration/readChunkBytes`` at a time.
    ///
    /// - Throws: `unknown-media` when there is no such blob, `invalid-request` for a range outside it.
    public func read(
        _ sha256: String,
        range: Range<Int64>,
        _ body: (Data) async throws -> Void
    ) async throws {
        guard SHA256Hex.isValid(sha256), let size = try await self.size(of: sha256) else {
            throw CourierStoreError(.unknownMedia, "no media \(sha256)")
        }
        guard range.lowerBound >= 0, range.upperBound <= size else {
            throw CourierStoreError(.invalidRequest, "\(range) is outside the \(size) bytes of \(sha256)")
        }
        let object = self.objectFile(sha256)
        var position = range.lowerBound
        while position < range.upperBound {
            let count = Int(min(Int64(self.configuration.readChunkBytes), range.upperBound - position))
            let start = position
            let chunk = try await self.run {
                try self.storage {
                    let handle = try FileHandle(forReadingFrom: object)
                    defer { try? handle.close() }
                    try handle.seek(toOffset: UInt64(start))
                    return try handle.read(upToCount: count) ?? Data()
                }
            }
            guard !chunk.isEmpty else { throw CourierStoreError(.storageFailed, "\(sha256) ended early") }
            position += Int64(chunk.count)
            try await body(chunk)
        }
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

    /// The SHA-256 of a file, read in chunks; with `sync`, the file is also made durable first.
    private func hash(_ file: URL, sync: Bool) throws -> String {
        let handle = try FileHandle(forUpdating: file)
        defer { try? handle.close() }
        if sync { try handle.synchronize() }
        var hasher = SHA256()
        while let chunk = try handle.read(upToCount: self.configuration.readChunkBytes), !chunk.isEmpty {
            hasher.update(data: chunk)
        }
        return SHA256Hex.string(hasher.finalize())
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
