import CourierStore
import CourierTesting
import Foundation
import Testing

@Suite("Messages, sequence numbers and event logs")
struct MessagingTests {
    @Test(
        "direct messages get gap-free sequence numbers and reach both users' logs, named from each side",
        arguments: StoreKind.allCases
    )
    func directMessages(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            let first = try await fixture.sent(alice, "m1", to: .user("bob"), "hi bob")
            let second = try await fixture.sent(
                bob,
                "m2",
                to: .user("alice"),
                "hi alice",
                nowMs: StoreFixture.start - 5_000
            )
            #expect(first.seq == 1 && second.seq == 2)
            #expect(first.conversation == .user("bob") && second.conversation == .user("alice"))
            // The server's clock went back; the conversation's times do not.
            #expect(second.timeMs == first.timeMs)

            let bobLog = try await fixture.log(bob)
            let aliceLog = try await fixture.log(alice)
            // Both logs grew by two; their cursors are positions in one stream, each taken once.
            #expect(bobLog.count == 2 && aliceLog.count == 2)
            let positions = (bobLog + aliceLog).map(\.cursor)
            #expect(Set(positions) == [1, 2, 3, 4], "an empty store's first positions")
            #expect(bobLog.map(\.cursor) == bobLog.map(\.cursor).sorted())
            #expect(aliceLog.map(\.cursor) == aliceLog.map(\.cursor).sorted())
            guard case .message(let received) = bobLog[0].kind, case .message(let own) = aliceLog[0].kind else {
                Issue.record("expected messages, got \(bobLog) and \(aliceLog)")
                return
            }
            #expect(received.from == "alice" && received.conversation == .user("alice") && received.id == "m1")
            #expect(own.from == "alice" && own.conversation == .user("bob"))
            #expect(try await fixture.texts(bob) == ["hi bob", "hi alice"])
            #expect(try await fixture.texts(bob, after: bobLog[0].cursor) == ["hi alice"])
        }
    }

    @Test(
        "groups: members get every message, a new member sees history from joining, non-members see nothing",
        arguments: StoreKind.allCases
    )
    func groups(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol", "dave", "erin", "frank")
            try await fixture.store.createGroup(
                name: "five",
                owner: "alice",
                members: ["bob", "carol", "dave", "erin"],
                nowMs: StoreFixture.start
            )
            for index in 1...3 {
                _ = try await fixture.sent(ids["alice"]!, "g\(index)", to: .group("five"), "early \(index)")
            }
            for name in ["alice", "bob", "carol", "dave", "erin"] {
                #expect(try await fixture.texts(ids[name]!) == ["early 1", "early 2", "early 3"])
            }
            // Everyone's log starts with the five joins.
            let joins = try await fixture.log(ids["erin"]!).prefix(5).compactMap { event -> String? in
                guard case .membership(let group, let user, .joined, 0) = event.kind, group == "five" else {
                    return nil
                }
                return user
            }
            #expect(joins.sorted() == ["alice", "bob", "carol", "dave", "erin"])

            // frank is not a member: no send, no history.
            #expect(refusal(try await fixture.send(ids["frank"]!, "f", to: .group("five"), "let me in")) == .notMember)
            await expectCode(.notMember) {
                _ = try await fixture.store.history(for: ids["frank"]!, in: .group("five"), beforeSeq: 0, limit: 10)
            }
            // Only the owner (and admins, of whom there are none) adds (a contact: frank and alice have written to
            // each other); then frank sees history from his joining on.
            _ = try await fixture.sent(ids["alice"]!, "to-frank", to: .user("frank"), "hi frank")
            _ = try await fixture.sent(ids["frank"]!, "to-alice", to: .user("alice"), "hi alice")
            let before = try await fixture.log(ids["frank"]!).last?.cursor ?? 0
            await expectCode(.notAdmin) {
                try await fixture.store.changeMembers(
                    of: "five",
                    actor: ids["bob"]!,
                    add: ["frank"],
                    remove: [],
                    nowMs: 1
                )
            }
            try await fixture.store.changeMembers(
                of: "five",
                actor: ids["alice"]!,
                add: ["frank"],
                remove: [],
                nowMs: 1
            )
            _ = try await fixture.sent(ids["bob"]!, "g4", to: .group("five"), "late")
            #expect(try await fixture.texts(ids["frank"]!, after: before) == ["late"])
            let page = try await fixture.store.history(for: ids["frank"]!, in: .group("five"), beforeSeq: 0, limit: 10)
            #expect(page.messages.map(\.seq) == [4] && !page.more)
            // A member may leave but not remove others.
            await expectCode(.notAdmin) {
                try await fixture.store.changeMembers(
                    of: "five",
                    actor: ids["bob"]!,
                    add: [],
                    remove: ["carol"],
                    nowMs: 1
                )
            }
            try await fixture.store.changeMembers(of: "five", actor: ids["bob"]!, add: [], remove: ["bob"], nowMs: 1)
            #expect(refusal(try await fixture.send(ids["bob"]!, "g5", to: .group("five"), "still here?")) == .notMember)
            #expect(
                try await fixture.store.group(named: "five").members == ["alice", "carol", "dave", "erin", "frank"]
            )
            await expectCode(.nameTaken) {
                try await fixture.store.createGroup(name: "FIVE", owner: "bob", members: [], nowMs: 1)
            }
        }
    }

    @Test("history pages backwards by sequence number", arguments: StoreKind.allCases)
    func historyPages(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol")
            for index in 1...25 {
                _ = try await fixture.sent(
                    ids[index.isMultiple(of: 2) ? "alice" : "bob"]!,
                    "h\(index)",
                    to: .user(index.isMultiple(of: 2) ? "bob" : "alice"),
                    "\(index)"
                )
            }
            var seen: [UInt64] = []
            var before: UInt64 = 0
            while true {
                let page = try await fixture.store.history(
                    for: ids["alice"]!,
                    in: .user("bob"),
                    beforeSeq: before,
                    limit: 10
                )
                seen += page.messages.map(\.seq)
                guard page.more, let oldest = page.messages.last?.seq else { break }
                before = oldest
            }
            #expect(seen == Array((1...25).reversed()))
            // No conversation yet: an empty page; an unknown user: an error.
            #expect(
                try await fixture.store.history(for: ids["carol"]!, in: .user("alice"), beforeSeq: 0, limit: 10)
                    .messages.isEmpty
            )
            await expectCode(.unknownUser) {
                _ = try await fixture.store.history(for: ids["carol"]!, in: .user("zed"), beforeSeq: 0, limit: 10)
            }
        }
    }

    @Test(
        "a history page carries how far the other members received and read it: those whose marks reach the page",
        arguments: StoreKind.allCases
    )
    func historyReceipts(kind: StoreKind) async throws {
        var limits = StoreLimits()
        limits.maxReceiptMarks = 2
        try await StoreFixture.with(kind, limits: limits) { fixture in
            let ids = try await fixture.users("alice", "bob", "zhang", "dave")
            let (alice, bob, zhang) = (ids["alice"]!, ids["bob"]!, ids["zhang"]!)
            try await fixture.store.createGroup(
                name: "family",
                owner: "alice",
                members: ["bob", "zhang", "dave"],
                nowMs: StoreFixture.start
            )
            // bob's phone, there before the messages, receives all four; bob reads two, zhang three; dave nothing.
            let phone = try await fixture.store.login(
                user: "bob",
                password: "pw-bob",
                deviceName: "phone",
                nowMs: StoreFixture.start
            ).device
            for index in 1...4 { _ = try await fixture.sent(alice, "g\(index)", to: .group("family"), "消息\(index)") }
            let bobCursor = try await fixture.store.logCursor(of: bob)
            _ = try await fixture.store.apply(
                [.ack(user: bob, device: phone.id, cursor: bobCursor)],
                nowMs: StoreFixture.start
            )
            _ = try await fixture.store.apply(
                [
                    .markRead(user: bob, conversation: .group("family"), upToSeq: 2),
                    .markRead(user: zhang, conversation: .group("family"), upToSeq: 3),
                ],
                nowMs: StoreFixture.start
            )
            let marks = { (before: UInt64, limit: Int) in
                try await fixture.store.history(for: alice, in: .group("family"), beforeSeq: before, limit: limit)
                    .receipts.map { "\($0.user) \($0.deliveredSeq)/\($0.readSeq)" }
            }
            // The furthest read first, the reader never among them, dave (nothing yet) not at all.
            let all = try await marks(0, 10)
            #expect(all == ["zhang 3/3", "bob 4/2"], "\(all)")
            // A page of messages 3 and 4 only: still both, for both marks reach message 3.
            let newest = try await marks(0, 2)
            #expect(newest == ["zhang 3/3", "bob 4/2"], "\(newest)")
            // Past what the limit takes, the furthest read are kept.
            _ = try await fixture.store.apply(
                [.markRead(user: ids["dave"]!, conversation: .group("family"), upToSeq: 4)],
                nowMs: StoreFixture.start
            )
            let limited = try await marks(0, 10)
            #expect(limited == ["dave 4/4", "zhang 3/3"], "\(limited)")
            // bob sees alice's marks too (she read what she sent), and his own never.
            let bobs = try await fixture.store.history(for: bob, in: .group("family"), beforeSeq: 0, limit: 10).receipts
            #expect(bobs.map(\.user) == ["alice", "dave"], "\(bobs)")
            // A member who joins later is marked as having read what came before: that says nothing, and its
            // marks are left out until it reads something after; then they come with where it joined.
            _ = try await fixture.users("erin")
            try await fixture.store.changeMembers(
                of: "family",
                actor: nil,
                add: ["erin"],
                remove: [],
                nowMs: StoreFixture.start
            )
            let withErin = try await fixture.store.history(for: bob, in: .group("family"), beforeSeq: 0, limit: 10)
            #expect(!withErin.receipts.contains { $0.user == "erin" }, "\(withErin.receipts)")
            // A page past everyone's marks carries none: an empty page carries none either.
            _ = try await fixture.sent(alice, "g5", to: .group("family"), "5")
            #expect(try await marks(0, 1) == [])
            _ = try await fixture.store.apply(
                [.markRead(user: ids["dave"]!, conversation: .group("family"), upToSeq: 5)],
                nowMs: StoreFixture.start
            )
            let erin = try await fixture.store.users().first { $0.name == "erin" }!.id
            _ = try await fixture.store.apply(
                [.markRead(user: erin, conversation: .group("family"), upToSeq: 5)],
                nowMs: StoreFixture.start
            )
            let late = try await fixture.store.history(for: alice, in: .group("family"), beforeSeq: 0, limit: 1)
            // erin read message 5, after she joined (at 4): her mark counts, and says where she joined (first: as
            // far read as dave, and joining marked her as having received up to 4).
            #expect(late.receipts.map { "\($0.user) \($0.readSeq) \($0.joinedSeq)" } == ["erin 5 4", "dave 5 0"])
            #expect(
                try await fixture.store.history(for: alice, in: .user("bob"), beforeSeq: 0, limit: 10).receipts == []
            )
        }
    }

    @Test(
        "acks produce delivered receipts, read marks produce read receipts and set unread counts",
        arguments: StoreKind.allCases
    )
    func receiptsAndUnread(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            let bobDevice = try await fixture.store.login(
                user: "bob",
                password: "pw-bob",
                deviceName: "phone",
                nowMs: StoreFixture.start
            ).device
            for index in 1...3 { _ = try await fixture.sent(alice, "u\(index)", to: .user("bob"), "\(index)") }
            #expect(try await fixture.store.unreadCounts(for: bob).map(\.unread) == [3])
            #expect(try await fixture.store.unreadCounts(for: alice).map(\.unread) == [0])
            let bobCursors = try await fixture.log(bob).map(\.cursor)
            try #require(bobCursors.count == 3)

            // bob's phone stores the first two events and acks them: alice learns "delivered up to 2".
            _ = try await fixture.store.apply(
                [.ack(user: bob, device: bobDevice.id, cursor: bobCursors[1])],
                nowMs: StoreFixture.start
            )
            #expect(try await fixture.store.ackedCursor(of: bobDevice.id) == bobCursors[1])
            let aliceCursor = try await fixture.store.logCursor(of: alice)
            guard case .receipt(.user("bob"), "bob", .delivered, 2)? = try await fixture.log(alice).last?.kind else {
                Issue.record("no delivered receipt: \(try await fixture.log(alice))")
                return
            }
            // Acking again, or backwards, changes nothing; an ack past the log's end is capped.
            _ = try await fixture.store.apply(
                [.ack(user: bob, device: bobDevice.id, cursor: bobCursors[0])],
                nowMs: StoreFixture.start
            )
            #expect(try await fixture.store.logCursor(of: alice) == aliceCursor)
            _ = try await fixture.store.apply(
                [.ack(user: bob, device: bobDevice.id, cursor: .max)],
                nowMs: StoreFixture.start
            )
            #expect(try await fixture.store.ackedCursor(of: bobDevice.id) == bobCursors[2])
            // Another user's device cannot be acked for.
            let wrong = try await fixture.store.apply(
                [.ack(user: alice, device: bobDevice.id, cursor: 3)],
                nowMs: StoreFixture.start
            )
            #expect(wrong.outcomes.map(refusal) == [.invalidRequest])

            _ = try await fixture.store.apply(
                [.markRead(user: bob, conversation: .user("alice"), upToSeq: 2)],
                nowMs: StoreFixture.start
            )
            #expect(try await fixture.store.unreadCounts(for: bob).map(\.unread) == [1])
            guard case .receipt(.user("bob"), "bob", .read, 2)? = try await fixture.log(alice).last?.kind,
                case .receipt(.user("alice"), "bob", .read, 2)? = try await fixture.log(bob).last?.kind
            else {
                Issue.record("read receipts missing")
                return
            }
            // Replying reads everything before it.
            _ = try await fixture.sent(bob, "r1", to: .user("alice"), "ok")
            #expect(try await fixture.store.unreadCounts(for: bob).map(\.unread) == [0])
            #expect(try await fixture.store.unreadCounts(for: alice).map(\.unread) == [1])
        }
    }

    @Test(
        "a device made by a new login starts at the user's present cursor; older messages come from history",
        arguments: StoreKind.allCases
    )
    func newDeviceStartsAtPresent(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let old = try await fixture.store.login(user: "bob", password: "pw-bob", deviceName: "old", nowMs: 1).device
            for index in 1...4 { _ = try await fixture.sent(ids["alice"]!, "n\(index)", to: .user("bob"), "\(index)") }
            let new = try await fixture.store.login(user: "bob", password: "pw-bob", deviceName: "new", nowMs: 2).device
            let present = try await fixture.store.logCursor(of: ids["bob"]!)
            #expect(try await fixture.log(ids["bob"]!).count == 4)
            #expect(old.ackedCursor == 0)
            #expect(present > 0 && new.ackedCursor == present)
            #expect(try await fixture.store.ackedCursor(of: new.id) == present)
        }
    }

    @Test(
        "the sender recalls within the window; the recall reaches every member and empties the body",
        arguments: StoreKind.allCases
    )
    func recall(kind: StoreKind) async throws {
        var limits = StoreLimits()
        limits.recallWindow = .seconds(60)
        try await StoreFixture.with(kind, limits: limits) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            let now = StoreFixture.start
            _ = try await fixture.sent(alice, "oops", to: .user("bob"), "secret", nowMs: now)
            _ = try await fixture.sent(alice, "old", to: .user("bob"), "fine", nowMs: now)
            func recall(_ user: UserID, _ id: String, at time: Int64) async throws -> CourierStoreError.Code? {
                refusal(
                    try await fixture.store.apply(
                        [.recall(user: user, conversation: .user(user == alice ? "bob" : "alice"), id: id)],
                        nowMs: time
                    ).outcomes[0]
                )
            }
            #expect(try await recall(bob, "oops", at: now) == .unknownMessage)
            #expect(try await recall(alice, "old", at: now + 60_001) == .recallWindowPassed)
            #expect(try await recall(alice, "oops", at: now + 60_000) == nil)
            for user in [alice, bob] {
                guard case .recall(.user(_), 1, "oops", "alice")? = try await fixture.log(user).last?.kind else {
                    Issue.record("no recall event for \(user)")
                    continue
                }
            }
            let page = try await fixture.store.history(for: bob, in: .user("alice"), beforeSeq: 0, limit: 10)
            #expect(page.messages.map(\.recalled) == [false, true])
            #expect(page.messages[1].body.isEmpty)
        }
    }

    @Test("SQLite's plan: a sync reads the event log and the groups' messages by their keys from the cursor on")
    func syncQueryPlan() async throws {
        try await withTemporaryDirectory { folder in
            let fixture = try SQLiteFixture(folder: folder)
            let ids = try await fixture.users("alice", "bob")
            for index in 1...300 {
                _ = try await fixture.sent(ids["alice"]!, "s\(index)", to: .user("bob"), "\(index)")
            }
            let plan = try await fixture.store.explainEventsQuery()
            // The user's own entries and its groups' messages, each read by its key from the cursor on; the only
            // scan is of the page they make (`e`, at most the limit's rows).
            #expect(plan.contains { $0.contains("SEARCH e USING PRIMARY KEY (user_id=? AND cursor>?)") }, "\(plan)")
            #expect(plan.contains { $0.contains("SEARCH s USING PRIMARY KEY (user_id=?)") }, "\(plan)")
            #expect(
                plan.contains {
                    // Bounded above too: each group gives a page no more than its first `limit` messages.
                    $0.contains("SEARCH g USING PRIMARY KEY (conversation_id=? AND cursor>? AND cursor<?)")
                },
                "\(plan)"
            )
            #expect(plan.filter { $0.hasPrefix("SCAN") } == ["SCAN e"], "\(plan)")
            let cursors = try await fixture.log(ids["bob"]!).map(\.cursor)
            try #require(cursors.count == 300)
            #expect(
                try await fixture.store.events(for: ids["bob"]!, after: cursors[297], limit: 100).map(\.cursor)
                    == Array(cursors[298...])
            )
        }
    }
}
