internal import Synchronization

/// Claims on keys held one at a time: a second claimant of a key waits, suspended, until the first lets go (and
/// stops waiting when its task is cancelled). One upload, or one download, of a file at a time.
final class KeyedClaims: Sendable {
    private struct State {
        var held: Set<String> = []
        var waiting: [String: [(id: Int, continuation: CheckedContinuation<Void, any Error>)]] = [:]
        var nextID = 0
    }

    private let state = Mutex(State())

    /// Waits until the caller holds the key.
    ///
    /// - Throws: `CancellationError` when the caller's task is cancelled first (it holds nothing then).
    func claim(_ key: String) async throws {
        let id = self.state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let granted: Result<Void, any Error>? = self.state.withLock { state in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if state.held.insert(key).inserted { return .success(()) }
                    state.waiting[key, default: []].append((id, continuation))
                    return nil
                }
                if let granted { continuation.resume(with: granted) }
            }
        } onCancel: {
            let cancelled = self.state.withLock { state -> CheckedContinuation<Void, any Error>? in
                guard let index = state.waiting[key]?.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiting[key]?.remove(at: index).continuation
            }
            cancelled?.resume(throwing: CancellationError())
        }
    }

    /// Lets go of a key the caller holds: the next claimant holds it now.
    func release(_ key: String) {
        let next = self.state.withLock { state -> CheckedContinuation<Void, any Error>? in
            guard var queue = state.waiting[key], !queue.isEmpty else {
                state.held.remove(key)
                state.waiting[key] = nil
                return nil
            }
            let next = queue.removeFirst()
            state.waiting[key] = queue.isEmpty ? nil : queue
            return next.continuation
        }
        next?.resume()
    }

    /// How many claimants wait for a key (for tests).
    func waiting(for key: String) -> Int {
        self.state.withLock { $0.waiting[key]?.count ?? 0 }
    }
}
