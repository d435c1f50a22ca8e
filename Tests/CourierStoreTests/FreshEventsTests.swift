import CourierStore
import CourierTesting
import Foundation
import Synchronization
import Testing

@Suite("Fresh events: what a group commit returns as it wrote it is what a read of the log returns")
struct FreshEventsTests {
    @Test(
        "messages, receipts and recalls, direct and in a group: fresh events equal the log read back",
        arguments: StoreKind.allCases
    )
    func equalToTheLog(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol")
            let (alice, bob, carol) = (ids["alice"]!, ids["bob"]!, ids["carol"]!)
            try await fixture.store.createGroup(
                name: "team",
                owner: "alice",
                members: ["bob", "carol"],
                nowMs: StoreFixture.start
            )
            let bobDevice = try await fixture.store.login(user: "bob", password: "pw-bob", deviceName: "b", nowMs: 1)
            let now = StoreFixture.start + 10
            // One batch: a direct message each way, a group message, a read mark, and a recall.
            let first = try await fixture.store.apply(
                [
                    .send(.init(sender: alice, id: "a1", to: .user("bob"), body: Array("hi bob".utf8))),
                    .send(.init(sender: bob, id: "b1", to: .user("alice"), body: Array("hi alice".utf8))),
                    .send(.init(sender: carol, id: "c1", to: .group("team"), body: Array("hello team".utf8))),
                    .markRead(user: alice, conversation: .user("bob"), upToSeq: 2),
                    .send(.init(sender: alice, id: "a2", to: .group("team"), body: Array("oops".utf8))),
                    .recall(user: alice, conversation: .group("team"), id: "a2"),
                ],
                nowMs: now
            )
            // A second: bob's device acknowledges everything (delivered receipts for the others).
            let second = try await fixture.store.apply(
                [.ack(user: bob, device: bobDevice.device.id, cursor: first.appended[bob]!)],
                nowMs: now + 1
            )
            // Every kind is there: messages, a read receipt, a recall; then delivered receipts.
            let kinds = first.fresh[bob]!.events.map { event -> String in
                switch event.kind {
                case .message: "message"
                case .receipt(_, _, let kind, _): "\(kind)"
                case .recall: "recall"
                case .membership: "membership"
                case .edit: "edit"
                case .reaction: "reaction"
                case .profile: "profile"
                case .role: "role"
                case .title: "title"
                case .notify: "notify"
                case .pin: "pin"
                case .hidden: "hidden"
                }
            }
            #expect(kinds == ["message", "message", "message", "read", "message", "recall"], "\(kinds)")
            #expect(second.fresh[alice]?.events.count == 2 && second.fresh[carol]?.events.count == 1)
            for (batch, name) in [(first, "first"), (second, "second")] {
                #expect(!batch.fresh.isEmpty, "\(name)")
                #expect(Set(batch.fresh.keys) == Set(batch.appended.keys), "\(name): every user's events are fresh")
                for (user, run) in batch.fresh {
                    // The cursor the run says it follows: what a read after it returns is the run, nothing between.
                    let fresh = run.events
                    let read = try await fixture.log(user, after: run.after).filter {
                        $0.cursor <= batch.appended[user]!
                    }
                    // a2 was recalled in the same batch: its fresh event says so, as the read does.
                    let expected = read
                    #expect(fresh == expected, "\(name), user \(user)")
                    #expect(fresh.last?.cursor == batch.appended[user])
                }
            }
        }
    }

    @Test(
        "edits, replies and reactions in one batch, with a recall among them: fresh events equal the log read back",
        arguments: StoreKind.allCases
    )
    func editsEqualToTheLog(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol", "dave")
            let (alice, bob, carol, dave) = (ids["alice"]!, ids["bob"]!, ids["carol"]!, ids["dave"]!)
            try await fixture.store.createGroup(
                name: "team",
                owner: "alice",
                members: ["bob", "carol"],
                nowMs: StoreFixture.start
            )
            _ = try await fixture.sent(alice, "old", to: .group("team"), "before", nowMs: StoreFixture.start)
            // dave joins after the first message: a reply to it quotes it for the others, not for him (each
            // member's event of one message is made once per way of seeing it, and shared).
            try await fixture.store.changeMembers(
                of: "team",
                actor: nil,
                add: ["dave"],
                remove: [],
                nowMs: StoreFixture.start
            )
            let team = Conversation.group("team")
            func body(_ text: String) -> [UInt8] { Array(text.utf8) }
            let batch = try await fixture.store.apply(
                [
                    .send(.init(sender: alice, id: "q", to: team, body: body("问题"))),
                    .send(.init(sender: bob, id: "r1", to: team, body: body("回答"), replyTo: .id("q", from: nil))),
                    .edit(.init(user: alice, conversation: team, seq: 2, body: body("问题 v2"))),
                    .send(.init(sender: carol, id: "r2", to: team, body: body("+1"), replyTo: .seq(2))),
                    .react(.init(user: carol, conversation: team, seq: 2, key: "👍", on: true)),
                    .edit(.init(user: alice, conversation: team, seq: 2, body: body("问题 v3"))),
                    .edit(.init(user: alice, conversation: team, seq: 1, body: body("before, edited"))),
                    .send(.init(sender: bob, id: "r3", to: team, body: body("old?"), replyTo: .seq(1))),
                    .recall(user: alice, conversation: team, id: "old"),
                    .react(.init(user: bob, conversation: team, seq: 3, key: "ok", on: true)),
                    .edit(.init(user: bob, conversation: team, seq: 3, body: body("回答 v2"))),
                ],
                nowMs: StoreFixture.start + 10
            )
            #expect(batch.outcomes.allSatisfy { refusal($0) == nil }, "\(batch.outcomes)")
            for user in [alice, bob, carol, dave] {
                let run = try #require(batch.fresh[user])
                let read = try await fixture.log(user, after: run.after)
                #expect(run.events == read, "user \(user)")
            }
            func quote(of id: String, for user: UserID) -> StoredReply? {
                batch.fresh[user]?.events.lazy.compactMap { event -> StoredReply? in
                    guard case .message(let message) = event.kind, message.id == id else { return nil }
                    return message.replyTo
                }.first
            }
            #expect(quote(of: "r3", for: carol)?.visible == true)
            #expect(quote(of: "r3", for: dave)?.visible == false)
            #expect(quote(of: "r1", for: dave)?.visible == true)
        }
    }

    @Test(
        "a user with more new events than the limit has none fresh (read back instead); 0 returns none",
        arguments: StoreKind.allCases
    )
    func bounded(kind: StoreKind) async throws {
        for limit in [0, 3] {
            var limits = StoreLimits()
            limits.maxFreshEventsPerUser = limit
            try await StoreFixture.with(kind, limits: limits) { fixture in
                let ids = try await fixture.users("alice", "bob")
                let (alice, bob) = (ids["alice"]!, ids["bob"]!)
                let sends: [WriteRequest] = (1...4).map {
                    .send(.init(sender: alice, id: "m\($0)", to: .user("bob"), body: Array("\($0)".utf8)))
                }
                let four = try await fixture.store.apply(sends, nowMs: StoreFixture.start)
                #expect(four.fresh.isEmpty, "limit \(limit): 4 events each")
                #expect(four.appended[alice] != nil && four.appended[bob] != nil)
                let two = try await fixture.store.apply(
                    Array(sends.prefix(2)).map { request in
                        guard case .send(var send) = request else { return request }
                        send.id += "-again"
                        return .send(send)
                    },
                    nowMs: StoreFixture.start + 1
                )
                #expect(two.fresh[bob]?.events.count == (limit == 0 ? nil : 2), "limit \(limit)")
            }
        }
    }

    @Test(
        "fresh events are made only for the room the caller says each user has: none for 0, up to it otherwise",
        arguments: StoreKind.allCases
    )
    func onlyWhereThereIsRoom(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol", "dave")
            let (alice, bob, carol, dave) = (ids["alice"]!, ids["bob"]!, ids["carol"]!, ids["dave"]!)
            try await fixture.store.createGroup(
                name: "team",
                owner: "alice",
                members: ["bob", "carol", "dave"],
                nowMs: StoreFixture.start
            )
            let sends: [WriteRequest] = (0..<3).map {
                .send(.init(sender: alice, id: "t\($0)", to: .group("team"), body: Array("m\($0)".utf8)))
            }
            // bob is offline (no room), carol has room for 2 of the 3, dave for all.
            let rooms: [UserID: Int] = [bob: 0, carol: 2, dave: 64, alice: 64]
            let asked = Mutex<[UserID]>([])
            let batch = try await fixture.store.apply(sends, nowMs: StoreFixture.start + 1) { user in
                asked.withLock { $0.append(user) }
                return rooms[user] ?? 0
            }
            #expect(batch.fresh[bob] == nil)
            // More new events than room: none at all (a connection takes them only contiguous), read back instead.
            #expect(batch.fresh[carol] == nil)
            #expect(batch.fresh[dave]?.events.count == 3)
            #expect(batch.appended[bob] != nil && batch.appended[carol] != nil)
            // Asked once per user and batch.
            let askedUsers = asked.withLock { $0 }
            #expect(askedUsers.count == Set(askedUsers).count)
            let readBack = try await fixture.store.events(for: dave, after: 0, limit: 100)
            #expect(batch.fresh[dave]?.events == Array(readBack.suffix(3)))
        }
    }
}
