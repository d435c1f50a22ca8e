internal import Synchronization

/// A lock that tasks wait for in line (first come, first served) without blocking a thread: for sections that await
/// (a SQLite store's write transactions, which span several accesses to its writer; a media upload's start).
package final class AsyncLock: Sendable {
    private struct State {
        var held = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    /// Takes the lock: at once when it is free, else after those waiting before.
    package init() {}

    package func lock() async {
        let free = self.state.withLock { state -> Bool in
            guard !state.held else { return false }
            state.held = true
            return true
        }
        if free { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let acquired = self.state.withLock { state -> Bool in
                if !state.held {
                    state.held = true
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if acquired { continuation.resume() }
        }
    }

    /// Hands the lock to the next in line (it stays held), or frees it.
    package func unlock() {
        let next = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
            if state.waiters.isEmpty {
                state.held = false
                return nil
            }
            return state.waiters.removeFirst()
        }
        next?.resume()
    }

    /// Runs `body` holding the lock.
    package func withLock<T: Sendable>(_ body: () async throws -> T) async rethrows -> T {
        await self.lock()
        defer { self.unlock() }
        return try await body()
    }
}
