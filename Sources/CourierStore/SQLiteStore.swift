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
public final class SQLiteStore: CourierDatabase {
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

        public init() {}
    }

    /// The file name of the database inside a data folder.
    public static let databaseFileName = "courier.sqlite"

    let pool: DatabasePool
    public let configuration: Configuration
    public var limits: StoreLimits { self.configuration.limits }
    let logger: Logger
    let names: Mutex<[UserID: String]> = Mutex([:])
    let decoy: Mutex<String?> = Mutex(nil)
    let passwordWork: PasswordWork

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
        config.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            if let maxDatabaseBytes {
                let pageSize = try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
                try db.execute(sql: "PRAGMA max_page_count = \(max(1, maxDatabaseBytes / pageSize))")
            }
        }
        config.label = "courier"
        do {
            // Made private before SQLite opens it: SQLite gives the -wal and -shm files the database's permissions.
            try PrivateFiles.createFile(atPath: path)
            for suffix in ["-wal", "-shm"] { try PrivateFiles.restrict(path + suffix) }
            self.pool = try DatabasePool(path: path, configuration: config)
            try Schema.migrator.migrate(self.pool)
        } catch {
            throw CourierStoreError(.storageFailed, "cannot open \(path): \(error)")
        }
        self.configuration = configuration
        self.logger = logger
        self.passwordWork = PasswordWork(
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
    public func close() throws {
        try self.pool.close()
    }

    /// Runs a write transaction, turning database errors into `storage-failed` and passing refusals through.
    func write<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        do {
            return try await self.pool.write(body)
        } catch let error as CourierStoreError {
            throw error
        } catch {
            self.logger.error("write failed", metadata: ["error": "\(error)"])
            throw CourierStoreError.plain(error, doing: "store it")
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
            throw CourierStoreError.plain(error, doing: "read it")
        }
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
