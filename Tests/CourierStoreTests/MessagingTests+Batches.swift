import CourierStore
import CourierTesting
import Foundation
import Testing

// Writes in one batch: resends of an id, refusals among others, acknowledgements, and ids that differ by a byte.
extension MessagingTests {
    @Test("a resend of a committed id returns the original receipt and stores nothing", arguments: StoreKind.allCases)
    func idempotentResend(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let original = try await fixture.sent(ids["alice"]!, "m1", to: .user("bob"), "once")
            let resend = try await fixture.sent(
                ids["alice"]!,
                "m1",
                to: .user("bob"),
                "once",
                nowMs: StoreFixture.start + 9_000
            )
            #expect(resend.duplicate && !original.duplicate)
            #expect(
                resend.seq == original.seq && resend.timeMs == original.timeMs
                    && resend.conversation == original.conversation
            )
            // Twice in one batch: one copy.
            let batch = try await fixture.store.apply(
                [
                    .send(.init(sender: ids["alice"]!, id: "m2", to: .user("bob"), body: Array("twice".utf8))),
                    .send(.init(sender: ids["alice"]!, id: "m2", to: .user("bob"), body: Array("twice".utf8))),
                ],
                nowMs: StoreFixture.start
            )
            guard case .sent(let a) = batch.outcomes[0], case .sent(let b) = batch.outcomes[1] else {
                Issue.record("\(batch.outcomes)")
                return
            }
            #expect(a.seq == 2 && b.seq == 2 && !a.duplicate && b.duplicate)
            #expect(try await fixture.texts(ids["bob"]!) == ["once", "twice"])
            // Another sender may use the same id.
            #expect(try await fixture.sent(ids["bob"]!, "m1", to: .user("alice"), "mine").seq == 3)
            // Ids are limited; an empty id gets one assigned.
            #expect(
                refusal(
                    try await fixture.send(ids["alice"]!, String(repeating: "x", count: 129), to: .user("bob"), "long")
                ) == .invalidRequest
            )
            let assigned = try await fixture.sent(ids["alice"]!, "", to: .user("bob"), "no id")
            #expect(assigned.id.hasPrefix("s-") && assigned.id.count == 34)
        }
    }

    @Test("a refused request in a batch changes nothing and does not hold up the others", arguments: StoreKind.allCases)
    func refusalsInBatch(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol")
            try await fixture.store.createGroup(
                name: "team",
                owner: "alice",
                members: ["bob"],
                nowMs: StoreFixture.start
            )
            let carol = ids["carol"]!
            let body = Array("x".utf8)
            let batch = try await fixture.store.apply(
                [
                    .send(.init(sender: ids["alice"]!, id: "a", to: .group("team"), body: body)),
                    .send(.init(sender: carol, id: "c1", to: .group("team"), body: body)),
                    .send(.init(sender: carol, id: "c2", to: .group("nope"), body: body)),
                    .send(.init(sender: carol, id: "c3", to: .user("nobody"), body: body)),
                    .send(.init(sender: ids["bob"]!, id: "b", to: .group("team"), body: body)),
                ],
                nowMs: StoreFixture.start
            )
            #expect(batch.outcomes.map(refusal) == [nil, .notMember, .unknownGroup, .unknownUser, nil])
            guard case .sent(let first) = batch.outcomes[0], case .sent(let last) = batch.outcomes[4] else { return }
            #expect(first.seq == 1 && last.seq == 2)
            #expect(try await fixture.log(carol).isEmpty)
            #expect(batch.appended.keys.sorted() == [ids["alice"]!, ids["bob"]!].sorted())
        }
    }

    @Test(
        "several acknowledgements in one batch take turns, as if applied one by one, and cover only what was stored before it",
        arguments: StoreKind.allCases
    )
    func acksInOneBatch(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol")
            let (alice, bob, carol) = (ids["alice"]!, ids["bob"]!, ids["carol"]!)
            func device(_ user: String, _ name: String) async throws -> DeviceID {
                try await fixture.store.login(
                    user: user,
                    password: "pw-" + user,
                    deviceName: name,
                    nowMs: StoreFixture.start
                )
                .device.id
            }
            let (phone, tablet) = (try await device("bob", "phone"), try await device("bob", "tablet"))
            for index in 1...3 { _ = try await fixture.sent(alice, "a\(index)", to: .user("bob"), "\(index)") }
            _ = try await fixture.sent(carol, "c1", to: .user("bob"), "c")
            let stored = try await fixture.store.logCursor(of: bob)
            let bobCursors = try await fixture.log(bob).map(\.cursor)
            #expect(bobCursors.count == 4 && bobCursors.last == stored)
            try #require(bobCursors.count == 4)
            let aliceBefore = try await fixture.store.logCursor(of: alice)
            let batch = try await fixture.store.apply(
                [
                    .ack(user: bob, device: phone, cursor: bobCursors[1]),
                    .send(.init(sender: alice, id: "a4", to: .user("bob"), body: Array("4".utf8))),
                    .ack(user: bob, device: phone, cursor: .max),
                    .ack(user: alice, device: tablet, cursor: bobCursors[2]),
                    .ack(user: bob, device: tablet, cursor: bobCursors[2]),
                    .ack(user: bob, device: phone, cursor: bobCursors[0]),
                ],
                nowMs: StoreFixture.start
            )
            #expect(batch.outcomes.map(refusal) == [nil, nil, nil, .invalidRequest, nil, nil])
            // The phone moved to 2, then to the end of what was stored before the batch (not past the batch's own
            // message), and not back; the tablet to 3.
            #expect(try await fixture.store.ackedCursor(of: phone) == stored)
            #expect(try await fixture.store.ackedCursor(of: tablet) == bobCursors[2])
            // alice hears "delivered up to 2", her message, then "up to 3"; the tablet's ack adds nothing; carol
            // hears "up to 1" (her only message, the fourth event of bob's log).
            let heard = try await fixture.log(alice, after: aliceBefore).map(\.kind)
            #expect(heard.count == 3, "\(heard)")
            guard heard.count == 3,
                case .receipt(.user("bob"), "bob", .delivered, 2) = heard[0],
                case .message = heard[1],
                case .receipt(.user("bob"), "bob", .delivered, 3) = heard[2]
            else {
                Issue.record("alice heard \(heard)")
                return
            }
            let carolHeard = try await fixture.log(carol).map(\.kind)
            guard case .receipt(.user("bob"), "bob", .delivered, 1)? = carolHeard.last else {
                Issue.record("carol heard \(carolHeard)")
                return
            }
        }
    }

    @Test(
        "in one batch: an id with a NUL is refused alone, and two spellings of one accented letter are two ids",
        arguments: StoreKind.allCases
    )
    func oddIDsInOneBatch(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            func send(_ id: String, _ text: String) -> WriteRequest {
                .send(.init(sender: ids["alice"]!, id: id, to: .user("bob"), body: Array(text.utf8)))
            }
            let batch = try await fixture.store.apply(
                [
                    send("before", "1"), send("m\u{0}x", "nul"), send("\u{E9}", "composed"),
                    send("e\u{301}", "decomposed"),
                ],
                nowMs: StoreFixture.start
            )
            #expect(refusal(batch.outcomes[1]) == .invalidRequest, "\(batch.outcomes)")
            let sent = batch.outcomes.compactMap { outcome -> SendReceipt? in
                if case .sent(let receipt) = outcome { return receipt }
                return nil
            }
            #expect(sent.map(\.seq) == [1, 2, 3] && !sent.contains(where: \.duplicate), "\(batch.outcomes)")
            #expect(try await fixture.texts(ids["bob"]!) == ["1", "composed", "decomposed"])
        }
    }
}
