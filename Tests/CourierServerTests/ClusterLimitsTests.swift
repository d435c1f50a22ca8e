import CourierPostgresTesting
import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStorePostgres
import CourierTesting
import PostgresNIO
import Testing

@Suite(
    "Limits that hold across nodes",
    .serialized,
    .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
)
struct ClusterLimitsTests {
    @Test("password guesses spread over three nodes: the per-user and the per-address limits hold on all together")
    func guessesAcrossNodes() async throws {
        try await ClusterFixture.with(nodes: 3) { cluster in
            try await cluster.user("alice")
            var codes: [String] = []
            for index in 0..<20 {
                codes.append(try await Self.passwordLogin(cluster, node: index % 3, "alice", password: "guess\(index)"))
            }
            // Five checked in all (each node alone would have checked five), the rest refused before any hashing.
            #expect(codes.filter { $0 == ErrorCodes.authFailed }.count == 5, "\(codes)")
            #expect(codes.filter { $0 == ErrorCodes.throttled }.count == 15, "\(codes)")
            // The address's limit (8) counts every name tried from it on every node: alice's five, and three more.
            var others: [String] = []
            for index in 0..<12 {
                others.append(try await Self.passwordLogin(cluster, node: index % 3, "nobody\(index)", password: "x"))
            }
            #expect(others.filter { $0 == ErrorCodes.authFailed }.count == 3, "\(others)")
        } configure: {
            $0.limits.maxFailedLoginsPerUser = 5
            $0.limits.maxFailedLoginsPerAddress = 8
        }
    }

    @Test(
        "one user over three nodes holds at most max-connections-per-user: a token past it is refused, a password login on another node makes the oldest yield"
    )
    func connectionsAcrossNodes() async throws {
        try await ClusterFixture.with(nodes: 3) { cluster in
            try await cluster.user("alice")
            let ports = cluster.nodes.map(\.ports.native)
            let (oldest, welcome) = try await NativeTestClient.login(port: ports[0], "alice", device: "phone")
            let (second, _) = try await NativeTestClient.resume(port: ports[1], token: welcome.token)
            let (third, _) = try await NativeTestClient.resume(port: ports[2], token: welcome.token)
            // A fourth, on any node, with the token: refused.
            for port in ports {
                #expect(try await LoginStormTests.tokenLogin(port: port, token: welcome.token) == ErrorCodes.serverFull)
            }
            // The owner's password login on node 1 gets in; the oldest connection, on node 0, yields its place.
            let (owner, _) = try await NativeTestClient.login(port: ports[1], "alice", device: "laptop")
            let yielded = try await oldest.expectClose()
            #expect(yielded.last?.failure?.code == ErrorCodes.serverFull, "\(yielded)")
            #expect(try await LoginStormTests.tokenLogin(port: ports[0], token: welcome.token) == ErrorCodes.serverFull)
            // The others are served.
            #expect(try await owner.sendText("hi", to: .user("alice")).ack != nil)
            #expect(try await second.messages(1).map(\.body.text) == ["hi"])
            // One leaves: a token login fits again, on another node (the close is counted a moment later: retry).
            await third.close()
            let code = try await LoginStormTests.resumeOnceThereIsRoom(port: ports[0], token: welcome.token)
            #expect(code == nil)
            for client in [second, owner] { await client.close() }
        } configure: {
            $0.limits.maxConnectionsPerUser = 3
        }
    }

    @Test(
        "logins of one user waiting on the database at once are bounded per node: one more is refused before it asks"
    )
    func openingPerUser() async throws {
        let store: (inout PostgresStore.Configuration) -> Void = { $0.admissionLockTimeout = .seconds(600) }
        try await ClusterFixture.with(nodes: 1, store: store) { cluster in
            try await cluster.user("alice")
            let port = cluster.nodes[0].ports.native
            let (first, welcome) = try await NativeTestClient.login(port: port, "alice", device: "phone")
            await first.close()
            // Another session holds the lock alice's connection count takes (its class is 0x436F_7572, "Cour"): a
            // token login that counts waits on it.
            try await TestDatabase.admin(cluster.location) { connection in
                try await connection.query("BEGIN", logger: TestDatabase.logger)
                try await connection.query(
                    """
                    SELECT pg_advisory_xact_lock(1131378034, hashtext('c:' || (SELECT id FROM users WHERE name = 'alice')))
                    """,
                    logger: TestDatabase.logger
                )
                try await withThrowingTaskGroup(of: String?.self) { group in
                    group.addTask { try await LoginStormTests.tokenLogin(port: port, token: welcome.token) }
                    try await waitUntil("a login waits for the lock") {
                        let rows = try await connection.query(
                            """
                            SELECT count(*) FROM pg_locks
                            WHERE locktype = 'advisory' AND NOT granted AND classid::bigint = 1131378034
                                AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                            """,
                            logger: TestDatabase.logger
                        )
                        var waiting = 0
                        for try await count in rows.decode(Int.self) { waiting = count }
                        return waiting == 1
                    }
                    // One is counting already (the limit here): the next is refused at once, the database not asked.
                    #expect(
                        try await LoginStormTests.tokenLogin(port: port, token: welcome.token) == ErrorCodes.serverFull
                    )
                    try await connection.query("COMMIT", logger: TestDatabase.logger)
                    #expect(try await group.next()! == nil, "the waiting login gets in once the lock is free")
                }
            }
            // Nobody is counting now: a token login gets in.
            #expect(try await LoginStormTests.tokenLogin(port: port, token: welcome.token) == nil)
        } configure: {
            $0.cluster.maxOpeningPerUser = 1
        }
    }

    @Test(
        "a node that lapsed (cut off past node-lifetime) counts its open connections again: the user's limit holds after"
    )
    func lapsedNodeCountsAgain() async throws {
        try await ClusterFixture.with(nodes: 2) { cluster in
            try await cluster.user("alice")
            let ports = cluster.nodes.map(\.ports.native)
            let (phone, welcome) = try await NativeTestClient.login(port: ports[0], "alice", device: "phone")
            let (laptop, _) = try await NativeTestClient.resume(port: ports[0], token: welcome.token)
            #expect(try await LoginStormTests.tokenLogin(port: ports[1], token: welcome.token) == ErrorCodes.serverFull)
            // What the other nodes do with a node whose last word ran out: it is dead, its leases go.
            let leases = { () async throws -> Int in
                try await TestDatabase.admin(cluster.location) { connection in
                    let rows = try await connection.query(
                        "SELECT count(*) FROM connection_leases WHERE yielded_ms IS NULL",
                        logger: TestDatabase.logger
                    )
                    var count = 0
                    for try await value in rows.decode(Int.self) { count = value }
                    return count
                }
            }
            #expect(try await leases() == 2)
            try await TestDatabase.admin(cluster.location) { connection in
                try await connection.query("BEGIN", logger: TestDatabase.logger)
                try await connection.query("UPDATE cluster_nodes SET alive_until_ms = 0", logger: TestDatabase.logger)
                try await connection.query("DELETE FROM connection_leases", logger: TestDatabase.logger)
                try await connection.query("COMMIT", logger: TestDatabase.logger)
            }
            // Its next heartbeat finds it lapsed, and counts its two connections again.
            try await waitUntil("the node counts its connections again") { try await leases() == 2 }
            #expect(try await LoginStormTests.tokenLogin(port: ports[1], token: welcome.token) == ErrorCodes.serverFull)
            await phone.close()
            await laptop.close()
        } configure: {
            $0.limits.maxConnectionsPerUser = 2
            $0.cluster.nodeHeartbeatInterval = .milliseconds(200)
        }
    }

    /// A password login on a node; the error code it ends with ("" for a welcome).
    static func passwordLogin(
        _ cluster: ClusterFixture,
        node: Int,
        _ user: String,
        password: String
    ) async throws
        -> String
    {
        let client = try await NativeTestClient.connect(port: cluster.nodes[node].ports.native)
        var hello = ClientEnvelope()
        hello.hello.password.user = user
        hello.hello.password.password = password
        try await client.send(hello)
        let answer = try await client.expect("an answer") { $0 }
        await client.close()
        return answer.failure?.code ?? ""
    }
}
