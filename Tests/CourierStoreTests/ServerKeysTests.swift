import CourierStore
import Synchronization
import Testing

@Suite("Server keys: made once for every server on one database, and kept")
struct ServerKeysTests {
    @Test(
        "a key is made the first time it is asked for and the same afterwards: reopened, on another node, and when two ask at once",
        arguments: StoreKind.allCases
    )
    func madeOnceAndKept(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let made = Mutex(0)
            let secret = Array("推送密钥 🔑".utf8)
            let first = try await fixture.store.serverKey(named: "vapid", nowMs: 1) {
                made.withLock { $0 += 1 }
                return secret
            }
            #expect(first == secret)
            let again = try await fixture.store.serverKey(named: "vapid", nowMs: 2) {
                made.withLock { $0 += 1 }
                return [9]
            }
            #expect(again == secret)
            #expect(made.withLock { $0 } == 1)
            try await fixture.another { other in
                let kept = try await other.serverKey(named: "vapid", nowMs: 3) { [7] }
                #expect(kept == secret)
                let another = try await other.serverKey(named: "another", nowMs: 3) { [7] }
                #expect(another == [7], "a name of its own")
            }
            try await fixture.another { other in
                async let one = fixture.store.serverKey(named: "raced", nowMs: 4) { [1] }
                async let two = other.serverKey(named: "raced", nowMs: 4) { [2] }
                let (a, b) = try await (one, two)
                #expect(a == b, "both nodes use the key kept first")
                #expect(a == [1] || a == [2])
            }
            #expect(try await fixture.count("SELECT count(*) FROM server_keys") == 3)
        }
    }
}
