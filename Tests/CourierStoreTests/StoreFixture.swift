import CourierPostgresTesting
import CourierStore
import CourierStorePostgres
import CourierStoreSQLite
import CourierTesting
import Foundation
import GRDB
import Logging
import PostgresNIO
import Testing

/// The stores the conformance tests run on: every test given `StoreKind.allCases` holds for both.
enum StoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// A real SQLite file in a temporary folder.
    case sqlite
    /// A database of its own in the private PostgreSQL cluster that `scripts/test` starts.
    case postgres

    var testDescription: String { self.rawValue }

    /// Both, when this run has the PostgreSQL tests (``TestDatabase/isEnabled``); SQLite alone otherwise.
    static var allCases: [StoreKind] { TestDatabase.isEnabled ? [.sqlite, .postgres] : [.sqlite] }
}

/// A store of either kind, with cheap password hashes (the tests that are about hashing use the standard cost).
struct StoreFixture: StoreTestHelpers, Sendable {
    static let cheapHasher = PasswordHasher(logN: 4, blockSize: 8, parallelism: 1, saltBytes: 16, keyBytes: 32)
    static let start: Int64 = 1_800_000_000_000

    let kind: StoreKind
    let store: any CourierDatabase
    /// Opens another store on the same database for the time of its body: another process (the admin commands)
    /// on SQLite's file, another node on PostgreSQL.
    let another: @Sendable (@Sendable (any CourierDatabase) async throws -> Void) async throws -> Void
    /// Whether the database holds a text as it is anywhere (SQLite: in the bytes of its file and its write-ahead log;
    /// PostgreSQL: in the users' and devices' rows, as text or as bytes).
    let holdsText: @Sendable (String) async throws -> Bool
    /// Runs a statement on the database from outside the store (the same SQL on both): what a database from before
    /// a rule holds, made where the store would no longer make it.
    let execute: @Sendable (String) async throws -> Void
    /// The integer a query of one row and one column answers (raw SQL, as an administrator).
    let count: @Sendable (String) async throws -> Int

    /// Runs `body` with a new, empty store of a kind, closed (or dropped) afterwards.
    static func with(
        _ kind: StoreKind,
        limits: StoreLimits = StoreLimits(),
        searchIndex: SearchIndexer.Configuration = .init(),
        sqliteCarriedRows: Int = StoreSettings().sqliteMaxCarriedRows,
        _ body: @Sendable (StoreFixture) async throws -> Void
    ) async throws {
        switch kind {
        case .sqlite:
            var sqlite = SQLiteStore.Configuration()
            sqlite.passwordHasher = Self.cheapHasher
            sqlite.limits = limits
            sqlite.searchIndex = searchIndex
            sqlite.maxCarriedRows = sqliteCarriedRows
            let configuration = sqlite
            try await withTemporaryDirectory(prefix: "store") { folder in
                let store = try SQLiteStore(folder: folder, configuration: configuration, logger: Logger(label: "test"))
                defer { try? store.close() }
                let fixture = StoreFixture(
                    kind: kind,
                    store: store,
                    another: { body in
                        let other = try SQLiteStore(
                            folder: folder,
                            configuration: configuration,
                            logger: Logger(label: "test")
                        )
                        defer { try? other.close() }
                        try await body(other)
                    },
                    holdsText: { text in
                        // The database file and its write-ahead log, where the newest writes are.
                        try ["", "-wal"].contains { suffix in
                            let path = folder.appendingPathComponent(SQLiteStore.databaseFileName + suffix).path
                            guard FileManager.default.fileExists(atPath: path) else { return false }
                            return try Data(contentsOf: URL(fileURLWithPath: path)).range(of: Data(text.utf8)) != nil
                        }
                    },
                    execute: { sql in
                        let queue = try DatabaseQueue(
                            path: folder.appendingPathComponent(SQLiteStore.databaseFileName).path
                        )
                        try await queue.write { try $0.execute(sql: sql) }
                        try queue.close()
                    },
                    count: { sql in
                        let queue = try DatabaseQueue(
                            path: folder.appendingPathComponent(SQLiteStore.databaseFileName).path
                        )
                        defer { try? queue.close() }
                        return try await queue.read { try Int.fetchOne($0, sql: sql) ?? 0 }
                    }
                )
                try await body(fixture)
            }
        case .postgres:
            var postgres = PostgresStore.Configuration()
            postgres.passwordHasher = Self.cheapHasher
            postgres.limits = limits
            postgres.searchIndex = searchIndex
            postgres.maxConnections = 4
            let configuration = postgres
            try await TestDatabase.with { location in
                let store = PostgresStore(location: location, configuration: configuration, logger: TestDatabase.logger)
                try await store.migrate()
                try await store.withRunning {
                    let fixture = StoreFixture(
                        kind: kind,
                        store: store,
                        another: { body in
                            let other = PostgresStore(
                                location: location,
                                configuration: configuration,
                                logger: TestDatabase.logger
                            )
                            try await other.withRunning { try await body(other) }
                        },
                        holdsText: { text in
                            var found = false
                            try await TestDatabase.admin(location) { connection in
                                let rows = try await connection.query(
                                    """
                                    SELECT EXISTS (SELECT 1 FROM users t WHERE strpos(t::text, \(text)) > 0
                                        OR strpos(t::text, encode(convert_to(\(text), 'UTF8'), 'hex')) > 0)
                                    OR EXISTS (SELECT 1 FROM devices t WHERE strpos(t::text, \(text)) > 0
                                        OR strpos(t::text, encode(convert_to(\(text), 'UTF8'), 'hex')) > 0)
                                    """,
                                    logger: TestDatabase.logger
                                )
                                for try await exists in rows.decode(Bool.self) { found = exists }
                            }
                            return found
                        },
                        execute: { sql in
                            try await TestDatabase.admin(location) { connection in
                                try await connection.run(PostgresQuery(unsafeSQL: sql), logger: TestDatabase.logger)
                            }
                        },
                        count: { sql in
                            var count = 0
                            try await TestDatabase.admin(location) { connection in
                                let rows = try await connection.query(
                                    PostgresQuery(unsafeSQL: sql),
                                    logger: TestDatabase.logger
                                )
                                for try await value in rows.decode(Int64.self) { count = Int(value) }
                            }
                            return count
                        }
                    )
                    try await body(fixture)
                }
            }
        }
    }

    var database: any CourierDatabase { self.store }
}

/// A SQLite store in a temporary folder, for the tests of what only SQLite has (its files, its query plans, its
/// checkpoints).
struct SQLiteFixture: StoreTestHelpers {
    let folder: URL
    let store: SQLiteStore

    init(folder: URL, configure: (inout SQLiteStore.Configuration) -> Void = { _ in }) throws {
        var configuration = SQLiteStore.Configuration()
        configuration.passwordHasher = StoreFixture.cheapHasher
        configure(&configuration)
        self.folder = folder
        self.store = try SQLiteStore(folder: folder, configuration: configuration, logger: Logger(label: "test"))
    }

    var database: any CourierDatabase { self.store }
}

/// Users, messages and logs, through the protocol every store implements.
protocol StoreTestHelpers {
    var database: any CourierDatabase { get }
}

extension StoreTestHelpers {
    /// Creates users with the password "pw-" + name.
    @discardableResult
    func users(_ names: String...) async throws -> [String: UserID] {
        var ids: [String: UserID] = [:]
        for name in names {
            ids[name] = try await self.database.addUser(name: name, password: "pw-" + name, nowMs: StoreFixture.start)
                .id
        }
        return ids
    }

    func send(
        _ sender: UserID,
        _ id: String,
        to: Conversation,
        _ text: String,
        nowMs: Int64 = StoreFixture.start
    ) async throws -> WriteOutcome {
        let batch = try await self.database.apply(
            [.send(.init(sender: sender, id: id, to: to, body: Array(text.utf8)))],
            nowMs: nowMs
        )
        return batch.outcomes[0]
    }

    func sent(
        _ sender: UserID,
        _ id: String,
        to: Conversation,
        _ text: String,
        nowMs: Int64 = StoreFixture.start
    ) async throws -> SendReceipt {
        let outcome = try await self.send(sender, id, to: to, text, nowMs: nowMs)
        guard case .sent(let receipt) = outcome else {
            throw FixtureError(message: "expected a receipt, got \(outcome)")
        }
        return receipt
    }

    /// Every event in a user's log after a cursor.
    func log(_ user: UserID, after cursor: UInt64 = 0) async throws -> [StoredEvent] {
        var events: [StoredEvent] = []
        var cursor = cursor
        while true {
            let page = try await self.database.events(for: user, after: cursor, limit: 100)
            guard let last = page.last else { return events }
            events += page
            cursor = last.cursor
        }
    }

    /// The texts of the message events in a log.
    func texts(_ user: UserID, after cursor: UInt64 = 0) async throws -> [String] {
        try await self.log(user, after: cursor).compactMap {
            guard case .message(let message) = $0.kind else { return nil }
            return String(decoding: message.body, as: UTF8.self)
        }
    }
}

struct FixtureError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}

func refusal(_ outcome: WriteOutcome) -> CourierStoreError.Code? {
    if case .refused(let error) = outcome { return error.code }
    return nil
}
