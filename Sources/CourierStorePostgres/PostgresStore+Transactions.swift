internal import CourierStore
internal import Logging
internal import NIOCore
internal import PostgresNIO
internal import Synchronization

extension PostgresStore {
    /// Runs one write transaction on a pooled connection, turning database errors into `storage-failed` and passing
    /// refusals through. A transaction PostgreSQL aborted for a deadlock, a serialization failure or a row lock that
    /// would have waited (``isRetryable(_:)``) committed nothing, and runs again from the start, up to
    /// ``Configuration-swift.struct/maxWriteRetries`` times; `body` must read everything it decides on inside the
    /// transaction.
    func write<T: Sendable>(
        doing: String,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        await self.whenRunning()
        var attempt = 0
        while true {
            do {
                let logger = self.logger
                let timeout = self.configuration.transactionTimeout
                return try await self.withPooledConnection { connection in
                    try await Self.untilClosed(connection, within: timeout) {
                        try await connection.withTransaction(logger: logger) { connection in
                            try await body(connection)
                        }
                    }
                }
            } catch let error as PostgresTransactionError {
                // The statement's own error, not the rollback's.
                let cause = error.closureError ?? error.beginError ?? error.commitError ?? error
                if let refusal = cause as? CourierStoreError { throw refusal }
                if Self.isRetryable(cause), attempt < self.configuration.maxWriteRetries {
                    attempt += 1
                    self.logger.debug(
                        "write retried",
                        metadata: [
                            "doing": "\(doing)", "error": "\(cause)",
                            "sqlstate": "\((cause as? PSQLError)?.serverInfo?[.sqlState] ?? "")",
                        ]
                    )
                    continue
                }
                self.logger.error("write failed", metadata: ["doing": "\(doing)", "error": "\(cause)"])
                throw Self.storageFailed(cause, doing: doing)
            } catch let error as CourierStoreError {
                throw error
            } catch {
                self.logger.error("write failed", metadata: ["doing": "\(doing)", "error": "\(error)"])
                throw Self.storageFailed(error, doing: doing)
            }
        }
    }

    /// Runs reads on one pooled connection, outside a transaction (each statement sees what was committed when it
    /// began), turning database errors into `storage-failed` and passing refusals through.
    func read<T: Sendable>(
        doing: String,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        await self.whenRunning()
        do {
            let timeout = self.configuration.transactionTimeout
            return try await self.withPooledConnection { connection in
                try await Self.untilClosed(connection, within: timeout) { try await body(connection) }
            }
        } catch let error as CourierStoreError {
            throw error
        } catch {
            self.logger.error("read failed", metadata: ["doing": "\(doing)", "error": "\(error)"])
            throw Self.storageFailed(error, doing: doing)
        }
    }

    /// The connection closed while a statement of `work` was unanswered. Nothing of it committed, unless that
    /// statement was the `COMMIT` itself: a send reported failed then is stored all the same, and its resend
    /// answers with the original (ids are unique per sender).
    struct ConnectionLost: Error, CustomStringConvertible {
        var description: String { "the connection to PostgreSQL closed" }
    }

    /// The work on a connection took longer than its deadline: the connection was closed under it. As with
    /// ``ConnectionLost``, nothing of it committed unless the unanswered statement was the `COMMIT`.
    struct TimedOut: Error, CustomStringConvertible {
        var after: Duration
        var description: String { "PostgreSQL did not answer within \(self.after); the connection was closed" }
    }

    /// Runs `body` on one of the pool's connections, or fails with `storage-failed` when none is had within
    /// ``Configuration-swift.struct/connectionWaitTimeout``: with the database down, the pool would keep a request
    /// waiting for as long as it tries to connect (a minute and more), and the client waiting for its answer would
    /// hear nothing. The time bounds the wait for a connection only; a statement that has started runs to its end.
    func withPooledConnection<T: Sendable>(
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let timeout = self.configuration.connectionWaitTimeout
        let lease = LeaseWait()
        let late = CourierStoreError(
            .storageFailed,
            "the database did not answer within \(timeout) (it may be down or out of reach): try again later"
        )
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                try await self.client.withConnection { connection in
                    guard lease.settle(as: LeaseWait.leased) else { throw late }
                    return try await body(connection)
                }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                if lease.settle(as: LeaseWait.late) { throw late }
                return nil
            }
            while let next = try await group.next() {
                guard let value = next else { continue }
                group.cancelAll()
                return value
            }
            throw late
        }
    }

    /// How often ``untilClosed(_:_:)`` looks whether the connection closed under a statement.
    static let closedCheckInterval = TimeAmount.milliseconds(250)

    /// Runs `work` on a connection, giving up on it if the connection closes first, or, with `deadline`, if the
    /// work takes longer than that: then the connection is closed (so the pool lets it go) and this throws
    /// ``TimedOut``. Checked every ``closedCheckInterval``.
    ///
    /// postgres-nio (1.33) writes a statement to its channel without a promise: a statement written just after the
    /// channel closed (PostgreSQL restarting, the connection ended by the server) is dropped, and its answer never
    /// comes. Waiting for it held the group commit for good. Here a timer on the connection's event loop looks every
    /// ``closedCheckInterval`` while `work` runs; once the connection is closed, this throws ``ConnectionLost``, and
    /// the pool lets the connection go. The task still waiting for the dropped answer is left behind, with what
    /// `work` holds (a batch's requests), each time this happens; it never holds a connection.
    static func untilClosed<T: Sendable>(
        _ connection: PostgresConnection,
        within deadline: Duration? = nil,
        _ work: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let start = NIODeadline.now()
        let waiting = Mutex<CheckedContinuation<T, any Error>?>(nil)
        let task = Mutex<(task: Task<Void, Never>?, cancelled: Bool)>((nil, false))
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                waiting.withLock { $0 = continuation }
                let finish: @Sendable (Result<T, any Error>) -> Void = { result in
                    waiting.withLock { waiting in
                        defer { waiting = nil }
                        return waiting
                    }?.resume(with: result)
                }
                let watchdog = connection.eventLoop.scheduleRepeatedTask(
                    initialDelay: Self.closedCheckInterval,
                    delay: Self.closedCheckInterval
                ) { repeated in
                    if waiting.withLock({ $0 == nil }) {
                        repeated.cancel()
                    } else if connection.isClosed {
                        repeated.cancel()
                        finish(.failure(ConnectionLost()))
                    } else if let deadline, NIODeadline.now() - start >= TimeAmount(deadline) {
                        repeated.cancel()
                        connection.close().whenComplete { _ in }
                        finish(.failure(TimedOut(after: deadline)))
                    }
                }
                let started = Task {
                    let result: Result<T, any Error>
                    do {
                        result = .success(try await work())
                    } catch {
                        result = .failure(error)
                    }
                    watchdog.cancel()
                    finish(result)
                }
                // Cancelled before the task existed: it is cancelled now.
                if task.withLock({ state in
                    state.task = started
                    return state.cancelled
                }) {
                    started.cancel()
                }
            }
        } onCancel: {
            task.withLock { state in
                state.cancelled = true
                return state.task
            }?.cancel()
        }
    }

    /// Whether a transaction was aborted and may succeed when run again: PostgreSQL's deadlock (40P01),
    /// serialization failure (40001), or a row lock a batch took out of its order with NOWAIT that another
    /// transaction held (55P03); a message id its sender used in another transaction committed meanwhile (23505 on
    /// `messages_by_client_id`: a batch does not lock its senders' rows); or a group commit that came to need a
    /// lock on a row it had read without one (``StaleBatchRead``).
    static func isRetryable(_ error: any Error) -> Bool {
        if error is StaleBatchRead { return true }
        guard let error = error as? PSQLError, let state = error.serverInfo?[.sqlState] else { return false }
        // A message id its sender used on another node meanwhile: run again, the batch finds the original.
        if state == "23505", error.serverInfo?[.constraintName] == "messages_by_client_id" { return true }
        return state == "40P01" || state == "40001" || state == "55P03"
    }

    /// Whether an error is PostgreSQL refusing a row that breaks a unique index (23505).
    static func isUniqueViolation(_ error: any Error) -> Bool {
        (error as? PSQLError)?.serverInfo?[.sqlState] == "23505"
    }
}

extension PostgresConnection {
    /// Every row of a query, for reading by column name or position.
    func rows(_ query: PostgresQuery, logger: Logger) async throws -> [PostgresRandomAccessRow] {
        var rows: [PostgresRandomAccessRow] = []
        for try await row in try await self.query(query, logger: logger) {
            rows.append(row.makeRandomAccess())
        }
        return rows
    }

    /// The first row of a query (the others read and dropped), or nil.
    func row(_ query: PostgresQuery, logger: Logger) async throws -> PostgresRandomAccessRow? {
        try await self.rows(query, logger: logger).first
    }

    /// The first column of the first row, or nil when there is no row (or its value is NULL).
    func value<T: PostgresDecodable>(
        _ query: PostgresQuery,
        as: T.Type,
        logger: Logger
    ) async throws -> T? where T._DecodableType == T {
        guard let row = try await self.row(query, logger: logger) else { return nil }
        return try row[0].decode(T?.self)
    }

    /// The first column of every row.
    func values<T: PostgresDecodable>(_ query: PostgresQuery, as: T.Type, logger: Logger) async throws -> [T] {
        try await self.rows(query, logger: logger).map { try $0[0].decode(T.self) }
    }
}

extension PostgresRandomAccessRow {
    /// A column's value.
    func get<T: PostgresDecodable>(_ column: String, as: T.Type = T.self) throws -> T {
        try self[column].decode(T.self)
    }

    /// A `bytea` column's bytes.
    func bytes(_ column: String) throws -> [UInt8] {
        var buffer = try self[column].decode(ByteBuffer.self)
        return buffer.readBytes(length: buffer.readableBytes) ?? []
    }
}

/// Whether a request got one of the pool's connections in time: settled once, by the lease or by the timer.
private final class LeaseWait: Sendable {
    static let leased = 1
    static let late = 2
    /// 0 while waiting.
    private let state = Atomic<Int>(0)

    /// Settles the wait as `outcome`, unless it was settled already.
    ///
    /// - Returns: Whether this call settled it.
    func settle(as outcome: Int) -> Bool {
        self.state.compareExchange(expected: 0, desired: outcome, ordering: .acquiringAndReleasing).exchanged
    }
}
