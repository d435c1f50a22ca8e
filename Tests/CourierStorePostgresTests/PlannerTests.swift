import CourierPostgresTesting
import CourierStore
import Foundation
import PostgresNIO
import Testing

@testable import CourierStorePostgres

@Suite(
    "PostgreSQL: the group commit's keyed statements are planned by their indexes, whatever the tables' sizes",
    .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
)
struct PlannerTests {
    /// The connection's `random_page_cost`, as PostgreSQL shows it.
    static func pageCost(_ connection: PostgresConnection) async throws -> String? {
        try await connection.value("SHOW random_page_cost", as: String.self, logger: TestDatabase.logger)
    }

    @Test("the store's connections cost a random page read at 1.1: a batch's name lookup reads the name index")
    func namesByIndex() async throws {
        try await TestDatabase.with { location in
            let store = PostgresStore(location: location, logger: TestDatabase.logger)
            try await store.migrate()
            // 12,000 users, as a small server has (the bench's database had as many when a batch's name lookup was
            // found scanning them all, at PostgreSQL's default cost of 4); a batch asks for 200 by name, in any case.
            try await TestDatabase.admin(location) { connection in
                try await connection.run(
                    "INSERT INTO users (name, created_ms) SELECT 'user' || g, 0 FROM generate_series(1, 12000) g",
                    logger: TestDatabase.logger
                )
                try await connection.run("ANALYZE users", logger: TestDatabase.logger)
            }
            let names = (1...200).map { "USER\($0 * 60)" }
            let (cost, plan) = try await store.withRunning {
                try await store.read(doing: "explain") { connection in
                    let cost = try await Self.pageCost(connection)
                    var plan: [String] = []
                    // The statement the group commit's waves run for user names (PostgresGroupCommit.userIDs).
                    for try await line in try await connection.query(
                        """
                        EXPLAIN SELECT n.asked, u.id FROM unnest(\(names)::text[]) AS n(asked)
                        JOIN users u ON lower(u.name) = lower(n.asked)
                        """,
                        logger: store.logger
                    ).decode(String.self) {
                        plan.append(line)
                    }
                    return (cost, plan.joined(separator: "\n"))
                }
            }
            #expect(cost == "1.1")
            #expect(plan.contains("Index Scan using users_by_name"), "\(plan)")
            #expect(!plan.contains("Seq Scan on users"), "\(plan)")
        }
    }

    @Test(
        "the search index's updates find each document by its key, not by the pending rows' index and its entries left behind by every row indexed"
    )
    func searchTokensByKey() async throws {
        try await TestDatabase.with { location in
            let store = PostgresStore(location: location, logger: TestDatabase.logger)
            try await store.migrate()
            // 20,000 rows indexed since the table's last vacuum (none: autovacuum is off for it here), each leaving an
            // entry in `message_search_pending`; then 200 new ones pending, as a batch's commit leaves them.
            try await TestDatabase.admin(location) { connection in
                for statement in [
                    "ALTER TABLE message_search SET (autovacuum_enabled = false)",
                    "INSERT INTO message_search (conversation_id, seq) SELECT g % 500, g FROM generate_series(1, 20000) g",
                    "UPDATE message_search SET tokens = ARRAY['你好', 'hello']",
                    "INSERT INTO message_search (conversation_id, seq) SELECT g % 50, g FROM generate_series(20001, 20200) g",
                    "ANALYZE message_search",
                ] {
                    try await connection.run(PostgresQuery(unsafeSQL: statement), logger: TestDatabase.logger)
                }
            }
            let pendingRows = try await TestDatabase.admin(location) { connection in
                try await connection.rows(
                    "SELECT doc, conversation_id, seq FROM message_search WHERE tokens IS NULL ORDER BY doc",
                    logger: TestDatabase.logger
                ).map {
                    (
                        doc: try $0.get("doc", as: Int64.self),
                        key: (try $0.get("conversation_id", as: Int64.self), try $0.get("seq", as: Int64.self))
                    )
                }
            }
            #expect(pendingRows.count == 200)
            let atKeys = pendingRows.prefix(100).map { (conversation: $0.key.0, seq: $0.key.1, tokens: ["こんにちは"]) }
            let byDoc = pendingRows.suffix(100).map { (doc: $0.doc, tokens: ["👋🏽"]) }
            let (plans, updated) = try await store.withRunning {
                let plans = try await store.read(doing: "explain") { connection in
                    var plans: [[String]] = []
                    for query in [
                        PostgresTransaction.searchTokensStatement(at: atKeys),
                        PostgresTransaction.searchTokensStatement(byDoc: byDoc),
                    ] {
                        var plan: [String] = []
                        let explain = PostgresQuery(unsafeSQL: "EXPLAIN " + query.sql, binds: query.binds)
                        for try await line in try await connection.query(explain, logger: store.logger)
                            .decode(String.self)
                        {
                            plan.append(line)
                        }
                        plans.append(plan)
                    }
                    return plans
                }
                // And the statements index the rows they name, every one, and no other.
                try await store.transaction(doing: "index") { try await $0.setSearchTokens(at: atKeys) }
                let updated = try await store.transaction(doing: "index") { try await $0.setSearchTokens(byDoc) }
                return (plans, updated)
            }
            #expect(plans[0].contains { $0.contains("Index Cond: ((conversation_id = ") }, "\(plans[0])")
            #expect(plans[1].contains { $0.contains("Index Cond: (doc = ") }, "\(plans[1])")
            for plan in plans {
                // The pending rows' index may be probed for a document (its key is the doc), never read whole.
                for (index, line) in plan.enumerated() where line.contains("message_search_pending") {
                    #expect(plan.dropFirst(index + 1).first?.contains("Index Cond: (doc = ") == true, "\(plan)")
                }
                #expect(!plan.contains { $0.contains("Seq Scan on message_search") }, "\(plan)")
            }
            #expect(updated == 100)
            let left = try await TestDatabase.admin(location) { connection in
                try await connection.value(
                    "SELECT count(*)::bigint FROM message_search WHERE tokens IS NULL OR NOT (tokens && ARRAY['こんにちは', '👋🏽'])",
                    as: Int64.self,
                    logger: TestDatabase.logger
                )
            }
            #expect(left == 20000, "only the 200 pending rows take the new tokens")
        }
    }

    @Test("a server told 0 (`--limit postgres-random-page-cost=0`) leaves the database's own page cost")
    func databasesOwnCost() async throws {
        try await TestDatabase.with { location in
            var settings = StoreSettings()
            settings.postgresRandomPageCost = nil
            let store = PostgresStore(
                location: location,
                configuration: PostgresStore.Configuration(serving: settings, node: "planner"),
                logger: TestDatabase.logger
            )
            let (ours, theirs) = try await store.withRunning {
                try await store.read(doing: "show") { connection in
                    let ours = try await Self.pageCost(connection)
                    let theirs = try await connection.value(
                        "SELECT boot_val FROM pg_settings WHERE name = 'random_page_cost'",
                        as: String.self,
                        logger: store.logger
                    )
                    return (ours, theirs)
                }
            }
            #expect(ours == theirs && ours == "4", "\(ours), \(theirs)")
        }
    }
}
