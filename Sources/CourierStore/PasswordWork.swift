internal import Foundation
internal import Synchronization

/// Runs password hashing (scrypt: tens of MiB and about 0.1 s each) on a few threads of its own, with a bounded
/// queue, so that a storm of logins never occupies the threads that deliver messages and never piles up memory.
///
/// Threads are started when work arrives and end when the queue is empty: an idle pool holds no thread. A job that
/// finds `threads` jobs running and `maxQueued` waiting is refused at once with `throttled`.
package final class PasswordWork: Sendable {
    private struct State {
        var queue: [@Sendable () -> Void] = []
        var workers = 0
    }

    let threads: Int
    let maxQueued: Int
    private let state = Mutex(State())

    init(threads: Int, maxQueued: Int) {
        self.threads = min(max(1, threads), StoreSettings.maxPasswordThreads)
        self.maxQueued = max(0, maxQueued)
    }

    /// Runs `body` on one of the pool's threads.
    ///
    /// - Throws: ``CourierStoreError`` with code `throttled` when the queue is full (nothing ran).
    func run<T: Sendable>(_ body: @escaping @Sendable () -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let job: @Sendable () -> Void = { continuation.resume(returning: body()) }
            let (accepted, startWorker) = self.state.withLock { state -> (Bool, Bool) in
                if state.workers >= self.threads, state.queue.count >= self.maxQueued { return (false, false) }
                state.queue.append(job)
                guard state.workers < self.threads else { return (true, false) }
                state.workers += 1
                return (true, true)
            }
            guard accepted else {
                continuation.resume(
                    throwing: CourierStoreError(.throttled, "too many password checks at once; retry later")
                )
                return
            }
            if startWorker {
                let thread = Thread { self.work() }
                thread.name = "courier-password"
                thread.start()
            }
        }
    }

    /// Jobs waiting for a thread, for tests and metrics.
    var queued: Int { self.state.withLock { $0.queue.count } }

    private func work() {
        while let job = self.state.withLock({ state -> (@Sendable () -> Void)? in
            guard !state.queue.isEmpty else {
                state.workers -= 1
                return nil
            }
            return state.queue.removeFirst()
        }) {
            job()
        }
    }
}
