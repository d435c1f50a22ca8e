import CourierStore
import Testing

@Suite("Several users' logs read at once, as a node reads them for its connections when another node wrote")
struct LogReadsTests {
    @Test(
        "each log in its own span, the same events a read of each gives (addresses, replies, edits, recalls); logs with nothing new left out",
        arguments: StoreKind.allCases
    )
    func severalLogs(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol", "dave")
            let (alice, bob, carol, dave) = (ids["alice"]!, ids["bob"]!, ids["carol"]!, ids["dave"]!)
            try await fixture.store.createGroup(
                name: "crew",
                owner: "alice",
                members: ["bob", "carol"],
                nowMs: StoreFixture.start
            )
            _ = try await fixture.sent(alice, "a1", to: .user("bob"), "你好 bob")
            _ = try await fixture.sent(bob, "b1", to: .user("alice"), "hi 👋")
            _ = try await fixture.sent(carol, "c1", to: .group("crew"), "みなさん 🎉")
            // dave joins after c1: a reply to it is shown to him without its quote.
            try await fixture.store.changeMembers(
                of: "crew",
                actor: nil,
                add: ["dave"],
                remove: [],
                nowMs: StoreFixture.start
            )
            _ = try await fixture.store.apply(
                [
                    .send(
                        .init(
                            sender: bob,
                            id: "b2",
                            to: .group("crew"),
                            body: Array("שלום".utf8),
                            replyTo: .seq(1)
                        )
                    ),
                    .edit(.init(user: alice, conversation: .user("bob"), seq: 1, body: Array("改了".utf8))),
                    .recall(user: bob, conversation: .user("alice"), id: "b1"),
                ],
                nowMs: StoreFixture.start + 1
            )
            var ends: [UserID: UInt64] = [:]
            for user in [alice, bob, carol, dave] { ends[user] = try await fixture.store.logCursor(of: user) }
            // alice from the start to her end; bob from 1 up to two before his end; carol with nothing new;
            // dave from the start.
            let spans = [
                alice: LogSpan(after: 0, upTo: ends[alice]!),
                bob: LogSpan(after: 1, upTo: ends[bob]! - 2),
                carol: LogSpan(after: ends[carol]!, upTo: ends[carol]!),
                dave: LogSpan(after: 0, upTo: ends[dave]!),
            ]
            let read = try await fixture.store.events(for: spans)
            #expect(Set(read.keys) == [alice, bob, dave])
            for (user, span) in spans where user != carol {
                let one = try await fixture.store.events(for: user, after: span.after, limit: 100)
                    .filter { $0.cursor <= span.upTo }
                #expect(read[user] == one, "\(user)")
                #expect(read[user]?.map(\.cursor) == Array((span.after + 1)...span.upTo), "\(user)")
            }
            #expect(try await fixture.store.events(for: [:]).isEmpty)
        }
    }
}
