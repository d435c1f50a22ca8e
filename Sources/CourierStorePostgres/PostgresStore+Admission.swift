public import CourierStore
internal import Logging
internal import PostgresNIO

/// The limits every node keeps together (``ClusterAdmission``), in the tables of migration `v4-admission`. Each key
/// (a user name's, an address's, a user's connections) is one transaction-scoped advisory lock: two nodes checking
/// the same key at once take turns, so neither counts past a limit the other is filling. An attempt takes its
/// address's lock before its user name's, so two never wait for each other in a circle.
extension PostgresStore: ClusterAdmission {
    /// The first of the advisory locks' two keys (the bytes of "Cour"); the second is the key's hash. Apart from the
    /// migrations' lock, which is one 64-bit key (the two kinds never meet).
    static let admissionLockClass: Int32 = 0x436F_7572

    public var clusterAdmission: (any ClusterAdmission)? { self }
    public var clusterRoutes: (any ClusterRoutes)? { self }

    public func admitPasswordAttempt(
        user: String,
        address: String,
        limits: LoginLimits,
        nowMs: Int64
    ) async throws -> PasswordAdmission {
        try await self.admit(keys: [("a:" + address, limits.perAddress), ("u:" + user, limits.perUser)], limits, nowMs)
    }

    public func admitSignUp(address: String, limits: LoginLimits, nowMs: Int64) async throws -> PasswordAdmission {
        // The address's key first, as for a password attempt; then the one every sign-up counts under.
        try await self.admit(
            keys: [
                (Self.signUpKeyPrefix + "a:" + address, limits.perAddress),
                (Self.signUpKeyPrefix + "*", limits.perUser),
            ],
            limits,
            nowMs
        )
    }

    /// What every sign-up's keys start with, so that they are pruned by their own window; no password attempt's key
    /// does ("a:", "u:").
    static let signUpKeyPrefix = "s:"

    /// Checks an attempt against the failures and the attempts in flight under each of its keys, each key's lock
    /// taken in the order given, and counts it in flight under each if it may go ahead.
    private func admit(
        keys: [(String, Int)],
        _ limits: LoginLimits,
        _ nowMs: Int64
    ) async throws -> PasswordAdmission {
        let logger = self.logger
        let lockTimeout = self.admissionLockTimeout
        let failedSince = nowMs - limits.window.wholeMilliseconds
        let startedSince = nowMs - limits.inFlightLifetime.wholeMilliseconds
        return try await self.write(doing: "admit a login") { connection in
            var wait: Duration?
            for (key, limit) in keys {
                try await Self.lock(key, timeout: lockTimeout, connection, logger: logger)
                let failures = try await connection.values(
                    """
                    SELECT ended_ms FROM login_attempts
                    WHERE key = \(key) AND failed AND ended_ms > \(failedSince)
                    ORDER BY ended_ms DESC LIMIT \(Int64(max(0, limit)))
                    """,
                    as: Int64.self,
                    logger: logger
                )
                let inFlight =
                    try await connection.value(
                        """
                        SELECT count(*) FROM login_attempts
                        WHERE key = \(key) AND ended_ms IS NULL AND started_ms > \(startedSince)
                        """,
                        as: Int64.self,
                        logger: logger
                    ) ?? 0
                if let keyWait = limits.wait(failures: failures, inFlight: Int(inFlight), limit: limit, nowMs: nowMs) {
                    wait = max(wait ?? .zero, keyWait)
                }
            }
            if let wait { return .throttled(retryAfter: wait) }
            let ids = try await connection.values(
                """
                INSERT INTO login_attempts (key, started_ms)
                SELECT key, \(nowMs) FROM unnest(\(keys.map(\.0))::text[]) AS k(key)
                RETURNING id
                """,
                as: Int64.self,
                logger: logger
            )
            return .admitted(PasswordAttempt(ids: ids.sorted()))
        }
    }

    public func finishPasswordAttempt(_ attempt: PasswordAttempt, failed: Bool, nowMs: Int64) async throws {
        let logger = self.logger
        try await self.write(doing: "finish a login") { connection in
            // A success leaves nothing to count.
            try await connection.run(
                failed
                    ? "UPDATE login_attempts SET ended_ms = \(nowMs), failed = true WHERE id = ANY(\(attempt.ids))"
                    : "DELETE FROM login_attempts WHERE id = ANY(\(attempt.ids))",
                logger: logger
            )
        }
    }

    public func openConnection(
        user: UserID,
        maxPerUser: Int,
        yielding: Bool,
        nowMs: Int64
    ) async throws -> ConnectionAdmission {
        let logger = self.logger
        let node = self.configuration.node
        let lockTimeout = self.admissionLockTimeout
        return try await self.write(doing: "open a connection") { connection in
            try await Self.lock("c:\(user.rawValue)", timeout: lockTimeout, connection, logger: logger)
            // The user's connections that count: not yielded, on a node that is alive. Those on dead nodes go; a
            // yielded one stays (until ``prune``) so that its node, back, still finds it yielded and closes it.
            try await connection.run(
                """
                DELETE FROM connection_leases l
                WHERE l.user_id = \(user.rawValue) AND l.yielded_ms IS NULL AND NOT EXISTS (
                    SELECT 1 FROM cluster_nodes n WHERE n.name = l.node AND n.alive_until_ms > \(nowMs))
                """,
                logger: logger
            )
            let open = try await connection.values(
                """
                SELECT id FROM connection_leases
                WHERE user_id = \(user.rawValue) AND yielded_ms IS NULL ORDER BY id
                """,
                as: Int64.self,
                logger: logger
            )
            var yielded: [Int64] = []
            if open.count >= maxPerUser {
                guard yielding else { return .full }
                yielded = Array(open.prefix(open.count - max(0, maxPerUser - 1)))
                try await connection.run(
                    "UPDATE connection_leases SET yielded_ms = \(nowMs) WHERE id = ANY(\(yielded))",
                    logger: logger
                )
            }
            guard
                let lease = try await connection.value(
                    """
                    INSERT INTO connection_leases (user_id, node, opened_ms)
                    VALUES (\(user.rawValue), \(node), \(nowMs)) RETURNING id
                    """,
                    as: Int64.self,
                    logger: logger
                )
            else { throw CourierStoreError(.storageFailed, "no id for a connection") }
            return .opened(lease: lease, yielded: yielded)
        }
    }

    public func closeConnections(_ leases: [Int64]) async throws {
        guard !leases.isEmpty else { return }
        let logger = self.logger
        try await self.write(doing: "close connections") { connection in
            try await connection.run("DELETE FROM connection_leases WHERE id = ANY(\(leases))", logger: logger)
        }
    }

    public func takeYieldedConnections() async throws -> [Int64] {
        let logger = self.logger
        let node = self.configuration.node
        return try await self.write(doing: "take yielded connections") { connection in
            try await connection.values(
                """
                DELETE FROM connection_leases WHERE node = \(node) AND yielded_ms IS NOT NULL RETURNING id
                """,
                as: Int64.self,
                logger: logger
            ).sorted()
        }
    }

    @discardableResult
    public func heartbeat(nowMs: Int64, aliveUntilMs: Int64) async throws -> Bool {
        let logger = self.logger
        let node = self.configuration.node
        return try await self.write(doing: "say the node is alive") { connection in
            let was = try await connection.value(
                "SELECT alive_until_ms FROM cluster_nodes WHERE name = \(node) FOR UPDATE",
                as: Int64.self,
                logger: logger
            )
            let forward = self.forward.withLock { $0 }
            try await connection.run(
                """
                INSERT INTO cluster_nodes (name, alive_until_ms, forward_address, forward_secret)
                VALUES (\(node), \(aliveUntilMs), \(forward?.address), \(forward?.secret))
                ON CONFLICT (name) DO UPDATE SET alive_until_ms = excluded.alive_until_ms,
                    forward_address = excluded.forward_address, forward_secret = excluded.forward_secret
                """,
                logger: logger
            )
            return (was ?? 0) <= nowMs
        }
    }

    public func restoreConnections(_ leases: [ConnectionLease], nowMs: Int64) async throws {
        guard !leases.isEmpty else { return }
        let logger = self.logger
        let node = self.configuration.node
        try await self.write(doing: "count the node's connections again") { connection in
            try await connection.run(
                """
                INSERT INTO connection_leases (id, user_id, node, opened_ms)
                SELECT lease, user_id, \(node), \(nowMs)
                FROM unnest(\(leases.map(\.lease)), \(leases.map(\.user.rawValue))) AS l(lease, user_id)
                ON CONFLICT (id) DO NOTHING
                """,
                logger: logger
            )
        }
    }

    public func forgetNode() async throws {
        let logger = self.logger
        let node = self.configuration.node
        try await self.write(doing: "forget the node's connections") { connection in
            try await connection.run("DELETE FROM connection_leases WHERE node = \(node)", logger: logger)
            try await connection.run("DELETE FROM cluster_nodes WHERE name = \(node)", logger: logger)
        }
    }

    public func prune(
        attemptsBeforeMs: Int64,
        signUpsBeforeMs: Int64,
        yieldedBeforeMs: Int64,
        nowMs: Int64
    ) async throws {
        let logger = self.logger
        let signUps = Self.signUpKeyPrefix + "%"
        try await self.write(doing: "prune what no longer counts") { connection in
            try await connection.run(
                """
                DELETE FROM login_attempts WHERE key NOT LIKE \(signUps) AND started_ms < \(attemptsBeforeMs)
                    OR key LIKE \(signUps) AND started_ms < \(signUpsBeforeMs)
                """,
                logger: logger
            )
            try await connection.run(
                """
                DELETE FROM connection_leases l
                WHERE (l.yielded_ms IS NULL OR l.yielded_ms < \(yieldedBeforeMs)) AND NOT EXISTS (
                    SELECT 1 FROM cluster_nodes n WHERE n.name = l.node AND n.alive_until_ms > \(nowMs))
                """,
                logger: logger
            )
            try await connection.run("DELETE FROM cluster_nodes WHERE alive_until_ms <= \(nowMs)", logger: logger)
        }
    }

    /// How long a key's lock is waited for: ``Configuration-swift.struct/admissionLockTimeout``, and never more than
    /// half the transaction's own deadline (``Configuration-swift.struct/transactionTimeout``), so that the lock's
    /// timeout, which is tried again, comes first.
    var admissionLockTimeout: Duration {
        min(self.configuration.admissionLockTimeout, self.configuration.transactionTimeout / 2)
    }

    /// Takes a key's advisory lock until the transaction ends, waiting at most `timeout`
    /// (``PostgresStore/Configuration-swift.struct/admissionLockTimeout``).
    private static func lock(
        _ key: String,
        timeout: Duration,
        _ connection: PostgresConnection,
        logger: Logger
    ) async throws {
        let milliseconds = max(1, timeout.wholeMilliseconds)
        try await connection.run("SET LOCAL lock_timeout = \(unescaped: String(milliseconds))", logger: logger)
        try await connection.run(
            "SELECT pg_advisory_xact_lock(\(Self.admissionLockClass), hashtext(\(key)))",
            logger: logger
        )
    }
}

extension PostgresStore: ClusterRoutes {
    public var node: String { self.configuration.node }

    public func advertise(_ forward: ForwardEndpoint?) async throws {
        self.forward.withLock { $0 = forward }
        let logger = self.logger
        let node = self.configuration.node
        try await self.write(doing: "say where the node takes forwarded writes") { connection in
            try await connection.run(
                """
                UPDATE cluster_nodes SET forward_address = \(forward?.address), forward_secret = \(forward?.secret)
                WHERE name = \(node)
                """,
                logger: logger
            )
        }
    }

    public func livePeers(nowMs: Int64) async throws -> [ClusterPeer] {
        let logger = self.logger
        return try await self.read(doing: "read the nodes alive") { connection in
            var peers: [ClusterPeer] = []
            for row in try await connection.rows(
                """
                SELECT name, forward_address, forward_secret FROM cluster_nodes WHERE alive_until_ms > \(nowMs)
                ORDER BY name
                """,
                logger: logger
            ) {
                let address = try row.get("forward_address", as: String?.self)
                let secret = try row.get("forward_secret", as: String?.self)
                peers.append(
                    ClusterPeer(
                        name: try row.get("name"),
                        forward: address.flatMap { address in
                            secret.map { ForwardEndpoint(address: address, secret: $0) }
                        }
                    )
                )
            }
            return peers
        }
    }
}
