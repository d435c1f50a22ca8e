import CourierStore
import CourierTesting
import Foundation
import Testing

/// Who sees whom (presence, typing) and who may add whom to a group: contacts are users who have both written in
/// their direct conversation; peers are contacts, two users of a direct conversation each of whom has written or read
/// there, and group members (who joined with consent).
@Suite("Contacts, peers and consent to groups")
struct ContactsTests {
    @Test("an unanswered message makes no peer and no contact; a reply makes both", arguments: StoreKind.allCases)
    func unanswered(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol")
            let (alice, bob, carol) = (ids["alice"]!, ids["bob"]!, ids["carol"]!)
            _ = try await fixture.sent(alice, "m1", to: .user("bob"), "hello?")
            #expect(try await fixture.store.peers(of: alice).isEmpty)
            #expect(try await fixture.store.peers(of: bob).isEmpty)
            #expect(try await fixture.store.members(of: .user("bob"), for: alice) == [alice, bob])
            #expect(try await fixture.store.members(of: .user("alice"), for: bob) == [bob, alice])
            // A typing notice to someone never written to reaches them too (round three: typing tells only what
            // the typist chose to show), but presence stays between peers.
            #expect(try await fixture.store.members(of: .user("carol"), for: alice) == [alice, carol])

            _ = try await fixture.sent(bob, "m2", to: .user("alice"), "hi")
            #expect(try await fixture.store.peers(of: alice) == [bob])
            #expect(try await fixture.store.contacts(of: bob) == [alice])
            #expect(Set(try await fixture.store.members(of: .user("bob"), for: alice)) == [alice, bob])
            #expect(try await fixture.store.peers(of: carol).isEmpty)
        }
    }

    @Test(
        "a stranger's message the recipient opens (reads) makes the two peers, not contacts",
        arguments: StoreKind.allCases
    )
    func opened(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol")
            let (alice, bob, carol) = (ids["alice"]!, ids["bob"]!, ids["carol"]!)
            let seq = try await fixture.sent(alice, "m1", to: .user("bob"), "hello?").seq
            // alice reading her own conversation makes nothing: bob has neither answered nor opened it.
            let alone = try await fixture.store.apply(
                [.markRead(user: alice, conversation: .user("bob"), upToSeq: seq)],
                nowMs: 2
            )
            #expect(try await fixture.store.peers(of: alice).isEmpty)
            #expect(alone.introductions.isEmpty)
            // bob opens it: each sees the other's presence and typing from now, and the batch says so (the server
            // then tells each, if online, that the other is).
            let opened = try await fixture.store.apply(
                [.markRead(user: bob, conversation: .user("alice"), upToSeq: seq)],
                nowMs: 3
            )
            #expect(opened.introductions == [Introduction(bob, named: "bob", alice, named: "alice")])
            #expect(try await fixture.store.peers(of: alice) == [bob])
            #expect(try await fixture.store.peers(of: bob) == [alice])
            #expect(Set(try await fixture.store.members(of: .user("alice"), for: bob)) == [alice, bob])
            // Not contacts: only those who have both written may put each other in groups.
            #expect(try await fixture.store.contacts(of: alice).isEmpty)
            #expect(try await fixture.store.peers(of: carol).isEmpty)
            // Peers already: bob's answer introduces nobody. carol answering a message from a stranger does, once;
            // a note to oneself never.
            #expect(
                try await fixture.store.apply(
                    [.send(.init(sender: bob, id: "r", to: .user("alice"), body: [1]))],
                    nowMs: 4
                ).introductions.isEmpty
            )
            _ = try await fixture.sent(alice, "m2", to: .user("carol"), "hi carol")
            let answers = try await fixture.store.apply(
                [
                    .send(.init(sender: carol, id: "c1", to: .user("alice"), body: [1])),
                    .send(.init(sender: carol, id: "c2", to: .user("alice"), body: [2])),
                    .send(.init(sender: carol, id: "n1", to: .user("carol"), body: [3])),
                ],
                nowMs: 5
            )
            #expect(answers.introductions == [Introduction(carol, named: "carol", alice, named: "alice")])
        }
    }

    @Test(
        "only contacts may be added to a group by its owner; the administrator may add anyone",
        arguments: StoreKind.allCases
    )
    func consent(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol", "dave")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            func code(_ body: () async throws -> Void) async -> CourierStoreError.Code? {
                do {
                    try await body()
                    return nil
                } catch let error as CourierStoreError {
                    return error.code
                } catch {
                    return nil
                }
            }
            // carol never wrote to alice: alice cannot put her in a group, at creation or later.
            #expect(
                await code {
                    try await fixture.store.createGroup(
                        name: "team",
                        owner: "alice",
                        members: ["carol"],
                        byOwner: true,
                        nowMs: 1
                    )
                } == .notContact
            )
            _ = try await fixture.sent(alice, "a1", to: .user("bob"), "join us?")
            _ = try await fixture.sent(bob, "b1", to: .user("alice"), "sure")
            try await fixture.store.createGroup(name: "team", owner: "alice", members: ["bob"], byOwner: true, nowMs: 2)
            #expect(
                await code {
                    try await fixture.store.changeMembers(
                        of: "team",
                        actor: alice,
                        add: ["carol"],
                        remove: [],
                        nowMs: 3
                    )
                } == .notContact
            )
            #expect(try await fixture.store.group(named: "team").members == ["alice", "bob"])
            // The administrator (no actor) adds anyone; group members then see each other.
            try await fixture.store.changeMembers(of: "team", actor: nil, add: ["dave"], remove: [], nowMs: 4)
            #expect(try await fixture.store.peers(of: ids["dave"]!) == [alice, bob])
            // A group message's fan-out cost: one delivery per member.
            let receipt = try await fixture.sent(bob, "b2", to: .group("team"), "hello team")
            #expect(receipt.recipients == 3)
        }
    }
}
