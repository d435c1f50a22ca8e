import CourierPostgresTesting
import CourierProtocol
import CourierStore
import CourierStorePostgres
import CourierStoreSQLite
import CourierTesting
import Foundation
import Logging
import PostgresNIO
import Synchronization
import Testing

@Suite("The search index written beside the group commit: searches see their own sends, a lost queue loses nothing")
struct SearchIndexerTests {
    static let now = StoreFixture.start
    /// The index beside the commit, on either database (SQLite's default is in the transaction).
    static var deferred: SearchIndexer.Configuration {
        var configuration = SearchIndexer.Configuration()
        configuration.deferred = true
        return configuration
    }

    /// Runs `body` while a follower writes the store's queue (``StoreBackend/followSearchIndex(logger:)``), then
    /// finishes it and waits for it to return, whatever `body` did: what the follower had left is written by then.
    static func following(_ store: any CourierDatabase, _ body: () async throws -> Void) async throws {
        let follower = Task { await store.followSearchIndex(logger: Logger(label: "test")) }
        let result: Result<Void, any Error>
        do {
            try await body()
            result = .success(())
        } catch {
            result = .failure(error)
        }
        store.searchIndexer.finish()
        await follower.value
        try result.get()
    }

    @Test(
        "by default PostgreSQL indexes beside the commit and SQLite in the transaction",
        arguments: StoreKind.allCases
    )
    func defaults(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            _ = try await fixture.store.apply(
                Self.sends(ids["alice"]!, to: "bob", [("d", "默认 default")]),
                nowMs: Self.now
            )
            #expect(fixture.store.searchIndexer.isDeferred == (kind == .postgres))
            #expect(fixture.store.searchIndexer.queued == (kind == .postgres ? 1 : 0))
            #expect(try await SearchTests.ids(fixture, ids["bob"]!, "默认") == ["d"])
        }
    }

    static func sends(_ sender: UserID, to peer: String, _ texts: [(id: String, text: String)]) -> [WriteRequest] {
        texts.map { .send(.init(sender: sender, id: $0.id, to: .user(peer), body: SearchTests.body($0.text))) }
    }

    @Test(
        "a new message's row commits unindexed and queued; a search writes the queue first and finds it",
        arguments: StoreKind.allCases
    )
    func searchSeesItsOwnSends(kind: StoreKind) async throws {
        try await StoreFixture.with(kind, searchIndex: Self.deferred) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            _ = try await fixture.store.apply(
                Self.sends(alice, to: "bob", [("m1", "明天开会 meeting"), ("m2", "上海 👍 مرحبا")]),
                nowMs: Self.now
            )
            // Committed, not indexed yet: both rows wait in the database and in the queue.
            #expect(fixture.store.searchIndexer.queued == 2)
            #expect(try await fixture.store.highestPendingSearch() != nil)
            #expect(try await SearchTests.ids(fixture, alice, "开会") == ["m1"])
            #expect(try await SearchTests.ids(fixture, bob, "مرحبا") == ["m2"])
            #expect(fixture.store.searchIndexer.queued == 0)
            #expect(try await fixture.store.highestPendingSearch() == nil)
            #expect(fixture.store.searchIndexer.figures.indexed == 2)
        }
    }

    @Test(
        "the follower writes the queue without a search, and writes what is left when it finishes",
        arguments: StoreKind.allCases
    )
    func followerWritesTheQueue(kind: StoreKind) async throws {
        var index = SearchIndexer.Configuration()
        index.deferred = true
        index.delay = .milliseconds(5)
        try await StoreFixture.with(kind, searchIndex: index) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let store = fixture.store
            try await Self.following(store) {
                _ = try await store.apply(Self.sends(ids["alice"]!, to: "bob", [("a", "火车站")]), nowMs: Self.now)
                // The follower counts a batch once its write has committed: the row is seen indexed a moment
                // before the count is (both are waited for, the count checked exactly).
                try await waitUntil("the follower indexed the message") {
                    try await store.highestPendingSearch() == nil && store.searchIndexer.figures.indexed >= 1
                }
                #expect(store.searchIndexer.figures.indexed == 1)
                // Finishing: what came last is written before the follower returns.
                _ = try await store.apply(Self.sends(ids["alice"]!, to: "bob", [("b", "图书馆")]), nowMs: Self.now)
            }
            #expect(try await store.highestPendingSearch() == nil)
            #expect(store.searchIndexer.figures.indexed == 2)
        }
    }

    @Test(
        "a queue lost with its process (a crash after the commit) loses no entry: the sweep indexes the rows",
        arguments: StoreKind.allCases
    )
    func lostQueueIsSwept(kind: StoreKind) async throws {
        var index = SearchIndexer.Configuration()
        index.deferred = true
        index.delay = .milliseconds(5)
        index.sweepInterval = .milliseconds(50)
        try await StoreFixture.with(kind, searchIndex: index) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            let store = fixture.store
            _ = try await store.apply(
                Self.sends(alice, to: "bob", (0..<5).map { ("lost\($0)", "丢失的消息 \($0)") }),
                nowMs: Self.now
            )
            #expect(store.searchIndexer.discardQueue() == 5)
            // Not found until swept: nothing queued, the rows unindexed.
            #expect(try await SearchTests.ids(fixture, bob, "丢失") == [])
            // The follower looks, sees the rows unindexed, and at its next look indexes those still unindexed.
            try await Self.following(store) {
                try await waitUntil("the sweep indexed the lost rows") { try await store.highestPendingSearch() == nil }
            }
            #expect(store.searchIndexer.figures.swept == 5)
            #expect(try await SearchTests.ids(fixture, bob, "丢失", limit: 10) == (0..<5).reversed().map { "lost\($0)" })
        }
    }

    @Test("past the queue's room entries are dropped and swept at once; none is lost", arguments: StoreKind.allCases)
    func overflowIsSwept(kind: StoreKind) async throws {
        var index = SearchIndexer.Configuration()
        index.deferred = true
        index.maxQueued = 2
        index.delay = .milliseconds(5)
        // Only the overflow makes it sweep within the test.
        index.sweepInterval = .seconds(3600)
        try await StoreFixture.with(kind, searchIndex: index) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let store = fixture.store
            _ = try await store.apply(
                Self.sends(ids["alice"]!, to: "bob", (0..<5).map { ("o\($0)", "溢出 overflow \($0)") }),
                nowMs: Self.now
            )
            #expect(store.searchIndexer.queued == 2)
            #expect(store.searchIndexer.figures.dropped == 3)
            try await Self.following(store) {
                try await waitUntil("the overflow swept") { try await store.highestPendingSearch() == nil }
            }
            #expect(store.searchIndexer.figures.swept >= 3)
            #expect(
                try await SearchTests.ids(fixture, ids["bob"]!, "溢出", limit: 10) == (0..<5).reversed().map { "o\($0)" }
            )
        }
    }

    @Test(
        "the queue's memory is bounded in bytes too: a long text past it is left for the sweep",
        arguments: StoreKind.allCases
    )
    func bytesBound(kind: StoreKind) async throws {
        var index = Self.deferred
        index.maxQueuedBytes = 4_096
        try await StoreFixture.with(kind, searchIndex: index) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let long = "长文本 " + String(repeating: "字", count: 2_000)
            _ = try await fixture.store.apply(
                Self.sends(ids["alice"]!, to: "bob", [("short", "短 short"), ("long", long)]),
                nowMs: Self.now
            )
            #expect(fixture.store.searchIndexer.queued == 1)
            #expect(fixture.store.searchIndexer.figures.dropped == 1)
            #expect(try await fixture.store.highestPendingSearch() != nil)
            // The sweep indexes both unindexed rows (the queued one too: the queue then finds it indexed).
            #expect(try await fixture.store.indexPending(limit: 10) == 2)
            #expect(try await SearchTests.ids(fixture, ids["bob"]!, "长文本") == ["long"])
            #expect(try await SearchTests.ids(fixture, ids["bob"]!, "短") == ["short"])
        }
    }

    @Test("the queue is written in transactions of at most max-batch entries", arguments: StoreKind.allCases)
    func batches(kind: StoreKind) async throws {
        var index = Self.deferred
        index.maxBatch = 2
        try await StoreFixture.with(kind, searchIndex: index) { fixture in
            let ids = try await fixture.users("alice", "bob")
            _ = try await fixture.store.apply(
                Self.sends(ids["alice"]!, to: "bob", (0..<5).map { ("b\($0)", "分批 batch \($0)") }),
                nowMs: Self.now
            )
            #expect(try await SearchTests.ids(fixture, ids["bob"]!, "分批", limit: 10).count == 5)
            #expect(fixture.store.searchIndexer.figures.indexed == 5)
            #expect(fixture.store.searchIndexer.figures.batches == 3)
            #expect(try await fixture.store.highestPendingSearch() == nil)
        }
    }

    @Test("an edit or a recall before the queue is written wins over the queued tokens", arguments: StoreKind.allCases)
    func editAndRecallWin(kind: StoreKind) async throws {
        try await StoreFixture.with(kind, searchIndex: Self.deferred) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            let store = fixture.store
            _ = try await store.apply(
                Self.sends(alice, to: "bob", [("e", "苹果 apple"), ("r", "苹果 recalled")]),
                nowMs: Self.now
            )
            var edit = WriteRequest.Edit(
                user: alice,
                conversation: .user("bob"),
                seq: 1,
                body: SearchTests.body("香蕉 banana")
            )
            edit.prepareSearch()
            let outcomes = try await store.apply(
                [.edit(edit), .recall(user: alice, conversation: .user("bob"), id: "r")],
                nowMs: Self.now
            ).outcomes
            for outcome in outcomes {
                if case .refused(let error) = outcome { Issue.record("refused: \(error)") }
            }
            // The queue still holds both messages' first tokens; writing it changes neither.
            #expect(store.searchIndexer.queued == 2)
            #expect(try await SearchTests.ids(fixture, bob, "苹果") == [])
            #expect(try await SearchTests.ids(fixture, bob, "香蕉") == ["e"])
            #expect(try await SearchTests.ids(fixture, bob, "recalled") == [])
            #expect(try await store.highestPendingSearch() == nil)
        }
    }

    @Test("PostgreSQL: writing the queue skips a row another transaction holds, never waits for it; the sweep gets it")
    func postgresSkipsLockedRows() async throws {
        guard TestDatabase.isEnabled else { return }
        try await TestDatabase.with { location in
            var configuration = PostgresStore.Configuration()
            configuration.passwordHasher = StoreFixture.cheapHasher
            configuration.maxConnections = 4
            let store = PostgresStore(location: location, configuration: configuration, logger: TestDatabase.logger)
            try await store.migrate()
            try await store.withRunning {
                let alice = try await store.addUser(name: "alice", password: "pw", nowMs: Self.now).id
                _ = try await store.addUser(name: "bob", password: "pw", nowMs: Self.now)
                _ = try await store.apply(
                    Self.sends(alice, to: "bob", [("held", "锁住的 held"), ("free", "自由的 free")]),
                    nowMs: Self.now
                )
                try await TestDatabase.admin(location) { holder in
                    // Another writer holds the first message's row, as an edit in a group commit would.
                    try await holder.run("BEGIN", logger: TestDatabase.logger)
                    try await holder.run(
                        "SELECT doc FROM message_search WHERE seq = 1 FOR UPDATE",
                        logger: TestDatabase.logger
                    )
                    // Returns while the lock is held: waiting for the row, it would never (the test then fails at
                    // the timeout, and the lock goes with the connection).
                    let done = Mutex(false)
                    let writing = Task {
                        try await store.indexQueuedSearch()
                        done.withLock { $0 = true }
                    }
                    try await waitUntil("the queue written while a row is held", timeout: .seconds(30)) {
                        done.withLock { $0 }
                    }
                    try await writing.value
                    #expect(try await store.highestPendingSearch() != nil)
                    try await holder.run("ROLLBACK", logger: TestDatabase.logger)
                }
                let bob = try await store.user(named: "bob")!.id
                #expect(try await store.search(for: bob, query: "自由", in: nil, before: 0, limit: 5).hits.count == 1)
                #expect(try await store.search(for: bob, query: "锁住", in: nil, before: 0, limit: 5).hits.isEmpty)
                #expect(try await store.indexPending(limit: 10) == 1)
                #expect(try await store.search(for: bob, query: "锁住", in: nil, before: 0, limit: 5).hits.count == 1)
            }
        }
    }

    @Test("PostgreSQL: another node finds a send once its node has written its queue, without a search there")
    func anotherNodeFindsItAfterTheDelay() async throws {
        guard TestDatabase.isEnabled else { return }
        var index = SearchIndexer.Configuration()
        index.delay = .milliseconds(5)
        try await StoreFixture.with(.postgres, searchIndex: index) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let store = fixture.store
            try await Self.following(store) {
                try await fixture.another { other in
                    _ = try await store.apply(
                        Self.sends(ids["alice"]!, to: "bob", [("n", "另一个节点 node")]),
                        nowMs: Self.now
                    )
                    try await waitUntil("the other node finds the send") {
                        try await other.search(for: ids["bob"]!, query: "节点", in: nil, before: 0, limit: 5).hits.count
                            == 1
                    }
                    // Found through the index the first node wrote: the other node's own queue never held it.
                    #expect(other.searchIndexer.figures.indexed == 0)
                }
            }
        }
    }

    @Test(
        "a search writes its own conversations' entries only; the rest wait for the follower",
        arguments: StoreKind.allCases
    )
    func searchFlushesItsOwnConversations(kind: StoreKind) async throws {
        try await StoreFixture.with(kind, searchIndex: Self.deferred) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol", "dave")
            _ = try await fixture.store.apply(
                Self.sends(ids["alice"]!, to: "bob", [("ab", "你好 bob")])
                    + Self.sends(ids["carol"]!, to: "dave", [("cd", "你好 dave")]),
                nowMs: Self.now
            )
            #expect(fixture.store.searchIndexer.queued == 2)
            #expect(try await SearchTests.ids(fixture, ids["bob"]!, "你好") == ["ab"])
            // Carol and dave's message is still queued, unindexed.
            #expect(fixture.store.searchIndexer.queued == 1)
            #expect(try await SearchTests.ids(fixture, ids["dave"]!, "你好") == ["cd"])
            #expect(fixture.store.searchIndexer.queued == 0)
        }
    }

    @Test("the database gone while finishing: the follower gives up at once, and the rows wait for the next start")
    func followerGivesUpWhenFinishing() async throws {
        try await withTemporaryDirectory(prefix: "indexer") { folder in
            var configuration = SQLiteStore.Configuration()
            configuration.passwordHasher = StoreFixture.cheapHasher
            configuration.searchIndex = Self.deferred
            let store = try SQLiteStore(folder: folder, configuration: configuration, logger: Logger(label: "test"))
            let alice = try await store.addUser(name: "alice", password: "pw", nowMs: Self.now).id
            let bob = try await store.addUser(name: "bob", password: "pw", nowMs: Self.now).id
            _ = try await store.apply(Self.sends(alice, to: "bob", [("g", "下次启动 next start")]), nowMs: Self.now)
            try store.close()
            store.searchIndexer.finish()
            let done = Mutex(false)
            let follower = Task {
                await store.followSearchIndex(logger: Logger(label: "test"))
                done.withLock { $0 = true }
            }
            try await waitUntil("the follower gave up", timeout: .seconds(30)) { done.withLock { $0 } }
            await follower.value
            // Not lost: the next start indexes it.
            let reopened = try SQLiteStore(folder: folder, configuration: configuration, logger: Logger(label: "test"))
            defer { try? reopened.close() }
            #expect(try await reopened.highestPendingSearch() != nil)
            #expect(try await reopened.indexPending(limit: 10) == 1)
            #expect(try await reopened.search(for: bob, query: "启动", in: nil, before: 0, limit: 5).hits.count == 1)
        }
    }
}
