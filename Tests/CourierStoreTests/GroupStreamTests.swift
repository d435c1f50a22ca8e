import CourierPostgresTesting
import CourierStore
import CourierTesting
import Foundation
import GRDB
import PostgresNIO
import Testing

@testable import CourierStorePostgres
@testable import CourierStoreSQLite

/// A group's message is stored once (`group_events`), and each member's log reads it through its spans of
/// membership (`group_spans`, docs/LOG-DESIGN.md, step 3). What a member's log holds must be what it held when the
/// message was written into every member's log: each message sent while it belonged, once, and none other.
@Suite("A group's messages stored once: each member reads exactly those sent while it belonged, on both databases")
struct GroupStreamTests {
    /// The texts of the group's messages in a log, in its order.
    static func groupTexts(_ log: [StoredEvent]) -> [String] {
        log.compactMap { event in
            guard case .message(let message) = event.kind, message.conversation == .group("tea") else { return nil }
            return String(decoding: message.body, as: UTF8.self)
        }
    }

    /// Adds and removes members of a group, as the administrator.
    static func change(
        _ store: any CourierDatabase,
        of group: String = "tea",
        add: [String] = [],
        remove: [String] = []
    ) async throws {
        try await store.changeMembers(of: group, actor: nil, add: add, remove: remove, nowMs: StoreFixture.start)
    }

    @Test(
        "join, leave, rejoin, and leave and rejoin with nothing between: each member's log, heads and acknowledgements",
        arguments: StoreKind.allCases
    )
    func membershipEdges(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol")
            let (alice, bob, carol) = (ids["alice"]!, ids["bob"]!, ids["carol"]!)
            try await fixture.store.createGroup(
                name: "tea",
                owner: "alice",
                members: ["bob"],
                nowMs: StoreFixture.start
            )
            _ = try await fixture.sent(alice, "m1", to: .group("tea"), "早上好 ☀️")
            try await Self.change(fixture.store, add: ["carol"])
            let carolJoined = try await fixture.store.logCursor(of: carol)
            // carol's phone from here (a device starts at its user's head)
            let phone = try await fixture.store.login(
                user: "carol",
                password: "pw-carol",
                deviceName: "phone",
                nowMs: StoreFixture.start
            ).device.id
            _ = try await fixture.sent(bob, "m2", to: .group("tea"), "こんにちは")
            // carol's acknowledgement of what she has tells the sender of what reached her (bob, up to seq 2),
            // and not alice, whose m1 came before carol joined.
            let (aliceBefore, bobBefore) = (
                try await fixture.store.logCursor(of: alice), try await fixture.store.logCursor(of: bob)
            )
            _ = try await fixture.store.apply(
                [.ack(user: carol, device: phone, cursor: try await fixture.store.logCursor(of: carol))],
                nowMs: StoreFixture.start
            )
            func delivered(_ user: UserID, after cursor: UInt64) async throws -> [UInt64] {
                try await fixture.log(user, after: cursor).compactMap { event in
                    guard case .receipt(.group("tea"), "carol", .delivered, let upTo) = event.kind else { return nil }
                    return upTo
                }
            }
            let acknowledged = (
                bob: try await delivered(bob, after: bobBefore), alice: try await delivered(alice, after: aliceBefore)
            )
            try await Self.change(fixture.store, remove: ["carol"])
            _ = try await fixture.sent(alice, "m3", to: .group("tea"), "مرحبا بالجميع")
            // A device of carol's that had read only to her joining still reads what came while she belonged.
            #expect(Self.groupTexts(try await fixture.log(carol, after: carolJoined)) == ["こんにちは"])
            try await Self.change(fixture.store, add: ["carol"])
            _ = try await fixture.sent(alice, "m4", to: .group("tea"), "👋 欢迎回来")
            // Out and in again with no message between: the span reopens, nothing twice.
            try await Self.change(fixture.store, remove: ["carol"])
            try await Self.change(fixture.store, add: ["carol"])
            _ = try await fixture.sent(carol, "m5", to: .group("tea"), "谢谢 🙏")

            let everything = ["早上好 ☀️", "こんにちは", "مرحبا بالجميع", "👋 欢迎回来", "谢谢 🙏"]
            #expect(Self.groupTexts(try await fixture.log(alice)) == everything)
            #expect(Self.groupTexts(try await fixture.log(bob)) == everything)
            #expect(Self.groupTexts(try await fixture.log(carol)) == ["こんにちは", "👋 欢迎回来", "谢谢 🙏"])

            // One position for every member: the message is the same entry in each log.
            var positions: [String: Set<UInt64>] = [:]
            for user in [alice, bob, carol] {
                let log = try await fixture.log(user)
                #expect(zip(log, log.dropFirst()).allSatisfy { $0.cursor < $1.cursor })
                #expect(try await fixture.store.logCursor(of: user) == log.last?.cursor)
                for event in log {
                    guard case .message(let message) = event.kind else { continue }
                    positions[String(decoding: message.body, as: UTF8.self), default: []].insert(event.cursor)
                }
            }
            #expect(positions.count == 5 && positions.values.allSatisfy { $0.count == 1 }, "\(positions)")
            #expect(
                try await fixture.count("SELECT count(*) FROM group_events") == 5,
                "a group's message is one row"
            )
            #expect(try await fixture.count("SELECT count(*) FROM events WHERE kind = 1") == 0)

            // The nodes' read of several logs at once, bounded above, reads the same.
            let bobLog = try await fixture.log(bob)
            let span = LogSpan(after: bobLog[0].cursor, upTo: bobLog[bobLog.count - 2].cursor)
            let read = try await fixture.store.events(
                for: [bob: span, carol: LogSpan(after: 0, upTo: .max)],
                limit: 100
            )
            #expect(read[bob]?.map(\.cursor) == Array(bobLog.dropFirst().dropLast()).map(\.cursor))
            #expect(read[carol]?.map(\.cursor) == (try await fixture.log(carol)).map(\.cursor))

            #expect(acknowledged == (bob: [2], alice: []))
        }
    }

    @Test(
        "a reply's quote, read back, is seen as the membership it came in allowed, whatever came after",
        arguments: StoreKind.allCases
    )
    func quotesByTheirSpan(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol", "dave")
            let (alice, bob, carol, dave) = (ids["alice"]!, ids["bob"]!, ids["carol"]!, ids["dave"]!)
            try await fixture.store.createGroup(
                name: "tea",
                owner: "alice",
                members: ["bob", "carol"],
                nowMs: StoreFixture.start
            )
            _ = try await fixture.sent(alice, "q1", to: .group("tea"), "原文 📜")
            try await Self.change(fixture.store, add: ["dave"])
            let reply = try await fixture.store.apply(
                [
                    .send(
                        .init(
                            sender: bob,
                            id: "r1",
                            to: .group("tea"),
                            body: Array("回复 ↩️".utf8),
                            replyTo: .id("q1", from: "alice")
                        )
                    )
                ],
                nowMs: StoreFixture.start
            )
            // As handed over when it was sent: carol may see the quote, dave (who joined after it) may not.
            var handed: [UserID: Bool] = [:]
            for user in [carol, dave] {
                guard case .message(let message)? = reply.fresh[user]?.events.last?.kind else { continue }
                handed[user] = message.replyTo?.visible
            }
            #expect(handed == [carol: true, dave: false])
            // carol leaves and comes back later; read back, each sees it as it was handed.
            try await Self.change(fixture.store, remove: ["carol"])
            _ = try await fixture.sent(alice, "m3", to: .group("tea"), "后来 ⏳")
            try await Self.change(fixture.store, add: ["carol"])
            for (user, visible) in [(carol, true), (dave, false)] {
                let quotes = try await fixture.log(user).compactMap { event -> StoredReply? in
                    guard case .message(let message) = event.kind, message.id == "r1" else { return nil }
                    return message.replyTo
                }
                #expect(quotes.map(\.visible) == [visible], "\(user)")
                #expect(quotes.map { String(decoding: $0.body, as: UTF8.self) } == [visible ? "原文 📜" : ""])
            }
        }
    }

    @Test(
        "pages of every size over two busy groups and a direct chat, one left midway: the same events, in order, once",
        arguments: StoreKind.allCases
    )
    func pagesOverSeveralGroups(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol")
            let (alice, bob, carol) = (ids["alice"]!, ids["bob"]!, ids["carol"]!)
            for group in ["tea", "chai"] {
                try await fixture.store.createGroup(
                    name: group,
                    owner: "alice",
                    members: ["bob", "carol"],
                    nowMs: StoreFixture.start
                )
            }
            let seed = TestSeed.make(for: "GroupStreamTests.pagesOverSeveralGroups(\(kind.rawValue))")
            var random = SeededRandom(seed: seed)
            var sent = 0
            for round in 0..<40 {
                if round == 25 {
                    try await Self.change(fixture.store, of: "chai", remove: ["carol"])
                }
                let (sender, to): (UserID, Conversation) =
                    switch random.next() % 4 {
                    case 0: (alice, .group("tea"))
                    case 1: (bob, .group("chai"))
                    case 2: (carol, .user("bob"))
                    default: (alice, .group("chai"))
                    }
                sent += 1
                _ = try await fixture.sent(sender, "m\(round)", to: to, "第\(round)条 🍵")
            }
            let whole = try await fixture.store.events(for: carol, after: 0, limit: 1_000).map(\.cursor)
            #expect(whole.count >= 20 && zip(whole, whole.dropFirst()).allSatisfy { $0 < $1 })
            for size in [1, 2, 3, 7, 16] {
                var paged: [UInt64] = []
                var cursor: UInt64 = 0
                while true {
                    let page = try await fixture.store.events(for: carol, after: cursor, limit: size)
                    #expect(page.count <= size)
                    guard let last = page.last else { break }
                    paged += page.map(\.cursor)
                    cursor = last.cursor
                }
                #expect(paged == whole, "pages of \(size), seed \(seed)")
            }
            #expect(sent == 40)
        }
    }

    @Test("SQLite: a page's work does not grow with the group's backlog before the join or after the cursor")
    func pageCostBounded() async throws {
        // SQLite's own count of steps, not time: the same on any machine. A bound SQLite did not use as the index's
        // range (the whole stream after the cursor walked, row by row) makes the larger backlog cost ~8 times more.
        func steps(backlog: Int) async throws -> Int {
            try await withTemporaryDirectory { folder in
                let fixture = try SQLiteFixture(folder: folder)
                let ids = try await fixture.users("alice", "carol")
                let (alice, carol) = (ids["alice"]!, ids["carol"]!)
                try await fixture.store.createGroup(name: "tea", owner: "alice", members: [], nowMs: StoreFixture.start)
                func send(_ range: Range<Int>) async throws {
                    let requests = range.map { index in
                        WriteRequest.send(
                            .init(sender: alice, id: "m\(index)", to: .group("tea"), body: Array("第\(index)条 🍵".utf8))
                        )
                    }
                    _ = try await fixture.store.apply(requests, nowMs: StoreFixture.start)
                }
                try await send(0..<backlog)
                try await Self.change(fixture.store, add: ["carol"])
                try await send(backlog..<(2 * backlog))
                let page = try await fixture.store.events(for: carol, after: 0, limit: 8)
                #expect(page.count == 8)
                #expect(Self.groupTexts(page).first == "第\(backlog)条 🍵")
                return try await fixture.store.eventsQuerySteps(for: carol, after: 0, limit: 8)
            }
        }
        let small = try await steps(backlog: 50)
        let large = try await steps(backlog: 400)
        #expect(large < small * 3 / 2, "a page took \(small) steps behind 100 messages, \(large) behind 800")
    }

    @Test("migration v15: the members of groups from before read the group's new messages; others do not (SQLite)")
    func sqliteMigration() async throws {
        try await withTemporaryDirectory { folder in
            do {
                let queue = try DatabaseQueue(path: folder.appendingPathComponent(SQLiteStore.databaseFileName).path)
                try Schema.migrator.migrate(queue, upTo: "v14-log-positions")
                try await queue.write { db in
                    for (id, name) in [(1, "alice"), (2, "bob"), (3, "carol")] {
                        try db.execute(
                            sql: "INSERT INTO users (id, name, created_ms) VALUES (?, ?, 0)",
                            arguments: [id, name]
                        )
                    }
                    try db.execute(
                        sql: """
                            INSERT INTO conversations (id, kind, name, owner_id, last_seq, created_ms)
                            VALUES (10, 2, 'tea', 1, 3, 0);
                            INSERT INTO members (conversation_id, user_id, joined_seq, read_seq, delivered_seq, role)
                            VALUES (10, 1, 0, 3, 3, 2), (10, 2, 3, 3, 3, 0);
                            """
                    )
                }
            }
            let fixture = try SQLiteFixture(folder: folder)
            try await Self.checkMigrated(fixture.store)
        }
    }

    @Test(
        "migration v15: the same over PostgreSQL's statements",
        .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
    )
    func postgresMigration() async throws {
        try await TestDatabase.with { location in
            let store = PostgresStore(location: location, logger: TestDatabase.logger)
            #expect(try await store.migrate().contains("v15-group-events"))
            let migration = try #require(PostgresSchema.migrations.first { $0.version == "v15-group-events" })
            try await TestDatabase.admin(location) { connection in
                let logger = TestDatabase.logger
                try await connection.run(
                    """
                    INSERT INTO users (id, name, created_ms) VALUES (1, 'alice', 0), (2, 'bob', 0), (3, 'carol', 0)
                    """,
                    logger: logger
                )
                try await connection.run(
                    """
                    INSERT INTO conversations (id, kind, name, owner_id, last_seq, created_ms)
                    VALUES (10, 2, 'tea', 1, 3, 0)
                    """,
                    logger: logger
                )
                try await connection.run(
                    """
                    INSERT INTO members (conversation_id, user_id, joined_seq, read_seq, delivered_seq, role)
                    VALUES (10, 1, 0, 3, 3, 2), (10, 2, 3, 3, 3, 0)
                    """,
                    logger: logger
                )
                // The migration's statements, as they ran before these rows existed, run again over them.
                try await connection.run("DROP TABLE group_events", logger: logger)
                try await connection.run("DROP TABLE group_spans", logger: logger)
                for statement in migration.statements {
                    try await connection.run(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
            }
            try await store.withRunning { try await Self.checkMigrated(store) }
        }
    }

    /// After the migration: bob, a member since seq 3, and alice read the group's next message; carol does not.
    static func checkMigrated(_ store: any CourierDatabase) async throws {
        let (alice, bob, carol) = (UserID(rawValue: 1), UserID(rawValue: 2), UserID(rawValue: 3))
        let outcome = try await store.apply(
            [.send(.init(sender: bob, id: "b1", to: .group("tea"), body: Array("迁移之后 ✅".utf8)))],
            nowMs: 1
        )
        guard case .sent(let receipt) = outcome.outcomes.first else {
            Issue.record("the send was refused: \(outcome.outcomes)")
            return
        }
        #expect(receipt.seq == 4 && receipt.recipients == 2)
        for user in [alice, bob] {
            let read = try await store.events(for: user, after: 0, limit: 10)
            #expect(Self.groupTexts(read) == ["迁移之后 ✅"], "\(user)")
            #expect(try await store.logCursor(of: user) == read.last?.cursor)
        }
        #expect(try await store.events(for: carol, after: 0, limit: 10).isEmpty)
    }
}
