import AsyncHTTPClient
import CourierVocabulary
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix

/// What the cache has done since it started, and what it holds (`GET /_stats`).
public struct CacheStatistics: Sendable, Codable, Hashable {
    /// Requests served wholly from the cache.
    public var hits = 0
    /// Requests served partly from the cache, partly from the origin.
    public var partialHits = 0
    /// Requests served wholly from the origin (including those streamed through uncached).
    public var misses = 0
    /// Bytes sent to players that the cache held when they were asked for.
    public var bytesFromCache: Int64 = 0
    /// Bytes the origin sent.
    public var bytesFromOrigin: Int64 = 0
    /// Resources known to the cache, and the bytes it holds of them.
    public var resources = 0
    public var bytesUsed: Int64 = 0
    public var maxBytes: Int64 = 0
}

/// What the cache holds of one resource (`GET /_cache`).
public struct CachedResource: Sendable, Codable, Hashable {
    public var key: String
    public var url: String?
    public var totalLength: Int64?
    public var contentType: String?
    public var etag: String?
    public var lastModified: String?
    public var cachedBytes: Int64
    /// The cached byte ranges, each as `[first, end)`.
    public var ranges: [[Int64]]
}

/// What a reader needs to answer a player before sending bytes.
struct ResourceHead: Sendable {
    var key: String
    var generation: Int
    var totalLength: Int64?
    var contentType: String?
    var etag: String?
    var lastModified: String?
    /// The URL that answered last (after redirects).
    var url: String?
}

/// Everything the engine keeps for one resource, in one value: what is cached and fetched of it
/// (``ResourceState``), who waits on it, the tasks working for it, and its commit and revalidation.
struct ResourceEntry {
    var state: ResourceState
    /// Readers waiting for news of the resource (a fetch's progress or end, a commit, a change), by reader.
    var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
    /// The origin fetches running for it, by fetch id.
    var fetches: [Int: Task<Void, Never>] = [:]
    var commit = CommitPhase.idle
    /// Whether its last commit failed (a full disk): its doomed files may stay a while, and nobody waits for them.
    var commitFailing = false
    /// The revalidation under way, which the requests that need one share (never for a private resource).
    var revalidation: Task<CacheEngine.Revalidation, Never>?
    /// When an origin last failed to answer a revalidation: the cached bytes are served as they are meanwhile.
    var lastAttempt: Date?
    /// Until when it streams through uncached (`no-store`, or larger than the cache).
    var passthroughUntil: Date?
    /// A playlist seen to be live: fetched from the origin at every request, never cached.
    var isLive = false
    /// The fetch whose origin answer the head last came from: a request whose own fetch that was needs no
    /// revalidation after it.
    var headFrom: Int?

    enum CommitPhase {
        case idle
        /// A commit runs.
        case running
        /// A commit runs, and another must follow it (the state changed since it started).
        case runningThenAgain
    }

    init(key: String, blockBytes: Int64, coalesceBytes: Int64) {
        self.state = ResourceState(
            record: ResourceRecord(key: key),
            blockBytes: blockBytes,
            coalesceBytes: coalesceBytes
        )
    }

    init(state: ResourceState) {
        self.state = state
    }
}

/// The cache proper: the resources' entries, the origin fetches that fill them, the commits that make their bytes
/// durable, eviction, revalidation and statistics. Readers (player requests) ask it what to send next; it answers
/// with bytes on disk, waiting for a fetch when needed.
///
/// By concern: readers and control (`+Readers`), fetches and the room they write in (`+Fetch`), commits and
/// eviction (`+Commits`), revalidation (`+Revalidation`); what an origin's answer means is ``OriginAnswer``.
actor CacheEngine {
    enum Opening: Sendable {
        /// Serve the resource as reader `reader`.
        case resource(ResourceHead, reader: Int)
        /// Stream it through from the origin uncached.
        case passthrough
        /// A live playlist (``openToServe(key:url:forward:start:upper:)`` only): fetched afresh for every request.
        case live
        case failed(ResourceState.Failure)
    }

    enum Read: Sendable {
        /// These bytes are on disk and pinned: send them, then ``CacheEngine/release(_:range:)``.
        case serve(Range<Int64>, generation: Int)
        case end
        case changed
        case failed(ResourceState.Failure)
    }

    let configuration: MediaCacheConfiguration
    let store: FragmentStore
    let origin: OriginClient
    let fileIO: NonBlockingFileIO
    let threadPool: NIOThreadPool
    /// A thread of its own for commits (fsync and the index), so a slow sync never delays the bytes in flight on
    /// ``threadPool``. Started by ``run()``, stopped when it ends.
    let commitPool = NIOThreadPool(numberOfThreads: 1)
    let logger: Logger

    /// One entry per resource the cache knows of.
    var entries: [String: ResourceEntry] = [:]
    /// The engine's background work (commits and their retries), run by ``run()`` as its child tasks; finished by
    /// ``stop()``.
    let work: (stream: AsyncStream<Work>, continuation: AsyncStream<Work>.Continuation)
    /// Who waits for ``run()`` to end.
    var runEndWaiters: [CheckedContinuation<Void, Never>] = []
    var runEnded = false
    var clock: UInt64 = 1
    var nextReader = 0
    var used: Int64 = 0
    /// Bytes evicted or dropped whose files the commits have not deleted yet: on disk, and so under the cap.
    var doomed: Int64 = 0
    /// Bytes fetches were let write that are not counted in `used` yet (their writes are under way).
    var admitted: Int64 = 0
    /// Fetches waiting for room under the cap (or for their readers to catch up).
    var roomWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    var nextRoomWaiter: UInt64 = 0
    /// Resources whose commit runs or is due: waiting for room frees something only while there are some (they
    /// delete what was evicted).
    var commitsUnderWay = 0
    /// Resources whose last commit failed.
    var failingCommits = 0
    var statistics = CacheStatistics()

    /// Work ``run()`` does as child tasks.
    enum Work: Sendable {
        /// Commit a resource's state.
        case commit(String)
        /// Commit it again after a while (its last commit failed; a full disk may free up).
        case retryCommit(String, after: Duration)
    }

    /// How long after a failed commit it is tried again.
    static let commitRetryDelay = Duration.seconds(1)

    /// The most bytes one answer of ``next(key:reader:generation:position:upper:url:forward:)`` pins: four blocks
    /// (at least 256 KiB), but no more than a thirty-second of the cap (at least a block), since pinned bytes
    /// cannot be evicted. A reader with two answers in flight asks for half of it each (``next(key:reader:generation:position:upper:limit:url:forward:)``),
    /// so that what one reader pins stays within it.
    nonisolated var maxServeBytes: Int64 {
        let blockBytes = self.configuration.blockBytes
        return max(blockBytes, min(max(blockBytes * 4, 256 << 10), self.configuration.maxBytes / 32))
    }

    /// How far a fetch may run ahead of the furthest of its readers: ``MediaCacheConfiguration/readAheadBytes``,
    /// at most a quarter of the cap, and at least what one answer pins and a block more (so that a reader sending
    /// its last answer does not hold the fetch up).
    var readAhead: Int64 {
        max(
            self.maxServeBytes + self.configuration.blockBytes,
            min(self.configuration.readAheadBytes, self.configuration.maxBytes / 4)
        )
    }

    /// How many bytes a fetch may have received and not yet written: a sixteenth of the cap, from a block to
    /// ``pipeBytes``.
    nonisolated var pipeLimit: Int {
        Int(min(Int64(Self.pipeBytes), max(self.configuration.blockBytes, self.configuration.maxBytes / 16)))
    }

    /// How many bytes a fetch may have received and not yet written.
    static let pipeBytes = 4 << 20

    init(configuration: MediaCacheConfiguration, origin: OriginClient, logger: Logger) throws {
        self.configuration = configuration
        self.store = try FragmentStore(folder: configuration.cacheDirectory, blockBytes: configuration.blockBytes)
        self.origin = origin
        self.threadPool = NIOThreadPool.singleton
        self.fileIO = NonBlockingFileIO(threadPool: self.threadPool)
        self.logger = logger
        self.work = AsyncStream.makeStream(of: Work.self)
        for record in self.store.loadAll() {
            var state = ResourceState(
                record: record,
                blockBytes: configuration.blockBytes,
                coalesceBytes: configuration.coalesceBytes
            )
            state.touchAll(clock: 0)
            self.used += state.available.count
            self.entries[record.key] = ResourceEntry(state: state)
        }
        self.statistics.maxBytes = configuration.maxBytes
    }

    /// A resource's entry, made when first needed.
    func entry(_ key: String) -> ResourceEntry {
        self.entries[key]
            ?? ResourceEntry(
                key: key,
                blockBytes: self.configuration.blockBytes,
                coalesceBytes: self.configuration.coalesceBytes
            )
    }

    /// Changes a resource's entry, making it first if needed.
    func update<T>(_ key: String, _ body: (inout ResourceEntry) -> T) -> T {
        var entry = self.entry(key)
        defer { self.entries[key] = entry }
        return body(&entry)
    }

    /// Runs the engine's background work (commits, and their retries after a failure) until ``stop()``: starts the
    /// commit thread, evicts down to the cap (after a restart with a smaller one), and returns once every commit
    /// asked for before the stop has run (a retry waiting for its time too: it runs once more).
    ///
    /// Only ``stop()`` ends it: run it where its caller's cancellation does not reach (a task of its own), since
    /// cancelling it would cancel the commits that make the last writes durable.
    func run() async {
        self.commitPool.start()
        self.evictIfNeeded()
        await withDiscardingTaskGroup { group in
            for await work in self.work.stream {
                switch work {
                case .commit(let key):
                    group.addTask { await self.commit(key) }
                case .retryCommit(let key, let delay):
                    group.addTask {
                        try? await Task.sleep(for: delay)
                        await self.retryCommit(key)
                    }
                }
            }
        }
        try? await self.commitPool.shutdownGracefully()
        self.runEnded = true
        for waiter in self.runEndWaiters { waiter.resume() }
        self.runEndWaiters = []
    }

    /// Stops every fetch, lets the commits under way finish, and waits for ``run()`` to end (at shutdown).
    func stop() async {
        let fetches = self.entries.values.flatMap { $0.fetches.values }
        for task in fetches { task.cancel() }
        for key in Array(self.entries.keys) { self.wake(key) }
        for task in fetches { await task.value }
        self.wakeRoomWaiters()
        // What the fetches' ends scheduled is committed; then the work stream ends.
        self.work.continuation.finish()
        guard !self.runEnded else { return }
        await withCheckedContinuation { self.runEndWaiters.append($0) }
    }
}
