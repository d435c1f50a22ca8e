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
