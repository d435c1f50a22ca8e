import CourierClient
import CourierPostgresTesting
import CourierStore
import CourierStorePostgres
import CourierTesting
import Foundation
import Logging
import PostgresNIO
import Synchronization
import Testing

/// Run alone by `scripts/test`, with the private PostgreSQL cluster it starts (which this test restarts).
@Suite(
    "Nodes on PostgreSQL: a node SIGKILLed and PostgreSQL restarted while clients send",
    .serialized,
    .enabled(if: Soak.isAsked, Comment(rawValue: Soak.skipReason))
)
struct ClusterCrashTests {
    @Test(
        "10,000 sends over three nodes, one node SIGKILLed and PostgreSQL restarted meanwhile: every acknowledged message is stored once and delivered once (with each conversation's writes forwarded to its owner, and without)",
        arguments: [false, true]
    )
    func killNodeAndRestartDatabase(forwarding: Bool) async throws {
        let seed = TestSeed.make(for: "killNodeAndRestartDatabase-\(forwarding ? "forwarding" : "local")")
        var random = SeededRandom(seed: seed)
        let perSender = 5_000
        try await TestDatabase.with { location in
            try await withTemporaryDirectory { folder in
                let environment = ["COURIER_DATABASE": TestDatabase.url(of: location)]
                for user in ["alice", "bob", "carol"] {
                    let (status, output) = try await CourierExecutable.run(
                        ["user", "add", user, "--password", "pw-" + user],
                        environment: environment
                    )
                    #expect(status == 0, "\(output)")
                }
                let (status, output) = try await CourierExecutable.run(
                    ["group", "create", "trio", "--owner", "carol", "--members", "alice,bob"],
                    environment: environment
                )
                #expect(status == 0, "\(output)")

                // Three nodes, each on its own ports and data folder; a lost notification is made up for in 100 ms.
                // Forwarding: alice's conversation with bob and the group are each owned by one of the nodes, which
                // may be the one killed (started again, on a new forward port the others read within 200 ms).
                var ports: [(native: Int, compat: Int, http: Int)] = []
                for _ in 0..<3 {
                    ports.append((try await FreePort.pick(), try await FreePort.pick(), try await FreePort.pick()))
                }
                func start(_ node: Int) async throws -> ServerProcess {
                    try await ServerProcess.start(
                        arguments: [
                            "serve", "--data", folder.appendingPathComponent("node\(node)").path,
                            "--port", String(ports[node].native), "--compat-port", String(ports[node].compat),
                            "--http-port", String(ports[node].http), "--node", "node\(node)",
                            "--limit", "cluster-poll-interval=100ms",
                            "--limit", "forward-writes=\(forwarding ? 1 : 0)",
                            "--limit", "routes-refresh-interval=200ms", "--forward-host", "127.0.0.2",
                        ],
                        environment: environment,
                        readyPort: ports[node].native,
                        log: folder.appendingPathComponent("node\(node).log")
                    )
                }
                var nodes: [ServerProcess] = []
                for node in 0..<3 { nodes.append(try await start(node)) }

                // alice on node 0 writes to bob, carol on node 1 to the group; bob reads on node 2. The node killed:
                // alice's (node 0); with forwarding, the group's owner (node 2, by the routes' hash of "trio" over
                // node0…node2), which carol's node forwards every send of hers to.
                let victim = forwarding ? 2 : 0
                func client(_ user: String, node: Int) throws -> CourierClient {
                    var configuration = CourierClient.Configuration(
                        port: ports[node].native,
                        credentials: .password(user: user, password: "pw-" + user),
                        storePath: folder.appendingPathComponent("\(user).sqlite").path
                    )
                    configuration.minBackoff = .milliseconds(10)
                    configuration.maxBackoff = .milliseconds(300)
                    return try CourierClient(configuration: configuration)
                }
                let clients = [try client("alice", node: 0), try client("bob", node: 2), try client("carol", node: 1)]
                let (alice, bob, carol) = (clients[0], clients[1], clients[2])
                let tallies = clients.map { _ in SendBurst.Tally() }
                let aliceIDs = try await alice.send(contentsOf: (0..<perSender).map { ("a\($0)", .user("bob")) })
                let carolIDs = try await carol.send(contentsOf: (0..<perSender).map { ("c\($0)", .group("trio")) })

                try await withThrowingTaskGroup(of: Void.self) { group in
                    for (client, tally) in zip(clients, tallies) {
                        group.addTask { await tally.follow(client) }
                    }
                    // bob first: a device made by a login starts at the present.
                    group.addTask { await bob.run() }
                    try await waitUntil("bob caught up") { tallies[1].caughtUp.withLock { $0 } }
                    group.addTask { await alice.run() }
                    group.addTask { await carol.run() }

                    // At two seeded counts of acknowledgements: a node SIGKILLed and started again, and
                    // PostgreSQL restarted, in a seeded order.
                    let total = 2 * perSender
                    var marks = (0..<2).map { _ in Int.random(in: 200..<(total - 1_000), using: &random) }.sorted()
                    if marks[1] <= marks[0] { marks[1] = marks[0] + 1 }
                    let killFirst = Bool.random(using: &random)
                    func acked() -> Int {
                        tallies[0].acked.withLock { $0.count } + tallies[2].acked.withLock { $0.count }
                    }
                    for (index, mark) in marks.enumerated() {
                        try await waitUntil("\(mark) acknowledgements", timeout: .seconds(180)) { acked() >= mark }
                        if (index == 0) == killFirst {
                            await nodes[victim].kill()
                            print(
                                "killNodeAndRestartDatabase: node \(victim) SIGKILLed after \(acked()) acknowledgements"
                            )
                            nodes[victim] = try await start(victim)
                        } else {
                            print("killNodeAndRestartDatabase: restarting PostgreSQL after \(acked()) acknowledgements")
                            try await TestDatabase.restartCluster()
                        }
                    }
                    // Until both outboxes are empty and bob has every message.
                    try await waitUntil("every message sent and received", timeout: .seconds(300)) {
                        let pending = (
                            try await alice.pendingMessageIDs().count, try await carol.pendingMessageIDs().count
                        )
                        return pending == (0, 0) && tallies[1].received.withLock({ $0.count }) >= total
                    }
                    for client in clients { client.stop() }
                    try await group.waitForAll()
                }
                if forwarding {
                    // Each node took forwards on the address --forward-host named (one loopback address of many).
                    let addresses = try await TestDatabase.admin(location) { connection in
                        var found: [String] = []
                        let rows = try await connection.query(
                            "SELECT forward_address FROM cluster_nodes ORDER BY name",
                            logger: Logger(label: "verify")
                        )
                        for try await address in rows.decode(String?.self) { found.append(address ?? "") }
                        return found
                    }
                    #expect(addresses.count == 3 && addresses.allSatisfy { $0.hasPrefix("127.0.0.2:") }, "\(addresses)")
                    // carol's node forwarded her sends (it is never killed: its count covers the whole run).
                    let metrics = try await ExternalProgram.output(
                        "/usr/bin/curl",
                        ["--silent", "--show-error", "--max-time", "60", "http://127.0.0.1:\(ports[1].http)/metrics"]
                    )
                    let line = metrics.split(separator: "\n").first { $0.hasPrefix("courier_forwards_sent_total ") }
                    let sent = line.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
                    #expect(sent >= Double(perSender), "carol's node forwarded \(sent) writes")
                }
                for node in nodes { #expect(await node.terminate() == 0, "a graceful stop exits 0") }

                // Read from the database through a store of its own: every acknowledged message is stored, once.
                let store = PostgresStore(location: location, logger: Logger(label: "verify"))
                try await store.withRunning {
                    try await SendBurst.check(
                        store: store,
                        perSender: perSender,
                        aliceIDs: aliceIDs,
                        carolIDs: carolIDs,
                        alice: tallies[0],
                        bob: tallies[1],
                        carol: tallies[2],
                        bobsClient: bob
                    )
                }
            }
        }
    }
}
