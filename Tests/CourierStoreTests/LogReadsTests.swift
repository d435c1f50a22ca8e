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
            var logs: [UserID: [UInt64]] = [:]
            for user in [alice, bob, carol, dave] { logs[user] = try await fixture.log(user).map(\.cursor) }
            let (bobs, carols) = (logs[bob]!, logs[carol]!)
            try #require(bobs.count >= 4 && !carols.isEmpty)
            // alice from the start to her end; bob from his first event up to two before his end; carol with
            // nothing new; dave from the start. The logs share one stream of positions: a span's width is no count.
            let spans = [
                alice: LogSpan(after: 0, upTo: logs[alice]!.last!),
                bob: LogSpan(after: bobs[0], upTo: bobs[bobs.count - 3]),
                carol: LogSpan(after: carols.last!, upTo: carols.last!),
                dave: LogSpan(after: 0, upTo: logs[dave]!.last!),
            ]
            let read = try await fixture.store.events(for: spans, limit: 100)
            #expect(Set(read.keys) == [alice, bob, dave])
            for (user, span) in spans where user != carol {
                let one = try await fixture.store.events(for: user, after: span.after, limit: 100)
                    .filter { $0.cursor <= span.upTo }
                #expect(read[user] == one, "\(user)")
                #expect(
                    read[user]?.map(\.cursor) == logs[user]!.filter { $0 > span.after && $0 <= span.upTo },
                    "\(user)"
                )
            }
            // The limit is per user: each log's oldest events in its span, however wide the span.
            let first = try await fixture.store.events(for: spans, limit: 1)
            #expect(Set(first.keys) == [alice, bob, dave])
            for (user, events) in first { #expect(events.map(\.cursor) == read[user].map { [$0[0].cursor] }) }
            #expect(try await fixture.store.events(for: [:], limit: 100).isEmpty)
        }
    }
}
