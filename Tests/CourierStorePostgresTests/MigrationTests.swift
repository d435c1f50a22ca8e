import CourierPostgresTesting
import CourierStore
import CourierTesting
import Foundation
import Logging
import PostgresNIO
import Synchronization
import Testing

@testable import CourierStorePostgres

@Suite(
    "PostgreSQL: the schema's migrations, on a real server",
    .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
)
struct MigrationTests {
    /// Every migration's version, oldest first, written out: a migration added, renamed or dropped is seen here.
    static let versions = [
        "v1", "v2-nodes", "v3-media", "v4-admission", "v5-edits", "v6-search", "v7-invites", "v8-profiles",
        "v9-roles", "v10-quiet", "v11-media-types", "v12-skeletons", "v13-group-origins", "v14-log-positions",
        "v15-group-events", "v16-forward-ports", "v17-push", "v18-push-outbox", "v19-push-gateways", "v20-bots",
        "v21-webhooks",
        "v22-blocks", "v23-pins", "v24-search-prefixes", "v25-media-collection",
    ]

    static func store(_ location: PostgresLocation) -> PostgresStore {
        PostgresStore(location: location, logger: TestDatabase.logger)
    }

    static func tables(_ location: PostgresLocation) async throws -> Set<String> {
        let found = Mutex<Set<String>>([])
        try await TestDatabase.admin(location) { connection in
            let rows = try await connection.query(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'",
                logger: TestDatabase.logger
            )
            for try await name in rows.decode(String.self) { found.withLock { _ = $0.insert(name) } }
        }
        return found.withLock { $0 }
    }

    @Test("five nodes migrating one empty database at once: one applies each migration, all find the schema")
    func concurrentMigrations() async throws {
        try await TestDatabase.with { location in
            // The migration lock is held from elsewhere until all five wait for it: they do overlap.
            let results = try await Self.holdingMigrationLock(location, untilWaiting: 5) {
                try await withThrowingTaskGroup(of: ([String], [String]).self) { group in
                    for _ in 0..<5 {
                        let store = Self.store(location)
                        group.addTask {
                            try await store.withRunning {
                                (try await store.migrate(), try await store.appliedMigrations())
                            }
                        }
                    }
                    return try await group.reduce(into: [([String], [String])]()) { $0.append($1) }
                }
            }
            // Exactly one node applied v1; the others waited for it and found it applied.
            #expect(
                results.map(\.0).filter { !$0.isEmpty } == [
                    Self.versions
                ]
            )
            #expect(
                results.allSatisfy { $0.1 == Self.versions }
            )
            let tables = try await Self.tables(location)
            for table in [
                "users", "devices", "conversations", "members", "messages", "events", "changes", "media_owners",
                "message_media", "courier_migrations", "invites", "profiles", "mentions", "name_skeletons",
            ] {
                #expect(tables.contains(table), "no table \(table) in \(tables.sorted())")
            }
        }
    }

    /// Runs `body` while an admin session holds the migration lock, releasing it once `count` sessions wait for it.
    static func holdingMigrationLock<T: Sendable>(
        _ location: PostgresLocation,
        untilWaiting count: Int,
        _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let result = Mutex<Result<T, any Error>?>(nil)
        try await TestDatabase.admin(location) { connection in
            try await connection.run(
                "SELECT pg_advisory_lock(\(PostgresStore.migrationLock))",
                logger: TestDatabase.logger
            )
            async let outcome = Result { try await body() }
            var waiting = 0
            let deadline = ContinuousClock.now + .seconds(60)
            while waiting < count, ContinuousClock.now < deadline {
                let rows = try await connection.query(
                    """
                    SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
                        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    """,
                    logger: TestDatabase.logger
                )
                for try await found in rows.decode(Int64.self) { waiting = Int(found) }
                if waiting < count { try await Task.sleep(for: .milliseconds(20)) }
            }
            try await connection.run(
                "SELECT pg_advisory_unlock(\(PostgresStore.migrationLock))",
                logger: TestDatabase.logger
            )
            #expect(waiting == count, "\(waiting) of \(count) sessions waited for the migration lock")
            let finished = await outcome
            result.withLock { $0 = finished }
        }
        return try result.withLock { $0 }!.get()
    }

    @Test("a node that waits for the migration lock past migrationLockTimeout fails instead of waiting for ever")
    func lockTimeout() async throws {
        try await TestDatabase.with { location in
            var configuration = PostgresStore.Configuration()
            configuration.migrationLockTimeout = .milliseconds(300)
            let store = PostgresStore(location: location, configuration: configuration, logger: TestDatabase.logger)
            let failed = Mutex<CourierStoreError?>(nil)
            try await TestDatabase.admin(location) { connection in
                // Another node's migration, stuck.
                try await connection.run(
                    "SELECT pg_advisory_lock(\(PostgresStore.migrationLock))",
                    logger: TestDatabase.logger
                )
                do {
                    try await store.migrate()
                } catch let error as CourierStoreError {
                    failed.withLock { $0 = error }
                }
                try await connection.run(
                    "SELECT pg_advisory_unlock(\(PostgresStore.migrationLock))",
                    logger: TestDatabase.logger
                )
            }
            let error = try #require(failed.withLock { $0 })
            #expect(error.code == .storageFailed && error.message.contains("lock timeout"), "\(error)")
            // Nothing of it was applied; once the lock is free, it goes through.
            #expect(try await Self.tables(location).isEmpty)
            let again = Self.store(location)
            #expect(
                try await again.migrate() == Self.versions
            )
        }
    }

    @Test("a migration that fails part way leaves nothing of it behind")
    func failedMigrationRollsBack() async throws {
        try await TestDatabase.with { location in
            // A table in the way of v1's: its CREATE TABLE fails after others of v1 have run.
            try await TestDatabase.admin(location) { connection in
                try await connection.run("CREATE TABLE members (x INT)", logger: TestDatabase.logger)
            }
            let store = Self.store(location)
            let error = await #expect(throws: CourierStoreError.self) {
                try await store.withRunning { try await store.migrate() }
            }
            #expect(error?.code == .storageFailed && error?.message.contains("members") == true)
            #expect(try await Self.tables(location) == ["members"])
        }
    }

    @Test("migrating again applies nothing; a database a newer courier migrated is refused")
    func againAndNewer() async throws {
        try await TestDatabase.with { location in
            let store = Self.store(location)
            let (first, second) = try await store.withRunning {
                (try await store.migrate(), try await store.migrate())
            }
            #expect(first == Self.versions && second == [])
            try await TestDatabase.admin(location) { connection in
                try await connection.run(
                    "INSERT INTO courier_migrations (version, applied_ms) VALUES ('v999', 0)",
                    logger: TestDatabase.logger
                )
            }
            let newer = Self.store(location)
            let error = await #expect(throws: CourierStoreError.self) {
                try await newer.withRunning { try await newer.migrate() }
            }
            #expect(error?.code == .storageFailed && error?.message.contains("v999") == true)
        }
    }

    @Test("a server that refuses the password: storage-failed, and the password appears nowhere in the error")
    func wrongPassword() async throws {
        var location = try TestDatabase.cluster()
        location.password = "not-the-password-\(UInt32.random(in: 0...UInt32.max))"
        var configuration = PostgresStore.Configuration()
        configuration.connectTimeout = .seconds(5)
        let store = PostgresStore(location: location, configuration: configuration, logger: TestDatabase.logger)
        let error = await #expect(throws: CourierStoreError.self) {
            try await store.withRunning { try await store.migrate() }
        }
        #expect(error?.code == .storageFailed)
        #expect(error.map { !"\($0)".contains(location.password!) } == true)
    }
}
