import CourierPostgresTesting
import CourierProtocol
import CourierStore
import CourierTesting
import Foundation
import Testing

@testable import CourierStorePostgres
@testable import CourierStoreSQLite

@Suite("Pinned messages and deleting a message for oneself, on both databases")
struct PinStoreTests {
    static let now = StoreFixture.start

    /// The pin events in a user's log after a cursor: (seq, by, pinned).
    static func pinEvents(_ fixture: StoreFixture, _ user: UserID, after cursor: UInt64) async throws -> [String] {
        try await fixture.log(user, after: cursor).compactMap {
            guard case .pin(_, let seq, let id, let from, let by, let pinned) = $0.kind else { return nil }
            return "\(pinned ? "+" : "-")\(seq) \(id) \(from) by \(by)"
        }
    }

    static func cursor(_ fixture: StoreFixture, _ user: UserID) async throws -> UInt64 {
        try await fixture.log(user).last?.cursor ?? 0
    }

    @Test(
        "a group's owner and admins pin, members may not; every member who can see it is told; history says pinned; a recall unpins; the limit",
        arguments: StoreKind.allCases
    )
    func groupPins(kind: StoreKind) async throws {
        var limits = StoreLimits()
        limits.maxPinsPerConversation = 2
        try await StoreFixture.with(kind, limits: limits) { fixture in
            let store = fixture.store
            let ids = try await QuietTests.team(fixture)
            let (alice, bob, carol, erin) = (ids["alice"]!, ids["bob"]!, ids["carol"]!, ids["erin"]!)
            try await SearchTests.send(fixture, carol, "c1", to: .group("team"), "周五读第三章 📚")
            try await SearchTests.send(fixture, carol, "c2", to: .group("team"), "second")
            try await SearchTests.send(fixture, carol, "c3", to: .group("team"), "third")
            let c1 = MessageName(id: "c1", from: nil, in: .group("team"))
            await expectCode(.notAdmin) { try await store.pin(c1, by: carol, off: false, nowMs: Self.now) }
            await expectCode(.notMember) { try await store.pin(c1, by: erin, off: false, nowMs: Self.now) }
            let before = try await Self.cursor(fixture, carol)
            // bob is an admin.
            try await store.pin(c1, by: bob, off: false, nowMs: Self.now)
            #expect(try await Self.pinEvents(fixture, carol, after: before) == ["+1 c1 carol by bob"])
            // Again: nothing changes, nobody is told.
            #expect(try await store.pin(c1, by: alice, off: false, nowMs: Self.now + 1).isEmpty)
            // A member added later sees neither the pin nor its event (the message is from before it joined).
            try await store.changeMembers(of: "team", actor: nil, add: ["erin"], remove: [], nowMs: Self.now)
            #expect(try await store.pins(in: .group("team"), for: erin).isEmpty)
            try await store.pin(
                MessageName(id: "c2", from: "carol", in: .group("team")),
                by: alice,
                off: false,
                nowMs: Self.now + 2
            )
            #expect(try await Self.pinEvents(fixture, erin, after: 0).isEmpty)
            // The list, the most recently pinned first; history marks them.
            #expect(try await store.pins(in: .group("team"), for: carol).map(\.id) == ["c2", "c1"])
            let page = try await store.history(for: carol, in: .group("team"), beforeSeq: 0, limit: 10).messages
            #expect(Set(page.filter(\.pinned).map(\.id)) == ["c1", "c2"])
            #expect(page.first { $0.id == "c3" }?.pinned == false)
            // At most two pinned.
            await expectCode(.quotaExceeded) {
                try await store.pin(MessageName(id: "c3", from: nil, in: nil), by: alice, off: false, nowMs: Self.now)
            }
            // A recall unpins.
            _ = try await store.apply([.recall(user: carol, conversation: .group("team"), id: "c2")], nowMs: Self.now)
            #expect(try await store.pins(in: .group("team"), for: carol).map(\.id) == ["c1"])
            await expectCode(.messageRecalled) {
                try await store.pin(MessageName(id: "c2", from: nil, in: nil), by: alice, off: false, nowMs: Self.now)
            }
            // Unpinned: said to every member.
            let unpinFrom = try await Self.cursor(fixture, ids["dave"]!)
            try await store.pin(c1, by: alice, off: true, nowMs: Self.now)
            #expect(try await Self.pinEvents(fixture, ids["dave"]!, after: unpinFrom) == ["-1 c1 carol by alice"])
            #expect(try await store.pins(in: .group("team"), for: carol).isEmpty)
        }
    }

    @Test(
        "in a direct conversation either side pins; a message withheld from a blocker tells it nothing when pinned",
        arguments: StoreKind.allCases
    )
    func directPins(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            try await SearchTests.send(fixture, bob, "b1", to: .user("alice"), "مرحبا pin me")
            try await SearchTests.send(fixture, alice, "a1", to: .user("bob"), "alice's")
            try await store.pin(MessageName(id: "b1", from: nil, in: nil), by: alice, off: false, nowMs: Self.now)
            #expect(try await store.pins(in: .user("alice"), for: bob).map(\.id) == ["b1"])
            let page = try await store.history(for: alice, in: .user("bob"), beforeSeq: 0, limit: 10).messages
            #expect(page.map { "\($0.id):\($0.pinned)" } == ["a1:false", "b1:true"])
            // Blocked, bob pins nothing there: not alice's message, not his withheld one; nobody is told.
            try await store.block("bob", by: alice, on: true, nowMs: Self.now)
            try await SearchTests.send(fixture, bob, "b2", to: .user("alice"), "withheld")
            let cursor = try await Self.cursor(fixture, alice)
            for id in ["a1", "b2"] {
                #expect(
                    try await store.pin(MessageName(id: id, from: nil, in: nil), by: bob, off: false, nowMs: Self.now)
                        .isEmpty
                )
            }
            #expect(try await fixture.log(alice, after: cursor).isEmpty)
            #expect(try await store.pins(in: .user("bob"), for: alice).map(\.id) == ["b1"])
            #expect(try await store.pins(in: .user("alice"), for: bob).map(\.id) == ["b1"])
            // Unblocked: a message still withheld from her stays unpinnable by him.
            try await store.block("bob", by: alice, on: false, nowMs: Self.now)
            #expect(
                try await store.pin(MessageName(id: "b2", from: nil, in: nil), by: bob, off: false, nowMs: Self.now)
                    .isEmpty
            )
            try await store.pin(MessageName(id: "a1", from: nil, in: nil), by: bob, off: false, nowMs: Self.now + 1)
            #expect(try await store.pins(in: .user("bob"), for: alice).map(\.id) == ["a1", "b1"])
        }
    }

    @Test(
        "deleting for oneself: gone from one's history, search and unread, on every device; the others keep it",
        arguments: StoreKind.allCases
    )
    func deleteForMe(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            try await SearchTests.send(fixture, bob, "b1", to: .user("alice"), "一 keep")
            try await SearchTests.send(fixture, bob, "b2", to: .user("alice"), "二 delete me")
            let cursor = try await Self.cursor(fixture, alice)
            #expect(try await BlockStoreTests.count(fixture, alice, .user("bob")).unread == 2)
            try await store.hide(MessageName(id: "b2", from: "bob", in: nil), for: alice, nowMs: Self.now)
            let events = try await fixture.log(alice, after: cursor)
            #expect(events.count == 1)
            if case .hidden(let conversation, let seq)? = events.first?.kind {
                #expect(conversation == .user("bob") && seq == 2)
            } else {
                Issue.record("no hidden event: \(events)")
            }
            #expect(try await BlockStoreTests.history(fixture, alice, .user("bob")) == ["b1"])
            #expect(try await BlockStoreTests.history(fixture, bob, .user("alice")) == ["b1", "b2"])
            #expect(try await SearchTests.ids(fixture, alice, "delete").isEmpty)
            #expect(try await SearchTests.ids(fixture, bob, "delete") == ["b2"])
            #expect(try await BlockStoreTests.count(fixture, alice, .user("bob")).unread == 1)
            // Hidden, it is not one she can name again.
            await expectCode(.unknownMessage) {
                try await store.hide(MessageName(id: "b2", from: "bob", in: nil), for: alice, nowMs: Self.now)
            }
            // Her own message too, of any age.
            try await SearchTests.send(fixture, alice, "a1", to: .user("bob"), "mine")
            try await store.hide(
                MessageName(conversation: .user("bob"), seq: 3),
                for: alice,
                nowMs: Self.now + 86_400_000
            )
            #expect(try await BlockStoreTests.history(fixture, alice, .user("bob")) == ["b1"])
            // In a group too: out of her unread count; the others keep it.
            try await store.createGroup(name: "pair", owner: "bob", members: ["alice"], byOwner: false, nowMs: Self.now)
            try await SearchTests.send(fixture, bob, "g1", to: .group("pair"), "群 one")
            try await SearchTests.send(fixture, bob, "g2", to: .group("pair"), "群 two")
            #expect(try await BlockStoreTests.count(fixture, alice, .group("pair")).unread == 2)
            try await store.hide(MessageName(id: "g2", from: "bob", in: .group("pair")), for: alice, nowMs: Self.now)
            let group = try await BlockStoreTests.count(fixture, alice, .group("pair"))
            #expect(group.unread == 1 && group.lastSeq == 1, "\(group)")
            #expect(try await BlockStoreTests.history(fixture, bob, .group("pair")) == ["g1", "g2"])
        }
    }
}
