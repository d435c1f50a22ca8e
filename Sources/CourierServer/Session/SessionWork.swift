import CourierProtocol
import CourierStore
import NIOCore
import Synchronization

/// What a connection's async work (a login, a history read, a media stream) shares with its channel handler and its
/// end: the work itself, so that the end can cancel it and wait for it before its bookkeeping; what the end must
/// release (the hub's handle, media streams, a compat media packet being received); and the outcomes of its writes,
/// coming back from the group commit on other threads. The session's state is not here: it is the handler's
/// ``SessionStateMachine``, changed on the event loop only.
final class SessionWork: Sendable {
    private struct State {
        var handle: ConnectionHandle?
        /// A compat media packet whose bytes are arriving.
        var inline: InlineUpload?
        var tasks: [Int: Task<Void, Never>] = [:]
        var nextTask = 0
        /// The channel closed: no new work starts, and `cleanup` runs once the last task ends.
        var ended = false
        var cleanup: (@Sendable () -> Void)?
        /// Outcomes of the connection's writes that came back from the group commit, waiting for the loop.
        var completed: [(serial: UInt64, result: Result<WriteOutcome, any Error>)] = []
    }

    private let state = Mutex(State())
    /// The connection's media streams.
    let streams: MediaStreams

    /// How the server's admission counts the connection.
    let ticket: ConnectionCounts.Ticket

    init(media: ServerConfiguration.Media, ticket: ConnectionCounts.Ticket) {
        self.ticket = ticket
        self.streams = MediaStreams(
            maxStreams: media.maxStreamsPerConnection,
            maxFetchWindow: media.maxFetchWindowBytes
        )
    }

    /// The connection's entry in the hub, from the moment the login registers it: the end unregisters it, even when
    /// the connection closed before the login's end reached the loop.
    var handle: ConnectionHandle? {
        get { self.state.withLock { $0.handle } }
        set { self.state.withLock { $0.handle = newValue } }
    }

    /// The compat media packet being received, if any: released (and deleted) if the connection ends before it does.
    var inline: InlineUpload? {
        get { self.state.withLock { $0.inline } }
        set { self.state.withLock { $0.inline = newValue } }
    }

    /// Runs async work for the connection; nothing once the connection has ended.
    ///
    /// - Returns: Whether the work was started (false once the connection has ended: then whatever the work was to
    ///   release is the caller's).
    @discardableResult
    func spawn(_ work: @escaping @Sendable () async -> Void) -> Bool {
        self.state.withLock { state in
            guard !state.ended else { return false }
            let id = state.nextTask
            state.nextTask += 1
            // Made under the lock: the task's own end (which takes it) comes after it is on the books.
            state.tasks[id] = Task {
                await work()
                self.finished(id)
            }
            return true
        }
    }

    private func finished(_ id: Int) {
        let cleanup = self.state.withLock { state -> (@Sendable () -> Void)? in
            state.tasks[id] = nil
            guard state.ended, state.tasks.isEmpty else { return nil }
            defer { state.cleanup = nil }
            return state.cleanup
        }
        cleanup?()
    }

    /// The channel closed: cancels the connection's work, and calls `cleanup` once none is left.
    func ended(then cleanup: @escaping @Sendable () -> Void) {
        let (tasks, now) = self.state.withLock { state -> ([Task<Void, Never>], Bool) in
            state.ended = true
            if state.tasks.isEmpty { return ([], true) }
            state.cleanup = cleanup
            return (Array(state.tasks.values), false)
        }
        // A fetch waiting for window stops at once (its wait is cancellable); uploads are released by `cleanup`.
        for task in tasks { task.cancel() }
        if now { cleanup() }
    }

    /// A write's outcome came back.
    ///
    /// - Returns: Whether the caller must wake the loop to take it (false while an earlier wake has not yet
    ///   taken what came before: outcomes of one batch are taken in one turn of the loop).
    func completed(_ serial: UInt64, _ result: Result<WriteOutcome, any Error>) -> Bool {
        self.state.withLock { state in
            state.completed.append((serial, result))
            return state.completed.count == 1
        }
    }

    /// The outcomes that came back since the last call.
    func takeCompleted() -> [(serial: UInt64, result: Result<WriteOutcome, any Error>)] {
        self.state.withLock { state in
            defer { state.completed = [] }
            return state.completed
        }
    }
}
