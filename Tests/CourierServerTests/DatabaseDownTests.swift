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
    /// Far more than the node's wait for a connection (10 s here), far less than the pool's own patience (a minute).
    static let bound: Duration = .seconds(40)

    @Test(
        "the database cut off: a send and a login are answered storage-failed with a retry-after within a bounded time, /health says 503; mended, all works again"
    )
    func databaseCutOff() async throws {
        let relay = try await TCPRelay.start(to: try TestDatabase.cluster().port)
        do {
            try await Self.cutOff(relay)
        } catch {
            await relay.stop()
            throw error
        }
        await relay.stop()
    }

    private static func cutOff(_ relay: TCPRelay) async throws {
        let route: @Sendable (Int, PostgresLocation) -> PostgresLocation = { _, location in
            var routed = location
            routed.port = relay.port
            return routed
        }
        let store: (inout PostgresStore.Configuration) -> Void = { $0.connectionWaitTimeout = .seconds(10) }
        try await ClusterFixture.with(nodes: 1, route: route, store: store) { cluster in
            try await cluster.user("alice")
            try await cluster.user("bob")
            let port = cluster.nodes[0].ports.native
            let (alice, _) = try await NativeTestClient.login(port: port, "alice")
            #expect(try await alice.sendText("before", to: .user("bob")).ack != nil)
            #expect(try await cluster.health(of: 0).contains("\"status\":\"ok\""))

            relay.cut()
            // A send on the open connection: answered, not left waiting for the pool's minute.
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
            try await waitUntil("/health says ok again") {
                try await Self.health(cluster).status == "200"
            }
            let (bob, _) = try await NativeTestClient.login(port: port, "bob")
            let (again, _) = try await NativeTestClient.login(port: port, "alice")
            #expect(try await again.sendText("after", to: .user("bob")).ack != nil)
            #expect(try await bob.messages(1).map(\.body.text) == ["after"])
            await again.close()
            await bob.close()
        }
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
