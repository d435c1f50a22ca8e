import CourierStore
import Testing

extension MessagingTests {
    @Test(
        "in a group, an acknowledgement's delivered receipt goes to the senders of the messages it covers, not to every member; also for log entries written before they named their sender",
        arguments: StoreKind.allCases,
        [false, true]
    )
    func groupDeliveredReceipts(kind: StoreKind, unnamedSenders: Bool) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol", "dave")
            let (alice, bob, carol, dave) = (ids["alice"]!, ids["bob"]!, ids["carol"]!, ids["dave"]!)
            try await fixture.store.createGroup(
                name: "tea",
                owner: "alice",
                members: ["bob", "carol", "dave"],
                nowMs: StoreFixture.start
            )
            let phone = try await fixture.store.login(
                user: "bob",
                password: "pw-bob",
                deviceName: "phone",
                nowMs: StoreFixture.start
            ).device.id
            var before: [UserID: UInt64] = [:]
            for user in [alice, carol, dave] { before[user] = try await fixture.store.logCursor(of: user) }
            // Entries of messages written before they carried their sender (`actor_id`), and before a group's
            // message was stored once: one entry in each member's log, as an older version wrote them. An
            // acknowledgement reads the sender from the message.
            func acknowledge() async throws {
                if unnamedSenders {
                    try await fixture.execute(
                        """
                        INSERT INTO events (user_id, cursor, kind, conversation_id, seq, actor_id)
                        SELECT s.user_id, g.cursor, 1, g.conversation_id, g.seq, NULL FROM group_spans s
                        JOIN group_events g ON g.conversation_id = s.conversation_id AND g.seq > s.from_seq
                            AND g.seq <= s.to_seq
                        """
                    )
                    try await fixture.execute("DELETE FROM group_events")
                    try await fixture.execute("UPDATE events SET actor_id = NULL WHERE kind = 1")
                } else {
                    // A group's message is stored once and names its sender, so that this needs no read of the
                    // message.
                    let named = "SELECT count(*) FROM group_events WHERE sender_id = "
                    #expect(try await fixture.count("SELECT count(*) FROM events WHERE kind = 1") == 0)
                    #expect(try await fixture.count(named + "\(alice.rawValue)") >= 2)
                }
                _ = try await fixture.store.apply(
                    [.ack(user: bob, device: phone, cursor: try await fixture.store.logCursor(of: bob))],
                    nowMs: StoreFixture.start
                )
            }
            func receipts(_ user: UserID) async throws -> [(String, UInt64)] {
                try await fixture.log(user, after: before[user]!).compactMap { event in
                    guard case .receipt(.group("tea"), let who, .delivered, let upTo) = event.kind else { return nil }
                    return (who, upTo)
                }
            }
            // alice writes twice, then bob's phone takes both: alice hears it; carol and dave, who wrote nothing
            // bob received, hear nothing.
            _ = try await fixture.sent(alice, "a1", to: .group("tea"), "第一条 🍵")
            _ = try await fixture.sent(alice, "a2", to: .group("tea"), "مرحبا")
            try await acknowledge()
            #expect(try await receipts(alice).map(\.0) == ["bob"])
            #expect(try await receipts(alice).map(\.1) == [2])
            #expect(try await receipts(carol).isEmpty)
            #expect(try await receipts(dave).isEmpty)
            // carol writes, and bob's own message follows it: the next acknowledgement covers carol's message
            // only (bob's own is no delivery), so carol hears it, up to hers; alice does not hear again.
            _ = try await fixture.sent(carol, "c1", to: .group("tea"), "好")
            _ = try await fixture.sent(bob, "b1", to: .group("tea"), "收到")
            try await acknowledge()
            #expect(try await receipts(carol).map(\.0) == ["bob"])
            #expect(try await receipts(carol).map(\.1) == [3])
            #expect(try await receipts(alice).count == 1)
            #expect(try await receipts(dave).isEmpty)
            // One acknowledgement covering two senders' messages: both hear it, up to the newest; and a sender
            // who left the group before it hears nothing (nor does anyone else).
            _ = try await fixture.sent(alice, "a3", to: .group("tea"), "三")
            _ = try await fixture.sent(dave, "d1", to: .group("tea"), "👋 bye")
            _ = try await fixture.sent(carol, "c2", to: .group("tea"), "😀")
            try await fixture.store.changeMembers(
                of: "tea",
                actor: nil,
                add: [],
                remove: ["dave"],
                nowMs: StoreFixture.start
            )
            try await acknowledge()
            #expect(try await receipts(alice).map(\.1) == [2, 7])
            #expect(try await receipts(carol).map(\.1) == [3, 7])
            #expect(try await receipts(dave).isEmpty)
        }
    }
}
