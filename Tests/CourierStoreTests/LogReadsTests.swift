import CourierStore
import Testing

@Suite("Several users' logs read at once, as a node reads them for its connections when another node wrote")
struct LogReadsTests {
    @Test(
        "each log from its own cursor, at most the limit, the same events a read of each would give; logs with nothing new left out",
        arguments: StoreKind.allCases
    )
    func severalLogs(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol", "dave")
            let (alice, bob, carol, dave) = (ids["alice"]!, ids["bob"]!, ids["carol"]!, ids["dave"]!)
            try await fixture.store.createGroup(
                name: "crew",
                owner: "alice",
                members: ["bob", "carol", "dave"],
                nowMs: StoreFixture.start
            )
            _ = try await fixture.sent(alice, "a1", to: .user("bob"), "你好 bob")
            _ = try await fixture.sent(carol, "c1", to: .group("crew"), "みなさん 🎉")
            _ = try await fixture.sent(bob, "b1", to: .group("crew"), "שלום", nowMs: StoreFixture.start + 1)
            _ = try await fixture.sent(alice, "a2", to: .user("carol"), "再见")
            let cursors = [
                alice: try await fixture.store.logCursor(of: alice),
                bob: try await fixture.store.logCursor(of: bob),
                carol: try await fixture.store.logCursor(of: carol),
            ]
            // bob from 1, carol from 0 with a limit of 2, alice from her end (nothing new), dave not asked.
            let read = try await fixture.store.events(for: [alice: cursors[alice]!, bob: 1, carol: 0], limit: 2)
            #expect(Set(read.keys) == [bob, carol])
            for (user, after) in [(bob, UInt64(1)), (carol, UInt64(0))] {
                let one = try await fixture.store.events(for: user, after: after, limit: 2)
                #expect(read[user] == one, "\(user)")
                #expect(read[user]?.map(\.cursor) == [after + 1, after + 2])
            }
            #expect(read[dave] == nil)  // not asked, though its log grew
            #expect(try await fixture.store.events(for: [:], limit: 5).isEmpty)
        }
    }
}
