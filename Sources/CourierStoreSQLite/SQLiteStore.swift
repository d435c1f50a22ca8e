public import CourierStore
public import Foundation
internal import GRDB
public import Logging
internal import Synchronization

/// Courier's persistence on one SQLite file, through GRDB.
///
/// The file is opened in WAL mode with `synchronous = FULL`: a transaction that returned is on disk and survives a
/// crash of the process or of the machine. Every write is one transaction; ``apply(_:nowMs:)`` takes many sends,
/// acks and receipts at once so that one fsync covers them all (group commit, see ``CommitQueue``).
///
/// Several processes may open the same file: the server, and the admin commands (`courier user …`) while it runs.
/// Writes of the admin commands are recorded in a `changes` table that the server reads with ``changes(after:)``.
public final class SQLiteStore: StoreBackend {
    /// Settings of the store.
    public struct Configuration: Sendable {
        /// How long a write waits for another process's write to finish before failing.
        public var busyTimeout: Duration = .seconds(5)
        /// The limits and policies every store applies alike.
        public var limits: StoreLimits = .init()
        /// The cost of password hashes written from now on.
        public var passwordHasher: PasswordHasher = .standard
        /// The largest the database file may grow, in bytes; nil for no limit but the disk's. A write that would
        /// pass it fails like one on a full disk: `storage-failed`, nothing committed.
        public var maxDatabaseBytes: Int? = nil
        /// Threads that hash and check passwords (scrypt costs about 32 MiB and 0.1 s each), apart from the threads
        /// that deliver messages. The default is a quarter of the processors, at least one.
        public var passwordThreads: Int = max(1, ProcessInfo.processInfo.activeProcessorCount / 4)
        /// Password checks that may wait for a thread; one more is refused at once with `throttled`.
        public var maxQueuedPasswordChecks: Int = 16
        /// Whether the write-ahead log is copied back into the database file by ``maintain()``, on a connection of
        /// its own, every ``checkpointInterval`` after writes (the server calls it), rather than by the write that
        /// takes the log past SQLite's 1,000 pages. That write waits for the copy and the database file's fsync, and
        /// every write queued behind it waits too: under a steady load, the group commit's slowest batches were
        /// these (10-25 ms against under 1 ms).
        public var backgroundCheckpoints: Bool = false
        /// With ``backgroundCheckpoints``: how often the server calls ``maintain()`` (``maintenanceInterval``).
        public var checkpointInterval: Duration = .milliseconds(100)
        /// With ``backgroundCheckpoints``: the log's size in pages past which a write still copies it back itself,
        /// should the checkpoints fall behind (SQLite's `wal_autocheckpoint`; 16,384 pages of 4 KiB are 64 MiB).
        public var writerCheckpointPages: Int = 16_384
        /// The most rows the group commit carries from one batch to the next (conversations and their members,
        /// users, names, devices, ids), instead of reading them again; past it, what a batch read is dropped once it
        /// commits. 0: none carried. See ``StoreSettings/sqliteMaxCarriedRows``.
        public var maxCarriedRows: Int = StoreSettings().sqliteMaxCarriedRows
        /// Whether the group commit writes the search index (always, but for the benchmark that measures what the
        /// index costs: `courier bench --pattern search` loads the same messages without it too).
        package var indexesForSearch = true
        /// How the search index is written beside the group commit (``SearchIndexer``).
        public var searchIndex: SearchIndexer.Configuration = .init()

        public init() {}

        /// The settings of a server's own store: what every store applies (``StoreSettings``), with the write-ahead
        /// log copied back apart from the writes (``backgroundCheckpoints``).
        public init(serving settings: StoreSettings) {
            self.limits = settings.limits
            self.passwordHasher = settings.passwordHasher
            self.passwordThreads = settings.passwordThreads
            self.maxQueuedPasswordChecks = settings.maxQueuedPasswordChecks
            self.searchIndex = settings.searchIndex
            self.maxCarriedRows = settings.sqliteMaxCarriedRows
            self.backgroundCheckpoints = true
        }
    }

    /// The file name of the database inside a data folder.
    public static let databaseFileName = "courier.sqlite"

    let pool: DatabasePool
    /// With ``Configuration-swift.struct/backgroundCheckpoints``: the connection that copies the write-ahead log back.
    private let checkpointer: DatabaseQueue?
    /// Writes so far, and those the last checkpoint saw: ``maintain()`` does nothing when no write came since.
    let writeCount = Atomic<Int>(0)
    /// The rows the last group commit carried on to the next (``GroupCommit/CarriedRows``), with the database's
    /// `data_version` when it committed: another process's commit changes it, and the rows are dropped. Taken by the
    /// next batch, put back by it once it commits; dropped by every other write. Only changed inside a write turn.
    let carried = Mutex<CarriedRows?>(nil)

    struct CarriedRows: Sendable {
        var rows: GroupCommit.CarriedRows
        var dataVersion: Int64
    }

    func dropCarriedRows() {
        self.carried.withLock { $0 = nil }
    }
    private let checkpointedWrites = Mutex<Int>(0)
    public let configuration: Configuration
    public var limits: StoreLimits { self.configuration.limits }
    /// The database file's path.
    public let path: String
    public var storeDescription: StoreDescription { StoreDescription(kind: "sqlite", location: self.path) }
    let logger: Logger
    let names: Mutex<[UserID: String]> = Mutex([:])
    package let passwords: Passwords
    public let searchIndexer: SearchIndexer
    /// This process's write transactions take turns: a rule's transaction spans several accesses to the writer.
    let turns = AsyncLock()

    /// Opens (creating if needed) the database of a data folder and brings its schema up to date.
    ///
    /// - Parameters:
    ///   - folder: The data folder; created if missing.
    ///   - configuration: The store's settings.
    ///   - logger: Where the store logs (info and below).
    /// - Throws: ``CourierStoreError`` with code `storage-failed` if the file cannot be opened or migrated.
    public convenience init(folder: URL, configuration: Configuration = .init(), logger: Logger) throws {
        try PrivateFiles.createFolder(folder)
        try self.init(
            path: folder.appendingPathComponent(Self.databaseFileName).path,
            configuration: configuration,
            logger: logger
        )
    }

    /// Opens (creating if needed) a database file and brings its schema up to date.
    public init(path: String, configuration: Configuration = .init(), logger: Logger) throws {
        var config = GRDB.Configuration()
        config.busyMode = .timeout(TimeInterval(configuration.busyTimeout.components.seconds))
        let maxDatabaseBytes = configuration.maxDatabaseBytes
        let writerCheckpointPages = configuration.backgroundCheckpoints ? configuration.writerCheckpointPages : nil
        config.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            if let writerCheckpointPages {
                // The log's file keeps the largest size it reached, as with SQLite's defaults (bounded here by this
                // many pages): truncating it after each copy (`journal_size_limit`) made every fsync of the regrown
                // file write its size too, and the open loop's p99 at 1,000/s went from 9 ms to 74.
                try db.execute(sql: "PRAGMA wal_autocheckpoint = \(max(1, writerCheckpointPages))")
            }
            if let maxDatabaseBytes {
                let pageSize = try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
                try db.execute(sql: "PRAGMA max_page_count = \(max(1, maxDatabaseBytes / pageSize))")
            }
        }
        config.label = "courier"
        // A rule's write transaction is begun, used and ended in separate accesses (``transaction(doing:_:)``),
        // one transaction of this process at a time (``turns``).
        config.allowsUnsafeTransactions = true
        do {
            // Made private before SQLite opens it: SQLite gives the -wal and -shm files the database's permissions.
            try PrivateFiles.createFile(atPath: path)
            for suffix in ["-wal", "-shm"] { try PrivateFiles.restrict(path + suffix) }
            self.pool = try DatabasePool(path: path, configuration: config)
            try Schema.migrator.migrate(self.pool)
            if configuration.backgroundCheckpoints {
                var checkpoints = GRDB.Configuration()
                checkpoints.label = "courier.checkpoints"
                checkpoints.busyMode = config.busyMode
                checkpoints.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
                self.checkpointer = try DatabaseQueue(path: path, configuration: checkpoints)
            } else {
                self.checkpointer = nil
            }
        } catch {
            throw CourierStoreError(.storageFailed, "cannot open \(path): \(error)")
        }
        self.configuration = configuration
        self.path = path
        self.logger = logger
        self.searchIndexer = SearchIndexer(configuration: configuration.searchIndex, deferredByDefault: false)
        self.passwords = Passwords(
            hasher: configuration.passwordHasher,
            threads: configuration.passwordThreads,
            maxQueued: configuration.maxQueuedPasswordChecks
        )
    }

    /// Writes a consistent copy of the database to a new file while other connections go on reading and writing.
    ///
    /// - Parameter path: The copy's path; it must not exist.
    /// - Throws: ``CourierStoreError`` with code `storage-failed`.
    public func backup(to path: String) throws {
        guard !FileManager.default.fileExists(atPath: path) else {
            throw CourierStoreError(.storageFailed, "\(path) exists; a backup does not overwrite")
        }
        do {
            try PrivateFiles.createFile(atPath: path)
            let destination = try DatabaseQueue(path: path)
            try self.pool.backup(to: destination)
            try destination.close()
        } catch {
            try? FileManager.default.removeItem(atPath: path)
            throw CourierStoreError(.storageFailed, "backup to \(path) failed: \(error)")
        }
    }

    /// Closes the database. Later calls fail.
    ///
    /// The write-ahead log is copied back into the database file and, when no other connection (an admin command's)
    /// has the file open, the file leaves WAL mode for this moment, which removes the `-wal` and `-shm` files: the
    /// database is that one file, whole, for a copy or a backup made of the folder. The next open goes back to WAL.
    public func close() throws {
        // Both, whatever the first says.
        let checkpointerClosed = Result { try self.checkpointer?.close() }
        _ = try? self.pool.writeWithoutTransaction { db in try db.checkpoint(.truncate) }
        try self.pool.close()
        try checkpointerClosed.get()
        var alone = GRDB.Configuration()
        alone.busyMode = .immediateError
        // Only the file that is there: an empty database is never made in its place.
        if FileManager.default.fileExists(atPath: self.path),
            let queue = try? DatabaseQueue(path: self.path, configuration: alone)
        {
            _ = try? queue.inDatabase { db in try db.execute(sql: "PRAGMA journal_mode = DELETE") }
            try? queue.close()
        }
    }

    public var maintenanceInterval: Duration? {
        self.checkpointer == nil ? nil : self.configuration.checkpointInterval
    }

    /// With ``Configuration-swift.struct/backgroundCheckpoints``, copies the write-ahead log back into the database
    /// file if this store wrote anything since the last complete copy (SQLite's passive checkpoint: it waits for
    /// no write and no write waits for it); nothing otherwise. Another process's writes (an admin command's) are
    /// copied with the next of this store's, or by that process's own close.
    public func maintain() async throws {
        _ = try await self.checkpoint()
    }

    /// A passive checkpoint, as ``maintain()`` runs it.
    ///
    /// - Returns: The log's size in pages and how many of them are in the database file now; nil when nothing
    ///   was written since the last complete copy, another checkpoint was running (a write's, or another
    ///   process's: this one is skipped), the task was cancelled, or checkpoints are the writes' own.
    @discardableResult
    public func checkpoint() async throws -> (logPages: Int, checkpointedPages: Int)? {
        guard let checkpointer = self.checkpointer else { return nil }
        let writes = self.writeCount.load(ordering: .relaxed)
        guard self.checkpointedWrites.withLock({ $0 }) != writes else { return nil }
        let result: (walFrameCount: Int, checkpointedFrameCount: Int)
        do {
            result = try await checkpointer.writeWithoutTransaction { db in try db.checkpoint(.passive) }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_BUSY {
            return nil
        } catch is CancellationError {
            return nil
        } catch {
            throw Self.plain(error, doing: "copy the write-ahead log back")
        }
        // A reader still on an older snapshot keeps the frames after it from being copied: the next call tries
        // again, even if nothing more is written.
        if result.checkpointedFrameCount == result.walFrameCount {
            self.checkpointedWrites.withLock { $0 = writes }
        }
        return (result.walFrameCount, result.checkpointedFrameCount)
    }

    /// Runs a write transaction, turning database errors into `storage-failed` and passing refusals through.
    ///
    /// Every write but the group commit's drops the rows the group commit carries from one batch to the next
    /// (``carried``): it may change them, unless it says it changes none of them (`keepingRows`). The group commit
    /// keeps them, and in `committed`, called after the commit and before any other write can start, stores what it
    /// carries on (and takes it out of the result, so that nothing else holds those tables).
    func write<T: Sendable>(
        keepingRows: Bool = false,
        _ body: @escaping @Sendable (Database) throws -> T,
        committed: @escaping @Sendable (inout T) -> Void = { _ in }
    ) async throws -> T {
        defer { self.writeCount.add(1, ordering: .relaxed) }
        do {
            return try await self.turns.withLock {
                try await self.pool.writeWithoutTransaction { db in
                    if !keepingRows { self.dropCarriedRows() }
                    // A transaction a failed rollback left open is rolled back first.
                    if db.isInsideTransaction { try db.rollback() }
                    var result: T?
                    try db.inTransaction {
                        result = try body(db)
                        return .commit
                    }
                    var value = result.take()!
                    committed(&value)
                    return value
                }
            }
        } catch let error as CourierStoreError {
            throw error
        } catch {
            self.logger.error("write failed", metadata: ["error": "\(error)"])
            throw Self.plain(error, doing: "store it")
        }
    }

    /// Runs a read, turning database errors into `storage-failed` and passing refusals through.
    func read<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        do {
            return try await self.pool.read(body)
        } catch let error as CourierStoreError {
            throw error
        } catch {
            self.logger.error("read failed", metadata: ["error": "\(error)"])
            throw Self.plain(error, doing: "read it")
        }
    }

    /// A `storage-failed` error in plain words for a client (``CourierStoreError/plain(_:doing:)``): "the disk is
    /// full" when SQLite says so.
    package static func plain(_ error: any Error, doing: String) -> CourierStoreError {
        if let database = error as? DatabaseError, database.resultCode == .SQLITE_FULL {
            return CourierStoreError.plain(DiskFull(error), doing: doing)
        }
        return CourierStoreError.plain(error, doing: doing)
    }

    /// A user's name by id, cached: names never change and users are never deleted.
    func name(of id: UserID, _ db: Database) throws -> String {
        if let name = self.names.withLock({ $0[id] }) { return name }
        guard let name = try String.fetchOne(db, sql: "SELECT name FROM users WHERE id = ?", arguments: [id.rawValue])
        else {
            throw CourierStoreError(.unknownUser, "no user with id \(id.rawValue)")
        }
        self.names.withLock { $0[id] = name }
        return name
    }
}

extension SQLiteStore {
    /// Empties the search index and numbers every message again, unindexed, as the migration that made the index
    /// left a database of messages stored before it: what the tests of ``CourierDatabase/indexPending(limit:)`` start
    /// from.
    package func resetSearchIndex() async throws {
        // As a database from before the index: nothing queued for it either.
        self.searchIndexer.discardQueue()
        try await self.write { db in
            try db.execute(sql: "DELETE FROM message_search")
            try db.execute(sql: Schema.numberMessagesForSearch)
        }
    }
}
