import NIOCore
import Synchronization

/// One value per event loop, made the first time a caller on that loop asks, and used on that loop only: the
/// sessions' deadline wheels (``LoopDeadlines``), their caches of encoded events (``EventEncodingCache``).
final class PerLoop<Value>: Sendable {
    private let table = Mutex<[ObjectIdentifier: NIOLoopBound<Value>]>([:])
    private let make: @Sendable (any EventLoop) -> Value

    init(_ make: @escaping @Sendable (any EventLoop) -> Value) {
        self.make = make
    }

    /// The value of the loop the caller runs on.
    func forLoop(_ loop: any EventLoop) -> Value {
        loop.preconditionInEventLoop()
        return self.table.withLock { table in
            if let existing = table[ObjectIdentifier(loop)] { return existing.value }
            let made = self.make(loop)
            table[ObjectIdentifier(loop)] = NIOLoopBound(made, eventLoop: loop)
            return made
        }
    }
}
