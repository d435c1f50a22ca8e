import Foundation
import Synchronization

/// Downloaded media on this device: whole files on disk, named by their SHA-256, bounded in total size with the
/// least recently used evicted first; downloads in progress as `.part` files (a broken download resumes from the
/// part's length); and a small in-memory layer for small files (thumbnails, voice clips), also LRU.
final class MediaFileCache: Sendable {
    let folder: URL
    let maxBytes: Int64
    let memoryBytes: Int
    let memoryItemBytes: Int

    private struct Entry {
        var size: Int64
        var used: UInt64
    }

    private struct State {
        /// Files being downloaded and uploaded now: one of each per file at a time.
        var files: [String: Entry] = [:]
        var total: Int64 = 0
        var memory: [String: (data: Data, used: UInt64)] = [:]
        var memoryTotal = 0
        var clock: UInt64 = 0

        mutating func tick() -> UInt64 {
            self.clock += 1
            return self.clock
        }
    }

    private let state = Mutex(State())

    init(folder: URL, maxBytes: Int64, memoryBytes: Int, memoryItemBytes: Int) throws {
        self.folder = folder
        self.maxBytes = maxBytes
        self.memoryBytes = memoryBytes
        self.memoryItemBytes = memoryItemBytes
        // Private, whatever the umask: the media of a user's conversations are for that user's eyes. A folder or
        // files left readable by an older version are tightened.
        try FileManager.default.createDirectory(
            at: folder,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: Self.folderMode]
        )
        try FileManager.default.setAttributes([.posixPermissions: Self.folderMode], ofItemAtPath: folder.path)
        // The files already here, oldest use first (the modification time records the last use).
        let keys: [URLResourceKey] = [.fileSizeKey, .contentModificationDateKey]
        let contents = try FileManager.default.contentsOfDirectory(at: folder, includingPropertiesForKeys: keys)
        for url in contents {
            try? FileManager.default.setAttributes([.posixPermissions: Self.fileMode], ofItemAtPath: url.path)
        }
        let found = contents.compactMap { url -> (String, Int64, Date)? in
            let name = url.lastPathComponent
            guard SHA256Hex.isValid(name), let values = try? url.resourceValues(forKeys: Set(keys)) else { return nil }
            return (name, Int64(values.fileSize ?? 0), values.contentModificationDate ?? .distantPast)
        }.sorted { $0.2 < $1.2 }
        self.state.withLock { state in
            for (name, size, _) in found {
                state.files[name] = Entry(size: size, used: state.tick())
                state.total += size
            }
        }
    }

    /// The file of a downloaded media, marked as just used; nil when it is not here.
    func file(_ sha256: String) -> URL? {
        let known = self.state.withLock { state -> Bool in
            guard state.files[sha256] != nil else { return false }
            state.files[sha256]!.used = state.tick()
            return true
        }
        guard known else { return nil }
        let url = self.folder.appendingPathComponent(sha256)
        // The modification time keeps the order of use across restarts.
        try? FileManager.default.setAttributes([.modificationDate: Date()], ofItemAtPath: url.path)
        return url
    }

    /// One download of a file at a time: a second waits for the first, then finds the file here.
    let downloads = KeyedClaims()
    /// One upload of a file at a time: a second waits for the first, then finds the server holding the file.
    let uploads = KeyedClaims()

    /// Where a download in progress is written.
    func partFile(_ sha256: String) -> URL {
        self.folder.appendingPathComponent(sha256 + ".part")
    }

    /// Permissions of the cache's folder and of its files: their owner's alone.
    static let folderMode: Int16 = 0o700
    static let fileMode: Int16 = 0o600

    /// Makes a download's part file if it is not there, readable by its owner only either way.
    func createPartFile(_ sha256: String) throws -> URL {
        let part = self.partFile(sha256)
        if !FileManager.default.fileExists(atPath: part.path) {
            _ = FileManager.default.createFile(
                atPath: part.path,
                contents: nil,
                attributes: [.posixPermissions: Self.fileMode]
            )
        }
        try FileManager.default.setAttributes([.posixPermissions: Self.fileMode], ofItemAtPath: part.path)
        return part
    }

    /// Files a finished, checked download, then evicts the least recently used files over the size bound (never
    /// the one just added).
    func insert(part: URL, sha256: String) throws -> URL {
        let url = self.folder.appendingPathComponent(sha256)
        if FileManager.default.fileExists(atPath: url.path) {
            try? FileManager.default.removeItem(at: part)
        } else {
            try FileManager.default.moveItem(at: part, to: url)
        }
        let size = Int64(
            (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)??.int64Value ?? 0
        )
        let evicted = self.state.withLock { state -> [String] in
            if let old = state.files[sha256] { state.total -= old.size }
            state.files[sha256] = Entry(size: size, used: state.tick())
            state.total += size
            var evicted: [String] = []
            while state.total > self.maxBytes,
                let oldest = state.files.filter({ $0.key != sha256 }).min(by: { $0.value.used < $1.value.used })
            {
                state.files[oldest.key] = nil
                state.total -= oldest.value.size
                evicted.append(oldest.key)
            }
            return evicted
        }
        for name in evicted { try? FileManager.default.removeItem(at: self.folder.appendingPathComponent(name)) }
        return url
    }

    /// Bytes of media on disk now.
    var totalBytes: Int64 { self.state.withLock { $0.total } }

    // MARK: Memory

    /// A small file's bytes from memory, else from disk (then kept in memory); nil when it is not downloaded.
    func data(_ sha256: String) throws -> Data? {
        if let data = self.state.withLock({ state -> Data? in
            guard let entry = state.memory[sha256] else { return nil }
            state.memory[sha256] = (entry.data, state.tick())
            return entry.data
        }) {
            return data
        }
        guard let url = self.file(sha256) else { return nil }
        let data = try Data(contentsOf: url)
        guard data.count <= self.memoryItemBytes else { return data }
        self.state.withLock { state in
            state.memory[sha256] = (data, state.tick())
            state.memoryTotal += data.count
            while state.memoryTotal > self.memoryBytes,
                let oldest = state.memory.filter({ $0.key != sha256 }).min(by: { $0.value.used < $1.value.used })
            {
                state.memory[oldest.key] = nil
                state.memoryTotal -= oldest.value.data.count
            }
        }
        return data
    }

    /// Whether a file is in the memory layer (for tests and diagnostics).
    func inMemory(_ sha256: String) -> Bool {
        self.state.withLock { $0.memory[sha256] != nil }
    }
}
