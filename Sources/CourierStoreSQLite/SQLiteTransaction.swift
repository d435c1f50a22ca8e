internal import CourierStore
internal import Foundation
internal import GRDB

extension SQLiteStore {
    /// Runs `body` as one write transaction (`BEGIN IMMEDIATE`: SQLite's write lock from the start), its statements
    /// each an access to the writer connection, in a turn of its own: no other write of this process runs
    /// meanwhile. Committed when `body` returns, rolled back when it throws (or is cancelled).
    package func transaction<T: Sendable>(
        doing: String,
        _ body: @escaping @Sendable (SQLiteTransaction) async throws -> T
    ) async throws -> T {
        defer { self.writeCount.add(1, ordering: .relaxed) }
        do {
            return try await self.turns.withLock {
                try await self.pool.writeWithoutTransaction { db in
                    // It may change what the group commit carries (``SQLiteStore/write(keepingRows:_:committed:)``).
                    self.dropCarriedRows()
                    // A transaction a failed rollback left open is rolled back first.
                    if db.isInsideTransaction { try db.rollback() }
                    try db.beginTransaction(.immediate)
                }
                do {
                    let result = try await body(SQLiteTransaction(store: self, writing: true))
                    try await self.pool.writeWithoutTransaction { db in try db.commit() }
                    return result
                } catch {
                    // Not cancelled with the caller: the rollback must run.
                    await Task {
                        try? await self.pool.writeWithoutTransaction { db in
                            if db.isInsideTransaction { try db.rollback() }
                        }
                    }.value
                    throw error
                }
            }
        } catch let error as CourierStoreError {
            throw error
        } catch {
            self.logger.error("write failed", metadata: ["doing": "\(doing)", "error": "\(error)"])
            throw SQLiteStore.plain(error, doing: doing)
        }
    }

    /// Runs reads, each on a reader connection of its own.
    package func reading<T: Sendable>(
        doing: String,
        _ body: @escaping @Sendable (SQLiteTransaction) async throws -> T
    ) async throws -> T {
        do {
            return try await body(SQLiteTransaction(store: self, writing: false))
        } catch let error as CourierStoreError {
            throw error
        } catch {
            self.logger.error("read failed", metadata: ["doing": "\(doing)", "error": "\(error)"])
            throw SQLiteStore.plain(error, doing: doing)
        }
    }
}

/// The reads and writes of the store's rules in SQLite's SQL: each an access to the writer connection inside a
/// write transaction (``SQLiteStore/transaction(doing:_:)``), or to a reader.
package struct SQLiteTransaction: StoreTransaction {
    let store: SQLiteStore
    let writing: Bool

    /// Runs one access to the database.
    func access<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        self.writing
            ? try await self.store.pool.writeWithoutTransaction(body) : try await self.store.pool.read(body)
    }

    /// Runs one access that writes: only inside a write transaction.
    func update<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        precondition(self.writing, "a write outside a write transaction")
        return try await self.store.pool.writeWithoutTransaction(body)
    }
}
