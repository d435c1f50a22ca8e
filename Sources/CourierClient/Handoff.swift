import Synchronization

/// Elements handed from producers to one consumer that takes everything waiting at once: while the consumer works
/// on one batch, the next accumulates (the client's acknowledgement bookkeeping commits each batch in one
/// transaction). Unbounded by design: each element stands for a message the server already acknowledged, and the
/// number of those is bounded by the sends in flight.
final class Handoff<Element: Sendable>: Sendable {
    private struct State {
        var items: [Element] = []
        var waiter: CheckedContinuation<[Element]?, Never>?
        var finished = false
    }

    private let state = Mutex(State())

    /// Adds an element, waking the consumer if it waits.
    func append(_ item: Element) {
        let handed = self.state.withLock { state -> (CheckedContinuation<[Element]?, Never>, [Element])? in
            state.items.append(item)
            guard let waiter = state.waiter else { return nil }
            state.waiter = nil
            defer { state.items = [] }
            return (waiter, state.items)
        }
        if let (waiter, items) = handed { waiter.resume(returning: items) }
    }

    /// No more elements: the consumer gets what is left, then nil.
    func finish() {
        let waiter = self.state.withLock { state -> CheckedContinuation<[Element]?, Never>? in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// Everything added since the last call, waiting while there is nothing; nil once finished and drained.
    func takeAll() async -> [Element]? {
        await withCheckedContinuation { continuation in
            let ready = self.state.withLock { state -> [Element]?? in
                if !state.items.isEmpty {
                    defer { state.items = [] }
                    return .some(state.items)
                }
                if state.finished { return .some(nil) }
                state.waiter = continuation
                return .none
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
