import CourierPostgresTesting
import CourierProtocol
import CourierStore
import CourierTesting
import Foundation
import Testing

@testable import CourierStorePostgres
@testable import CourierStoreSQLite

@Suite("Blocking, on both databases")
struct BlockStoreTests {
    static let now = StoreFixture.start

    static func send(
        _ fixture: StoreFixture,
        _ sender: UserID,
        _ id: String,
        to: Conversation,
        _ text: String
    ) async throws -> SendReceipt {
        try await SearchTests.send(fixture, sender, id, to: to, text)
        let found = try await fixture.store.history(for: sender, in: to, beforeSeq: 0, limit: 100).messages
        guard let message = found.first(where: { $0.id == id }) else { throw FixtureError(message: "\(id) not kept") }
        return SendReceipt(id: id, conversation: to, seq: message.seq, timeMs: message.timeMs, duplicate: false)
    }

    /// The ids of a user's history with another, oldest first.
    static func history(_ fixture: StoreFixture, _ user: UserID, _ conversation: Conversation) async throws -> [String]
    {
        try await fixture.store.history(for: user, in: conversation, beforeSeq: 0, limit: 100).messages.reversed()
            .map(\.id)
    }

    /// The ids of the message events in a user's log.
    static func logged(_ fixture: StoreFixture, _ user: UserID) async throws -> [String] {
        try await fixture.log(user).compactMap {
            guard case .message(let message) = $0.kind else { return nil }
            return message.id
        }
    }

    static func count(_ fixture: StoreFixture, _ user: UserID, _ conversation: Conversation) async throws -> UnreadCount
    {
        guard
            let count = try await fixture.store.unreadCounts(for: user).first(where: { $0.conversation == conversation }
            )
        else { throw FixtureError(message: "no \(conversation) for \(user)") }
        return count
    }

    @Test(
        "a blocked user's direct messages are kept for their sender alone: not in the blocker's log, history, unread or search; the blocker's marks stay where the block left them",
        arguments: StoreKind.allCases
    )
    func directMessages(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            _ = try await Self.send(fixture, bob, "b1", to: .user("alice"), "你好 before")
            let a1 = try await Self.send(fixture, alice, "a1", to: .user("bob"), "hi bob")
            let before = try await Self.send(fixture, bob, "b2", to: .user("alice"), "unread when blocked")
            #expect(try await store.block("bob", by: alice, on: true, nowMs: Self.now))
            // Again: nothing changes.
            #expect(try await !store.block("BOB", by: alice, on: true, nowMs: Self.now))
            let cursor = try await fixture.log(alice).last?.cursor ?? 0

            // Bob's send is acknowledged as any; it reaches only bob.
            let withheld = try await Self.send(fixture, bob, "b3", to: .user("alice"), "明天见 withheld")
            #expect(withheld.seq == before.seq + 1)
            #expect(try await Self.logged(fixture, alice).contains("b3") == false)
            #expect(try await fixture.log(alice, after: UInt64(cursor)).isEmpty)
            #expect(try await Self.history(fixture, bob, .user("alice")) == ["b1", "a1", "b2", "b3"])
            #expect(try await Self.history(fixture, alice, .user("bob")) == ["b1", "a1", "b2"])
            // Alice's unread: b2 only, not the withheld b3.
            #expect(try await Self.count(fixture, alice, .user("bob")).unread == 1)
            #expect(try await SearchTests.ids(fixture, alice, "withheld").isEmpty)
            #expect(try await SearchTests.ids(fixture, bob, "withheld") == ["b3"])
            // Alice cannot name it: no reaction, no reply to it.
            let react = try await store.apply(
                [.react(.init(user: alice, conversation: .user("bob"), seq: UInt64(withheld.seq), key: "👍", on: true))],
                nowMs: Self.now
            )
            #expect(refusal(react.outcomes[0]) == .unknownMessage)
            var reply = WriteRequest.Send(sender: alice, id: "a-reply", to: .user("bob"), body: SearchTests.body("?"))
            reply.replyTo = .seq(UInt64(withheld.seq))
            #expect(refusal(try await store.apply([.send(reply)], nowMs: Self.now).outcomes[0]) == .unknownMessage)
            // Bob's recall of a withheld message tells her nothing either.
            let withheld2 = try await Self.send(fixture, bob, "b3b", to: .user("alice"), "taken back")
            _ = try await store.apply([.recall(user: bob, conversation: .user("alice"), id: "b3b")], nowMs: Self.now)
            #expect(try await fixture.log(alice, after: UInt64(cursor)).isEmpty)
            #expect(withheld2.seq == withheld.seq + 1)
            // Alice reads what she sees (b2), then writes: her read mark moves to her own message, but bob sees
            // her marks as they were at the block (a1, her own), and gets no receipt.
            let bobCursor = try await fixture.log(bob).last?.cursor ?? 0
            _ = try await store.apply(
                [.markRead(user: alice, conversation: .user("bob"), upToSeq: UInt64(before.seq))],
                nowMs: Self.now
            )
            _ = try await Self.send(fixture, alice, "a2", to: .user("bob"), "still talking")
            let bobsEvents = try await fixture.log(bob, after: UInt64(bobCursor))
            #expect(bobsEvents.count == 1)  // a2 itself, no receipt
            let bobsView = try await Self.count(fixture, bob, .user("alice"))
            #expect(bobsView.peerReadSeq == UInt64(a1.seq))
            let marks = try await store.history(for: bob, in: .user("alice"), beforeSeq: 0, limit: 100).receipts
            #expect(marks.count == 1 && marks.allSatisfy { $0.readSeq == UInt64(a1.seq) }, "\(marks)")
            // Alice's own unread is 0 (b3 hidden, a2 hers).
            #expect(try await Self.count(fixture, alice, .user("bob")).unread == 0)

            // Unblocked: new messages reach her; the withheld one stays withheld.
            #expect(try await store.block("bob", by: alice, on: false, nowMs: Self.now))
            #expect(try await !store.block("bob", by: alice, on: false, nowMs: Self.now))
            _ = try await Self.send(fixture, bob, "b4", to: .user("alice"), "after")
            #expect(try await Self.logged(fixture, alice).contains("b4"))
            #expect(try await Self.history(fixture, alice, .user("bob")) == ["b1", "a1", "b2", "a2", "b4"])
            #expect(try await Self.count(fixture, alice, .user("bob")).unread == 1)
            // Unblocked, a withheld message stays out of her reach: bob's edit of it and his reaction to it send her
            // nothing, and his reply to it quotes nothing of it, live or in history.
            let afterUnblock = try await fixture.log(alice).last?.cursor ?? 0
            _ = try await store.apply(
                [
                    .edit(
                        .init(
                            user: bob,
                            conversation: .user("alice"),
                            seq: UInt64(withheld.seq),
                            body: SearchTests.body("edited")
                        )
                    ),
                    .react(
                        .init(user: bob, conversation: .user("alice"), seq: UInt64(withheld.seq), key: "❤️", on: true)
                    ),
                ],
                nowMs: Self.now
            )
            #expect(try await fixture.log(alice, after: afterUnblock).isEmpty)
            var answer = WriteRequest.Send(sender: bob, id: "b5", to: .user("alice"), body: SearchTests.body("re"))
            answer.replyTo = .seq(UInt64(withheld.seq))
            guard case .sent = try await store.apply([.send(answer)], nowMs: Self.now).outcomes[0] else {
                Issue.record("bob's reply refused")
                return
            }
            let quoted = try await fixture.log(alice, after: afterUnblock).compactMap { event -> StoredReply? in
                guard case .message(let message) = event.kind, message.id == "b5" else { return nil }
                return message.replyTo
            }
            #expect(quoted.count == 1 && quoted.allSatisfy { !$0.visible && $0.body.isEmpty }, "\(quoted)")
            let page = try await store.history(for: alice, in: .user("bob"), beforeSeq: 0, limit: 100).messages
            let inHistory = page.first { $0.id == "b5" }?.replyTo
            #expect(page.contains { $0.id == "b5" })
            #expect(inHistory.map { !$0.visible && $0.body.isEmpty } ?? true, "\(String(describing: inHistory))")
        }
    }

    @Test(
        "a block made before any conversation holds from its first message; the list, oneself, an unknown user and the limit",
        arguments: StoreKind.allCases
    )
    func beforeAnyConversation(kind: StoreKind) async throws {
        var limits = StoreLimits()
        limits.maxBlocksPerUser = 2
        try await StoreFixture.with(kind, limits: limits) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("alice", "carol", "dave", "erin")
            let (alice, carol) = (ids["alice"]!, ids["carol"]!)
            try await store.block("carol", by: alice, on: true, nowMs: Self.now)
            try await store.block("dave", by: alice, on: true, nowMs: Self.now + 1)
            _ = try await Self.send(fixture, carol, "c1", to: .user("alice"), "first words")
            #expect(try await Self.logged(fixture, alice).isEmpty)
            // Nothing tells alice that carol wrote: the conversation has no message she sees.
            let counts = try await store.unreadCounts(for: alice).first { $0.conversation == .user("carol") }
            #expect(counts.map { $0.lastSeq == 0 && $0.unread == 0 } ?? true, "\(String(describing: counts))")
            // Unblocking no one tells nothing of who exists.
            #expect(try await !store.block("nobody", by: alice, on: false, nowMs: Self.now))
            #expect(try await Self.history(fixture, alice, .user("carol")).isEmpty)
            #expect(try await Self.history(fixture, carol, .user("alice")) == ["c1"])
            #expect(try await store.blocks(of: alice).map(\.name) == ["carol", "dave"])
            #expect(try await store.blocks(of: carol).isEmpty)
            await expectCode(.quotaExceeded) { try await store.block("erin", by: alice, on: true, nowMs: Self.now) }
            await expectCode(.invalidRequest) { try await store.block("alice", by: alice, on: true, nowMs: Self.now) }
            await expectCode(.unknownUser) { try await store.block("nobody", by: alice, on: true, nowMs: Self.now) }
            await expectCode(.unknownUser) { try await store.block("", by: alice, on: true, nowMs: Self.now) }
            let relations = try await store.blockRelations(of: carol)
            #expect(relations.blockedBy == [alice] && relations.blocking.isEmpty)
        }
    }

    @Test(
        "the blocked user cannot put the blocker in a group; in a group they share both see everything; presence, typing and profile stay apart",
        arguments: StoreKind.allCases
    )
    func groupsPresenceProfiles(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("alice", "bob", "carol")
            let (alice, bob, carol) = (ids["alice"]!, ids["bob"]!, ids["carol"]!)
            // Contacts first: each has written to the other.
            for (one, other) in [(alice, "bob"), (bob, "alice"), (carol, "bob"), (bob, "carol")] {
                _ = try await Self.send(fixture, one, "hi-\(one.rawValue)-\(other)", to: .user(other), "hi")
            }
            var update = ProfileUpdate()
            update.displayName = "爱丽丝 Alice"
            try await store.setProfile(of: alice, update, nowMs: Self.now)
            try await store.createGroup(
                name: "club",
                owner: "carol",
                members: ["alice", "bob"],
                byOwner: false,
                nowMs: Self.now
            )
            try await store.block("bob", by: alice, on: true, nowMs: Self.now)

            // Bob cannot add alice to a group of his.
            try await store.createGroup(name: "bobs", owner: "bob", members: [], byOwner: false, nowMs: Self.now)
            await expectCode(.notContact) {
                try await store.changeMembers(of: "bobs", actor: bob, add: ["alice"], remove: [], nowMs: Self.now)
            }
            await expectCode(.notContact) {
                try await store.createGroup(
                    name: "bobs2",
                    owner: "bob",
                    members: ["alice"],
                    byOwner: true,
                    nowMs: Self.now
                )
            }
            // Alice may still add bob (her choice).
            try await store.createGroup(
                name: "alices",
                owner: "alice",
                members: ["bob"],
                byOwner: true,
                nowMs: Self.now
            )

            // In the group they share, both see each other's messages.
            _ = try await Self.send(fixture, bob, "g1", to: .group("club"), "群里 hello")
            _ = try await Self.send(fixture, alice, "g2", to: .group("club"), "hello back")
            #expect(try await Self.logged(fixture, alice).contains("g1"))
            #expect(try await Self.logged(fixture, bob).contains("g2"))
            #expect(try await Self.history(fixture, alice, .group("club")).suffix(2) == ["g1", "g2"])

            // Presence and typing: neither side reaches the other, in the group either; carol still reaches both.
            #expect(try await !store.peers(of: alice).contains(bob))
            #expect(try await !store.peers(of: bob).contains(alice))
            #expect(try await store.peers(of: carol).isSuperset(of: [alice, bob]))
            #expect(try await store.members(of: .user("bob"), for: alice) == [alice])
            #expect(try await store.members(of: .user("alice"), for: bob) == [bob])
            #expect(try await Set(store.members(of: .group("club"), for: bob)) == [bob, carol])
            #expect(try await Set(store.members(of: .group("club"), for: carol)) == [alice, bob, carol])

            // Bob sees alice's name alone, looked up by name too; carol sees her display name.
            #expect(try await store.profiles(of: ["alice"], for: bob).first?.displayName == nil)
            #expect(try await store.profile(of: "alice", seenBy: bob)?.displayName == nil)
            #expect(try await store.profile(of: "alice", seenBy: carol)?.displayName == "爱丽丝 Alice")
            #expect(try await store.profiles(of: ["alice"], for: carol).first?.displayName == "爱丽丝 Alice")
            // Alice's profile change reaches carol, not bob.
            let bobCursor = try await fixture.log(bob).last?.cursor ?? 0
            let carolCursor = try await fixture.log(carol).last?.cursor ?? 0
            update.displayName = "アリス"
            try await store.setProfile(of: alice, update, nowMs: Self.now)
            #expect(try await fixture.log(bob, after: bobCursor).isEmpty)
            #expect(try await !fixture.log(carol, after: carolCursor).isEmpty)
        }
    }
}
