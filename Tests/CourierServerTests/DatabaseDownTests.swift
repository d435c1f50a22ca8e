import CourierPostgresTesting
import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStorePostgres
import CourierTesting
import Testing

@Suite(
    "A node whose PostgreSQL goes away",
    .serialized,
    .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
)
struct DatabaseDownTests {
    /// Far more than the node's wait for a connection (5 s here) and its deadline for a transaction (10 s here), far
    /// less than the pool's own patience (a minute) or the kernel's for packets dropped (a quarter of an hour).
    static let bound: Duration = .seconds(40)

    @Test(
        "the database cut off: a send and a login are answered storage-failed with a retry-after within a bounded time, /health says 503; mended, all works again"
    )
    func databaseCutOff() async throws {
        try await Self.down(stalled: false)
    }

    @Test(
        "the database stops answering, nothing closed (packets dropped): a send is answered storage-failed within the transaction timeout, /health says 503; mended, all works again and the listener listens again"
    )
    func databaseStalled() async throws {
        try await Self.down(stalled: true)
    }

    private static func down(stalled: Bool) async throws {
        let relay = try await TCPRelay.start(to: try TestDatabase.cluster().port)
        do {
            try await Self.cutOff(relay, stalled: stalled)
        } catch {
            await relay.stop()
            throw error
        }
        await relay.stop()
    }

    private static func cutOff(_ relay: TCPRelay, stalled: Bool) async throws {
        let route: @Sendable (Int, PostgresLocation) -> PostgresLocation = { _, location in
            var routed = location
            routed.port = relay.port
            return routed
        }
        let store: (inout PostgresStore.Configuration) -> Void = {
            // Short, and long enough that the node's own start (its migrations, its first heartbeat) on a machine
            // busy with other tests never comes near them.
            $0.connectionWaitTimeout = .seconds(5)
            $0.transactionTimeout = .seconds(10)
            $0.connectTimeout = .seconds(5)
        }
        var feed = PostgresFeed.Configuration()
        feed.livenessInterval = .seconds(1)
        feed.livenessTimeout = .seconds(2)
        try await ClusterFixture.with(nodes: 1, feed: feed, route: route, store: store) { cluster in
            try await cluster.user("alice")
            try await cluster.user("bob")
            let port = cluster.nodes[0].ports.native
            let (alice, _) = try await NativeTestClient.login(port: port, "alice")
            #expect(try await alice.sendText("before", to: .user("bob")).ack != nil)
            #expect(try await cluster.health(of: 0).contains("\"status\":\"ok\""))

            if stalled { relay.stall() } else { relay.cut() }
            // A send on the open connection: answered, not left waiting for the pool's minute (or, packets dropped,
            // for the kernel's quarter of an hour).
            var send = ClientEnvelope()
            send.send.id = "during"
            send.send.to = .user("bob")
            send.send.body.text = "during"
            try await alice.send(send)
            let answer = try await alice.expect(timeout: Self.bound, "the send's answer") { $0.failure }
            #expect(answer.code == ErrorCodes.storageFailed && answer.retryAfterMs > 0, "\(answer)")
            // /health says the node cannot serve, with the reason (and nothing of where the database is).
            try await waitUntil("/health says 503") {
                let health = try await Self.health(cluster)
                return health.status == "503" && health.body.contains("\"status\":\"unavailable\"")
            }
            if stalled {
                // The listener's connection hears nothing either, and closes nothing: its question goes unanswered,
                // and it lets the connection go (it would otherwise say it listens, and hear nothing, for good).
                try await waitUntil("/health says the listener is not listening") {
                    try await Self.health(cluster).body.contains("\"listening\":false")
                }
            }
            // A password login: refused with a retry-after, within the bound too.
            let login = try await NativeTestClient.connect(port: port)
            var hello = ClientEnvelope()
            hello.hello.password.user = "bob"
            hello.hello.password.password = "pw-bob"
            try await login.send(hello)
            let refused = try await login.expect(timeout: Self.bound, "the login's answer") { $0.failure }
            #expect(refused.code == ErrorCodes.storageFailed && refused.retryAfterMs > 0, "\(refused)")
            await login.close()
            await alice.close()

            relay.mend()
            try await waitUntil("/health says ok again, the listener listening") {
                let health = try await Self.health(cluster)
                return health.status == "200" && health.body.contains("\"listening\":true")
            }
            // As a client does: a login answered storage-failed (a pool connection not back yet) is tried again.
            let bob = try await Self.login(port: port, "bob")
            let again = try await Self.login(port: port, "alice")
            #expect(try await again.sendText("after", to: .user("bob")).ack != nil)
            #expect(try await bob.messages(1).map(\.body.text) == ["after"])
            await again.close()
            await bob.close()
        }
    }

    /// A password login, tried again while the node answers `storage-failed` (as the Swift client does after its
    /// `retry_after_ms`).
    static func login(port: Int, _ user: String) async throws -> NativeTestClient {
        var client: NativeTestClient?
        try await waitUntil("\(user) logs in once the database is back") {
            do {
                client = try await NativeTestClient.login(port: port, user).0
                return true
            } catch  where "\(error)".contains(ErrorCodes.storageFailed) {
                return false
            }
        }
        return client!
    }

    /// The node's `/health`: its status code and body.
    static func health(_ cluster: ClusterFixture) async throws -> (status: String, body: String) {
        let output = try await ExternalProgram.output(
            "/usr/bin/curl",
            [
                "--silent", "--max-time", "60", "--write-out", "\n%{http_code}",
                "http://127.0.0.1:\(cluster.nodes[0].ports.http)/health",
            ]
        )
        let lines = output.split(separator: "\n")
        return (String(lines.last ?? ""), lines.dropLast().joined(separator: "\n"))
    }
}
