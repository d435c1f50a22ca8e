import CourierStore
import CourierStoreSQLite
import CourierTesting
import Foundation
import Synchronization
import Testing

@Suite("Group commit, durability limits and backups")
struct CommitQueueTests {
    @Test(
        "concurrent senders share transactions, and every conversation's numbers stay gap-free",
        arguments: StoreKind.allCases
    )
    func groupCommit(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let names = (0..<8).map { "user\($0)" }
            var ids: [UserID] = []
            for name in names { ids.append(try await fixture.store.addUser(name: name, password: "x", nowMs: 1).id) }
            try await fixture.store.createGroup(
                name: "all",
                owner: names[0],
                members: Array(names.dropFirst()),
                nowMs: 1
            )
            let batches = Mutex<[Int]>([])
            let queue = CommitQueue(
                store: fixture.store,
                clock: { StoreFixture.start },
                onCommit: { report in batches.withLock { $0.append(report.requests) } }
            )
            let perSender = 250
            let receipts = try await withThrowingTaskGroup(of: [SendReceipt].self) { group in
                group.addTask {
                    await queue.run()
                    return []
                }
                for (index, sender) in ids.enumerated() {
                    group.addTask {
                        var receipts: [SendReceipt] = []
                        for message in 0..<perSender {
                            // Half to the group, half to the next user.
                            let to: Conversation =
                                message.isMultiple(of: 2) ? .group("all") : .user(names[(index + 1) % names.count])
                            let outcome = try await queue.submit(
                                .send(.init(sender: sender, id: "\(index)-\(message)", to: to, body: [1]))
                            )
                            guard case .sent(let receipt) = outcome else { throw FixtureError(message: "\(outcome)") }
                            receipts.append(receipt)
                        }
                        return receipts
                    }
                }
                var all: [SendReceipt] = []
                for _ in 0..<ids.count { all += try await group.next()! }
                queue.finish()
                for try await rest in group { all += rest }
                return all
            }
            #expect(receipts.count == ids.count * perSender)
            let groupSeqs = receipts.filter { $0.conversation == .group("all") }.map(\.seq).sorted()
            #expect(groupSeqs == Array(1...UInt64(ids.count * perSender / 2)))
            // Each direct pair (i, i+1) got 125 messages from i, numbered 1...125 in that conversation.
            let direct = Dictionary(grouping: receipts.filter { $0.conversation != .group("all") }, by: \.conversation)
            for (_, pair) in direct { #expect(pair.map(\.seq).sorted() == Array(1...UInt64(perSender / 2))) }
            let sizes = batches.withLock { $0 }
            #expect(sizes.reduce(0, +) == ids.count * perSender)
            #expect(sizes.max()! > 1, "no two writes ever shared a transaction: \(sizes.count) batches")
            print("groupCommit: \(receipts.count) sends in \(sizes.count) transactions, largest \(sizes.max()!)")
            // Every member's log has every group message exactly once.
            for user in ids {
                let groupEvents = try await fixture.log(user).compactMap { event -> UInt64? in
                    guard case .message(let message) = event.kind, message.conversation == .group("all") else {
                        return nil
                    }
                    return message.seq
                }
                #expect(groupEvents == groupSeqs)
            }
        }
    }

    @Test(
        "SQLite's file full: the batch is refused, nothing of it stored, nothing acknowledged, earlier messages intact"
    )
    func fullDisk() async throws {
        try await withTemporaryDirectory { folder in
            // The schema alone takes 64 pages of 4 KiB (256 KiB): room beyond it for a dozen 8 KiB messages.
            let fixture = try SQLiteFixture(folder: folder) { $0.maxDatabaseBytes = 384 * 1024 }
            let ids = try await fixture.users("alice", "bob")
            let alice = ids["alice"]!
            var committed = 0
            var failure: CourierStoreError?
            let body = [UInt8](repeating: 0x61, count: 8 * 1024)
            for index in 0..<200 {
                do {
                    _ = try await fixture.store.apply(
                        [.send(.init(sender: alice, id: "f\(index)", to: .user("bob"), body: body))],
                        nowMs: 1
                    )
                    committed += 1
                } catch let error as CourierStoreError {
                    failure = error
                    break
                }
            }
            let error = try #require(failure, "384 KiB held 200 messages of 8 KiB")
            #expect(error.code == .storageFailed)
            #expect(committed > 0)
            // Exactly the committed messages are there, in both logs, whose positions together are gap-free: the
            // refused one left no trace, not even a position taken from the counter.
            let texts = try await fixture.log(ids["bob"]!)
            let own = try await fixture.log(alice)
            #expect(texts.count == committed && own.count == committed)
            #expect((texts + own).map(\.cursor).sorted() == Array(1...UInt64(2 * committed)))
            let page = try await fixture.store.history(for: alice, in: .user("bob"), beforeSeq: 0, limit: 1000)
            #expect(page.messages.map(\.seq) == Array((1...UInt64(committed)).reversed()))
            // Small writes that fit still work (the store is not wedged).
            _ = try await fixture.store.apply(
                [.markRead(user: ids["bob"]!, conversation: .user("alice"), upToSeq: 1)],
                nowMs: 1
            )
        }
    }

    @Test("after a failed write (SQLite's file full), the same origin's writes behind it fail too; others commit")
    func failedOriginKeepsOrder() async throws {
        try await withTemporaryDirectory { folder in
            // The schema's 256 KiB and a little room: a 300 KiB message cannot fit, a short one can.
            let fixture = try SQLiteFixture(folder: folder) { $0.maxDatabaseBytes = 384 * 1024 }
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            var configuration = CommitQueue.Configuration()
            configuration.maxBatchRequests = 1
            let queue = CommitQueue(store: fixture.store, configuration: configuration, clock: { StoreFixture.start })
            let (a, b) = (queue.newOrigin(), queue.newOrigin())
            func send(_ sender: UserID, _ id: String, bytes: Int = 10) -> WriteRequest {
                .send(
                    .init(
                        sender: sender,
                        id: id,
                        to: .user(sender == alice ? "bob" : "alice"),
                        body: .init(repeating: 0x61, count: bytes)
                    )
                )
            }
            // Queued before the queue runs, one write a batch: a1 cannot fit; a2 waits behind it; b1 is another's.
            let a1 = queue.enqueue(send(alice, "a1", bytes: 300 * 1024), origin: a)
            let a2 = queue.enqueue(send(alice, "a2"), origin: a)
            let b1 = queue.enqueue(send(bob, "b1"), origin: b)
            async let running: Void = queue.run()
            func code(_ ticket: CommitTicket) async -> CourierStoreError.Code? {
                do {
                    _ = try await ticket.outcome()
                    return nil
                } catch {
                    return (error as? CourierStoreError)?.code
                }
            }
            #expect(await code(a1) == .storageFailed)
            #expect(await code(a2) == .storageFailed, "a2 would have overtaken a1")
            #expect(await code(b1) == nil)
            // Until the origin is forgotten (its connection gone), its writes fail at once.
            #expect(await code(queue.enqueue(send(alice, "a3"), origin: a)) == .storageFailed)
            queue.forget(origin: a)
            #expect(await code(queue.enqueue(send(alice, "a4"), origin: a)) == nil)
            queue.finish()
            await running
            let stored = try await fixture.store.history(for: alice, in: .user("bob"), beforeSeq: 0, limit: 10)
            #expect(stored.messages.map(\.id) == ["a4", "b1"])
        }
    }

    @Test("the queue commits what is waiting when finished, then refuses new writes", arguments: StoreKind.allCases)
    func finishDrains(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let queue = CommitQueue(store: fixture.store, clock: { 1 })
            // Queued before run() starts, then finish(): still committed.
            let first = queue.enqueue(.send(.init(sender: ids["alice"]!, id: "a", to: .user("bob"), body: [1])))
            let second = queue.enqueue(.send(.init(sender: ids["alice"]!, id: "b", to: .user("bob"), body: [2])))
            queue.finish()
            await queue.run()
            let outcomes = [try await first.outcome(), try await second.outcome()]
            #expect(outcomes.map(refusal) == [nil, nil])
            await expectCode(.storageFailed) {
                _ = try await queue.submit(.send(.init(sender: ids["alice"]!, id: "c", to: .user("bob"), body: [3])))
            }
            #expect(try await fixture.log(ids["bob"]!).count == 2)
        }
    }

    @Test("SQLite: a backup taken while messages are written is a consistent, openable copy")
    func onlineBackup() async throws {
        try await withTemporaryDirectory { folder in
            let fixture = try SQLiteFixture(folder: folder)
            let ids = try await fixture.users("alice", "bob")
            for index in 0..<100 {
                _ = try await fixture.sent(ids["alice"]!, "b\(index)", to: .user("bob"), "\(index)")
            }
            let backup = folder.appendingPathComponent("backup")
            try FileManager.default.createDirectory(at: backup, withIntermediateDirectories: true)
            let copy = backup.appendingPathComponent(SQLiteStore.databaseFileName).path
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for index in 100..<300 {
                        _ = try await fixture.sent(ids["alice"]!, "b\(index)", to: .user("bob"), "\(index)")
                    }
                }
                group.addTask { try fixture.store.backup(to: copy) }
                try await group.waitForAll()
            }
            await expectCode(.storageFailed) { try fixture.store.backup(to: copy) }
            let restored = try SQLiteFixture(folder: backup)
            let log = try await restored.log(ids["bob"]!)
            // A prefix of the writes, whole: both logs' positions together gap-free, sequence numbers too, the user's
            // cursor matching.
            #expect(log.count >= 100)
            let own = try await restored.log(ids["alice"]!)
            #expect(own.count == log.count)
            #expect((log + own).map(\.cursor).sorted() == Array(1...UInt64(2 * log.count)))
            #expect(try await restored.store.logCursor(of: ids["bob"]!) == log.last?.cursor)
            #expect(try await restored.texts(ids["bob"]!) == (0..<log.count).map { "\($0)" })
            _ = try await restored.store.login(user: "alice", password: "pw-alice", deviceName: "restored", nowMs: 1)
        }
    }
}
