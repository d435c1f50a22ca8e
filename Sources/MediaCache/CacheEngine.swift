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

/// The cache proper: the resources' states, the origin fetches that fill them, the commits that make their bytes
/// durable, eviction, revalidation and statistics. Readers (player requests) ask it what to send next; it answers
/// with bytes on disk, waiting for a fetch when needed.
actor CacheEngine {
    enum Opening: Sendable {
        /// Serve the resource as reader `reader`.
        case resource(ResourceHead, reader: Int)
        /// Stream it through from the origin uncached.
        case passthrough
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
    /// ``threadPool``. Started by ``start()``, stopped by ``stop()``.
    let commitPool = NIOThreadPool(numberOfThreads: 1)
    let logger: Logger

    private var states: [String: ResourceState] = [:]
    private var waiters: [String: [Int: CheckedContinuation<Void, Never>]] = [:]
    private var committing: Set<String> = []
    private var commitPending: Set<String> = []
    private var revalidations: [String: Task<Revalidation, Never>] = [:]
    /// When an origin last failed to answer a revalidation: the cached bytes are served as they are meanwhile.
    private var lastAttempt: [String: Date] = [:]
    private var passthroughUntil: [String: Date] = [:]
    /// Playlists seen to be live: fetched from the origin at every request, never cached.
    private var livePlaylists: Set<String> = []
    private var fetchTasks: [String: [Int: Task<Void, Never>]] = [:]
    private var clock: UInt64 = 1
    private var nextReader = 0
    private var used: Int64 = 0
    /// Bytes evicted or dropped whose files the commits have not deleted yet: on disk, and so under the cap.
    private var doomed: Int64 = 0
    /// Bytes fetches were let write that are not counted in `used` yet (their writes are under way).
    private var admitted: Int64 = 0
    /// Fetches waiting for room under the cap (or for their readers to catch up).
    private var roomWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    private var nextRoomWaiter: UInt64 = 0
    /// Resources whose last commit failed (a full disk): their doomed files may stay a while, and nobody waits for
    /// them.
    private var failingCommits: Set<String> = []
    private var statistics = CacheStatistics()

    /// The most bytes one answer of ``next(key:reader:generation:position:upper:url:forward:)`` pins: four blocks
    /// (at least 256 KiB), but no more than a thirty-second of the cap (at least a block), since pinned bytes
    /// cannot be evicted.
    private var maxServeBytes: Int64 {
        let blockBytes = self.configuration.blockBytes
        return max(blockBytes, min(max(blockBytes * 4, 256 << 10), self.configuration.maxBytes / 32))
    }

    /// How far a fetch may run ahead of the furthest of its readers: ``MediaCacheConfiguration/readAheadBytes``,
    /// at most a quarter of the cap, and at least what one answer pins and a block more (so that a reader sending
    /// its last answer does not hold the fetch up).
    private var readAhead: Int64 {
        max(
            self.maxServeBytes + self.configuration.blockBytes,
            min(self.configuration.readAheadBytes, self.configuration.maxBytes / 4)
        )
    }

    /// How many bytes a fetch may have received and not yet written: a sixteenth of the cap, from a block to
    /// ``pipeBytes``.
    private nonisolated var pipeLimit: Int {
        Int(min(Int64(Self.pipeBytes), max(self.configuration.blockBytes, self.configuration.maxBytes / 16)))
    }

    init(configuration: MediaCacheConfiguration, origin: OriginClient, logger: Logger) throws {
        self.configuration = configuration
        self.store = try FragmentStore(folder: configuration.cacheDirectory, blockBytes: configuration.blockBytes)
        self.origin = origin
        self.threadPool = NIOThreadPool.singleton
        self.fileIO = NonBlockingFileIO(threadPool: self.threadPool)
        self.logger = logger
        for record in self.store.loadAll() {
            var state = ResourceState(
                record: record,
                blockBytes: configuration.blockBytes,
                coalesceBytes: configuration.coalesceBytes
            )
            state.touchAll(clock: 0)
            self.used += state.available.count
            self.states[record.key] = state
        }
        self.statistics.maxBytes = configuration.maxBytes
    }

    /// Starts the commit thread, and evicts down to the cap (after a restart with a smaller one).
    func start() {
        self.commitPool.start()
        self.evictIfNeeded()
    }

    /// Stops every fetch, lets the commits under way finish, and stops the commit thread (at shutdown).
    func stop() async {
        for tasks in self.fetchTasks.values { for task in tasks.values { task.cancel() } }
        for key in Array(self.waiters.keys) { self.wake(key) }
        for tasks in self.fetchTasks.values { for task in tasks.values { await task.value } }
        self.wakeRoomWaiters()
        while !self.committing.isEmpty { try? await Task.sleep(for: .milliseconds(5)) }
        try? await self.commitPool.shutdownGracefully()
    }

    // MARK: Readers

    /// Opens a resource for a player: its head once the cache knows it (starting a fetch at `start` when it does
    /// not, revalidating when its freshness has run out).
    func open(key: String, url: URL, forward: HTTPHeaders, start: Int64, upper: Int64?) async -> Opening {
        if let until = self.passthroughUntil[key], until > Date() { return .passthrough }
        let reader = self.nextReader
        self.nextReader += 1
        let opening = await self.open(key: key, reader: reader, url: url, forward: forward, start: start, upper: upper)
        // A reader that is not served is no fetch's reader any longer (a fetch must not go on, nor keep bytes, for
        // it).
        if case .resource = opening {} else { self.leave(key, reader: reader) }
        return opening
    }

    private func open(
        key: String,
        reader: Int,
        url: URL,
        forward: HTTPHeaders,
        start: Int64,
        upper: Int64?
    ) async -> Opening {
        var revalidated = false
        while !Task.isCancelled {
            if self.states[key] == nil {
                self.states[key] = ResourceState(
                    record: ResourceRecord(key: key),
                    blockBytes: self.configuration.blockBytes,
                    coalesceBytes: self.configuration.coalesceBytes
                )
            }
            let state = self.states[key]!
            if state.headSeen {
                // Revalidated at most once per request: after it, the record is fresh, or changed, or the origin is
                // unreachable and the cached bytes are served as they are. Private bytes (a request with credentials,
                // or `Cache-Control: private`) are served only once the origin has confirmed them for this request.
                if !revalidated, self.needsRevalidation(key, state.record) {
                    revalidated = true
                    let outcome = await self.revalidate(key: key, url: url, forward: forward)
                    if Self.isPrivate(key, state.record) {
                        switch outcome {
                        case .confirmed: break
                        case .refused(let status): return .failed(.upstream(status: status))
                        case .unreachable(let reason): return .failed(.unreachable(reason))
                        }
                    }
                    continue
                }
                return .resource(Self.head(state.record), reader: reader)
            }
            if let until = self.passthroughUntil[key], until > Date() { return .passthrough }
            switch self.states[key]!.step(reader: reader, generation: state.generation, position: start, upper: upper) {
            case .fetch(let id, let range):
                self.startFetch(
                    key: key,
                    id: id,
                    generation: state.generation,
                    range: range,
                    url: url,
                    forward: forward
                )
                await self.wait(key, reader)
            case .wait:
                await self.wait(key, reader)
            case .failed(let failure):
                return .failed(failure)
            case .changed:
                continue
            case .serve, .end:
                // Bytes without a head, or a start past any length: nothing to answer but "unsatisfiable" (and
                // never a loop that holds the actor).
                self.leave(key, reader: reader)
                return .failed(.upstream(status: 416))
            }
        }
        self.leave(key, reader: reader)
        return .failed(.unreachable("cancelled"))
    }

    /// What a reader sends next at `position`: bytes on disk (pinned until released), after waiting for a fetch
    /// (started here when none brings them) if needed.
    func next(
        key: String,
        reader: Int,
        generation: Int,
        position: Int64,
        upper: Int64?,
        url: URL,
        forward: HTTPHeaders
    ) async -> Read {
        while !Task.isCancelled {
            guard self.states[key] != nil else { return .changed }
            let step = self.states[key]!.step(reader: reader, generation: generation, position: position, upper: upper)
            // A reader that moved on may let a fetch held back for it go on.
            self.wakeRoomWaiters()
            switch step {
            case .serve(let range):
                let capped = range.lowerBound..<min(range.upperBound, range.lowerBound + self.maxServeBytes)
                self.states[key]!.pin(capped, clock: self.tick())
                return .serve(capped, generation: generation)
            case .end:
                return .end
            case .changed:
                return .changed
            case .failed(let failure):
                return .failed(failure)
            case .wait:
                await self.wait(key, reader)
            case .fetch(let id, let range):
                self.startFetch(key: key, id: id, generation: generation, range: range, url: url, forward: forward)
                await self.wait(key, reader)
            }
        }
        self.leave(key, reader: reader)
        return .failed(.unreachable("cancelled"))
    }

    /// Sent bytes are no longer pinned.
    func release(_ key: String, range: Range<Int64>) {
        self.states[key]?.unpin(range)
        self.evictIfNeeded()
        self.wakeRoomWaiters()
    }

    /// A reader is done (or gone): the fetches it waited on may stop at their next block boundary.
    func leave(_ key: String, reader: Int) {
        self.states[key]?.leave(reader: reader)
        self.waiters[key]?.removeValue(forKey: reader)?.resume()
        self.wakeRoomWaiters()
    }

    /// The bytes of a resource available now (a reader's snapshot at its start, to tell cached bytes from fetched).
    func available(_ key: String) -> ByteRangeSet {
        self.states[key]?.available ?? ByteRangeSet()
    }

    /// Counts a finished request: `cached` bytes were there when asked for, `fetched` came from the origin first.
    func account(cached: Int64, fetched: Int64) {
        switch (cached > 0, fetched > 0) {
        case (true, false): self.statistics.hits += 1
        case (true, true): self.statistics.partialHits += 1
        default: self.statistics.misses += 1
        }
        self.statistics.bytesFromCache += cached
    }

    /// Whether a key is a live playlist (fetched fresh at every request).
    func isLive(_ key: String) -> Bool {
        self.livePlaylists.contains(key)
    }

    /// Marks a playlist live (its cached copy dropped), or no longer live.
    func setLive(_ key: String, _ live: Bool) {
        if live {
            self.livePlaylists.insert(key)
            _ = self.remove(key: key)
        } else {
            self.livePlaylists.remove(key)
        }
    }

    /// Counts bytes an origin sent that did not go through a fetch (streamed through).
    func countOriginBytes(_ count: Int64) {
        self.statistics.bytesFromOrigin += count
    }

    /// The file of a block of a resource's generation.
    nonisolated func blockFile(_ block: Int64, key: String, generation: Int) -> URL {
        self.store.blockFile(block, for: key, generation: generation)
    }

    private func tick() -> UInt64 {
        self.clock += 1
        return self.clock
    }

    private func wait(_ key: String, _ reader: Int) async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                if Task.isCancelled {
                    continuation.resume()
                } else {
                    self.waiters[key, default: [:]][reader] = continuation
                }
            }
        } onCancel: {
            Task { await self.wakeOne(key, reader) }
        }
    }

    private func wakeOne(_ key: String, _ reader: Int) {
        self.waiters[key]?.removeValue(forKey: reader)?.resume()
    }

    private func wake(_ key: String) {
        self.wakeRoomWaiters()
        guard let waiting = self.waiters.removeValue(forKey: key) else { return }
        for continuation in waiting.values { continuation.resume() }
    }

    /// Waits until something may have made room (a reader moved or left, a write or a commit ended, a fetch
    /// stopped), or until `deadline`.
    private func waitForRoom(until deadline: ContinuousClock.Instant? = nil) async {
        let id = self.nextRoomWaiter
        self.nextRoomWaiter += 1
        let timer = deadline.map { deadline in
            Task {
                try? await Task.sleep(until: deadline)
                self.wakeRoomWaiter(id)
            }
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                if Task.isCancelled {
                    continuation.resume()
                } else {
                    self.roomWaiters[id] = continuation
                }
            }
        } onCancel: {
            Task { await self.wakeRoomWaiter(id) }
        }
        timer?.cancel()
    }

    private func wakeRoomWaiter(_ id: UInt64) {
        self.roomWaiters.removeValue(forKey: id)?.resume()
    }

    private func wakeRoomWaiters() {
        guard !self.roomWaiters.isEmpty else { return }
        let waiting = self.roomWaiters
        self.roomWaiters = [:]
        for continuation in waiting.values { continuation.resume() }
    }

    /// Bytes a resource's state no longer counts as used went on the doomed list (their files are deleted by its
    /// next commit).
    private func dropped(_ bytes: Int64) {
        self.used -= bytes
        self.doomed += bytes
    }

    private static func head(_ record: ResourceRecord) -> ResourceHead {
        ResourceHead(
            key: record.key,
            generation: record.generation,
            totalLength: record.totalLength,
            contentType: record.contentType,
            etag: record.etag,
            lastModified: record.lastModified,
            url: record.url
        )
    }

    // MARK: Control

    func statisticsNow() -> CacheStatistics {
        var statistics = self.statistics
        statistics.resources = self.states.values.filter { $0.headSeen }.count
        statistics.bytesUsed = self.used
        return statistics
    }

    func resources() -> [CachedResource] {
        self.states.values.filter(\.headSeen).sorted { $0.record.key < $1.record.key }.map { state in
            let record = state.record
            return CachedResource(
                key: record.key,
                url: record.url,
                totalLength: record.totalLength,
                contentType: record.contentType,
                etag: record.etag,
                lastModified: record.lastModified,
                cachedBytes: state.available.count,
                ranges: state.available.ranges.map { [$0.lowerBound, $0.upperBound] }
            )
        }
    }

    /// Drops everything cached of a key; false when nothing was.
    func remove(key: String) -> Bool {
        guard var state = self.states[key], state.headSeen else { return false }
        for task in (self.fetchTasks.removeValue(forKey: key) ?? [:]).values { task.cancel() }
        self.dropped(state.startGeneration { _ in })
        state.headSeen = false
        self.states[key] = state
        self.passthroughUntil[key] = nil
        self.scheduleCommit(key)
        self.wake(key)
        return true
    }

    // MARK: Fetches

    private func startFetch(
        key: String,
        id: Int,
        generation: Int,
        range: Range<Int64>,
        url: URL,
        forward: HTTPHeaders
    ) {
        var validator: String?
        if let record = self.states[key]?.record, record.generation == generation {
            if let etag = record.etag, !etag.hasPrefix("W/") {
                validator = etag
            } else {
                validator = record.lastModified
            }
        }
        let task = Task {
            await self.runFetch(
                key: key,
                id: id,
                generation: generation,
                range: range,
                url: url,
                forward: forward,
                validator: validator
            )
            self.fetchTaskEnded(key, id)
        }
        self.fetchTasks[key, default: [:]][id] = task
    }

    private func fetchTaskEnded(_ key: String, _ id: Int) {
        self.fetchTasks[key]?[id] = nil
        if self.fetchTasks[key]?.isEmpty == true { self.fetchTasks[key] = nil }
    }

    private enum HeadVerdict {
        case write(start: Int64, generation: Int, stop: Int64)
        case stop
    }

    private nonisolated func runFetch(
        key: String,
        id: Int,
        generation: Int,
        range: Range<Int64>,
        url: URL,
        forward: HTTPHeaders,
        validator: String?
    ) async {
        var headers = Self.forwarded(forward)
        let last = range.upperBound == .max ? "" : String(range.upperBound - 1)
        headers.add(name: "Range", value: "bytes=\(range.lowerBound)-\(last)")
        if let validator { headers.add(name: "If-Range", value: validator) }
        let response: OriginResponse
        do {
            response = try await self.origin.request(url, headers: headers)
        } catch {
            await self.fetchFailed(key: key, id: id, generation: generation, .unreachable(Self.words(error)))
            return
        }
        let verdict = await self.fetchHead(
            key: key,
            id: id,
            generation: generation,
            requested: range,
            status: response.status,
            headers: response.headers,
            url: response.url
        )
        guard case .write(let start, let generation, let stop) = verdict else { return }
        let pipe = FetchPipe(stop: stop, limit: self.pipeLimit)
        async let written = self.writeLoop(pipe, key: key, id: id, generation: generation, start: start)
        // Receive: clip to where the engine says the fetch stops, hand over, go on.
        var position = start
        var stoppedEarly = false
        var receiveError: (any Error)?
        do {
            for try await var chunk in response.body {
                let received = Int64(chunk.readableBytes)
                guard let stop = pipe.stop, position < stop else {
                    stoppedEarly = true
                    break
                }
                let count = Int(min(Int64(chunk.readableBytes), stop - position))
                let slice = chunk.readSlice(length: count)!
                position += Int64(count)
                guard await pipe.push(slice, received: received), count == Int(received) else {
                    stoppedEarly = true
                    break
                }
            }
        } catch {
            receiveError = error
        }
        pipe.finish()
        let (end, writeError, writerStopped) = await written
        if let error = receiveError {
            let why = "the origin \(OriginClient.origin(of: url)) broke off: \(OriginClient.plainWords(error))"
            await self.fetchFailed(key: key, id: id, generation: generation, .unreachable(why))
            return
        }
        if let error = writeError {
            await self.fetchFailed(key: key, id: id, generation: generation, .unreachable(Self.words(error)))
            return
        }
        await self.fetchEnded(
            key: key,
            id: id,
            generation: generation,
            position: end,
            bodyComplete: !stoppedEarly && !writerStopped
        )
    }

    /// How many bytes a fetch may have received and not yet written.
    static let pipeBytes = 4 << 20

    /// Writes what a fetch receives, in batches, and tells the engine after each; returns where the written bytes
    /// end, the error that stopped it, if any, and whether it stopped before the bytes received ran out (then the
    /// body did not end there).
    private nonisolated func writeLoop(
        _ pipe: FetchPipe,
        key: String,
        id: Int,
        generation: Int,
        start: Int64
    ) async -> (Int64, (any Error)?, Bool) {
        let folder = self.store.generationFolder(for: key, generation: generation).path
        let files = BlockFiles(folder: folder, blockBytes: self.configuration.blockBytes)
        var position = start
        do {
            try await self.threadPool.runIfActive { try self.store.prepare(key: key, generation: generation) }
            while let (chunks, received) = await pipe.take() {
                let count = chunks.reduce(0) { $0 + Int64($1.readableBytes) }
                guard await self.admitWrite(key: key, id: id, generation: generation, count: count) else {
                    pipe.setStop(nil)
                    try? files.close()
                    return (position, nil, true)
                }
                let at = position
                do {
                    try await self.threadPool.runIfActive { try files.write(chunks, at: at) }
                } catch {
                    await self.admittedWriteFailed(count)
                    throw error
                }
                let next = await self.wrote(
                    key: key,
                    id: id,
                    generation: generation,
                    range: position..<(position + count),
                    received: received,
                    admitted: count
                )
                position += count
                pipe.setStop(next)
                if next == nil { break }
            }
            try? files.close()
            return (position, nil, false)
        } catch {
            try? files.close()
            pipe.setStop(nil)
            return (position, error, false)
        }
    }

    private static func forwarded(_ forward: HTTPHeaders) -> HTTPHeaders {
        var headers = HTTPHeaders()
        for name in OriginClient.forwardedHeaders {
            for value in forward[name] { headers.add(name: name, value: value) }
        }
        return headers
    }

    /// An origin answered a fetch: checks its validators against what is cached, records its length, type and
    /// freshness, and says where its body starts.
    private func fetchHead(
        key: String,
        id: Int,
        generation: Int,
        requested: Range<Int64>,
        status: Int,
        headers: HTTPHeaders,
        url: URL
    ) -> HeadVerdict {
        guard var state = self.states[key], state.generation == generation, state.fetches[id] != nil else {
            return .stop
        }
        let now = Date()
        switch status {
        case 200, 206:
            var start: Int64 = 0
            var total: Int64?
            if status == 206 {
                guard let contentRange = headers.first(name: "Content-Range").flatMap(ContentRange.init) else {
                    self.fail(&state, key: key, id: id, .unreachable("a 206 without a usable Content-Range"))
                    return .stop
                }
                start = contentRange.first
                total = contentRange.total
            } else {
                total = headers.first(name: "Content-Length").flatMap { Int64($0) }
            }
            let freshness = Freshness(headers: headers.map { ($0.name, $0.value) }, received: now)
            if freshness.noStore || (total ?? 0) > self.configuration.maxBytes {
                self.passthroughUntil[key] = now.addingTimeInterval(self.configuration.revalidationInterval)
                if state.headSeen { self.dropped(state.startGeneration { _ in }) }
                state.headSeen = false
                self.fail(&state, key: key, id: id, .passthrough)
                // The dropped generation's folder goes with this commit.
                self.scheduleCommit(key)
                return .stop
            }
            let etag = headers.first(name: "ETag")
            let lastModified = headers.first(name: "Last-Modified")
            let fill = self.fill(headers, url: url, total: total, freshness: freshness, now: now)
            if state.headSeen && Self.changed(state.record, etag: etag, lastModified: lastModified, total: total) {
                self.logger.info("origin changed; dropping cached bytes", metadata: ["key": "\(key)"])
                self.dropped(state.startGeneration(keeping: id, fill))
            } else {
                state.update(fill)
            }
            state.headSeen = true
            if start != requested.lowerBound { state.fetch(id, startsAt: start) }
            if status == 206 { state.honoursRanges(id) }
            // An origin that ignores Range sends the whole body whatever is asked: any later fetch would cost the
            // bytes before it again, so this one goes on to the end (while anyone reads).
            if status == 200 { state.extend(id, to: total ?? .max) }
            let stop = state.stop(for: id)
            let generation = state.generation
            self.states[key] = state
            self.scheduleCommit(key)
            self.wake(key)
            guard let stop else {
                self.states[key]?.finished(id, lengthKnown: false)
                return .stop
            }
            return .write(start: start, generation: generation, stop: stop)
        case 416:
            if let total = headers.first(name: "Content-Range").flatMap(ContentRange.unsatisfied) {
                if !state.headSeen || state.record.totalLength == total {
                    // The length only: a 416's type and validators (if any) are those of an error page.
                    state.update { record in
                        record.url = self.storedURL(url)
                        record.totalLength = total
                        record.lastValidated = now
                    }
                    state.headSeen = true
                    state.finished(id, lengthKnown: false)
                    self.states[key] = state
                    self.scheduleCommit(key)
                    self.wake(key)
                    return .stop
                }
            }
            self.fail(&state, key: key, id: id, .upstream(status: status))
            return .stop
        default:
            self.fail(&state, key: key, id: id, .upstream(status: status))
            return .stop
        }
    }

    /// What an origin's 200 or 206 says of a resource, as a change to its record (a length it does not give is
    /// kept).
    private func fill(
        _ headers: HTTPHeaders,
        url: URL,
        total: Int64?,
        freshness: Freshness,
        now: Date
    ) -> (inout ResourceRecord) -> Void {
        let stored = self.storedURL(url)
        let isPrivate = headers["Cache-Control"].contains { value in
            value.lowercased().split(separator: ",").contains {
                $0.trimmingCharacters(in: .whitespaces).hasPrefix("private")
            }
        }
        return { record in
            record.url = stored
            record.isPrivate = isPrivate ? true : nil
            record.totalLength = total ?? record.totalLength
            record.contentType = headers.first(name: "Content-Type")
            record.etag = headers.first(name: "ETag")
            record.lastModified = headers.first(name: "Last-Modified")
            record.freshUntil = freshness.freshUntil
            record.lastValidated = now
        }
    }

    /// A URL as the cache keeps it on disk and lists it: without credential parameters.
    private func storedURL(_ url: URL) -> String {
        Credentials.stripped(url, parameters: self.configuration.credentialParameters).absoluteString
    }

    /// Whether an origin's answer describes other bytes than the cached ones: another length, or another
    /// validator (the ETag when both have one, else Last-Modified); a validator the cached bytes had and the answer
    /// lacks counts as another. Bytes cached without any validator (an origin that sends none) are kept while the
    /// length holds.
    static func changed(_ record: ResourceRecord, etag: String?, lastModified: String?, total: Int64?) -> Bool {
        if let old = record.totalLength, let total, old != total { return true }
        if let old = record.etag { return etag.map { $0 != old } ?? true }
        if let old = record.lastModified { return lastModified.map { $0 != old } ?? true }
        return false
    }

    private func fail(_ state: inout ResourceState, key: String, id: Int, _ failure: ResourceState.Failure) {
        state.failed(id, failure)
        self.states[key] = state
        self.fetchTasks[key]?[id] = nil
        self.wake(key)
    }

    /// A fetch wrote bytes: they are served from now on. Returns where the fetch stops now (nil: stop here).
    private func wrote(
        key: String,
        id: Int,
        generation: Int,
        range: Range<Int64>,
        received: Int64,
        admitted: Int64
    ) -> Int64? {
        self.admitted -= admitted
        self.statistics.bytesFromOrigin += received
        guard self.states[key]?.generation == generation, self.states[key]?.fetches[id] != nil else {
            self.wakeRoomWaiters()
            return nil
        }
        self.used += self.states[key]!.wrote(id, range, clock: self.tick())
        let blockBytes = self.configuration.blockBytes
        if range.upperBound % blockBytes == 0 || range.upperBound / blockBytes != range.lowerBound / blockBytes {
            self.scheduleCommit(key)
        }
        self.wake(key)
        self.evictIfNeeded()
        return self.states[key]?.stop(for: id)
    }

    private func fetchEnded(key: String, id: Int, generation: Int, position: Int64, bodyComplete: Bool) {
        self.fetchTasks[key]?[id] = nil
        guard var state = self.states[key], state.generation == generation, let fetch = state.fetches[id] else {
            return
        }
        // A body that ended by itself before the bytes asked for: cut short (a reader waiting for them must not wait
        // for ever, nor be sent anything else).
        if bodyComplete, fetch.end != .max, position < fetch.end, position < (state.record.totalLength ?? .max) {
            self.fail(&state, key: key, id: id, .unreachable("the origin's response ended early"))
            self.scheduleCommit(key)
            return
        }
        state.finished(id, lengthKnown: bodyComplete && fetch.end == .max)
        self.states[key] = state
        self.scheduleCommit(key)
        self.wake(key)
    }

    private func fetchFailed(key: String, id: Int, generation: Int, _ failure: ResourceState.Failure) {
        self.logger.debug("fetch failed", metadata: ["key": "\(key)", "reason": "\(failure)"])
        guard var state = self.states[key], state.generation == generation else { return }
        if state.isAheadOfReaders(id) {
            // Held back for readers that have not caught up (a paused player), its origin may have given up on it:
            // it just ends, and a reader that gets to its end starts another fetch there.
            state.finished(id, lengthKnown: false)
            self.states[key] = state
            self.fetchTasks[key]?[id] = nil
            self.scheduleCommit(key)
            self.wake(key)
            return
        }
        self.fail(&state, key: key, id: id, failure)
        self.scheduleCommit(key)
    }

    // MARK: Commits and eviction

    private func scheduleCommit(_ key: String) {
        guard !self.committing.contains(key) else {
            self.commitPending.insert(key)
            return
        }
        guard self.states[key] != nil else { return }
        let commit = self.states[key]!.commit()
        self.committing.insert(key)
        let store = self.store
        Task {
            let succeeded: Bool
            var missing = Set<Int64>()
            do {
                missing = try await self.commitPool.runIfActive {
                    // A block file that is not there (deleted by a commit before this one) lists nothing.
                    var missing = Set<Int64>()
                    var record = commit.record
                    for block in commit.syncBlocks {
                        let file = store.blockFile(block, for: key, generation: commit.record.generation)
                        guard let handle = try? FileHandle(forUpdating: file) else {
                            missing.insert(block)
                            let blockBytes = store.blockBytes
                            for range in commit.syncing {
                                record.ranges.remove(
                                    range.clamped(to: (block * blockBytes)..<((block + 1) * blockBytes))
                                )
                            }
                            continue
                        }
                        defer { try? handle.close() }
                        try handle.synchronize()
                    }
                    if commit.writesIndex {
                        try store.writeIndex(record)
                    } else {
                        store.removeIndex(for: key)
                    }
                    store.deleteBlocks(commit.deleting, for: key, generation: commit.record.generation)
                    for generation in commit.oldGenerations { store.deleteGeneration(generation, for: key) }
                    return missing
                }
                succeeded = true
            } catch {
                self.logger.warning("cannot commit the cache index", metadata: ["key": "\(key)", "error": "\(error)"])
                succeeded = false
            }
            self.committed(key, commit, succeeded: succeeded, missing: missing)
        }
    }

    private func committed(_ key: String, _ commit: ResourceState.Commit, succeeded: Bool, missing: Set<Int64>) {
        self.committing.remove(key)
        if succeeded {
            self.failingCommits.remove(key)
            if let outcome = self.states[key]?.committed(commit, missing: missing) {
                self.doomed -= outcome.freed
                self.used -= outcome.lost
            }
            if self.commitPending.remove(key) != nil { self.scheduleCommit(key) }
        } else {
            // Tried again in a second (a full disk may free up); meanwhile the bytes stay served from this process.
            self.failingCommits.insert(key)
            self.states[key]?.commitFailed(commit)
            self.commitPending.remove(key)
            Task {
                try? await Task.sleep(for: .seconds(1))
                self.scheduleCommit(key)
            }
        }
        self.wake(key)
    }

    /// Evicts the least recently used blocks (not pinned, not being written, not waiting for a reader) until the
    /// cache, with `incoming` bytes more, is below its cap by a twentieth (so that eviction runs in batches, not at
    /// every write).
    private func evictIfNeeded(incoming: Int64 = 0) {
        guard self.used + incoming > self.configuration.maxBytes else { return }
        let target = self.configuration.maxBytes - self.configuration.maxBytes / 20 - incoming
        var candidates: [(key: String, block: Int64, lastUse: UInt64, bytes: Int64)] = []
        for (key, state) in self.states {
            for candidate in state.evictable(readAhead: self.readAhead) {
                candidates.append((key, candidate.block, candidate.lastUse, candidate.bytes))
            }
        }
        candidates.sort { ($0.lastUse, $0.key, $0.block) < ($1.lastUse, $1.key, $1.block) }
        var touched = Set<String>()
        for candidate in candidates {
            guard self.used > target else { break }
            self.states[candidate.key]!.evict(candidate.block)
            self.dropped(candidate.bytes)
            touched.insert(candidate.key)
        }
        for key in touched { self.scheduleCommit(key) }
    }

    /// Whether a fetch may write its next `count` bytes, waiting until it may; false when it should stop instead.
    ///
    /// The cap holds on disk while fetches write, not only after: bytes in use, bytes evicted whose files are not
    /// deleted yet (a commit deletes them), bytes other fetches were let write and the bytes about to be written
    /// stay within it. Short of room, a fetch first evicts, then waits for the commits under way to delete what was
    /// evicted. When nothing is left to wait for (what remains is pinned by players, or unread by the readers of a
    /// fetch), a fetch a reader waits for writes anyway (that excess is bounded by what readers hold), one running
    /// ahead of its readers waits for them to catch up, and one nobody reads stops. Independently of the cap, a
    /// fetch never runs more than the read-ahead ahead of the furthest of its readers; held there for
    /// ``MediaCacheConfiguration/heldFetchTimeout`` by an origin that honours ranges, it stops (the reader starts
    /// another where it ends), so paused players do not hold origin connections.
    private func admitWrite(key: String, id: Int, generation: Int, count: Int64) async -> Bool {
        let cap = self.configuration.maxBytes
        let heldLimit = Duration.nanoseconds(self.configuration.heldFetchTimeout.nanoseconds)
        var heldSince: ContinuousClock.Instant?
        while !Task.isCancelled {
            guard let state = self.states[key], state.generation == generation, let fetch = state.fetches[id] else {
                return false
            }
            let need = state.writeNeed(id, count: count, readAhead: self.readAhead)
            if need == .tooFarAhead {
                let since = heldSince ?? .now
                heldSince = since
                if fetch.rangesHonoured, ContinuousClock.now - since >= heldLimit {
                    return false
                }
                await self.waitForRoom(until: since + heldLimit)
                continue
            }
            heldSince = nil
            self.evictIfNeeded(incoming: self.admitted + count)
            if self.used + self.doomed + self.admitted + count <= cap {
                self.admitted += count
                return true
            }
            // Waiting frees something only while commits are under way (they delete what was evicted).
            let commitsUnderWay = !self.committing.isEmpty || !self.commitPending.isEmpty
            if !commitsUnderWay || self.doomed <= 0 || !self.failingCommits.isEmpty {
                if need == .waited {
                    self.admitted += count
                    return true
                }
                if need == .unread { return false }
            }
            await self.waitForRoom()
        }
        return false
    }

    /// A write that was let through failed: its bytes are not coming.
    private func admittedWriteFailed(_ count: Int64) {
        self.admitted -= count
        self.wakeRoomWaiters()
    }

    // MARK: Revalidation

    /// Whether a resource's bytes are someone's: a request with credentials cached them, or the origin marked them
    /// `private`. They are confirmed with the origin, with the request's own credentials, at every request.
    private static func isPrivate(_ key: String, _ record: ResourceRecord) -> Bool {
        Credentials.isPrivate(key: key) || record.isPrivate == true
    }

    private func needsRevalidation(_ key: String, _ record: ResourceRecord) -> Bool {
        if Self.isPrivate(key, record) { return true }
        let now = Date()
        if let freshUntil = record.freshUntil, now < freshUntil { return false }
        let last = [record.lastValidated, self.lastAttempt[key]].compactMap { $0 }.max()
        guard let last else { return true }
        return now.timeIntervalSince(last) >= self.configuration.revalidationInterval
    }

    /// What a revalidation found.
    enum Revalidation: Sendable {
        /// The origin answered for the bytes (304, or 200/206, the record updated or its bytes dropped if changed).
        case confirmed
        /// The origin refused (401, 403, 404, …).
        case refused(Int)
        case unreachable(String)
    }

    private func revalidate(key: String, url: URL, forward: HTTPHeaders) async -> Revalidation {
        // A private resource is confirmed with each request's own credentials: never by another request's check.
        if !Credentials.isPrivate(key: key), let running = self.revalidations[key] {
            return await running.value
        }
        guard let record = self.states[key]?.record else { return .confirmed }
        // A private resource's record holds its URL without credentials: the request's URL carries them.
        let target = Self.isPrivate(key, record) ? url : (URL(string: record.url ?? "") ?? url)
        let task = Task { await self.runRevalidation(key: key, record: record, url: target, forward: forward) }
        if !Credentials.isPrivate(key: key) { self.revalidations[key] = task }
        let outcome = await task.value
        if !Credentials.isPrivate(key: key) { self.revalidations[key] = nil }
        return outcome
    }

    private nonisolated func runRevalidation(
        key: String,
        record: ResourceRecord,
        url: URL,
        forward: HTTPHeaders
    ) async -> Revalidation {
        var headers = Self.forwarded(forward)
        headers.add(name: "Range", value: "bytes=0-0")
        if let etag = record.etag { headers.add(name: "If-None-Match", value: etag) }
        if let lastModified = record.lastModified { headers.add(name: "If-Modified-Since", value: lastModified) }
        do {
            let response = try await self.origin.request(url, headers: headers)
            // Only the head matters; an origin that ignores the range would send it all.
            var iterator = response.body.makeAsyncIterator()
            _ = try? await iterator.next()
            return await self.revalidated(key: key, record: record, response: response)
        } catch {
            await self.revalidationFailed(key: key, error)
            return .unreachable(Self.words(error))
        }
    }

    /// An error in words: a media cache error's message (its code aside), else the error's own description.
    static func words(_ error: any Error) -> String {
        (error as? MediaCacheError)?.message ?? "\(error)"
    }

    private func revalidationFailed(key: String, _ error: any Error) {
        self.logger.info("origin unreachable; serving cached bytes", metadata: ["key": "\(key)", "error": "\(error)"])
        self.lastAttempt[key] = Date()
    }

    private func revalidated(key: String, record: ResourceRecord, response: OriginResponse) -> Revalidation {
        guard var state = self.states[key], state.generation == record.generation else { return .confirmed }
        let now = Date()
        let headers = response.headers
        let freshness = Freshness(headers: headers.map { ($0.name, $0.value) }, received: now)
        switch response.status {
        case 304:
            state.update { record in
                record.freshUntil = freshness.freshUntil
                record.lastValidated = now
            }
        case 200, 206:
            let total =
                response.status == 206
                ? headers.first(name: "Content-Range").flatMap(ContentRange.init)?.total
                : headers.first(name: "Content-Length").flatMap { Int64($0) }
            let etag = headers.first(name: "ETag")
            let lastModified = headers.first(name: "Last-Modified")
            let fill = self.fill(headers, url: response.url, total: total, freshness: freshness, now: now)
            if Self.changed(state.record, etag: etag, lastModified: lastModified, total: total) {
                self.logger.info("origin changed; dropping cached bytes", metadata: ["key": "\(key)"])
                self.dropped(state.startGeneration(fill))
                state.headSeen = total != nil
            } else {
                state.update(fill)
            }
        case 404, 410:
            self.dropped(state.startGeneration { _ in })
            state.headSeen = false
            self.states[key] = state
            self.scheduleCommit(key)
            self.wake(key)
            return .refused(Int(response.status))
        default:
            self.lastAttempt[key] = now
            return .refused(Int(response.status))
        }
        self.lastAttempt[key] = nil
        self.states[key] = state
        self.scheduleCommit(key)
        self.wake(key)
        return .confirmed
    }
}
