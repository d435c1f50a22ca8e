public import CourierStore
internal import CourierVocabulary
internal import Foundation
public import Logging
package import PostgresNIO
public import ServiceLifecycle
internal import Synchronization

/// Courier's store on PostgreSQL, which any number of `courier serve` nodes share (issue 17).
///
/// It keeps what the SQLite store keeps, with the same rules (the same conformance tests run on both), and holds
/// them with several writers at once: every write is one transaction on a pooled connection (a ServiceLifecycle
/// `Service`: run it while the store is used). Every user's event log takes its positions from one counter
/// (`log_positions`) at the end of the transaction that appends, which holds the counter's row until it commits:
/// positions are committed in the order they are taken, and a reader never meets a smaller one later
/// (``PostgresTransaction/writeLog(_:_:logger:)``). A transaction locks rows in one order: conversations, then the
/// users its requests are from, then devices, each by id, and the counter last, so that two group commits never wait
/// for each other in a circle (PostgreSQL breaks one that does anyway, and the write is retried). The members whose
/// logs a batch only appends to are not locked.
///
/// The schema is brought up to date by ``migrate()`` at a node's start. Nodes starting together on an empty
/// database do not race: the migrations run in one transaction under an advisory lock, so one node applies them and
/// the others wait and then find them applied.
public final class PostgresStore: StoreBackend, Service, CustomReflectable {
    /// Settings of the connection pool.
    public struct Configuration: Sendable {
        /// The most connections this node opens to the database.
        public var maxConnections: Int = 20
        /// How long opening a connection may take before the request waiting for it fails.
        public var connectTimeout: Duration = .seconds(10)
        /// How long a request waits for one of the pool's connections before it fails with `storage-failed`: with
        /// the database down or out of reach, a send, a login or a read is answered within this.
        public var connectionWaitTimeout: Duration = .seconds(5)
        /// How long one transaction (or one read, or one notification) may take on its connection, all its statements
        /// together, before the node closes that connection and answers `storage-failed`: a connection whose packets
        /// are silently dropped (a firewall's state lost, a cable pulled) would otherwise hold the request, and the
        /// group commit behind it, until the kernel gives up many minutes later.
        public var transactionTimeout: Duration = .seconds(60)
        /// How long ``migrate()`` waits for another node's migration (or anything else holding the tables it
        /// changes) before it fails, rather than holding the node's start for ever.
        public var migrationLockTimeout: Duration = .seconds(60)
        /// This node's name, which must differ from every other node's on the database and stay the same when the
        /// node starts again: what it recorded of its connected devices is its own to clear at its next start
        /// (``clearConnectedDevices()``). `courier serve` names it after the host and its native port.
        public var node: String = ProcessInfo.processInfo.hostName
        /// How long PostgreSQL lets one of this node's transactions sit idle before it ends it (its
        /// `idle_in_transaction_session_timeout`): a node cut off from the network in the middle of a write holds the
        /// rows it locked until then, and, when it stopped between taking its log's positions and its commit, the
        /// positions' counter: every node's writes that append to a log wait for it. The node's own transactions
        /// never wait for anything but the database, and between two statements only for their rules (milliseconds).
        public var abandonedTransactionTimeout: Duration = .seconds(5)
        /// The planner's cost of reading a page at random, relative to reading one in sequence, for this store's
        /// connections (their `random_page_cost`; nil leaves the database's own). PostgreSQL's default, 4, is a
        /// spinning disk's: with it, a group commit's keyed reads and updates of a few hundred users, members or
        /// devices were planned as hash joins over whole tables (measured: 2–6 ms a statement against 0.4–1 ms by
        /// their indexes, at 11,700 users, and growing with the tables). 1.1 is what PostgreSQL's documentation
        /// suggests when the data is cached or on SSDs, as the rows a server touches are.
        public var randomPageCost: Double? = 1.1
        /// How many times a write that PostgreSQL aborted for a deadlock, a serialization failure or a row lock taken
        /// out of order that would have waited (nothing of it was committed) is tried again before it fails with
        /// `storage-failed`.
        public var maxWriteRetries: Int = 3
        /// How long a transaction of the limits that hold across nodes waits for a key's lock (one user name, one
        /// address, one user's connections) before it fails and is tried again, up to ``maxWriteRetries``: a crowd
        /// of logins for one key never holds the pool's connections long.
        public var admissionLockTimeout: Duration = .seconds(10)
        /// The limits and policies every store applies alike.
        public var limits: StoreLimits = .init()
        /// The cost of password hashes written from now on.
        public var passwordHasher: PasswordHasher = .standard
        /// Threads that hash and check passwords, apart from the threads that deliver messages (as
        /// the SQLite store's `passwordThreads`).
        public var passwordThreads: Int = max(1, ProcessInfo.processInfo.activeProcessorCount / 4)
        /// Password checks that may wait for a thread; one more is refused at once with `throttled`.
        public var maxQueuedPasswordChecks: Int = 16
        /// The most bytes of media one row holds (``PostgresBlobStore``).
        public var mediaRowBytes: Int = 256 * 1024
        /// The bytes of media an upload gathers before they are written, as rows of ``mediaRowBytes`` in one
        /// transaction (``PostgresBlobStore``): fewer transactions per file, at the cost of this much memory per upload
        /// being received (all uploads together are bounded by the server's `max-pending-upload-bytes`).
        public var mediaAppendBytes: Int = 4 * 1024 * 1024
        /// Whether the group commit writes the search index (always, but for the benchmark that measures what the
        /// index costs: `courier bench --pattern search` loads the same messages without it too).
        package var indexesForSearch = true
        /// How the search index is written beside the group commit (``SearchIndexer``).
        public var searchIndex: SearchIndexer.Configuration = .init()

        public init() {}

        /// The settings of a node: what every store applies (``StoreSettings``), under this node's name.
        public init(serving settings: StoreSettings, node: String) {
            self.limits = settings.limits
            self.searchIndex = settings.searchIndex
            self.passwordHasher = settings.passwordHasher
            self.passwordThreads = settings.passwordThreads
            self.maxQueuedPasswordChecks = settings.maxQueuedPasswordChecks
            self.randomPageCost = settings.postgresRandomPageCost
            self.node = node
        }
    }

    /// Where the database is (its ``PostgresLocation/description`` leaves the password out).
    public let location: PostgresLocation
    let client: PostgresClient
    /// For one-off connections outside the pool (the migrations at start), which fail at once where the pool would
    /// retry: a wrong password, a database that does not exist.
    let connection: PostgresConnection.Configuration
    let migrationLockTimeout: Duration
    let logger: Logger
    public let configuration: Configuration
    public var limits: StoreLimits { self.configuration.limits }
    public var storeDescription: StoreDescription {
        StoreDescription(kind: "postgres", location: self.location.description)
    }
    package let passwords: Passwords
    public let searchIndexer: SearchIndexer
    /// Where this node takes forwarded writes, written with each heartbeat (``advertise(_:)``).
    let forward = Mutex<ForwardEndpoint?>(nil)
    /// Whether the pool runs yet, and what waits for it to.
    private let pool = Mutex<(running: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))
    /// Users' names by id: names never change and users are never deleted.
    let names: Mutex<[UserID: String]> = Mutex([:])

    /// The key of the advisory lock that migrations take (the bytes of "courierm"): one node migrates at a time.
    static let migrationLock: Int64 = 0x636F_7572_6965_726D

    public init(location: PostgresLocation, configuration: Configuration = .init(), logger: Logger) {
        var client = location.clientConfiguration
        client.options.maximumConnections = max(1, configuration.maxConnections)
        client.options.connectTimeout = configuration.connectTimeout
        // No keep-alive question on idle connections: it has no deadline of its own, and one asked on a connection
        // whose packets are dropped would hold that connection for good. Idle connections close after a minute
        // instead, and every request's work has ``Configuration-swift.struct/transactionTimeout``.
        client.options.keepAliveBehavior = nil
        client.options.additionalStartupParameters = [
            (
                "idle_in_transaction_session_timeout",
                String(max(1, configuration.abandonedTransactionTimeout.wholeMilliseconds))
            ),
            // What the writes rely on, whatever the database's default: each statement sees what committed before
            // it began (the log's heads, read once the counter is held), and a row updated meanwhile is read again.
            ("default_transaction_isolation", "read committed"),
        ]
        if let cost = configuration.randomPageCost, cost.isFinite, cost > 0 {
            client.options.additionalStartupParameters.append(("random_page_cost", String(cost)))
        }
        var connection = location.connectionConfiguration
        connection.options.connectTimeout = TimeAmount(configuration.connectTimeout)
        self.location = location
        self.client = PostgresClient(configuration: client, backgroundLogger: logger)
        self.connection = connection
        self.migrationLockTimeout = configuration.migrationLockTimeout
        self.logger = logger
        self.configuration = configuration
        self.searchIndexer = SearchIndexer(configuration: configuration.searchIndex, deferredByDefault: true)
        self.passwords = Passwords(
            hasher: configuration.passwordHasher,
            threads: configuration.passwordThreads,
            maxQueued: configuration.maxQueuedPasswordChecks
        )
    }

    /// Nothing to let go of: the pool's connections close when ``run()`` ends.
    public func close() throws {}

    /// Keeps the pool's connections until the task is cancelled (or the service group shuts down).
    public func run() async throws {
        await cancelWhenGracefulShutdown {
            self.poolStarted()
            await self.client.run()
        }
    }

    /// Runs the pool for the time of `body`: for commands and tests, which use the store once (a server runs it as
    /// a service instead). A store's pool runs once: either this or ``run()``, one time.
    public func withRunning<T: Sendable>(_ body: @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                self.poolStarted()
                await self.client.run()
            }
            defer { group.cancelAll() }
            return try await body()
        }
    }

    /// The pool is about to run: what waits for it goes on.
    private func poolStarted() {
        let waiters = self.pool.withLock { state in
            state.running = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Waits until the pool runs (at once when it does): a query asked of a pool that does not run yet would wait
    /// all the same, with a warning in the log.
    func whenRunning() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let running = self.pool.withLock { state in
                if !state.running { state.waiters.append(continuation) }
                return state.running
            }
            if running { continuation.resume() }
        }
    }

    /// Brings the schema up to date: applies the migrations the database lacks, in one transaction under the
    /// migration lock (another node migrating at the same time waits for it, then finds them applied). It uses a
    /// connection of its own, not the pool (which need not run yet): a database that cannot be reached, or refuses
    /// the password, fails it at once.
    ///
    /// - Returns: The versions this call applied (none when the schema was up to date).
    /// - Throws: ``CourierStoreError`` with code `storage-failed`: the database cannot be reached, a statement
    ///   failed (nothing of the migration is applied), or a newer Courier has migrated the database to a version this
    ///   one does not know.
    @discardableResult
    public func migrate() async throws -> [String] {
        let logger = self.logger
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration: self.connection, id: 0, logger: logger)
        } catch {
            throw Self.storageFailed(error, doing: "connect to \(self.location)")
        }
        do {
            let applied = try await Self.migrate(
                on: connection,
                lockTimeout: self.migrationLockTimeout,
                logger: logger
            )
            try? await connection.close()
            return applied
        } catch let error as CourierStoreError {
            try? await connection.close()
            throw error
        } catch {
            try? await connection.close()
            throw Self.storageFailed(error, doing: "migrate \(self.location)")
        }
    }

    private static func migrate(
        on connection: PostgresConnection,
        lockTimeout: Duration,
        logger: Logger
    ) async throws -> [String] {
        let timeoutMs = max(1, lockTimeout.wholeMilliseconds)
        do {
            return try await connection.withTransaction(logger: logger) { connection in
                try await connection.run("SET LOCAL lock_timeout = \(unescaped: String(timeoutMs))", logger: logger)
                try await connection.run("SELECT pg_advisory_xact_lock(\(Self.migrationLock))", logger: logger)
                try await connection.run(
                    """
                    CREATE TABLE IF NOT EXISTS courier_migrations (
                        version TEXT PRIMARY KEY,
                        applied_ms BIGINT NOT NULL
                    )
                    """,
                    logger: logger
                )
                var applied: Set<String> = []
                let rows = try await connection.query("SELECT version FROM courier_migrations", logger: logger)
                for try await version in rows.decode(String.self) { applied.insert(version) }
                let known = Set(PostgresSchema.migrations.map(\.version))
                if let unknown = applied.subtracting(known).sorted().first {
                    throw CourierStoreError(
                        .storageFailed,
                        "the database's schema has migration \(unknown), which this courier does not know: a newer "
                            + "courier migrated it"
                    )
                }
                var now: [String] = []
                let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
                for migration in PostgresSchema.migrations where !applied.contains(migration.version) {
                    for statement in migration.statements {
                        try await connection.run(PostgresQuery(unsafeSQL: statement), logger: logger)
                    }
                    try await migration.rows?(connection, logger)
                    try await connection.run(
                        "INSERT INTO courier_migrations (version, applied_ms) VALUES (\(migration.version), \(nowMs))",
                        logger: logger
                    )
                    now.append(migration.version)
                }
                return now
            }
        } catch let error as PostgresTransactionError {
            // The statement's own error, not the rollback's.
            throw error.closureError ?? error.beginError ?? error.commitError ?? error
        }
    }

    /// The migrations the database has, in the order they are applied (any this Courier does not know last).
    public func appliedMigrations() async throws -> [String] {
        await self.whenRunning()
        do {
            var applied: [String] = []
            let rows = try await self.client.query("SELECT version FROM courier_migrations", logger: self.logger)
            for try await version in rows.decode(String.self) { applied.append(version) }
            let order = Dictionary(
                uniqueKeysWithValues: PostgresSchema.migrations.enumerated().map { ($1.version, $0) }
            )
            return applied.sorted { (order[$0] ?? .max, $0) < (order[$1] ?? .max, $1) }
        } catch {
            throw Self.storageFailed(error, doing: "read the migrations of \(self.location)")
        }
    }

    /// A database error as `storage-failed`, with what PostgreSQL said (its message, never the connection's
    /// password: postgres-nio's errors do not carry it).
    static func storageFailed(_ error: any Error, doing: String) -> CourierStoreError {
        if let error = error as? PSQLError {
            // What the server said, or what went wrong under the connection (refused, no such host, a timeout).
            let said = error.serverInfo?[.message] ?? error.underlying.map { "\($0)" }
            return CourierStoreError(
                .storageFailed,
                "could not \(doing) (\(error.code)\(said.map { ": \($0)" } ?? ""))"
            )
        }
        return CourierStoreError(.storageFailed, "could not \(doing): \(error)")
    }

    /// The location without its password, and nothing of the connections' settings (which hold it).
    public var customMirror: Mirror {
        Mirror(self, children: ["location": self.location])
    }
}

extension PostgresLocation {
    /// postgres-nio's settings for a pool on this database (without TLS, which is not supported yet).
    var clientConfiguration: PostgresClient.Configuration {
        .init(
            host: self.host,
            port: self.port,
            username: self.user,
            password: self.password,
            database: self.database,
            tls: .disable
        )
    }

    /// postgres-nio's settings for one connection to this database.
    package var connectionConfiguration: PostgresConnection.Configuration {
        .init(
            host: self.host,
            port: self.port,
            username: self.user,
            password: self.password,
            database: self.database,
            tls: .disable
        )
    }
}

extension PostgresConnection {
    /// Runs a statement to its end: a query's error may come with its rows, so they are read (and dropped) here,
    /// where the statement that failed is the one named, not the next one ("current transaction is aborted").
    package func run(_ query: PostgresQuery, logger: Logger) async throws {
        for try await _ in try await self.query(query, logger: logger) {}
    }
}

extension PostgresStore {
    /// Empties the search index and numbers every message again, unindexed, as the migration that made the index
    /// left a database of messages stored before it: what the tests of ``CourierDatabase/indexPending(limit:)`` start
    /// from.
    package func resetSearchIndex() async throws {
        // As a database from before the index: nothing queued for it either.
        self.searchIndexer.discardQueue()
        try await self.write(doing: "reset the search index") { connection in
            try await connection.run("DELETE FROM message_search", logger: self.logger)
            try await connection.run(
                PostgresQuery(unsafeSQL: PostgresSchema.numberMessagesForSearch),
                logger: self.logger
            )
        }
    }
}
