import CourierStore
import CourierTesting
import Foundation
import Synchronization
import Testing

@Suite("Several writers on one database (nodes on PostgreSQL, processes on SQLite)")
struct ConcurrentWritersTests {
    /// What one writer's batch was and what became of it.
    struct Applied: Sendable {
        var requests: [WriteRequest]
        var outcomes: [WriteOutcome]
        var fresh: [UserID: FreshRun]
    }

    @Test(
        "three stores writing at once: the logs' positions gap-free together, a reader following one never skips, each fresh run follows the cursor it names, every conversation gap-free, every id stored once",
        arguments: StoreKind.allCases
    )
    func threeWriters(kind: StoreKind) async throws {
        let seed = TestSeed.make(for: "threeWriters(\(kind.rawValue))")
        try await StoreFixture.with(kind) { fixture in
            let names = (0..<6).map { "user\($0)" }
            let ids = try await names.asyncMap { try await fixture.store.addUser(name: $0, password: "x", nowMs: 1).id }
            var devices: [DeviceID] = []
            for name in names {
                devices.append(
                    try await fixture.store.login(user: name, password: "x", deviceName: "d", nowMs: 1).device.id
                )
            }
            try await fixture.store.createGroup(name: "all", owner: names[0], members: names, nowMs: 1)
            try await fixture.store.createGroup(name: "half", owner: names[0], members: ["user1", "user2"], nowMs: 1)
            let plan = WritePlan(names: names, ids: ids, devices: devices)

            let (results, followed) = try await Self.write(fixture: fixture, plan: plan, seed: seed)

            // Every conversation's messages, numbered 1...last without a gap, each id once.
            var stored: [Conversation: [StoredMessage]] = [:]
            for address in [Conversation.group("all"), .group("half")] + names.dropFirst().map({ .user($0) }) {
                var page = try await fixture.store.history(for: ids[0], in: address, beforeSeq: 0, limit: 100_000)
                if address == .group("half") {
                    page = try await fixture.store.history(for: ids[1], in: address, beforeSeq: 0, limit: 100_000)
                }
                let seqs = page.messages.map(\.seq).reversed()
                #expect(Array(seqs) == Array((0..<UInt64(seqs.count)).map { $0 + 1 }), "\(address)")
                #expect(Set(page.messages.map { "\($0.from)/\($0.id)" }).count == page.messages.count, "\(address)")
                stored[address] = page.messages
            }
            // Every receipt names a stored message; a resend of an id anywhere got the one original.
            var originals: [String: SendReceipt] = [:]
            var receipts = 0
            for result in results {
                for (request, outcome) in zip(result.requests, result.outcomes) {
                    guard case .send(let send) = request else { continue }
                    guard case .sent(let receipt) = outcome else {
                        Issue.record("a send was refused: \(outcome)")
                        continue
                    }
                    receipts += 1
                    let key = "\(send.sender.rawValue)/\(send.id)"
                    if !receipt.duplicate {
                        #expect(originals[key] == nil, "\(key) stored twice")
                        originals[key] = receipt
                    }
                }
            }
            for result in results {
                for (request, outcome) in zip(result.requests, result.outcomes) {
                    guard case .send(let send) = request, case .sent(let receipt) = outcome else { continue }
                    let original = originals["\(send.sender.rawValue)/\(send.id)"]
                    #expect(original?.seq == receipt.seq && original?.conversation == receipt.conversation)
                }
            }
            #expect(originals.count == stored.values.map(\.count).reduce(0, +))
            #expect(receipts > originals.count, "the shared ids were resent")
            // As user0 sees them (user0 is in every conversation above): the message's conversation and number.
            for (key, receipt) in originals where key.hasPrefix("\(ids[0].rawValue)/") {
                let conversation = receipt.conversation
                let found = stored[conversation]?.first { $0.seq == receipt.seq }
                #expect(found.map { "\(ids[0].rawValue)/\($0.id)" } == key)
            }

            // Every user's log: its cursors growing, each message once, and every message of its conversations
            // there. All the logs' positions together: 1...n, each taken once (a batch rolled back took none); a
            // position in several logs is one group's message, stored once (the same message in every one).
            var positions: [UInt64: Set<String>] = [:]
            var logs: [UserID: [UInt64]] = [:]
            for (index, user) in ids.enumerated() {
                let log = try await fixture.log(user)
                logs[user] = log.map(\.cursor)
                for event in log {
                    let entry =
                        switch event.kind {
                        case .message(let message):
                            if case .group = message.conversation {
                                "\(message.conversation)@\(message.seq)"
                            } else {
                                "\(user.rawValue): \(event.kind)"
                            }
                        default: "\(user.rawValue): \(event.kind)"
                        }
                    positions[event.cursor, default: []].insert(entry)
                }
                #expect(zip(log, log.dropFirst()).allSatisfy { $0.cursor < $1.cursor }, "\(names[index])")
                #expect(try await fixture.store.logCursor(of: user) == log.last?.cursor ?? 0)
                if index == 0 {
                    // Read while the writers wrote, each read after the newest seen: positions are taken in commit
                    // order, so none committed later was smaller.
                    #expect(followed == log.map(\.cursor), "a reader following user0's log skipped events")
                }
                var messages: [String] = []
                for event in log {
                    guard case .message(let message) = event.kind else { continue }
                    messages.append("\(message.conversation)#\(message.seq)")
                }
                #expect(Set(messages).count == messages.count, "\(names[index]) got a message twice")
                var expected = 0
                for (address, list) in stored {
                    let member: Bool =
                        switch address {
                        case .group("half"): index <= 2
                        case .group: true
                        case .user(let peer): index == 0 || peer == names[index]
                        }
                    if member { expected += list.count }
                }
                #expect(messages.count == expected, "\(names[index])")
            }
            #expect(positions.keys.sorted() == Array(1...UInt64(positions.count)))
            #expect(positions.values.allSatisfy { $0.count == 1 }, "\(positions.filter { $0.value.count > 1 })")
            #expect(positions.values.contains { $0.first!.hasPrefix("#") }, "no group's message was written")
            // Each batch's fresh events follow the cursor they say, directly: the entry before the first of them in
            // the log is that cursor (other stores appended to these logs meanwhile, without the users' locks).
            var runs = 0
            for result in results {
                for (user, run) in result.fresh {
                    guard let first = run.events.first, let log = logs[user], let at = log.firstIndex(of: first.cursor)
                    else { continue }
                    runs += 1
                    #expect(run.after == (at == 0 ? 0 : log[at - 1]), "\(user): a run after \(run.after)")
                    #expect(Array(log[at..<min(log.count, at + run.events.count)]) == run.events.map(\.cursor))
                }
            }
            #expect(runs > 0)
        }
    }
}

extension ConcurrentWritersTests {
    /// Three writers on each of three stores on the fixture's database, 30 batches each, all at once, and a reader
    /// following user0's log meanwhile, each read after the newest cursor it has seen.
    ///
    /// - Returns: The batches, and the cursors the reader saw, in the order it saw them.
    static func write(
        fixture: StoreFixture,
        plan: WritePlan,
        seed: UInt64
    ) async throws -> ([Applied], followed: [UInt64]) {
        let applied = Mutex<[Applied]>([])
        let follow = Follow()
        try await fixture.another { second in
            try await fixture.another { third in
                let stores: [any CourierDatabase] = [fixture.store, second, third]
                try await withThrowingTaskGroup(of: [Applied].self) { group in
                    group.addTask {
                        var seen: [UInt64] = []
                        while true {
                            let last = follow.writing.load(ordering: .acquiring) == 0
                            while true {
                                let read = try await fixture.store.events(
                                    for: plan.ids[0],
                                    after: seen.last ?? 0,
                                    limit: 100
                                )
                                seen += read.map(\.cursor)
                                if read.isEmpty { break }
                            }
                            if last || Task.isCancelled { break }
                            await Task.yield()
                        }
                        follow.seen.withLock { $0 = seen }
                        return []
                    }
                    for (storeIndex, store) in stores.enumerated() {
                        for writer in 0..<3 {
                            let writerSeed = seed &+ UInt64(storeIndex * 3 + writer)
                            group.addTask {
                                var random = SeededRandom(seed: writerSeed)
                                var applied: [Applied] = []
                                for batch in 0..<30 {
                                    let requests = plan.batch(
                                        writer: "w\(storeIndex)-\(writer)-\(batch)",
                                        shared: batch % 10,
                                        using: &random
                                    )
                                    let result = try await store.apply(requests, nowMs: 1_000 + Int64(batch))
                                    applied.append(
                                        Applied(requests: requests, outcomes: result.outcomes, fresh: result.fresh)
                                    )
                                }
                                follow.writing.subtract(1, ordering: .releasing)
                                return applied
                            }
                        }
                    }
                    for try await batches in group {
                        applied.withLock { $0 += batches }
                    }
                }
            }
        }
        return (applied.withLock { $0 }, follow.seen.withLock { $0 })
    }

    /// What the reader of ``write(fixture:plan:seed:)`` shares with the writers.
    final class Follow: Sendable {
        /// The writers still writing.
        let writing = Atomic<Int>(9)
        let seen = Mutex<[UInt64]>([])
    }
}

/// The random writes of ``ConcurrentWritersTests``: sends to groups and between users, resends of ids shared by
/// every writer, acknowledgements and read marks, in batches of 1 to 8.
struct WritePlan: Sendable {
    let names: [String]
    let ids: [UserID]
    let devices: [DeviceID]

    func batch(writer: String, shared: Int, using random: inout SeededRandom) -> [WriteRequest] {
        (0..<Int.random(in: 1...8, using: &random)).map { index in
            let sender = Int.random(in: 0..<self.names.count, using: &random)
            let user = self.ids[sender]
            switch Int.random(in: 0..<10, using: &random) {
            case 0:
                // Every writer sends these: one copy is stored, the others are duplicates.
                return .send(.init(sender: self.ids[0], id: "shared-\(shared)", to: .group("all"), body: [1]))
            case 1:
                return .ack(
                    user: user,
                    device: self.devices[sender],
                    cursor: UInt64.random(in: 0...4_000, using: &random)
                )
            case 2:
                return .markRead(user: user, conversation: .group("all"), upToSeq: .random(in: 0...200, using: &random))
            case 3, 4:
                let to: Conversation = sender <= 2 ? .group("half") : .group("all")
                return .send(.init(sender: user, id: "\(writer)-\(index)", to: to, body: Array(writer.utf8)))
            default:
                // Between user0 and the others, both ways: conversations every log shares with user0's.
                let to: Conversation =
                    sender == 0 ? .user(self.names[Int.random(in: 1..<6, using: &random)]) : .user("user0")
                return .send(.init(sender: user, id: "\(writer)-\(index)", to: to, body: Array(writer.utf8)))
            }
        }
    }
}

extension Sequence {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var result: [T] = []
        for element in self { result.append(try await transform(element)) }
        return result
    }
}
