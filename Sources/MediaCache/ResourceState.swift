/// The bookkeeping of one resource while the proxy uses it: which bytes can be served, which origin fetches are
/// running and who waits on them. A value type whose methods say what to do; ``CacheEngine`` carries the actions out
/// (fetch tasks, file writes, continuations), so the coalescing rules are tested without sockets.
///
/// The rules:
/// - A reader at `position` is served whatever contiguous bytes are available there (written in this process, or
///   listed in the index), whoever fetched them.
/// - Otherwise it waits on a running fetch that will reach `position` soon: one that started at or before it, has not
///   passed it, and has at most ``coalesceBytes`` left to go. Ten players starting the same video thus share one
///   fetch.
/// - Otherwise it starts a fetch at `position`, up to the next available byte, the next running fetch's start, or the
///   end of what it asked for rounded up to a block boundary. A running fetch that would reach `position` only later
///   stops there instead, so running fetches do not bring the same bytes; a seek far ahead keeps what is cached
///   behind it.
/// - A fetch nobody waits on any longer stops at its next block boundary.
/// - A fetch runs at most a read-ahead ahead of the furthest of its readers (``writeNeed(_:count:readAhead:)``), and
///   the read-ahead's worth of bytes after each of its readers is not evicted (``evictable(readAhead:)``): a slow
///   player's next bytes are neither
///   thrown away before it reads them nor fetched faster than the cache can hold them.
struct ResourceState {
    /// Why a fetch gave a reader nothing.
    enum Failure: Equatable, Sendable {
        /// The origin answered with an error status (relayed to a player who has not had a response yet).
        case upstream(status: Int)
        /// The origin could not be reached, went silent, reset the connection or ended its response early.
        case unreachable(String)
        /// The resource must not be cached (`no-store`, or larger than the cache): it streams through.
        case passthrough
    }

    struct Fetch: Equatable {
        var start: Int64
        /// The first byte not written yet.
        var position: Int64
        /// Where the fetch stops (`Int64.max` while the resource's length is unknown).
        var end: Int64
        var readers: Set<Int> = []
        /// Whether its origin answered with the range asked for (206): stopping it costs nothing, another fetch
        /// can go on where it stopped.
        var rangesHonoured = false
    }

    /// What a reader does next.
    enum Step: Equatable {
        /// Send these bytes: they are on disk.
        case serve(Range<Int64>)
        /// Everything asked for has been sent.
        case end
        /// Wait for news (a fetch's progress, its end, a commit); then ask again.
        case wait
        /// Start a fetch of these bytes with this id (the reader waits on it); then ask again.
        case fetch(id: Int, range: Range<Int64>)
        /// The resource changed at the origin since the reader started: its response must be aborted, never mixed.
        case changed
        /// The fetch the reader waited on failed.
        case failed(Failure)
    }

    private(set) var record: ResourceRecord
    /// The bytes of the current generation written in this process or listed in the index.
    private(set) var available: ByteRangeSet
    private(set) var fetches: [Int: Fetch] = [:]
    /// Blocks being sent to a player: never evicted.
    private(set) var pins: [Int64: Int] = [:]
    /// When each block was last written or served (a logical clock), for LRU eviction.
    private(set) var lastUse: [Int64: UInt64] = [:]
    /// Blocks evicted whose files are deleted once the index without them is written; not fetched again until then.
    private(set) var deleting: Set<Int64> = []
    /// Bytes written but not yet synced and listed in the index.
    private(set) var unsynced = ByteRangeSet()
    /// Generations whose folders are deleted once the index names the current one.
    private(set) var oldGenerations: Set<Int> = []
    /// Whether an origin's response head has been seen for this generation (in this process, or before a restart:
    /// every index on disk was written after one). Until then a reader must wait for one.
    var headSeen: Bool
    /// Readers whose fetch failed, with why.
    private var failures: [Int: Failure] = [:]
    /// Where each reader of the current generation last asked for bytes.
    private(set) var readerPositions: [Int: Int64] = [:]
    /// Bytes of evicted blocks, and of dropped generations, whose files are still on disk (deleted by the next
    /// commit): they count against the cap on disk until then.
    private(set) var doomedBytes: Int64 = 0
    private var blockDoom: [Int64: Int64] = [:]
    private var generationDoom: [Int: Int64] = [:]
    private var nextFetchID = 0

    let blockBytes: Int64
    let coalesceBytes: Int64

    init(record: ResourceRecord, blockBytes: Int64, coalesceBytes: Int64) {
        self.record = record
        self.available = record.ranges
        self.headSeen = record.lastValidated != nil
        self.blockBytes = blockBytes
        self.coalesceBytes = coalesceBytes
    }

    var generation: Int { self.record.generation }
    var isIdle: Bool { self.fetches.isEmpty && self.pins.isEmpty && self.deleting.isEmpty }

    /// What `reader`, which started on `generation` and wants bytes up to `upper` (nil: to the end), does at
    /// `position`.
    mutating func step(reader: Int, generation: Int, position: Int64, upper: Int64?) -> Step {
        guard generation == self.generation else {
            self.leave(reader: reader)
            return .changed
        }
        self.readerPositions[reader] = position
        let limit = min(upper ?? .max, self.record.totalLength ?? .max)
        if position >= limit {
            self.leave(reader: reader)
            return .end
        }
        // The reader stays registered on the fetch it waited on: the fetch goes on for it while it catches up.
        // Bytes on disk are served even when that fetch has failed since.
        if let run = self.available.run(containing: position) {
            return .serve(position..<min(run.upperBound, limit))
        }
        if let failure = self.failures.removeValue(forKey: reader) {
            self.leave(reader: reader)
            return .failed(failure)
        }
        // Already waiting on a fetch that will bring this byte: one that has not passed it yet.
        for (id, fetch) in self.fetches where fetch.readers.contains(reader) {
            if fetch.start <= position && fetch.position <= position && position < fetch.end { return .wait }
            self.fetches[id]?.readers.remove(reader)
        }
        for (id, fetch) in self.fetches.sorted(by: { $0.key < $1.key })
        where fetch.start <= position && fetch.position <= position && position < fetch.end
            && position - fetch.position <= self.coalesceBytes
        {
            self.fetches[id]?.readers.insert(reader)
            return .wait
        }
        // Up to the next byte on disk, or the next running fetch's start, whichever comes first.
        var end = self.available.firstStart(after: position) ?? .max
        for fetch in self.fetches.values where fetch.start > position { end = min(end, fetch.start) }
        if limit != .max {
            // Rounded up to a block (without overflowing, whatever a Range header said).
            let rounded =
                limit > Int64.max - self.blockBytes
                ? Int64.max : (limit + self.blockBytes - 1) / self.blockBytes * self.blockBytes
            end = min(end, rounded, self.record.totalLength ?? .max)
        }
        if end != .max, !self.deleting.isDisjoint(with: Self.blocks(of: position..<end, size: self.blockBytes)) {
            return .wait
        }
        if end == .max, self.deleting.contains(where: { ($0 + 1) * self.blockBytes > position }) { return .wait }
        // A fetch behind this position that would reach it later stops here instead.
        for (id, fetch) in self.fetches where fetch.position < position && fetch.end > position {
            self.fetches[id]?.end = position
        }
        let id = self.nextFetchID
        self.nextFetchID += 1
        self.fetches[id] = Fetch(start: position, position: position, end: end, readers: [reader])
        return .fetch(id: id, range: position..<end)
    }

    /// A reader is gone (done, aborted, or its player disconnected).
    mutating func leave(reader: Int) {
        self.failures[reader] = nil
        self.readerPositions[reader] = nil
        for (id, fetch) in self.fetches where fetch.readers.contains(reader) {
            self.fetches[id]?.readers.remove(reader)
        }
    }

    /// The origin answered a fetch starting elsewhere than asked (it ignored the range: from 0).
    mutating func fetch(_ id: Int, startsAt start: Int64) {
        self.fetches[id]?.start = start
        self.fetches[id]?.position = start
    }

    /// A fetch's origin answered with the range asked for.
    mutating func honoursRanges(_ id: Int) {
        self.fetches[id]?.rangesHonoured = true
    }

    /// A fetch goes on to `end` (its response holds the whole resource anyway).
    mutating func extend(_ id: Int, to end: Int64) {
        guard let fetch = self.fetches[id], fetch.end < end else { return }
        self.fetches[id]!.end = end
    }

    /// Where a fetch at `position` should stop writing: its end, or — when nobody waits on it — the next block
    /// boundary. Nil when it has no reason to go on.
    func stop(for id: Int) -> Int64? {
        guard let fetch = self.fetches[id] else { return nil }
        var stop = fetch.end
        if fetch.readers.isEmpty {
            let boundary = (fetch.position / self.blockBytes + 1) * self.blockBytes
            stop = min(stop, fetch.position % self.blockBytes == 0 ? fetch.position : boundary)
        }
        return fetch.position < stop ? stop : nil
    }

    /// How much a fetch's next bytes are wanted, for the cache to weigh against its cap.
    enum WriteNeed: Equatable {
        /// A reader waits for them now.
        case waited
        /// Its readers are behind it, and these bytes stay within the read-ahead of the furthest.
        case ahead
        /// Beyond the read-ahead: the fetch waits for its readers.
        case tooFarAhead
        /// Nobody reads the fetch (it fills up its block).
        case unread
    }

    /// How much the `count` bytes a fetch writes next are wanted.
    func writeNeed(_ id: Int, count: Int64, readAhead: Int64) -> WriteNeed {
        guard let fetch = self.fetches[id],
            let furthest = fetch.readers.compactMap({ self.readerPositions[$0] }).max()
        else { return .unread }
        if furthest >= fetch.position { return .waited }
        return fetch.position + count - furthest <= readAhead ? .ahead : .tooFarAhead
    }

    /// Whether a fetch's readers are all behind it (it was held back for them).
    func isAheadOfReaders(_ id: Int) -> Bool {
        guard let fetch = self.fetches[id] else { return false }
        let positions = fetch.readers.compactMap { self.readerPositions[$0] }
        return !positions.isEmpty && positions.allSatisfy { $0 < fetch.position }
    }

    /// A fetch wrote bytes; returns how many of them are new to the cache. Only the part up to the fetch's end
    /// counts, and none of it in a block waiting to be deleted: a fetch whose end was moved back (or that the origin
    /// sent from the start) may still have been writing bytes received before, perhaps into a block evicted since.
    /// Those are written but never listed.
    mutating func wrote(_ id: Int, _ range: Range<Int64>, clock: UInt64) -> Int64 {
        guard let fetch = self.fetches[id] else { return 0 }
        self.fetches[id]!.position = max(fetch.position, range.upperBound)
        let clipped = range.lowerBound..<min(range.upperBound, max(range.lowerBound, fetch.end))
        guard !clipped.isEmpty else { return 0 }
        var kept = ByteRangeSet([clipped])
        for block in self.deleting { kept.remove((block * self.blockBytes)..<((block + 1) * self.blockBytes)) }
        let before = self.available.count
        for piece in kept.ranges {
            self.available.insert(piece)
            self.unsynced.insert(piece)
            for block in Self.blocks(of: piece, size: self.blockBytes) { self.lastUse[block] = clock }
        }
        return self.available.count - before
    }

    /// What a commit writes: the record listing the written bytes too, the blocks to sync first, and the blocks and
    /// generations to delete after. The written bytes are taken off ``unsynced``.
    struct Commit: Sendable {
        var record: ResourceRecord
        /// Whether an index is written at all (not for a resource dropped before any head was seen again).
        var writesIndex: Bool
        var syncing: [Range<Int64>]
        var syncBlocks: Set<Int64>
        var deleting: Set<Int64>
        var oldGenerations: Set<Int>
    }

    mutating func commit() -> Commit {
        var record = self.record
        var syncBlocks = Set<Int64>()
        let syncing = self.unsynced.ranges
        for range in syncing {
            record.ranges.insert(range)
            syncBlocks.formUnion(Self.blocks(of: range, size: self.blockBytes))
        }
        self.unsynced = ByteRangeSet()
        return Commit(
            record: record,
            writesIndex: self.headSeen,
            syncing: syncing,
            syncBlocks: syncBlocks,
            deleting: self.deleting,
            oldGenerations: self.oldGenerations
        )
    }

    /// A commit's index is in place: its synced bytes are listed (those still available: not evicted since), its
    /// blocks and old generations are gone. Bytes of blocks whose file was missing at the sync were not listed, and
    /// are no longer served.
    ///
    /// - Returns: How many doomed bytes the commit deleted, and how many available bytes were lost with missing
    ///   block files (no longer in use).
    @discardableResult
    mutating func committed(_ commit: Commit, missing: Set<Int64> = []) -> (freed: Int64, lost: Int64) {
        var freed: Int64 = 0
        self.oldGenerations.subtract(commit.oldGenerations)
        for generation in commit.oldGenerations { freed += self.generationDoom.removeValue(forKey: generation) ?? 0 }
        defer { self.doomedBytes -= freed }
        // Block numbers of another generation name other files.
        guard commit.record.generation == self.generation else { return (freed, 0) }
        self.deleting.subtract(commit.deleting)
        for block in commit.deleting { freed += self.blockDoom.removeValue(forKey: block) ?? 0 }
        let before = self.available.count
        for block in missing {
            let range = (block * self.blockBytes)..<((block + 1) * self.blockBytes)
            for synced in commit.syncing where synced.overlaps(range) {
                self.available.remove(synced.clamped(to: range))
            }
        }
        let lost = before - self.available.count
        for range in commit.syncing {
            for piece in self.available.pieces(of: range) {
                if case .cached(let cached) = piece { self.record.ranges.insert(cached) }
            }
        }
        return (freed, lost)
    }

    /// A commit failed (a full disk, say): its bytes stay available in this process and are synced again next time.
    mutating func commitFailed(_ commit: Commit) {
        guard commit.record.generation == self.generation else { return }
        for range in commit.syncing {
            for piece in self.available.pieces(of: range) {
                if case .cached(let cached) = piece { self.unsynced.insert(cached) }
            }
        }
    }

    /// A fetch ended. When it read a body of unknown length from the start to its end, that end is the length.
    mutating func finished(_ id: Int, lengthKnown: Bool) {
        guard let fetch = self.fetches.removeValue(forKey: id) else { return }
        if lengthKnown, self.record.totalLength == nil, fetch.start == 0 { self.record.totalLength = fetch.position }
    }

    /// A fetch failed: its readers are told at their next step.
    mutating func failed(_ id: Int, _ reason: Failure) {
        guard let fetch = self.fetches.removeValue(forKey: id) else { return }
        for reader in fetch.readers { self.failures[reader] = reason }
    }

    /// Updates what the record says of the resource (length, type, validators, freshness), keeping its bytes.
    mutating func update(_ change: (inout ResourceRecord) -> Void) {
        let ranges = self.record.ranges
        let generation = self.record.generation
        change(&self.record)
        self.record.ranges = ranges
        self.record.generation = generation
    }

    /// The origin's validator changed (or the resource is dropped): a new generation with no bytes. Readers of the
    /// old one are told `.changed` at their next step; its fetches are forgotten (their tasks find out at their next
    /// write) except `keeping`, whose response is the new resource; its folder is deleted once the new index is
    /// written. Returns how many bytes were dropped.
    mutating func startGeneration(keeping kept: Int? = nil, _ change: (inout ResourceRecord) -> Void) -> Int64 {
        let dropped = self.available.count
        let old = self.record.generation
        var fresh = ResourceRecord(key: self.record.key)
        change(&fresh)
        fresh.ranges = ByteRangeSet()
        fresh.generation = old + 1
        self.record = fresh
        self.available = ByteRangeSet()
        self.unsynced = ByteRangeSet()
        let keptFetch = kept.flatMap { self.fetches[$0] }
        self.fetches = [:]
        if let kept, var keptFetch {
            keptFetch.readers = []
            self.fetches[kept] = keptFetch
        }
        self.lastUse = [:]
        self.deleting = []
        self.readerPositions = [:]
        // The old folder goes whole: its doomed blocks with it.
        self.generationDoom[old, default: 0] += dropped + self.blockDoom.values.reduce(0, +)
        self.blockDoom = [:]
        self.doomedBytes += dropped
        self.oldGenerations.insert(old)
        return dropped
    }

    mutating func pin(_ range: Range<Int64>, clock: UInt64) {
        for block in Self.blocks(of: range, size: self.blockBytes) {
            self.pins[block, default: 0] += 1
            self.lastUse[block] = clock
        }
    }

    mutating func unpin(_ range: Range<Int64>) {
        for block in Self.blocks(of: range, size: self.blockBytes) {
            if let count = self.pins[block], count > 1 { self.pins[block] = count - 1 } else { self.pins[block] = nil }
        }
    }

    /// Blocks that may be evicted, with their last use and the bytes they hold: not pinned, not where a running
    /// fetch will write, not among the next `readAhead` bytes of a fetch's reader that it has yet to read (a
    /// reader far behind — a paused player — keeps a read-ahead's worth, not everything since).
    func evictable(readAhead: Int64) -> [(block: Int64, lastUse: UInt64, bytes: Int64)] {
        var result: [(block: Int64, lastUse: UInt64, bytes: Int64)] = []
        var unread: [Range<Int64>] = []
        for fetch in self.fetches.values {
            for reader in fetch.readers {
                if let position = self.readerPositions[reader], position < fetch.position {
                    let end =
                        position > Int64.max - readAhead ? fetch.position : min(fetch.position, position + readAhead)
                    unread.append(position..<end)
                }
            }
        }
        for (block, used) in self.lastUse where self.pins[block] == nil && !self.deleting.contains(block) {
            let range = (block * self.blockBytes)..<((block + 1) * self.blockBytes)
            let written = self.fetches.values.contains { fetch in
                (fetch.position < range.upperBound && fetch.end > range.lowerBound)
                    || fetch.position / self.blockBytes == block
            }
            if written || unread.contains(where: { $0.overlaps(range) }) { continue }
            let bytes = self.available.intersection(count: range)
            if bytes > 0 { result.append((block, used, bytes)) }
        }
        return result
    }

    /// Evicts a block: its bytes are no longer available nor listed; its file is deleted after the next index write.
    mutating func evict(_ block: Int64) {
        let range = (block * self.blockBytes)..<((block + 1) * self.blockBytes)
        let bytes = self.available.intersection(count: range)
        self.blockDoom[block, default: 0] += bytes
        self.doomedBytes += bytes
        self.available.remove(range)
        self.unsynced.remove(range)
        self.record.ranges.remove(range)
        self.lastUse[block] = nil
        self.deleting.insert(block)
    }

    /// The blocks of the record's listed bytes, each last used at `clock` (after a restart, before any use).
    mutating func touchAll(clock: UInt64) {
        for range in self.available.ranges {
            for block in Self.blocks(of: range, size: self.blockBytes) { self.lastUse[block] = clock }
        }
    }

    static func blocks(of range: Range<Int64>, size: Int64) -> ClosedRange<Int64> {
        (range.lowerBound / size)...((max(range.upperBound, range.lowerBound + 1) - 1) / size)
    }
}

extension ByteRangeSet {
    /// The held range that contains `position`, if any.
    func run(containing position: Int64) -> Range<Int64>? {
        self.ranges.first { $0.contains(position) }
    }

    /// The start of the first held range after `position`.
    func firstStart(after position: Int64) -> Int64? {
        self.ranges.first { $0.lowerBound > position }?.lowerBound
    }

    /// How many bytes of `range` are held.
    func intersection(count range: Range<Int64>) -> Int64 {
        self.pieces(of: range).reduce(0) { total, piece in
            if case .cached(let cached) = piece { return total + Int64(cached.count) }
            return total
        }
    }
}
