package import Logging
internal import Synchronization

/// The search index written beside the group commit rather than inside it.
///
/// A group commit stores each new message's row of the index unindexed (its tokens NULL), in the message's own
/// transaction, and hands the message's tokens to this queue; ``StoreBackend/indexQueuedSearch()`` writes the queue's
/// tokens a moment later in one transaction of their own. On PostgreSQL, where writers run side by side, that takes
/// the GIN index's insertions out of the group commit's transaction (the default there); SQLite's one writer would do
/// the same FTS5 work in a second transaction, so it indexes in the message's own
/// (``Configuration-swift.struct/deferred``; docs/BENCHMARKS.md, issue 43, has both measured).
///
/// What holds:
/// - No entry is lost to a crash: the unindexed row commits with the message, and whatever the queue held is found
///   again by ``StoreBackend/indexPending(limit:upTo:)``: by the server's backfill at start, and by the follower every
///   ``Configuration-swift.struct/sweepInterval`` for rows unindexed at two looks in a row (a node that died with its
///   queue).
/// - A search sees every message committed through this store in the searcher's conversations before it began: it
///   writes those entries of the queue first (``StoreBackend/flushSearchIndex(for:)``), at most one batch of the
///   follower's after, so a sender finds its own sends at once. Sends committed by another node are found once that
///   node has written its queue (``Configuration-swift.struct/delay`` later, under load). A row another transaction
///   is sweeping at that moment is skipped, not waited for, and found once that one commits.
/// - An edit or a recall in the meantime wins: the queue writes tokens only to a row that has none
///   (an edit writes its tokens in its own transaction, a recall deletes the row).
/// - Memory is bounded: past ``Configuration-swift.struct/maxQueued`` entries or
///   ``Configuration-swift.struct/maxQueuedBytes`` the queue keeps no more, and the rows it dropped are swept from the
///   database at once.
/// - A database that fails: the follower retries with a growing pause (up to 5 s); once finished it gives up at the
///   first failure (the rows wait in the database for the next start).
public final class SearchIndexer: Sendable {
    /// Settings of the index's writing; every store takes them (``StoreSettings/searchIndex``).
    public struct Configuration: Sendable, Hashable {
        /// Whether new messages are indexed beside the group commit (true), or in its transaction (false); nil: as
        /// suits the database (docs/BENCHMARKS.md, issue 43): PostgreSQL writes the index beside the commit, its
        /// writers run side by side and the GIN index's insertions leave the batch's transaction; SQLite writes it in
        /// the transaction, its one writer does the same FTS5 work either way and a second transaction only adds to
        /// it.
        public var deferred: Bool? = nil
        /// How long the first entry queued waits for others before the queue is written: one transaction for all
        /// that came meanwhile.
        public var delay: Duration = .milliseconds(50)
        /// The most entries written in one transaction (a search waits for at most one such, and so does an edit of
        /// a message in it, on PostgreSQL: the transaction holds the rows it writes).
        public var maxBatch: Int = 2_048
        /// The most entries queued in memory; the rows of those past it are left for the sweep.
        public var maxQueued: Int = 65_536
        /// The most bytes of tokens and bodies queued in memory; the rows of those past it are left for the sweep.
        public var maxQueuedBytes: Int = 64 << 20
        /// How often rows left unindexed are looked for (``StoreBackend/indexPending(limit:upTo:)``): rows
        /// unindexed at one look and still at the next (a queue lost with its process, on another node) are indexed
        /// then.
        public var sweepInterval: Duration = .seconds(30)

        public init() {}
    }

    /// A committed message's tokens, waiting to be written.
    package struct Entry: Sendable {
        package var conversation: Int64
        package var seq: Int64
        /// Its text's tokens, when the request came with them (``WriteRequest/Send/prepareSearch()``).
        package var prepared: [String]?
        /// Its body, for the tokens when none were prepared (empty when they were).
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
            self.body = prepared == nil ? body : []
            self.queued = queued
        }

        /// The index's document: the text's tokens, and the conversation's.
        package var tokens: [String] {
            SearchIndex.tokens(ofBody: self.body, prepared: self.prepared, conversation: self.conversation)
        }

        /// What it holds in memory, roughly.
        var bytes: Int {
            64 + self.body.count + (self.prepared?.reduce(0) { $0 + $1.utf8.count + 16 } ?? 0)
        }
    }

    /// What the queue has done, for metrics and the benchmark.
    public struct Figures: Sendable, Hashable {
        /// Entries written (their rows indexed, or found indexed, edited or recalled already).
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
        var bytes = 0
        var waiter: CheckedContinuation<Void, Never>?
        var finished = false
        /// Entries dropped since the last sweep: the next sweep runs at once.
        var overflowed = false
        var figures = Figures()

        mutating func admit(_ entries: some Collection<Entry>, limits: Configuration, atFront: Bool) {
            var kept: [Entry] = []
            for entry in entries {
                guard self.queue.count + kept.count < limits.maxQueued,
                    self.bytes + entry.bytes <= limits.maxQueuedBytes
                else {
                    self.figures.dropped += 1
                    self.overflowed = true
                    continue
                }
                self.bytes += entry.bytes
                kept.append(entry)
            }
            if atFront { self.queue.insert(contentsOf: kept, at: 0) } else { self.queue.append(contentsOf: kept) }
        }

        mutating func removed(_ entries: some Collection<Entry>) {
            self.bytes -= entries.reduce(0) { $0 + $1.bytes }
        }
    }

    package let configuration: Configuration
    /// Whether new messages are indexed beside the group commit (``Configuration-swift.struct/deferred``, or the
    /// database's choice).
    public let isDeferred: Bool
    private let state = Mutex(State())
    /// One writer of the queue at a time: a search's flush waits for a write in flight to end (one batch).
    package let writing = AsyncLock()

    /// - Parameter deferredByDefault: The database's choice when the configuration makes none.
    package init(configuration: Configuration, deferredByDefault: Bool) {
        self.configuration = configuration
        self.isDeferred = configuration.deferred ?? deferredByDefault
    }

    /// Queues the new messages of a committed group commit; wakes ``StoreBackend/followSearchIndex(logger:)``.
    package func committed(_ entries: [Entry]) {
        guard !entries.isEmpty else { return }
        let waiter = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.admit(entries, limits: self.configuration, atFront: false)
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Takes up to a batch of queued entries (oldest first).
    package func take() -> [Entry] {
        self.state.withLock { state in
            let count = min(state.queue.count, max(1, self.configuration.maxBatch))
            let taken = Array(state.queue.prefix(count))
            state.queue.removeFirst(count)
            state.removed(taken)
            return taken
        }
    }

    /// Takes every queued entry of these conversations.
    package func take(in conversations: Set<Int64>) -> [Entry] {
        self.state.withLock { state in
            var taken: [Entry] = []
            state.queue.removeAll { entry in
                guard conversations.contains(entry.conversation) else { return false }
                taken.append(entry)
                return true
            }
            state.removed(taken)
            return taken
        }
    }

    /// Puts entries whose write failed back in front (as room allows; the sweep finds the rest).
    package func requeue(_ entries: [Entry]) {
        self.state.withLock { $0.admit(entries, limits: self.configuration, atFront: true) }
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
            defer {
                state.queue = []
                state.bytes = 0
            }
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

    /// Waits until entries are queued, ``finish()`` is called, the task is cancelled, or `timeout` passes.
    ///
    /// - Returns: false once finished (or cancelled) with nothing queued.
    package func waitForEntries(timeout: Duration) async -> Bool {
        let ready = self.state.withLock { state -> Bool? in
            if !state.queue.isEmpty { return true }
            return state.finished ? false : nil
        }
        if let ready { return ready }
        if Task.isCancelled { return false }
        // A timer wakes the wait for the sweep; an entry, finish() or cancellation wakes it sooner.
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
                // Cancelled before the waiter was in place: the handler found nobody to wake.
                if Task.isCancelled { self.wake() }
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

    /// Ends ``StoreBackend/followSearchIndex(logger:)`` once the queue is written.
    public func finish() {
        self.state.withLock { $0.finished = true }
        self.wake()
    }

    package var isFinished: Bool { self.state.withLock { $0.finished } }
}

extension StoreBackend {
    /// Writes entries in transactions of at most a batch each.
    ///
    /// - Throws: `storage-failed` when a transaction failed (the entries not written are queued again).
    private func writeSearchEntries(_ entries: [SearchIndexer.Entry]) async throws {
        let indexer = self.searchIndexer
        var start = 0
        while start < entries.count {
            let batch = Array(entries[start..<min(entries.count, start + max(1, indexer.configuration.maxBatch))])
            // Tokens not prepared are worked out here, outside the transaction.
            let documents = batch.map { ($0.conversation, $0.seq, $0.tokens) }
            do {
                try await self.transaction(doing: "index messages for search") { transaction in
                    try await transaction.setSearchTokens(at: documents)
                }
            } catch {
                indexer.requeue(Array(entries[start...]))
                throw error
            }
            indexer.wrote(batch, at: .now)
            start += batch.count
        }
    }

    /// Writes the queue, a batch per transaction, until it is empty; a search may come between two batches.
    ///
    /// - Throws: `storage-failed` when a transaction failed (its entries are queued again).
    package func indexQueuedSearch() async throws {
        let indexer = self.searchIndexer
        while indexer.queued > 0 {
            try await indexer.writing.withLock {
                try await self.writeSearchEntries(indexer.take())
            }
        }
    }

    /// Writes the queued entries of these conversations now, for a search to see everything committed in them
    /// before it (a failure is left to the search's own reads to report).
    package func flushSearchIndex(for conversations: Set<Int64>) async {
        let indexer = self.searchIndexer
        guard indexer.isDeferred, indexer.queued > 0 else { return }
        try? await indexer.writing.withLock {
            try await self.writeSearchEntries(indexer.take(in: conversations))
        }
    }

    /// Indexes rows left unindexed at `upTo` and below (by their place in the index), a batch at a time, until a
    /// batch indexes none (none left, or those left held by another transaction).
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
        var failures = 0
        while true {
            let more = await indexer.waitForEntries(timeout: max(.milliseconds(1), nextSweep - clock.now))
            if more, indexer.queued > 0 {
                // The first entry waits for others (finish() cuts the wait short).
                if !indexer.isFinished, indexer.queued < configuration.maxBatch {
                    try? await Task.sleep(for: configuration.delay)
                }
                do {
                    try await self.indexQueuedSearch()
                    failures = 0
                } catch {
                    logger.warning("indexing messages for search failed", metadata: ["error": "\(error)"])
                    // Finished or cancelled, it stops: the rows stay unindexed in the database, for the next start.
                    if indexer.isFinished || Task.isCancelled { return }
                    failures += 1
                    let pause = min(configuration.delay * (1 << min(failures, 10)), .seconds(5))
                    guard (try? await Task.sleep(for: pause)) != nil else { return }
                }
            }
            if !more { return }
            let overflowed = indexer.takeOverflow()
            if overflowed || clock.now >= nextSweep {
                nextSweep = clock.now + configuration.sweepInterval
                do {
                    let highest = try await self.highestPendingSearch()
                    // Rows the queue dropped are the newest: all unindexed now are swept then.
                    if let seen = overflowed ? highest : seenPending { _ = try await self.sweepSearchIndex(upTo: seen) }
                    seenPending = overflowed ? nil : highest
                } catch {
                    logger.warning("sweeping unindexed messages for search failed", metadata: ["error": "\(error)"])
                }
            }
        }
    }
}
