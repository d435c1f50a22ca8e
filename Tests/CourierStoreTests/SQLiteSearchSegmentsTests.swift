import CourierStore
import CourierStoreSQLite
import CourierTesting
import Foundation
import GRDB
import Logging
import Testing

/// FTS5 keeps a transaction's new terms in memory and writes them as one segment at the commit, unless a later
/// statement of the transaction opens a savepoint: then it writes what it holds as a segment of its own. The search
/// index must be the transaction's last write, in one statement, or each message costs a segment (and the merging
/// of hundreds of them was half of SQLite's writer's time).
@Suite("SQLite: a batch's messages go into the search index as one FTS5 segment, in the commit and beside it")
struct SQLiteSearchSegmentsTests {
    /// The FTS5 segments the index holds (with merging off, one per flush of FTS5's in-memory terms).
    static func segments(_ folder: URL) throws -> Int {
        let queue = try DatabaseQueue(path: folder.appendingPathComponent(SQLiteStore.databaseFileName).path)
        defer { try? queue.close() }
        return try queue.read { try Int.fetchOne($0, sql: "SELECT count(DISTINCT segid) FROM message_fts_idx") ?? 0 }
    }

    /// Runs `body` with a store whose FTS5 table merges no segments (so that each flush stays countable).
    static func withStore(
        deferred: Bool,
        _ body: (SQLiteStore, URL, [String: UserID]) async throws -> Void
    ) async throws {
        try await withTemporaryDirectory(prefix: "segments") { folder in
            var configuration = SQLiteStore.Configuration()
            configuration.passwordHasher = StoreFixture.cheapHasher
            configuration.searchIndex.deferred = deferred
            let store = try SQLiteStore(folder: folder, configuration: configuration, logger: Logger(label: "test"))
            defer { try? store.close() }
            var ids: [String: UserID] = [:]
            for name in ["alice", "bob", "carol"] {
                ids[name] = try await store.addUser(name: name, password: "pw-\(name)-1234", nowMs: StoreFixture.start)
                    .id
            }
            let queue = try DatabaseQueue(path: folder.appendingPathComponent(SQLiteStore.databaseFileName).path)
            try await queue.write {
                try $0.execute(sql: "INSERT INTO message_fts(message_fts, rank) VALUES ('automerge', 0)")
            }
            try queue.close()
            try await body(store, folder, ids)
        }
    }

    /// A batch as the group commit takes it: sends to two conversations, an edit and a recall among them.
    static func batch(_ round: Int, _ ids: [String: UserID]) -> [WriteRequest] {
        let alice = ids["alice"]!
        // Tokens prepared as a server does on the event loop (the edit's are not: its own text must be indexed,
        // never the tokens its message came with).
        var requests: [WriteRequest] = (0..<64).map { index in
            var send = WriteRequest.Send(
                sender: alice,
                id: "r\(round)-\(index)",
                to: .user(index % 2 == 0 ? "bob" : "carol"),
                body: SearchTests.body("第\(round)批 第\(index)条 上海 message\(index) مرحبا 🚀")
            )
            send.prepareSearch()
            return .send(send)
        }
        requests.insert(
            // r0-0 and r1-0 are the first of each round's 32 messages to bob.
            .edit(
                .init(
                    user: alice,
                    conversation: .user("bob"),
                    seq: UInt64(round * 32 + 1),
                    body: SearchTests.body("改了 北京")
                )
            ),
            at: 10
        )
        requests.insert(.recall(user: alice, conversation: .user("carol"), id: "r\(round)-1"), at: 20)
        return requests
    }

    /// The ids a search finds, every page followed.
    static func found(_ store: SQLiteStore, _ user: UserID, _ query: String) async throws -> [String] {
        var (ids, before) = ([String](), UInt64(0))
        for _ in 0..<20 {
            let page = try await store.search(for: user, query: query, in: nil, before: before, limit: 50)
            ids += page.hits.map(\.message.id)
            guard page.more else { return ids }
            before = page.next
        }
        Issue.record("more than 20 pages for \(query)")
        return ids
    }

    @Test("in the transaction: one segment per batch, and every message found")
    func inTheTransaction() async throws {
        try await Self.withStore(deferred: false) { store, folder, ids in
            for round in 0..<2 {
                let outcomes = try await store.apply(Self.batch(round, ids), nowMs: StoreFixture.start).outcomes
                #expect(outcomes.allSatisfy { if case .refused = $0 { false } else { true } })
                // One flush for the batch (64 messages, an edit and a recall); a segment per message before.
                #expect(try Self.segments(folder) == round + 1)
            }
            // 128 sent, two recalled, two edited away from 上海 (in the batch that sent them).
            #expect(try await Self.found(store, ids["alice"]!, "上海").count == 124)
            #expect(try await Self.found(store, ids["bob"]!, "北京").sorted() == ["r0-0", "r1-0"])
            #expect(try await Self.found(store, ids["carol"]!, "مرحبا").count == 62)
            // A batch that edits and recalls older messages besides its sends: a segment for the edits, one for
            // the recalls, one for the sends (one per edit and per recall, written row by row).
            let alice = ids["alice"]!
            var older: [WriteRequest] = [
                // r0-2 is bob's second message, r1-4 his 35th; r0-5 and r1-7 went to carol.
                .edit(.init(user: alice, conversation: .user("bob"), seq: 2, body: SearchTests.body("北京 again"))),
                .recall(user: alice, conversation: .user("carol"), id: "r0-5"),
                .edit(.init(user: alice, conversation: .user("bob"), seq: 35, body: SearchTests.body("又 北京"))),
                .recall(user: alice, conversation: .user("carol"), id: "r1-7"),
            ]
            older += (0..<4).map {
                .send(.init(sender: alice, id: "late\($0)", to: .user("bob"), body: SearchTests.body("上海 晚了")))
            }
            let outcomes = try await store.apply(older, nowMs: StoreFixture.start).outcomes
            #expect(outcomes.allSatisfy { if case .refused = $0 { false } else { true } })
            #expect(try Self.segments(folder) == 2 + 3)
            #expect(try await Self.found(store, alice, "上海").count == 124 + 4 - 4)
            #expect(try await Self.found(store, ids["bob"]!, "北京").sorted() == ["r0-0", "r0-2", "r1-0", "r1-4"])
        }
    }

    @Test("beside the commit: the follower's batch is one segment too")
    func besideTheCommit() async throws {
        try await Self.withStore(deferred: true) { store, folder, ids in
            let outcomes = try await store.apply(Self.batch(0, ids), nowMs: StoreFixture.start).outcomes
            #expect(outcomes.allSatisfy { if case .refused = $0 { false } else { true } })
            // The commit indexes only the message the batch edited (an edit's tokens are written with it); the
            // other rows wait, unindexed, for the follower, which writes them in one transaction: one more segment.
            // (The follower starts after the count: the entries wait in its queue meanwhile.)
            #expect(try Self.segments(folder) == 1)
            let follower = Task { await store.followSearchIndex(logger: Logger(label: "test")) }
            store.searchIndexer.finish()
            await follower.value
            #expect(try Self.segments(folder) == 2)
            #expect(try await Self.found(store, ids["alice"]!, "上海").count == 62)
            #expect(try await Self.found(store, ids["bob"]!, "北京") == ["r0-0"])
        }
    }
}
