internal import Synchronization

/// Turns taken one at a time, in the order they were asked for: a lock for async work that suspends its waiters
/// instead of blocking their threads. A waiter is not cancelled: the work ahead of it is short.
final class WriteTurns: Sendable {
    private struct State {
        var busy = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    /// Runs `body` in a turn of its own.
    func run<T>(_ body: () async throws -> T) async throws -> T {
        await self.take()
        defer { self.give() }
        return try await body()
    }

    private func take() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let granted = self.state.withLock { state in
                if state.busy {
                    state.waiting.append(continuation)
                    return false
                }
                state.busy = true
                return true
            }
            if granted { continuation.resume() }
        }
    }

    private func give() {
        let next = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.waiting.isEmpty else {
                state.busy = false
                return nil
            }
            return state.waiting.removeFirst()
        }
        next?.resume()
    }
}
