package import Logging
internal import Synchronization

/// The search index written beside the group commit rather than inside it.
///
/// A group commit stores each new message's row of the index unindexed (its tokens NULL), in the message's own
/// transaction, and hands the message's tokens to this queue; ``StoreBackend/indexQueuedSearch()`` writes the queue's
/// tokens a moment later in one transaction of their own. On SQLite that takes FTS5's insert (its postings flushed
/// as a segment at every commit, and the merges of those segments: half the single writer's time per message) off
/// the path every message takes, and makes it one segment for hundreds of messages instead of one per group commit.
///
/// What holds:
/// - No entry is lost to a crash: the unindexed row commits with the message, and whatever the queue held is found
///   again by ``StoreBackend/indexPending(limit:)`` (run at start, and every ``Configuration-swift.struct/sweepInterval``
///   for rows left unindexed that long: a node that died with its queue).
/// - A search sees every message committed through this store before it began: it writes the queue first
///   (``StoreBackend/indexQueuedSearch()``), so a sender finds its own sends at once. Sends committed by another node
///   are found once that node has written its queue (``Configuration-swift.struct/delay`` later, under load).
/// - An edit or a recall in the meantime wins: the queue writes tokens only to a row that has none
///   (an edit writes its tokens in its own transaction, a recall deletes the row).
/// - Memory is bounded: past ``Configuration-swift.struct/maxQueued`` entries the queue keeps no more, and the
///   rows it dropped are swept from the database (``StoreBackend/indexPending(limit:)``).
public final class SearchIndexer: Sendable {
    /// Settings of the index's writing; every store takes them (``StoreSettings/searchIndex``).
    public struct Configuration: Sendable, Hashable {
        /// Whether new messages are indexed beside the group commit (true), or in its transaction (false); nil: as
        /// suits the database (docs/BENCHMARKS.md, issue 43): PostgreSQL writes the index beside the commit, its
        /// writers run side by side and the GIN index's insertions leave the batch's transaction; SQLite writes it in
        /// the transaction, its one writer does the same FTS5 work either way and a second transaction only adds to
        /// it.
        public var deferred: Bool? = nil
        /// How long the first entry queued waits for others before the queue is written: one transaction (and on
        /// SQLite one FTS5 segment) for all that came meanwhile.
        public var delay: Duration = .milliseconds(50)
        /// The most entries written in one transaction.
        public var maxBatch: Int = 8_192
        /// The most entries queued in memory; the rows of those past it are left for the sweep.
        public var maxQueued: Int = 65_536
        /// How often rows left unindexed are looked for (``StoreBackend/indexPending(limit:)``): rows unindexed at
        /// one look and still at the next (a queue lost with its process, on another node) are indexed then.
        public var sweepInterval: Duration = .seconds(30)

        public init() {}
    }

    /// A committed message's tokens, waiting to be written.
    package struct Entry: Sendable {
        package var conversation: Int64
        package var seq: Int64
        /// Its text's tokens, when the request came with them (``WriteRequest/Send/prepareSearch()``).
        package var prepared: [String]?
        /// Its body, for the tokens when none were prepared.
        package var body: [UInt8]
        /// When it was queued (``ContinuousClock``), for the lag.
        package var queued: ContinuousClock.Instant

        package init(
            conversation: Int64,
            seq: Int64,
            prepared: [String]?,
            body: [UInt8],
            queued: ContinuousClock.Instant
        ) {
            self.conversation = conversation
            self.seq = seq
            self.prepared = prepared
            self.body = body
            self.queued = queued
        }

        /// The index's document: the text's tokens, and the conversation's.
        package var tokens: [String] {
            SearchIndex.tokens(ofBody: self.body, prepared: self.prepared, conversation: self.conversation)
        }
    }

    /// What the queue has done, for metrics and the benchmark.
    public struct Figures: Sendable, Hashable {
        /// Entries written.
        public var indexed = 0
        /// Transactions that wrote them.
        public var batches = 0
        /// Entries the queue had no room for (left for the sweep).
        public var dropped = 0
        /// Rows the sweeps indexed.
        public var swept = 0
        /// The longest any entry waited from its commit to the end of the transaction that indexed it.
        public var maxLag: Duration = .zero
        /// How many entries waited longer than 1 s.
        public var lateOverOneSecond = 0
    }

    private struct State {
        var queue: [Entry] = []
        var waiter: CheckedContinuation<Void, Never>?
        var finished = false
        /// Entries dropped since the last sweep: the next sweep runs at once.
        var overflowed = false
        var figures = Figures()
    }

    package let configuration: Configuration
    /// Whether new messages are indexed beside the group commit (``Configuration-swift.struct/deferred``, or the
    /// database's choice).
    public let isDeferred: Bool
    private let state = Mutex(State())
    /// One writer of the queue at a time: a search's flush waits for a write in flight to end.
    package let writing = AsyncLock()

    /// - Parameter deferredByDefault: The database's choice when the configuration makes none.
    package init(configuration: Configuration, deferredByDefault: Bool) {
        self.configuration = configuration
        self.isDeferred = configuration.deferred ?? deferredByDefault
    }

    /// Queues the new messages of a committed group commit; wakes ``StoreBackend/followSearchIndex()``.
    package func committed(_ entries: [Entry]) {
        guard !entries.isEmpty else { return }
        let waiter = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
            let room = max(0, self.configuration.maxQueued - state.queue.count)
            if room < entries.count {
                state.figures.dropped += entries.count - room
                state.overflowed = true
            }
            state.queue.append(contentsOf: entries.prefix(room))
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Takes up to a batch of queued entries (oldest first).
    package func take() -> [Entry] {
        self.state.withLock { state in
            let count = min(state.queue.count, max(1, self.configuration.maxBatch))
            defer { state.queue.removeFirst(count) }
            return Array(state.queue.prefix(count))
        }
    }

    /// Puts entries whose write failed back in front (as room allows; the sweep finds the rest).
    package func requeue(_ entries: [Entry]) {
        self.state.withLock { state in
            let room = max(0, self.configuration.maxQueued - state.queue.count)
            if room < entries.count {
                state.figures.dropped += entries.count - room
                state.overflowed = true
            }
            state.queue.insert(contentsOf: entries.prefix(room), at: 0)
        }
    }

    /// Records a written batch.
    package func wrote(_ entries: [Entry], at now: ContinuousClock.Instant) {
        guard let oldest = entries.map(\.queued).min() else { return }
        let late = entries.count { now - $0.queued > .seconds(1) }
        self.state.withLock { state in
            state.figures.indexed += entries.count
            state.figures.batches += 1
            state.figures.maxLag = max(state.figures.maxLag, now - oldest)
            state.figures.lateOverOneSecond += late
        }
    }

    package func swept(_ count: Int) {
        self.state.withLock { $0.figures.swept += count }
    }

    /// What the queue has done so far.
    public var figures: Figures { self.state.withLock { $0.figures } }

    /// Entries waiting.
    public var queued: Int { self.state.withLock { $0.queue.count } }

    /// Forgets what is queued, as a process that died would (its rows stay unindexed in the database, for the sweep).
    ///
    /// - Returns: How many entries it forgot.
    @discardableResult
    package func discardQueue() -> Int {
        self.state.withLock { state in
            defer { state.queue = [] }
            return state.queue.count
        }
    }

    /// Whether entries were dropped since the last call (and forgets it).
    package func takeOverflow() -> Bool {
        self.state.withLock { state in
            defer { state.overflowed = false }
            return state.overflowed
        }
    }

    /// Waits until entries are queued, ``finish()`` is called, or `timeout` passes.
    ///
    /// - Returns: false once finished with nothing queued.
    package func waitForEntries(timeout: Duration) async -> Bool {
        let ready = self.state.withLock { state -> Bool? in
            if !state.queue.isEmpty { return true }
            return state.finished ? false : nil
        }
        if let ready { return ready }
        if Task.isCancelled { return false }
        // A timer wakes the wait for the sweep; an entry or finish() wakes it sooner.
        let timer = Task {
            // Cancelled (the wait ended sooner): it wakes nobody.
            guard (try? await Task.sleep(for: timeout)) != nil else { return }
            self.wake()
        }
        defer { timer.cancel() }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                let earlier = self.state.withLock { state -> CheckedContinuation<Void, Never>?? in
                    if !state.queue.isEmpty || state.finished { return .none }
                    // One follower waits at a time; an earlier one is let go.
                    defer { state.waiter = waiter }
                    return .some(state.waiter)
                }
                switch earlier {
                case .none: waiter.resume()
                case .some(let earlier): earlier?.resume()
                }
            }
        } onCancel: {
            self.wake()
        }
        if Task.isCancelled, self.queued == 0 { return false }
        return self.state.withLock { !$0.queue.isEmpty || !$0.finished }
    }

    private func wake() {
        let waiter = self.state.withLock { state in
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Ends ``StoreBackend/followSearchIndex()`` once the queue is written.
    public func finish() {
        self.state.withLock { $0.finished = true }
        self.wake()
    }

    package var isFinished: Bool { self.state.withLock { $0.finished } }
}

extension StoreBackend {
    /// Writes the queued tokens (``SearchIndexer``), a batch per transaction, until the queue is empty.
    ///
    /// - Throws: `storage-failed` when a transaction failed (its entries are queued again).
    package func indexQueuedSearch() async throws {
        let indexer = self.searchIndexer
        try await indexer.writing.withLock {
            while true {
                let entries = indexer.take()
                if entries.isEmpty { return }
                // Tokens not prepared are worked out here, outside the transaction.
                let documents = entries.map { ($0.conversation, $0.seq, $0.tokens) }
                do {
                    try await self.transaction(doing: "index messages for search") { transaction in
                        try await transaction.setSearchTokens(at: documents)
                    }
                } catch {
                    indexer.requeue(entries)
                    throw error
                }
                indexer.wrote(entries, at: .now)
            }
        }
    }

    /// Writes the queue now, for a search to see everything committed before it (a failure is left to the search's
    /// own reads to report).
    package func flushSearchIndex() async {
        guard self.searchIndexer.isDeferred else { return }
        try? await self.indexQueuedSearch()
    }

    /// Indexes rows left unindexed: those at `upTo` and below (by their place in the index), a batch at a time.
    ///
    /// - Returns: How many it indexed.
    package func sweepSearchIndex(upTo: Int64) async throws -> Int {
        var total = 0
        while true {
            let done = try await self.indexPending(limit: max(1, self.searchIndexer.configuration.maxBatch), upTo: upTo)
            total += done
            if done == 0 { break }
        }
        self.searchIndexer.swept(total)
        return total
    }

    /// Writes the queue as it fills, ``SearchIndexer/Configuration-swift.struct/delay`` after its first entry, and
    /// sweeps the database for rows left unindexed, until ``SearchIndexer/finish()``; then writes what is left.
    public func followSearchIndex(logger: Logger) async {
        let indexer = self.searchIndexer
        let configuration = indexer.configuration
        guard indexer.isDeferred else { return }
        let clock = ContinuousClock()
        var nextSweep = clock.now + configuration.sweepInterval
        // The highest unindexed row seen at the last look: still unindexed at the next, it was left behind.
        var seenPending: Int64? = nil
        while true {
            let more = await indexer.waitForEntries(timeout: max(.milliseconds(1), nextSweep - clock.now))
            if more, indexer.queued > 0 {
                // The first entry waits for others (finish() cuts the wait short).
                if !indexer.isFinished, indexer.queued < configuration.maxBatch {
                    try? await Task.sleep(for: configuration.delay)
                }
                do {
                    try await self.indexQueuedSearch()
                } catch {
                    logger.warning("indexing messages for search failed", metadata: ["error": "\(error)"])
                    // Cancelled, it stops: the rows stay unindexed in the database, for the next start's sweep.
                    guard (try? await Task.sleep(for: configuration.delay)) != nil else { return }
                }
            }
            if !more { return }
            let overflowed = indexer.takeOverflow()
            if overflowed || clock.now >= nextSweep {
                nextSweep = clock.now + configuration.sweepInterval
                do {
                    // Rows the queue dropped are the newest: all are swept then.
                    if let seen = overflowed ? Int64.max : seenPending {
                        _ = try await self.sweepSearchIndex(upTo: seen)
                    }
                    seenPending = try await self.highestPendingSearch()
                } catch {
                    logger.warning("indexing messages for search failed", metadata: ["error": "\(error)"])
                }
            }
        }
    }
}
