import CourierStore
import CourierTesting
import Foundation
import Synchronization
import Testing

/// SQLite's group commit carries the rows a batch read on to the next batch (`SQLiteStore.Configuration.maxCarriedRows`):
/// what it writes must be what reading them afresh writes, and anything else that writes must drop them.
@Suite("SQLite: rows carried from one batch to the next")
struct CarriedRowsTests {
    /// Everything a workload leaves that a client can see: each user's log, as read.
    static func logs(_ fixture: StoreFixture, _ users: [UserID]) async throws -> [[StoredEvent]] {
        var logs: [[StoredEvent]] = []
        for user in users { logs.append(try await fixture.log(user)) }
        return logs
    }

    @Test("random batches of sends, acknowledgements, read marks and recalls write the same with rows carried or not")
    func sameAsReadAfresh() async throws {
        let seed = TestSeed.make(for: "CarriedRowsTests.sameAsReadAfresh")
        // Per run: every user's log, then the devices' and users' cursors and a digest of the members' marks.
        let runs = Mutex<[(logs: [[StoredEvent]], cursors: [Int])]>([])
        // Read afresh, carried, and carried under a bound small enough to drop them every few batches.
        for carried in [0, StoreSettings().sqliteMaxCarriedRows, 12] {
            try await StoreFixture.with(.sqlite, sqliteCarriedRows: carried) { fixture in
                var random = SeededRandom(seed: seed)
                let names = ["ann", "ben", "chloe", "dawei", "eve", "fatima"]
                var ids: [UserID] = []
                var devices: [DeviceID] = []
                for name in names {
                    ids.append(
                        try await fixture.store.addUser(name: name, password: "pw", nowMs: StoreFixture.start).id
                    )
                    devices.append(
                        try await fixture.store.login(user: name, password: "pw", deviceName: "d", nowMs: 1).device.id
                    )
                }
                try await fixture.store.createGroup(
                    name: "team",
                    owner: names[0],
                    members: Array(names[1...4]),
                    nowMs: StoreFixture.start
                )
                var sent: [(UserID, String, Conversation)] = []
                for batch in 0..<40 {
                    var requests: [WriteRequest] = []
                    for index in 0..<Int.random(in: 1...12, using: &random) {
                        let who = Int.random(in: 0..<names.count, using: &random)
                        let other = (who + Int.random(in: 1..<names.count, using: &random)) % names.count
                        let address: Conversation =
                            Bool.random(using: &random) && (0...4).contains(who) ? .group("team") : .user(names[other])
                        switch Int.random(in: 0..<10, using: &random) {
                        case 0..<6:
                            let id = "m\(batch)-\(index)"
                            sent.append((ids[who], id, address))
                            requests.append(
                                .send(.init(sender: ids[who], id: id, to: address, body: Array("文字 \(id) 🙂".utf8)))
                            )
                        case 6..<8:
                            requests.append(
                                .ack(
                                    user: ids[who],
                                    device: devices[who],
                                    cursor: UInt64.random(in: 0...UInt64(batch * 6), using: &random)
                                )
                            )
                        case 8 where Bool.random(using: &random):
                            // An edit or a reaction, on a seq that may or may not hold the user's message.
                            let seq = UInt64.random(in: 1...12, using: &random)
                            requests.append(
                                Bool.random(using: &random)
                                    ? .edit(
                                        .init(
                                            user: ids[who],
                                            conversation: address,
                                            seq: seq,
                                            body: Array("改 \(batch)".utf8)
                                        )
                                    )
                                    : .react(.init(user: ids[who], conversation: address, seq: seq, key: "👍", on: true))
                            )
                        case 8:
                            requests.append(
                                .markRead(
                                    user: ids[who],
                                    conversation: address,
                                    upToSeq: UInt64.random(in: 0...20, using: &random)
                                )
                            )
                        default:
                            // A resend of an earlier id (answered as a duplicate), or a recall.
                            if let (sender, id, to) = sent.randomElement(using: &random) {
                                requests.append(
                                    Bool.random(using: &random)
                                        ? .send(.init(sender: sender, id: id, to: to, body: Array("again".utf8)))
                                        : .recall(user: sender, conversation: to, id: id)
                                )
                            }
                        }
                    }
                    _ = try await fixture.store.apply(requests, nowMs: StoreFixture.start + Int64(batch))
                }
                let logs = try await Self.logs(fixture, ids)
                var acked: [Int] = []
                for device in devices {
                    acked.append(
                        try await fixture.count("SELECT acked_cursor FROM devices WHERE id = \(device.rawValue)")
                    )
                }
                for id in ids {
                    acked.append(
                        try await fixture.count(
                            "SELECT COALESCE(MAX(cursor), 0) FROM log_heads WHERE user_id = \(id.rawValue)"
                        )
                    )
                }
                acked.append(
                    try await fixture.count(
                        "SELECT COALESCE(SUM(read_seq * 7 + delivered_seq * 3 + sent), 0) FROM members"
                    )
                )
                runs.withLock { $0.append((logs, acked)) }
            }
        }
        let results = runs.withLock { $0 }
        #expect(results[0].logs.map(\.count).reduce(0, +) > 100, "the workload wrote something (seed \(seed))")
        for carried in results.dropFirst() {
            #expect(results[0].logs == carried.logs, "seed \(seed)")
            #expect(results[0].cursors == carried.cursors, "seed \(seed)")
        }
    }

    @Test(
        "a batch after another reads only what it did not carry: a send's id; after any other write, everything again"
    )
    func carriedAtAll() async throws {
        // The default carries; a bound of one row (fewer than a batch reads) carries nothing, as 0 does.
        for carried in [StoreSettings().sqliteMaxCarriedRows, 1, 0] {
            try await StoreFixture.with(.sqlite, sqliteCarriedRows: carried) { fixture in
                let ids = try await fixture.users("ann", "ben")
                func send(_ id: String) async throws -> AppliedBatch {
                    try await fixture.store.apply(
                        [.send(.init(sender: ids["ann"]!, id: id, to: .user("ben"), body: Array("你好 \(id)".utf8)))],
                        nowMs: StoreFixture.start
                    )
                }
                let first = try await send("1")
                let second = try await send("2")
                // The first reads the names and ids (its conversation is made, not read); the second, carried, one
                // wave (is "2" a resend?), and read afresh the names, ids and conversation again.
                #expect(first.loads.waves >= 2)
                #expect(carried > 1 ? second.loads.waves == 1 : second.loads.waves >= 3, "carrying \(carried)")
                // A write outside the group commit (a profile here) drops them: everything is read again.
                _ = try await fixture.store.setProfile(
                    of: ids["ben"]!,
                    ProfileUpdate(displayName: "本"),
                    nowMs: StoreFixture.start
                )
                let third = try await send("3")
                #expect(third.loads.waves >= 3, "carrying \(carried)")
            }
        }
    }

    /// A group of ann and ben with ann's first message, then `addLilei` (a write outside the group commit, somehow),
    /// then ann's second: lilei must get the second, which rows carried from before the add would leave out.
    static func memberAddedBetweenBatches(
        _ fixture: StoreFixture,
        addLilei: @Sendable () async throws -> Void
    ) async throws {
        let ids = try await fixture.users("ann", "ben", "lilei")
        try await fixture.store.createGroup(name: "team", owner: "ann", members: ["ben"], nowMs: StoreFixture.start)
        _ = try await fixture.sent(ids["ann"]!, "one", to: .group("team"), "一")
        try await addLilei()
        let second = try await fixture.store.apply(
            [.send(.init(sender: ids["ann"]!, id: "two", to: .group("team"), body: Array("二".utf8)))],
            nowMs: StoreFixture.start
        )
        #expect(try await fixture.texts(ids["lilei"]!) == ["二"])
        // Each member's fresh event follows the entry written between (the membership change), not the head the
        // rows carried from before it: a connection holding it as following the older head would skip that entry.
        for name in ["ann", "ben", "lilei"] {
            let log = try await fixture.log(ids[name]!)
            let run = try #require(second.fresh[ids[name]!], "\(name)")
            #expect(log.count >= 2 && run.events.map(\.cursor) == [log[log.count - 1].cursor], "\(name)")
            #expect(run.after == log[log.count - 2].cursor, "\(name): a run after \(run.after)")
        }
    }

    @Test("a member added between two batches (a write outside the group commit) gets the second batch's message")
    func droppedByOtherWrites() async throws {
        try await StoreFixture.with(.sqlite) { fixture in
            try await Self.memberAddedBetweenBatches(fixture) {
                try await fixture.store.changeMembers(
                    of: "team",
                    actor: nil,
                    add: ["lilei"],
                    remove: [],
                    nowMs: StoreFixture.start
                )
            }
        }
    }

    @Test("another process's write between two batches is seen: a member it added gets the second batch's message")
    func droppedByAnotherProcess() async throws {
        try await StoreFixture.with(.sqlite) { fixture in
            try await Self.memberAddedBetweenBatches(fixture) {
                try await fixture.another { other in
                    try await other.changeMembers(
                        of: "team",
                        actor: nil,
                        add: ["lilei"],
                        remove: [],
                        nowMs: StoreFixture.start
                    )
                }
            }
        }
    }
}
