import CourierPostgresTesting
import CourierProtocol
import CourierStore
import CourierTesting
import Foundation
import Testing

@Suite("Who reacted to a message, on both databases")
struct ReactorsStoreTests {
    static let now = StoreFixture.start

    @Test(
        "each key once, the first given first; under it the users, the earliest first, at most the limit, with the count; only a member who can see the message asks",
        arguments: StoreKind.allCases
    )
    func reactors(kind: StoreKind) async throws {
        var limits = StoreLimits()
        limits.maxReactorsListed = 2
        try await StoreFixture.with(kind, limits: limits) { fixture in
            let store = fixture.store
            let ids = try await QuietTests.team(fixture)
            let (alice, bob, carol, dave, erin) = (
                ids["alice"]!, ids["bob"]!, ids["carol"]!, ids["dave"]!, ids["erin"]!
            )
            try await SearchTests.send(fixture, carol, "c1", to: .group("team"), "周末去爬山吗？ ⛰️")
            let c1 = MessageName(id: "c1", from: nil, in: .group("team"))
            #expect(try await store.reactors(of: c1, for: alice).isEmpty)
            // Given in this order, a millisecond apart: 👍 by dave, 🎉 by bob, 👍 by alice, 👍 by carol, 🎉 by dave.
            let given: [(UserID, String)] = [(dave, "👍"), (bob, "🎉"), (alice, "👍"), (carol, "👍"), (dave, "🎉")]
            for (index, (user, key)) in given.enumerated() {
                let outcome = try await EditsTests.react(
                    fixture,
                    user,
                    .group("team"),
                    seq: 1,
                    key,
                    at: Self.now + Int64(index)
                )
                #expect(outcome == .done)
            }
            let all = try await store.reactors(of: c1, for: bob)
            #expect(
                all == [
                    Reactors(key: "👍", count: 3, users: ["dave", "alice"]),
                    Reactors(key: "🎉", count: 2, users: ["bob", "dave"]),
                ]
            )
            // Taken off: gone from the list, the next one moves up, and 👍 now counts from alice's, after 🎉.
            #expect(try await EditsTests.react(fixture, dave, .group("team"), seq: 1, "👍", on: false) == .done)
            let after = try await store.reactors(of: c1, for: carol)
            #expect(
                after == [
                    Reactors(key: "🎉", count: 2, users: ["bob", "dave"]),
                    Reactors(key: "👍", count: 2, users: ["alice", "carol"]),
                ]
            )
            // Not a member: refused as every request about a group the user is not in.
            await expectCode(.notMember) { _ = try await store.reactors(of: c1, for: erin) }
            // By id alone, erin finds no message of that id that she can see.
            await expectCode(.unknownMessage) {
                _ = try await store.reactors(of: MessageName(id: "c1", from: nil, in: nil), for: erin)
            }
            // A recalled message has none to show.
            let recall = try await store.apply(
                [.recall(user: carol, conversation: .group("team"), id: "c1")],
                nowMs: Self.now + 10
            ).outcomes[0]
            #expect(recall == .done)
            #expect(try await store.reactors(of: c1, for: alice).isEmpty)
        }
    }
}
