import CourierStore
import CourierTesting
import Foundation
import Testing

@Suite("Edits, replies and reactions, on both databases")
struct EditsTests {
    static let now = StoreFixture.start

    /// An edit of a message by place, applied alone.
    static func edit(
        _ fixture: StoreFixture,
        _ user: UserID,
        _ conversation: Conversation,
        seq: UInt64,
        _ text: String,
        at time: Int64 = now
    ) async throws -> CourierStoreError.Code? {
        refusal(
            try await fixture.store.apply(
                [.edit(.init(user: user, conversation: conversation, seq: seq, body: Array(text.utf8)))],
                nowMs: time
            ).outcomes[0]
        )
    }

    static func react(
        _ fixture: StoreFixture,
        _ user: UserID,
        _ conversation: Conversation,
        seq: UInt64,
        _ key: String,
        on: Bool = true,
        at time: Int64 = now
    ) async throws -> WriteOutcome {
        try await fixture.store.apply(
            [.react(.init(user: user, conversation: conversation, seq: seq, key: key, on: on))],
            nowMs: time
        ).outcomes[0]
    }

    static func text(_ message: StoredMessage) -> String { String(decoding: message.body, as: UTF8.self) }

    @Test(
        "only the sender edits, within the window and the edit limit, never a recalled message; each edit keeps the text it replaced",
        arguments: StoreKind.allCases
    )
    func editRules(kind: StoreKind) async throws {
        var limits = StoreLimits()
        limits.editWindow = .seconds(3600)
        limits.maxEditsPerMessage = 2
        try await StoreFixture.with(kind, limits: limits) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol")
            let (alice, bob, carol) = (ids["alice"]!, ids["bob"]!, ids["carol"]!)
            let now = Self.now
            _ = try await fixture.sent(alice, "m1", to: .user("bob"), "我家在上海", nowMs: now)
            _ = try await fixture.sent(bob, "m2", to: .user("alice"), "好的", nowMs: now)
            _ = try await fixture.sent(alice, "m3", to: .user("bob"), "撤回", nowMs: now)

            #expect(try await Self.edit(fixture, bob, .user("alice"), seq: 1, "not mine") == .notSender)
            #expect(try await Self.edit(fixture, carol, .user("alice"), seq: 1, "stranger") == .notMember)
            #expect(try await Self.edit(fixture, alice, .user("bob"), seq: 9, "none") == .unknownMessage)
            #expect(
                try await Self.edit(fixture, alice, .user("bob"), seq: 1, "late", at: now + 3_600_001)
                    == .editWindowPassed
            )
            _ = try await fixture.store.apply([.recall(user: alice, conversation: .user("bob"), id: "m3")], nowMs: now)
            #expect(try await Self.edit(fixture, alice, .user("bob"), seq: 3, "after recall") == .messageRecalled)

            #expect(try await Self.edit(fixture, alice, .user("bob"), seq: 1, "我家在北京", at: now + 1_000) == nil)
            #expect(try await Self.edit(fixture, alice, .user("bob"), seq: 1, "我家在南京", at: now + 2_000) == nil)
            #expect(
                try await Self.edit(fixture, alice, .user("bob"), seq: 1, "third", at: now + 3_000) == .tooManyEdits
            )

            // Every member's log has each edit, in order, with the text as it now is; never a new message.
            for user in [alice, bob] {
                let edits = try await fixture.log(user).compactMap { event -> StoredMessage? in
                    guard case .edit(let message) = event.kind else { return nil }
                    return message
                }
                #expect(edits.map(\.seq) == [1, 1])
                #expect(edits.allSatisfy { Self.text($0) == "我家在南京" && $0.from == "alice" && $0.id == "m1" })
            }
            let page = try await fixture.store.history(for: bob, in: .user("alice"), beforeSeq: 0, limit: 10)
            #expect(page.messages.map(\.seq) == [3, 2, 1])
            #expect(Self.text(page.messages[2]) == "我家在南京")
            #expect(page.messages[2].editedMs == now + 2_000)
            #expect(page.messages[1].editedMs == nil)
            let versions = try await fixture.store.versions(
                of: MessageName(conversation: .user("alice"), seq: 1),
                for: bob
            )
            #expect(versions.map(\.version) == [0, 1])
            #expect(versions.map { String(decoding: $0.body, as: UTF8.self) } == ["我家在上海", "我家在北京"])
            #expect(versions.map(\.replacedMs) == [now + 1_000, now + 2_000])
            // A stranger sees no versions.
            await #expect {
                try await fixture.store.versions(of: MessageName(conversation: .user("alice"), seq: 1), for: carol)
            } throws: {
                ($0 as? CourierStoreError)?.code == .unknownUser || ($0 as? CourierStoreError)?.code == .unknownMessage
            }
        }
    }

    @Test(
        "max-versions-per-read cuts a versions answer to the oldest ones, on both databases",
        arguments: StoreKind.allCases
    )
    func versionsPerRead(kind: StoreKind) async throws {
        var limits = StoreLimits()
        limits.maxVersionsPerRead = 2
        try await StoreFixture.with(kind, limits: limits) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            _ = try await fixture.sent(alice, "m1", to: .user("bob"), "一", nowMs: Self.now)
            for (index, text) in ["二", "三", "四"].enumerated() {
                let at = Self.now + Int64(index + 1) * 1_000
                #expect(try await Self.edit(fixture, alice, .user("bob"), seq: 1, text, at: at) == nil)
            }
            let versions = try await fixture.store.versions(
                of: MessageName(conversation: .user("alice"), seq: 1),
                for: bob
            )
            #expect(versions.map(\.version) == [0, 1])
            #expect(versions.map { String(decoding: $0.body, as: UTF8.self) } == ["一", "二"])
        }
    }

    @Test(
        "an edit window of zero never closes; a recall takes the versions and reactions with it",
        arguments: StoreKind.allCases
    )
    func recallTakesEverything(kind: StoreKind) async throws {
        var limits = StoreLimits()
        limits.editWindow = .zero
        limits.recallWindow = .seconds(365 * 24 * 3600)
        try await StoreFixture.with(kind, limits: limits) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            _ = try await fixture.sent(alice, "m1", to: .user("bob"), "first", nowMs: Self.now)
            let muchLater = Self.now + 300 * 24 * 3_600_000
            #expect(try await Self.edit(fixture, alice, .user("bob"), seq: 1, "second", at: muchLater) == nil)
            #expect(try await Self.react(fixture, bob, .user("alice"), seq: 1, "👍") == .done)
            _ = try await fixture.store.apply(
                [.recall(user: alice, conversation: .user("bob"), id: "m1")],
                nowMs: muchLater
            )
            let name = MessageName(conversation: .user("alice"), seq: 1)
            #expect(try await fixture.store.versions(of: name, for: bob).isEmpty)
            let page = try await fixture.store.history(for: bob, in: .user("alice"), beforeSeq: 0, limit: 10)
            #expect(page.messages[0].recalled && page.messages[0].reactions.isEmpty && page.messages[0].body.isEmpty)
            #expect(page.messages[0].editedMs == nil)
            // The edit event read back now says the message was recalled, without its text.
            let edit = try await fixture.log(bob).compactMap { event -> StoredMessage? in
                guard case .edit(let message) = event.kind else { return nil }
                return message
            }
            #expect(edit.count == 1 && edit[0].recalled && edit[0].body.isEmpty)
            // Taking a reaction off a recalled message is done; putting one on is refused.
            #expect(try await Self.react(fixture, bob, .user("alice"), seq: 1, "👍", on: false) == .done)
            #expect(refusal(try await Self.react(fixture, bob, .user("alice"), seq: 1, "👍")) == .messageRecalled)
        }
    }

    @Test(
        "an edit, a send, a reaction and a recall in one batch: the edit and reactions of a message recalled later in it are dropped",
        arguments: StoreKind.allCases
    )
    func oneBatch(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            _ = try await fixture.sent(alice, "keep", to: .user("bob"), "one", nowMs: Self.now)
            let before = try await fixture.store.logCursor(of: bob)
            let batch = try await fixture.store.apply(
                [
                    .send(.init(sender: alice, id: "gone", to: .user("bob"), body: Array("two".utf8))),
                    .edit(.init(user: alice, conversation: .user("bob"), seq: 2, body: Array("two!".utf8))),
                    .edit(.init(user: alice, conversation: .user("bob"), seq: 1, body: Array("one!".utf8))),
                    .edit(.init(user: alice, conversation: .user("bob"), seq: 1, body: Array("one!!".utf8))),
                    .react(.init(user: bob, conversation: .user("alice"), seq: 2, key: "😂", on: true)),
                    .react(.init(user: bob, conversation: .user("alice"), seq: 1, key: "ok", on: true)),
                    .react(.init(user: bob, conversation: .user("alice"), seq: 1, key: "ok", on: false)),
                    .react(.init(user: bob, conversation: .user("alice"), seq: 1, key: "❤", on: true)),
                    .recall(user: alice, conversation: .user("bob"), id: "gone"),
                    .react(.init(user: bob, conversation: .user("alice"), seq: 2, key: "😂", on: true)),
                ],
                nowMs: Self.now + 10
            )
            #expect(batch.outcomes.prefix(9).map(refusal).allSatisfy { $0 == nil })
            #expect(refusal(batch.outcomes[9]) == .messageRecalled)
            let page = try await fixture.store.history(for: bob, in: .user("alice"), beforeSeq: 0, limit: 10)
            #expect(page.messages.map(\.seq) == [2, 1])
            #expect(page.messages[0].recalled && page.messages[0].reactions.isEmpty)
            #expect(Self.text(page.messages[1]) == "one!!" && page.messages[1].editedMs == Self.now + 10)
            // A text-style heart is stored as the emoji.
            #expect(page.messages[1].reactions == [ReactionCount(key: "❤️", count: 1, mine: true)])
            let versions = try await fixture.store.versions(
                of: MessageName(conversation: .user("alice"), seq: 1),
                for: bob
            )
            #expect(versions.map { String(decoding: $0.body, as: UTF8.self) } == ["one", "one!"])
            // The fresh events equal what a read returns, but for what the recall changed after them.
            let read = try await fixture.log(bob, after: before)
            let fresh = batch.fresh[bob]?.events ?? []
            #expect(batch.fresh[bob]?.after == before)
            #expect(!read.isEmpty && fresh.map(\.cursor) == read.map(\.cursor))
        }
    }

    @Test(
        "reactions: one per user and key, a retry changes nothing, limits per message and per user, counted by the server",
        arguments: StoreKind.allCases
    )
    func reactionRules(kind: StoreKind) async throws {
        var limits = StoreLimits()
        limits.maxReactionKeysPerMessage = 3
        limits.maxReactionsPerUser = 2
        try await StoreFixture.with(kind, limits: limits) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol", "dave")
            let (alice, bob, carol, dave) = (ids["alice"]!, ids["bob"]!, ids["carol"]!, ids["dave"]!)
            try await fixture.store.createGroup(
                name: "team",
                owner: "alice",
                members: ["bob", "carol"],
                byOwner: false,
                nowMs: Self.now
            )
            _ = try await fixture.sent(alice, "m1", to: .group("team"), "周末去爬山吗", nowMs: Self.now)
            let group = Conversation.group("team")
            #expect(try await Self.react(fixture, bob, group, seq: 1, "👍") == .done)
            let cursor = try await fixture.store.logCursor(of: alice)
            #expect(try await Self.react(fixture, bob, group, seq: 1, "👍") == .done)
            // A retry appended nothing.
            #expect(try await fixture.store.logCursor(of: alice) == cursor)
            #expect(try await Self.react(fixture, carol, group, seq: 1, "👍") == .done)
            #expect(try await Self.react(fixture, bob, group, seq: 1, "好", at: Self.now + 1) == .done)
            #expect(refusal(try await Self.react(fixture, bob, group, seq: 1, "😂")) == .tooManyReactions)
            #expect(try await Self.react(fixture, carol, group, seq: 1, "شكرا", at: Self.now + 2) == .done)
            #expect(refusal(try await Self.react(fixture, alice, group, seq: 1, "🎉")) == .tooManyReactions)
            // A key given already is not a new key.
            #expect(try await Self.react(fixture, alice, group, seq: 1, "好", at: Self.now + 3) == .done)
            #expect(refusal(try await Self.react(fixture, alice, group, seq: 1, "two words")) == .invalidReaction)
            #expect(refusal(try await Self.react(fixture, dave, group, seq: 1, "👍")) == .notMember)
            #expect(refusal(try await Self.react(fixture, bob, group, seq: 7, "👍")) == .unknownMessage)
            // Taking one off, twice: the second changes nothing.
            #expect(try await Self.react(fixture, carol, group, seq: 1, "👍", on: false) == .done)
            #expect(try await Self.react(fixture, carol, group, seq: 1, "👍", on: false) == .done)

            let page = try await fixture.store.history(for: bob, in: group, beforeSeq: 0, limit: 10)
            #expect(
                page.messages[0].reactions == [
                    ReactionCount(key: "👍", count: 1, mine: true),
                    ReactionCount(key: "好", count: 2, mine: true),
                    ReactionCount(key: "شكرا", count: 1, mine: false),
                ]
            )
            let changes = try await fixture.log(alice).compactMap { event -> StoredReaction? in
                guard case .reaction(let reaction) = event.kind else { return nil }
                return reaction
            }
            #expect(changes.map(\.user) == ["bob", "carol", "bob", "carol", "alice", "carol"])
            #expect(changes.map(\.on) == [true, true, true, true, true, false])
            #expect(changes.allSatisfy { $0.id == "m1" && $0.from == "alice" && $0.conversation == group })
        }
    }

    @Test(
        "a reply names a message it can see by seq or by id; the quote follows edits and recalls, hidden from later members",
        arguments: StoreKind.allCases
    )
    func replies(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol")
            let (alice, bob, carol) = (ids["alice"]!, ids["bob"]!, ids["carol"]!)
            try await fixture.store.createGroup(
                name: "team",
                owner: "alice",
                members: ["bob"],
                byOwner: false,
                nowMs: Self.now
            )
            let group = Conversation.group("team")
            _ = try await fixture.sent(alice, "q", to: group, "明天开会?", nowMs: Self.now)
            _ = try await fixture.sent(bob, "q", to: group, "same id, other sender", nowMs: Self.now)
            func reply(
                _ user: UserID,
                _ id: String,
                to target: WriteRequest.ReplyTarget,
                _ text: String
            ) async throws -> WriteOutcome {
                let send = WriteRequest.Send(sender: user, id: id, to: group, body: Array(text.utf8), replyTo: target)
                let batch = try await fixture.store.apply([.send(send)], nowMs: Self.now)
                return batch.outcomes[0]
            }
            #expect(refusal(try await reply(bob, "r0", to: .id("q", from: nil), "?")) == .ambiguousMessage)
            #expect(refusal(try await reply(bob, "r0", to: .id("nope", from: nil), "?")) == .unknownMessage)
            #expect(refusal(try await reply(bob, "r0", to: .seq(9), "?")) == .unknownMessage)
            #expect(refusal(try await reply(bob, "r1", to: .id("q", from: "alice"), "好")) == nil)
            // Carol joins; she cannot reply to what came before her. Bob answers the question again, after she came.
            try await fixture.store.changeMembers(of: "team", actor: nil, add: ["carol"], remove: [], nowMs: Self.now)
            #expect(refusal(try await reply(carol, "r2", to: .seq(1), "?")) == .unknownMessage)
            #expect(refusal(try await reply(bob, "r3", to: .seq(1), "再说一次: 好")) == nil)
            #expect(refusal(try await reply(carol, "r2", to: .id("r3", from: nil), "我也来")) == nil)

            // Alice edits the question: the quote follows.
            #expect(try await Self.edit(fixture, alice, group, seq: 1, "后天开会?") == nil)
            let bobPage = try await fixture.store.history(for: bob, in: group, beforeSeq: 0, limit: 10)
            let answer = try #require(bobPage.messages.first { $0.id == "r1" })
            #expect(answer.replyTo?.seq == 1 && answer.replyTo?.visible == true && answer.replyTo?.from == "alice")
            #expect(answer.replyTo?.id == "q" && answer.replyTo?.body == Array("后天开会?".utf8))
            // Carol sees bob's second answer, but not what it answers.
            let carolPage = try await fixture.store.history(for: carol, in: group, beforeSeq: 0, limit: 10)
            #expect(carolPage.messages.map(\.id) == ["r2", "r3"])
            let seen = try #require(carolPage.messages.first { $0.id == "r3" })
            #expect(
                seen.replyTo == StoredReply(seq: 1, visible: false, id: "", from: "", body: [], recalled: false)
            )
            // Her own reply's quote is visible to her.
            #expect(carolPage.messages.first { $0.id == "r2" }?.replyTo?.visible == true)

            // The sync event carries the quote, as history does.
            let bobEvent = try await fixture.log(bob).compactMap { event -> StoredMessage? in
                guard case .message(let message) = event.kind, message.id == "r1" else { return nil }
                return message
            }
            #expect(bobEvent.first?.replyTo?.body == Array("后天开会?".utf8))
            let carolEvents = try await fixture.log(carol).compactMap { event -> StoredMessage? in
                guard case .message(let message) = event.kind else { return nil }
                return message
            }
            #expect(carolEvents.map(\.id) == ["r3", "r2"])
            #expect(carolEvents[0].replyTo?.visible == false && carolEvents[0].replyTo?.body == [])
            #expect(carolEvents[1].replyTo?.visible == true && carolEvents[1].replyTo?.from == "bob")

            // Recalled: still a reply, its quote recalled.
            _ = try await fixture.store.apply([.recall(user: alice, conversation: group, id: "q")], nowMs: Self.now)
            let after = try await fixture.store.history(for: bob, in: group, beforeSeq: 0, limit: 10)
            let recalled = try #require(after.messages.first { $0.id == "r1" })
            #expect(recalled.replyTo?.recalled == true && recalled.replyTo?.body == [] && recalled.replyTo?.seq == 1)
            #expect(refusal(try await reply(bob, "r4", to: .seq(1), "?")) == .messageRecalled)
        }
    }

    @Test(
        "a message named by id: unique per sender, so the same id from two senders needs the sender or the conversation",
        arguments: StoreKind.allCases
    )
    func namingByID(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol")
            let (alice, bob, carol) = (ids["alice"]!, ids["bob"]!, ids["carol"]!)
            _ = try await fixture.sent(alice, "x", to: .user("bob"), "from alice", nowMs: Self.now)
            _ = try await fixture.sent(carol, "x", to: .user("bob"), "from carol", nowMs: Self.now)
            _ = try await fixture.sent(carol, "y", to: .user("alice"), "not bob's", nowMs: Self.now)
            await #expect {
                try await fixture.store.message(MessageName(id: "x"), for: bob)
            } throws: {
                ($0 as? CourierStoreError)?.code == .ambiguousMessage
            }
            let byAlice = try await fixture.store.message(MessageName(id: "x", from: "alice"), for: bob)
            #expect(byAlice.conversation == .user("alice") && byAlice.seq == 1 && Self.text(byAlice) == "from alice")
            let inCarols = try await fixture.store.message(MessageName(id: "x", in: .user("carol")), for: bob)
            #expect(inCarols.from == "carol")
            // What bob cannot see is not found.
            await #expect {
                try await fixture.store.message(MessageName(id: "y"), for: bob)
            } throws: {
                ($0 as? CourierStoreError)?.code == .unknownMessage
            }
            let own = try await fixture.store.message(MessageName(id: "y", from: "carol"), for: carol)
            #expect(own.conversation == .user("alice"))
        }
    }

    @Test(
        "a member who joined after a message hears nothing of its edits, reactions or recall; an id from before it joined is not its to name",
        arguments: StoreKind.allCases
    )
    func lateJoiner(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol")
            let (alice, bob, carol) = (ids["alice"]!, ids["bob"]!, ids["carol"]!)
            try await fixture.store.createGroup(
                name: "team",
                owner: "alice",
                members: ["bob"],
                byOwner: false,
                nowMs: Self.now
            )
            let team = Conversation.group("team")
            _ = try await fixture.sent(alice, "x", to: team, "before carol", nowMs: Self.now)
            _ = try await fixture.sent(bob, "x", to: team, "bob's x, before carol", nowMs: Self.now)
            try await fixture.store.changeMembers(of: "team", actor: nil, add: ["carol"], remove: [], nowMs: Self.now)
            _ = try await fixture.sent(alice, "y", to: team, "after carol", nowMs: Self.now)
            let before = try await fixture.store.logCursor(of: carol)
            #expect(try await Self.edit(fixture, alice, team, seq: 1, "edited before carol") == nil)
            #expect(try await Self.react(fixture, bob, team, seq: 1, "👀") == .done)
            _ = try await fixture.store.apply([.recall(user: alice, conversation: team, id: "x")], nowMs: Self.now)
            // Nothing of message 1 reached carol; bob heard all three.
            #expect(try await fixture.store.logCursor(of: carol) == before)
            let bobKinds = try await fixture.log(bob).suffix(3).map { event -> String in
                switch event.kind {
                case .edit: "edit"
                case .reaction: "reaction"
                case .recall: "recall"
                default: "other"
                }
            }
            #expect(bobKinds == ["edit", "reaction", "recall"])
            // Two messages "x" came before carol joined, one "y" after: a reply by id sees only what she can.
            let reply = try await fixture.store.apply(
                [
                    .send(
                        .init(sender: carol, id: "r", to: team, body: Array("re y".utf8), replyTo: .id("y", from: nil))
                    )
                ],
                nowMs: Self.now
            )
            #expect(refusal(reply.outcomes[0]) == nil)
            let blind = try await fixture.store.apply(
                [
                    .send(
                        .init(sender: carol, id: "r2", to: team, body: Array("re x".utf8), replyTo: .id("x", from: nil))
                    )
                ],
                nowMs: Self.now
            )
            #expect(refusal(blind.outcomes[0]) == .unknownMessage)
        }
    }

    @Test(
        "a message stored before the batch, recalled in it: an edit, a reaction or a reply after the recall is refused",
        arguments: StoreKind.allCases
    )
    func recalledEarlierInTheBatch(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            _ = try await fixture.sent(alice, "m", to: .user("bob"), "oops", nowMs: Self.now)
            let batch = try await fixture.store.apply(
                [
                    .recall(user: alice, conversation: .user("bob"), id: "m"),
                    .edit(.init(user: alice, conversation: .user("bob"), seq: 1, body: Array("still?".utf8))),
                    .react(.init(user: bob, conversation: .user("alice"), seq: 1, key: "😮", on: true)),
                    .send(.init(sender: bob, id: "r", to: .user("alice"), body: Array("?".utf8), replyTo: .seq(1))),
                ],
                nowMs: Self.now
            )
            #expect(batch.outcomes.dropFirst().map(refusal) == [.messageRecalled, .messageRecalled, .messageRecalled])
            let page = try await fixture.store.history(for: bob, in: .user("alice"), beforeSeq: 0, limit: 5)
            #expect(page.messages.map(\.recalled) == [true] && page.messages[0].reactions.isEmpty)
        }
    }
}
