import CourierPostgresTesting
import CourierStore
import CourierTesting
import Foundation
import GRDB
import PostgresNIO
import Testing

@testable import CourierStorePostgres
@testable import CourierStoreSQLite

/// Migration `v14-log-positions`: every user's log takes its positions from one counter from then on. The counter
/// must start above every cursor a device may hold, or a new entry could take a position at or below one already
/// acknowledged, and that device would never read it.
@Suite("Migration v14-log-positions: the logs' one counter starts above every cursor stored before, on both databases")
struct LogPositionsMigrationTests {
    /// The users as a database from before stores them: alice's log ends at 7, bob's at 41, carol's is empty.
    static let users: [(id: Int64, name: String, cursor: Int64)] = [(1, "alice", 7), (2, "bob", 41), (3, "carol", 0)]

    /// What both databases must show after the migration: carol writes to alice, and both entries take positions
    /// above bob's 41; a device of alice's that stored up to her old 7 reads the message after it.
    static func check(_ store: any CourierDatabase) async throws {
        let (alice, carol) = (UserID(rawValue: 1), UserID(rawValue: 3))
        // The heads moved out of the users' rows, as they were.
        for user in Self.users {
            #expect(try await store.logCursor(of: UserID(rawValue: user.id)) == UInt64(user.cursor), "\(user.name)")
        }
        let outcome = try await store.apply(
            [.send(.init(sender: carol, id: "c1", to: .user("alice"), body: Array("你好 🌏".utf8)))],
            nowMs: 1
        )
        guard case .sent = outcome.outcomes.first else {
            Issue.record("the send was refused: \(outcome.outcomes)")
            return
        }
        let aliceCursor = try await store.logCursor(of: alice)
        let carolCursor = try await store.logCursor(of: carol)
        #expect(Set([aliceCursor, carolCursor]) == [42, 43])
        let read = try await store.events(for: alice, after: 7, limit: 10)
        #expect(read.map(\.cursor) == [aliceCursor])
        guard case .message(let message)? = read.first?.kind else {
            Issue.record("alice read \(read)")
            return
        }
        #expect(String(decoding: message.body, as: UTF8.self) == "你好 🌏")
    }

    @Test("SQLite: a data folder from before, opened by this version")
    func sqlite() async throws {
        try await withTemporaryDirectory { folder in
            do {
                let queue = try DatabaseQueue(path: folder.appendingPathComponent(SQLiteStore.databaseFileName).path)
                try Schema.migrator.migrate(queue, upTo: "v13-group-origins")
                try await queue.write { db in
                    for user in Self.users {
                        try db.execute(
                            sql: "INSERT INTO users (id, name, created_ms, log_cursor) VALUES (?, ?, 0, ?)",
                            arguments: [user.id, user.name, user.cursor]
                        )
                    }
                }
            }
            let fixture = try SQLiteFixture(folder: folder)
            try await Self.check(fixture.store)
        }
    }

    @Test(
        "PostgreSQL: the migration's statements over the same rows",
        .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
    )
    func postgres() async throws {
        try await TestDatabase.with { location in
            let store = PostgresStore(location: location, logger: TestDatabase.logger)
            #expect(try await store.migrate().contains("v14-log-positions"))
            let migration = try #require(PostgresSchema.migrations.first { $0.version == "v14-log-positions" })
            try await TestDatabase.admin(location) { connection in
                let logger = TestDatabase.logger
                // The schema as it was before: the users' rows held their logs' cursors.
                try await connection.run(
                    "ALTER TABLE users ADD COLUMN log_cursor BIGINT NOT NULL DEFAULT 0",
                    logger: logger
                )
                for user in Self.users {
                    try await connection.run(
                        """
                        INSERT INTO users (id, name, created_ms, log_cursor)
                        VALUES (\(user.id), \(user.name), 0, \(user.cursor))
                        """,
                        logger: logger
                    )
                }
                // The migration's statements, as they ran before these users existed, run again over them.
                try await connection.run("DROP TABLE log_positions", logger: logger)
                try await connection.run("DROP TABLE log_heads", logger: logger)
                for statement in migration.statements {
                    try await connection.run(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
            }
            try await store.withRunning { try await Self.check(store) }
        }
    }
}
