internal import Synchronization

/// Group commit: collects the writes of every session and applies as many as are waiting in one transaction, so
/// one fsync covers them all. A caller's ``submit(_:)`` returns only after its write is durably committed (or
/// refused, or failed with nothing committed).
///
/// Nothing is ever dropped: a submitter waits in ``submit(_:)`` until its write is applied, and the number waiting
/// is bounded by the server's limits on connections and unacknowledged sends per connection.
///
/// ``run()`` does the work until ``finish()``: it then commits what is waiting and returns; later submissions fail
/// with `storage-failed` ("the store is shutting down").
public final class CommitQueue: Sendable {
    /// Settings of the queue.
    public struct Configuration: Sendable {
        /// The most writes applied in one transaction.
        public var maxBatchRequests: Int = 4096

        public init() {}
    }

    /// Figures of the batch just committed, for metrics.
    public struct BatchReport: Sendable {
        public var requests: Int
        public var duration: Duration
        public var appended: [UserID: UInt64]
        /// The events as written, for users with few enough (``AppliedBatch/fresh``).
        public var fresh: [UserID: FreshRun] = [:]
        /// The users the batch made peers (``AppliedBatch/introductions``).
        public var introductions: [Introduction] = []
        public var failed: Bool
        /// How many messages the batch wrote to the push outbox (``AppliedBatch/pushes``).
        public var pushes = 0
    }

    private struct Pending {
        var request: WriteRequest
        var ticket: CommitTicket
        var origin: Int?
    }

    private struct State {
        var pending: [Pending] = []
        var waiter: CheckedContinuation<Void, Never>?
        var finished = false
        /// Origins with a write in a batch that failed: their later writes fail too, until ``forget(origin:)``.
        var failedOrigins: Set<Int> = []
        var nextOrigin = 1
    }

    private let store: any CourierDatabase
    private let configuration: Configuration
    private let clock: @Sendable () -> Int64
    private let onCommit: @Sendable (BatchReport) -> Void
    private let freshRoom: (@Sendable (UserID) -> Int)?
    private let state = Mutex(State())

    /// Creates a queue in front of a store.
    ///
    /// - Parameters:
    ///   - store: Where writes go.
    ///   - configuration: The queue's settings.
    ///   - clock: The server's clock in milliseconds since 1970, read once per batch.
    ///   - onCommit: Called after each batch (committed or failed), before the submitters resume: the server wakes
    ///     the connections of users whose logs grew from here.
    public init(
        store: any CourierDatabase,
        configuration: Configuration = .init(),
        clock: @escaping @Sendable () -> Int64,
        freshRoom: (@Sendable (UserID) -> Int)? = nil,
        onCommit: @escaping @Sendable (BatchReport) -> Void = { _ in }
    ) {
        self.store = store
        self.configuration = configuration
        self.clock = clock
        self.freshRoom = freshRoom
        self.onCommit = onCommit
    }

    /// Applies a write with the next batch.
    ///
    /// - Returns: The write's outcome, once committed.
    /// - Throws: ``CourierStoreError`` with code `storage-failed` if the batch's transaction failed (nothing of it
    ///   was committed) or the queue has finished.
    public func submit(_ request: WriteRequest) async throws -> WriteOutcome {
        try await self.enqueue(request).outcome()
    }

    /// Queues a write at once and returns a ticket to await its outcome with.
    ///
    /// Writes are applied in the order they are enqueued: a session enqueues its requests in the order they
    /// arrived, so one client's messages to a conversation get sequence numbers in the order it sent them.
    ///
    /// - Parameter origin: The writer (a connection, ``newOrigin()``), for the order to hold across a failure too:
    ///   once a batch with one of its writes fails, its writes still waiting fail with it, and so do those it
    ///   enqueues later, until ``forget(origin:)``. None of them can overtake the failed one; the writer sends them
    ///   again, in order (a session closes its connection, and the client sends what was not acknowledged).
    public func enqueue(_ request: WriteRequest, origin: Int? = nil) -> CommitTicket {
        let ticket = CommitTicket()
        enum Admission {
            case accepted(CheckedContinuation<Void, Never>?)
            case finished
            case failedBefore
        }
        let admission = self.state.withLock { state -> Admission in
            guard !state.finished else { return .finished }
            if let origin, state.failedOrigins.contains(origin) { return .failedBefore }
            state.pending.append(Pending(request: request, ticket: ticket, origin: origin))
            defer { state.waiter = nil }
            return .accepted(state.waiter)
        }
        switch admission {
        case .accepted(let waiter):
            waiter?.resume()
        case .finished:
            ticket.complete(.failure(CourierStoreError(.storageFailed, "the store is shutting down")))
        case .failedBefore:
            ticket.complete(.failure(Self.earlierFailure))
        }
        return ticket
    }

    package static let earlierFailure = CourierStoreError(
        .storageFailed,
        "an earlier write of this connection was not stored: not stored either, send both again in order"
    )

    /// A new writer's mark for ``enqueue(_:origin:)``.
    public func newOrigin() -> Int {
        self.state.withLock { state in
            defer { state.nextOrigin += 1 }
            return state.nextOrigin
        }
    }

    /// The writer is gone (its writes in flight have all come back): its mark is forgotten.
    public func forget(origin: Int) {
        _ = self.state.withLock { $0.failedOrigins.remove(origin) }
    }

    /// Stops taking writes; ``run()`` commits what is waiting, then returns.
    public func finish() {
        let waiter = self.state.withLock { state in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Commits batches until ``finish()`` has been called and nothing is waiting.
    public func run() async {
        let clock = ContinuousClock()
        while let batch = await self.nextBatch() {
            let start = clock.now
            do {
                let applied = try await self.store.apply(
                    batch.map(\.request),
                    nowMs: self.clock(),
                    freshRoom: self.freshRoom
                )
                self.onCommit(
                    BatchReport(
                        requests: batch.count,
                        duration: clock.now - start,
                        appended: applied.appended,
                        fresh: applied.fresh,
                        introductions: applied.introductions,
                        failed: false,
                        pushes: applied.pushes
                    )
                )
                for (pending, outcome) in zip(batch, applied.outcomes) {
                    pending.ticket.complete(.success(outcome))
                }
            } catch {
                self.onCommit(
                    BatchReport(requests: batch.count, duration: clock.now - start, appended: [:], failed: true)
                )
                // The writes waiting behind the failed ones of the same origins must not overtake them.
                let origins = Set(batch.compactMap(\.origin))
                let behind = self.state.withLock { state -> [Pending] in
                    guard !origins.isEmpty else { return [] }
                    state.failedOrigins.formUnion(origins)
                    let behind = state.pending.filter { $0.origin.map(origins.contains) ?? false }
                    state.pending.removeAll { $0.origin.map(origins.contains) ?? false }
                    return behind
                }
                for pending in batch {
                    pending.ticket.complete(.failure(error))
                }
                for pending in behind {
                    pending.ticket.complete(.failure(Self.earlierFailure))
                }
            }
        }
    }

    /// The next writes to apply, waiting for some; nil once finished with nothing left.
    private func nextBatch() async -> [Pending]? {
        while true {
            enum Step {
                case batch([Pending])
                case done
                case wait
            }
            let step = self.state.withLock { state -> Step in
                if !state.pending.isEmpty {
                    let count = min(state.pending.count, self.configuration.maxBatchRequests)
                    let batch = Array(state.pending.prefix(count))
                    state.pending.removeFirst(count)
                    return .batch(batch)
                }
                return state.finished ? .done : .wait
            }
            switch step {
            case .batch(let batch): return batch
            case .done: return nil
            case .wait:
                await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                    let resumeNow = self.state.withLock { state in
                        if !state.pending.isEmpty || state.finished { return true }
                        state.waiter = waiter
                        return false
                    }
                    if resumeNow { waiter.resume() }
                }
            }
        }
    }
}

/// The outcome of one enqueued write, to be awaited once (``outcome()``) or taken by a callback
/// (``whenComplete(_:)``), not both.
public final class CommitTicket: Sendable {
    private struct State {
        var result: Result<WriteOutcome, any Error>?
        var waiter: CheckedContinuation<Result<WriteOutcome, any Error>, Never>?
        var callback: (@Sendable (Result<WriteOutcome, any Error>) -> Void)?
    }

    private let state = Mutex(State())

    /// A ticket for a write its creator completes (a write another node commits).
    package init() {}

    package func complete(_ result: Result<WriteOutcome, any Error>) {
        let (waiter, callback) = self.state.withLock { state in
            state.result = result
            defer {
                state.waiter = nil
                state.callback = nil
            }
            return (state.waiter, state.callback)
        }
        waiter?.resume(returning: result)
        callback?(result)
    }

    /// Calls `body` with the write's outcome once it is known: at once (on the caller's thread) if it is already,
    /// else on the committing task's thread, after the batch. For callers that hold no task while they wait (a
    /// connection's channel handler).
    public func whenComplete(_ body: @escaping @Sendable (Result<WriteOutcome, any Error>) -> Void) {
        let ready = self.state.withLock { state -> Result<WriteOutcome, any Error>? in
            if let result = state.result { return result }
            state.callback = body
            return nil
        }
        if let ready { body(ready) }
    }

    /// Waits for the write's outcome.
    ///
    /// - Throws: ``CourierStoreError`` with code `storage-failed` if its transaction failed.
    public func outcome() async throws -> WriteOutcome {
        let result = await withCheckedContinuation { continuation in
            let ready = self.state.withLock { state -> Result<WriteOutcome, any Error>? in
                if let result = state.result { return result }
                state.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
        return try result.get()
    }
}
