import CourierStore
import Testing

/// The transactions the store's rules run in (``StoreBackend/transaction(doing:_:)``), on both databases: on SQLite
/// a transaction spans several accesses to its writer, in a turn of its own, and must end whatever its body does.
@Suite("Transactions of the store's rules")
struct TransactionTests {
    struct Refusal: Error {}

    @Test(
        "a transaction whose body fails after writing leaves nothing, and the next one commits",
        arguments: StoreKind.allCases
    )
    func failedBody(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let backend = try #require(fixture.store as? any StoreBackend)
            try await Self.failAfterWriting(backend)
            #expect(try await fixture.store.user(named: "ghost") == nil)
            // The writer is free again: a rule's transaction and a group commit both go through.
            _ = try await fixture.store.addUser(name: "alice", password: "pw", nowMs: StoreFixture.start)
            _ = try await fixture.store.apply([], nowMs: StoreFixture.start)
            #expect(try await fixture.store.user(named: "alice") != nil)
        }
    }

    private static func failAfterWriting<Backend: StoreBackend>(_ backend: Backend) async throws {
        await #expect(throws: CourierStoreError.self) {
            try await backend.transaction(doing: "fail") { transaction in
                _ = try await transaction.insertUser(name: "ghost", passwordHash: "x", nowMs: StoreFixture.start)
                throw CourierStoreError(.invalidRequest, "refused after writing")
            }
        }
        // Another error than a refusal is a storage failure, and changes nothing either.
        await #expect(throws: CourierStoreError.self) {
            try await backend.transaction(doing: "fail") { transaction in
                _ = try await transaction.insertUser(name: "ghost", passwordHash: "x", nowMs: StoreFixture.start)
                throw Refusal()
            }
        }
    }

    @Test(
        "a transaction cancelled while its body waits, after writing, rolls back; the writer takes the next",
        arguments: StoreKind.allCases
    )
    func cancelled(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let backend = try #require(fixture.store as? any StoreBackend)
            try await Self.cancelAfterWriting(backend)
            #expect(try await fixture.store.user(named: "ghost") == nil)
            _ = try await fixture.store.addUser(name: "alice", password: "pw", nowMs: StoreFixture.start)
            #expect(try await fixture.store.user(named: "alice") != nil)
        }
    }

    private static func cancelAfterWriting<Backend: StoreBackend>(_ backend: Backend) async throws {
        let (wrote, written) = AsyncStream.makeStream(of: Void.self)
        let task = Task {
            try await backend.transaction(doing: "wait") { transaction in
                _ = try await transaction.insertUser(name: "ghost", passwordHash: "x", nowMs: StoreFixture.start)
                written.yield()
                // Waits until cancelled.
                let (never, _) = AsyncStream.makeStream(of: Void.self)
                for await _ in never {}
                try Task.checkCancellation()
            }
        }
        for await _ in wrote { break }
        task.cancel()
        await #expect(throws: (any Error).self) { try await task.value }
    }

    @Test("many rule transactions and group commits at once on one SQLite store take turns, and all commit")
    func turns() async throws {
        try await StoreFixture.with(.sqlite) { fixture in
            let store = fixture.store
            let alice = try await store.addUser(name: "alice", password: "pw", nowMs: 1).id
            _ = try await store.addUser(name: "bob", password: "pw", nowMs: 1)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<40 {
                    group.addTask {
                        if index % 2 == 0 {
                            try await store.createGroup(name: "g\(index)", owner: "alice", members: ["bob"], nowMs: 2)
                        } else {
                            let send = WriteRequest.Send(sender: alice, id: "m\(index)", to: .user("bob"), body: [1])
                            let outcomes = try await store.apply([.send(send)], nowMs: 2).outcomes
                            guard case .sent = outcomes.first else {
                                Issue.record("send \(index): \(outcomes)")
                                return
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await store.groupNames().count == 20)
            let page = try await store.history(for: alice, in: .user("bob"), beforeSeq: 0, limit: 100)
            #expect(page.messages.count == 20)
        }
    }
}
