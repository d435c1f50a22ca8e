import Synchronization
import Testing

@testable import CourierClient

/// One upload, or one download, of a file at a time: the second waits, suspended, for the first to let go.
@Suite("Claims on a file, one at a time")
struct KeyedClaimsTests {
    /// The order in which claimants got the file.
    final class Order: Sendable {
        let names = Mutex<[String]>([])
    }

    /// Waits, yielding, until `count` claimants wait for the key.
    static func waitForWaiters(_ claims: KeyedClaims, _ key: String, _ count: Int) async {
        while claims.waiting(for: key) != count { await Task.yield() }
    }

    @Test("a second claim waits until the first lets go, in the order asked; another key does not wait")
    func turns() async throws {
        let claims = KeyedClaims()
        try await claims.claim("a")
        let order = Order()
        let second = Task {
            try await claims.claim("a")
            order.names.withLock { $0.append("second") }
        }
        await Self.waitForWaiters(claims, "a", 1)
        let third = Task {
            try await claims.claim("a")
            order.names.withLock { $0.append("third") }
        }
        await Self.waitForWaiters(claims, "a", 2)
        // Another file is claimed at once.
        try await claims.claim("b")
        #expect(order.names.withLock { $0 }.isEmpty, "nobody got the file while it was held")
        claims.release("a")
        try await second.value
        #expect(order.names.withLock { $0 } == ["second"])
        claims.release("a")
        try await third.value
        #expect(order.names.withLock { $0 } == ["second", "third"])
        claims.release("a")
        // Free again: claimed at once.
        try await claims.claim("a")
    }

    @Test("a waiting claim whose task is cancelled stops waiting and holds nothing")
    func cancelled() async throws {
        let claims = KeyedClaims()
        try await claims.claim("a")
        let waiting = Task { try await claims.claim("a") }
        await Self.waitForWaiters(claims, "a", 1)
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
        #expect(claims.waiting(for: "a") == 0)
        // The holder's release frees the file: the cancelled claim did not take it.
        claims.release("a")
        try await claims.claim("a")
    }
}
