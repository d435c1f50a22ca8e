import Crypto
public import Foundation

/// What the cache knows of one resource besides its bytes: where they came from, how to revalidate them, and which
/// of them it holds.
public struct ResourceRecord: Hashable, Sendable, Codable {
    /// The cache key (normally the origin URL after the app's normalization).
    public var key: String
    /// The resource's whole length, once an origin said it.
    public var totalLength: Int64?
    public var contentType: String?
    /// The validators of the bytes held: a new one from the origin means the old bytes are dropped.
    public var etag: String?
    public var lastModified: String?
    /// Until when the bytes may be served without asking the origin (``Freshness``), and when the origin last
    /// confirmed them.
    public var freshUntil: Date?
    public var lastValidated: Date?
    /// The byte ranges held, each durable on disk before it is listed here.
    public var ranges: ByteRangeSet

    public init(key: String) {
        self.key = key
        self.ranges = ByteRangeSet()
    }
}

/// The cache's files: one folder per resource, named by the SHA-256 of its key (so no key, whatever its characters,
/// can name a path outside the cache folder), holding `data` (the resource's bytes at their own offsets, with holes
/// where nothing is cached) and `index` (its ``ResourceRecord`` as JSON).
///
/// Crash consistency: bytes are written to `data` first; a range is added to the index only after the data file has
/// been synced, and the index is replaced atomically (written aside, synced, renamed). After a crash at any moment the
/// index lists only bytes that are on disk: the cache may lack the last bytes written, never serve wrong ones.
public struct FragmentStore: Sendable {
    public let folder: URL

    public init(folder: URL) throws {
        self.folder = folder
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    }

    /// The folder of a key: the SHA-256 of its UTF-8 bytes, in hex.
    public func resourceFolder(for key: String) -> URL {
        let digest = SHA256.hash(data: Data(key.utf8)).map { String(format: "%02x", $0) }.joined()
        return self.folder.appendingPathComponent(digest, isDirectory: true)
    }

    /// The record of a key, or nil when nothing of it is cached (or its index cannot be read: then it is treated as
    /// absent, and will be written anew).
    public func record(for key: String) -> ResourceRecord? {
        let index = self.resourceFolder(for: key).appendingPathComponent("index")
        guard let data = try? Data(contentsOf: index),
            let record = try? JSONDecoder().decode(ResourceRecord.self, from: data),
            record.key == key
        else { return nil }
        return record
    }

    /// Writes bytes of a resource at their offset. They are not listed (served) until ``commit(_:adding:)``.
    public func write(_ bytes: some DataProtocol, at offset: Int64, for key: String) throws {
        let folder = self.resourceFolder(for: key)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let file = folder.appendingPathComponent("data")
        if !FileManager.default.fileExists(atPath: file.path) {
            _ = FileManager.default.createFile(atPath: file.path, contents: nil)
        }
        let handle = try FileHandle(forWritingTo: file)
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64(offset))
        try handle.write(contentsOf: bytes)
    }

    /// Makes the written bytes of `ranges` durable, then lists them in the resource's record (replacing its other
    /// fields with `record`'s).
    public func commit(_ record: ResourceRecord, adding ranges: [Range<Int64>] = []) throws -> ResourceRecord {
        let folder = self.resourceFolder(for: record.key)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let data = folder.appendingPathComponent("data")
        if !ranges.isEmpty {
            let handle = try FileHandle(forUpdating: data)
            defer { try? handle.close() }
            try handle.synchronize()
        }
        var updated = record
        for range in ranges { updated.ranges.insert(range) }
        let encoded = try JSONEncoder().encode(updated)
        let aside = folder.appendingPathComponent("index.new")
        try encoded.write(to: aside)
        let handle = try FileHandle(forUpdating: aside)
        try handle.synchronize()
        try handle.close()
        // rename(2) replaces the old index atomically: a reader sees the old record or the new, never a mix.
        guard rename(aside.path, folder.appendingPathComponent("index").path) == 0 else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: aside.path])
        }
        Self.syncFolder(folder)
        return updated
    }

    /// Reads cached bytes; the range must be listed in the record.
    public func read(_ range: Range<Int64>, for key: String) throws -> Data {
        let handle = try FileHandle(forReadingFrom: self.resourceFolder(for: key).appendingPathComponent("data"))
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64(range.lowerBound))
        let data = try handle.read(upToCount: Int(range.count)) ?? Data()
        guard data.count == range.count else {
            throw CocoaError(.fileReadCorruptFile, userInfo: [NSFilePathErrorKey: key])
        }
        return data
    }

    /// Drops everything cached of a key (its validator changed, or it is evicted whole).
    public func remove(_ key: String) throws {
        let folder = self.resourceFolder(for: key)
        if FileManager.default.fileExists(atPath: folder.path) {
            try FileManager.default.removeItem(at: folder)
        }
    }

    private static func syncFolder(_ folder: URL) {
        guard let handle = try? FileHandle(forReadingFrom: folder) else { return }
        try? handle.synchronize()
        try? handle.close()
    }
}
