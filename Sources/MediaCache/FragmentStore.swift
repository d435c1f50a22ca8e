import CourierVocabulary
import Crypto
public import Foundation

/// What the cache knows of one resource besides its bytes: where they came from, how to revalidate them, and which
/// of them it holds.
public struct ResourceRecord: Hashable, Sendable, Codable {
    /// The cache key (normally the origin URL after the app's normalization).
    public var key: String
    /// The origin URL the bytes were last fetched from (the key may have dropped parts of it).
    public var url: String?
    /// Which set of block files holds the bytes: a new generation starts when the origin's validator changes, so old
    /// and new bytes never share a file.
    public var generation: Int
    /// The resource's whole length, once an origin said it.
    public var totalLength: Int64?
    public var contentType: String?
    /// The validators of the bytes held: a new one from the origin means the old bytes are dropped.
    public var etag: String?
    public var lastModified: String?
    /// The block size the bytes were stored with (a cache reopened with another size drops them).
    public var blockBytes: Int64?
    /// Until when the bytes may be served without asking the origin (``Freshness``), and when the origin last
    /// confirmed them.
    public var freshUntil: Date?
    public var lastValidated: Date?
    /// Whether the origin said `Cache-Control: private`: the bytes are then confirmed with the origin at every
    /// request, as those of a request with credentials are.
    public var isPrivate: Bool?
    /// The byte ranges held, each durable on disk before it is listed here.
    public var ranges: ByteRangeSet

    public init(key: String) {
        self.key = key
        self.generation = 0
        self.ranges = ByteRangeSet()
    }

    /// Whether every byte of the resource is held.
    public var isComplete: Bool {
        guard let total = self.totalLength else { return false }
        return self.ranges.contains(0..<total)
    }
}

/// The cache's files: one folder per resource, named by the SHA-256 of its key (so no key, whatever its characters,
/// can name a path outside the cache folder), holding `index` (its ``ResourceRecord`` as JSON) and a folder per
/// generation, `g<N>`, of fixed-size block files named by their number: block `i` holds the resource's bytes
/// `i * blockBytes ..< (i + 1) * blockBytes` at their own offsets, with holes where nothing is cached. Eviction
/// deletes whole block files, which frees their space on any file system.
///
/// Crash consistency: bytes are written to block files first; a range is added to the index only after its blocks
/// have been synced, and the index is replaced atomically (written aside, synced, renamed). A block is deleted only
/// after an index that no longer lists it is in place. After a crash at any moment the index lists only bytes that
/// are on disk: the cache may lack the last bytes written, never serve wrong ones.
public struct FragmentStore: Sendable {
    public let folder: URL
    /// The size of a block file: the unit of eviction.
    public let blockBytes: Int64

    public init(folder: URL, blockBytes: Int64 = 1 << 20) throws {
        precondition(blockBytes > 0, "blocks hold at least one byte")
        self.folder = folder
        self.blockBytes = blockBytes
        try Self.createFolder(folder)
        // A cache folder an older version left readable is closed to others as it opens (what is inside is then
        // out of their reach whatever its own permissions).
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: folder.path)
    }

    /// Creates a folder only its owner may read (0700): cached media can be private.
    static func createFolder(_ folder: URL) throws {
        try FileManager.default.createDirectory(
            at: folder,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
    }

    /// The folder of a key: the SHA-256 of its UTF-8 bytes, in hex.
    public func resourceFolder(for key: String) -> URL {
        let digest = SHA256Hex.string(SHA256.hash(data: Data(key.utf8)))
        return self.folder.appendingPathComponent(digest, isDirectory: true)
    }

    /// The folder of a generation's block files.
    public func generationFolder(for key: String, generation: Int) -> URL {
        self.resourceFolder(for: key).appendingPathComponent("g\(generation)", isDirectory: true)
    }

    /// The file of one block.
    public func blockFile(_ block: Int64, for key: String, generation: Int) -> URL {
        self.generationFolder(for: key, generation: generation).appendingPathComponent(String(block))
    }

    /// The blocks a range of bytes lies in.
    public func blocks(of range: Range<Int64>) -> ClosedRange<Int64> {
        precondition(!range.isEmpty)
        return (range.lowerBound / self.blockBytes)...((range.upperBound - 1) / self.blockBytes)
    }

    /// A range cut at block boundaries: each piece lies in one block, given with its offset inside the block.
    public func pieces(of range: Range<Int64>) -> [(block: Int64, offset: Int64, range: Range<Int64>)] {
        guard !range.isEmpty else { return [] }
        return self.blocks(of: range).map { block in
            let start = max(range.lowerBound, block * self.blockBytes)
            let end = min(range.upperBound, (block + 1) * self.blockBytes)
            return (block, start - block * self.blockBytes, start..<end)
        }
    }

    /// The record of a key, or nil when nothing of it is cached (or its index cannot be read: then it is treated as
    /// absent, and will be written anew).
    public func record(for key: String) -> ResourceRecord? {
        self.record(at: self.resourceFolder(for: key)).flatMap { $0.key == key ? $0 : nil }
    }

    /// Every resource with a readable index. Folders without one (a crash before the first commit) and generation
    /// folders the index does not name (a validator changed) are deleted.
    public func loadAll() -> [ResourceRecord] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: self.folder.path)) ?? []
        var records: [ResourceRecord] = []
        for name in names where SHA256Hex.isValid(name) {
            let folder = self.folder.appendingPathComponent(name, isDirectory: true)
            guard let record = self.record(at: folder), self.resourceFolder(for: record.key) == folder,
                record.blockBytes == nil || record.blockBytes == self.blockBytes
            else {
                try? FileManager.default.removeItem(at: folder)
                continue
            }
            for entry in (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
            where entry.hasPrefix("g") && entry != "g\(record.generation)" {
                try? FileManager.default.removeItem(at: folder.appendingPathComponent(entry))
            }
            records.append(record)
        }
        return records
    }

    private func record(at folder: URL) -> ResourceRecord? {
        guard let data = try? Data(contentsOf: folder.appendingPathComponent("index")) else { return nil }
        return try? JSONDecoder().decode(ResourceRecord.self, from: data)
    }

    /// Creates the folders a generation's blocks are written in.
    public func prepare(key: String, generation: Int) throws {
        try Self.createFolder(self.resourceFolder(for: key))
        try Self.createFolder(self.generationFolder(for: key, generation: generation))
    }

    /// Writes bytes of a resource at their offset. They are not listed (served after a restart) until
    /// ``commit(_:adding:)``.
    public func write(_ bytes: some DataProtocol, at offset: Int64, for key: String, generation: Int = 0) throws {
        let data = Data(bytes)
        try self.prepare(key: key, generation: generation)
        for piece in self.pieces(of: offset..<(offset + Int64(data.count))) {
            let file = self.blockFile(piece.block, for: key, generation: generation)
            if !FileManager.default.fileExists(atPath: file.path) {
                guard
                    FileManager.default.createFile(
                        atPath: file.path,
                        contents: nil,
                        attributes: [.posixPermissions: 0o600]
                    )
                else {
                    throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: file.path])
                }
            }
            let handle = try FileHandle(forWritingTo: file)
            defer { try? handle.close() }
            try handle.seek(toOffset: UInt64(piece.offset))
            let start = Int(piece.range.lowerBound - offset)
            try handle.write(contentsOf: data[start..<(start + piece.range.count)])
        }
    }

    /// Makes the blocks of `ranges` durable (each block file synced), then lists the ranges in the resource's record
    /// (replacing its other fields with `record`'s), and returns the record as written.
    public func commit(_ record: ResourceRecord, adding ranges: [Range<Int64>] = []) throws -> ResourceRecord {
        var blocks = Set<Int64>()
        for range in ranges where !range.isEmpty { blocks.formUnion(self.blocks(of: range)) }
        for block in blocks {
            let handle = try FileHandle(
                forUpdating: self.blockFile(block, for: record.key, generation: record.generation)
            )
            defer { try? handle.close() }
            try handle.synchronize()
        }
        var updated = record
        for range in ranges { updated.ranges.insert(range) }
        try self.writeIndex(updated)
        return updated
    }

    /// Replaces a resource's index with `record` atomically and durably.
    public func writeIndex(_ record: ResourceRecord) throws {
        let folder = self.resourceFolder(for: record.key)
        try Self.createFolder(folder)
        var record = record
        record.blockBytes = self.blockBytes
        let encoded = try JSONEncoder().encode(record)
        let aside = folder.appendingPathComponent("index.new")
        try encoded.write(to: aside)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: aside.path)
        let handle = try FileHandle(forUpdating: aside)
        try handle.synchronize()
        try handle.close()
        // rename(2) replaces the old index atomically: a reader sees the old record or the new, never a mix.
        guard rename(aside.path, folder.appendingPathComponent("index").path) == 0 else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: aside.path])
        }
        Self.syncFolder(folder)
    }

    /// Deletes a resource's index (its bytes are then never served again, and its folder goes at the next start).
    public func removeIndex(for key: String) {
        try? FileManager.default.removeItem(at: self.resourceFolder(for: key).appendingPathComponent("index"))
    }

    /// Reads cached bytes; the range must be listed in the record.
    public func read(_ range: Range<Int64>, for key: String, generation: Int = 0) throws -> Data {
        var data = Data(capacity: range.count)
        for piece in self.pieces(of: range) {
            let handle = try FileHandle(forReadingFrom: self.blockFile(piece.block, for: key, generation: generation))
            defer { try? handle.close() }
            try handle.seek(toOffset: UInt64(piece.offset))
            let bytes = try handle.read(upToCount: piece.range.count) ?? Data()
            guard bytes.count == piece.range.count else {
                throw CocoaError(.fileReadCorruptFile, userInfo: [NSFilePathErrorKey: key])
            }
            data.append(bytes)
        }
        return data
    }

    /// Deletes block files (after an index that no longer lists them has been written).
    public func deleteBlocks(_ blocks: some Sequence<Int64>, for key: String, generation: Int) {
        for block in blocks {
            try? FileManager.default.removeItem(at: self.blockFile(block, for: key, generation: generation))
        }
    }

    /// Deletes a generation's folder (after an index naming a newer generation has been written).
    public func deleteGeneration(_ generation: Int, for key: String) {
        try? FileManager.default.removeItem(at: self.generationFolder(for: key, generation: generation))
    }

    /// Drops everything cached of a key.
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
