import CourierClient
import CourierStore
import CourierStoreSQLite
import CourierTesting
import Foundation
import Logging
import Synchronization
import Testing

@Suite(
    "SIGKILL of the server while clients send",
    .serialized,
    .enabled(if: Soak.isAsked, Comment(rawValue: Soak.skipReason))
)
struct CrashRecoveryTests {
    @Test("after SIGKILLs at seeded random moments every acknowledged message is stored and delivered exactly once")
    func killAndRestart() async throws {
        let seed = TestSeed.make(for: "killAndRestart")
        var random = SeededRandom(seed: seed)
        let perSender = 5_000
        try await withTemporaryDirectory { folder in
            let data = folder.appendingPathComponent("data")
            let log = folder.appendingPathComponent("server.log")
            for user in ["alice", "bob", "carol"] {
                let (status, output) = try await CourierExecutable.run([
                    "user", "add", user, "--password", "pw-" + user, "--data", data.path,
                ])
                #expect(status == 0, "\(output)")
            }
            let (status, output) = try await CourierExecutable.run([
                "group", "create", "trio", "--owner", "carol", "--members", "alice,bob", "--data", data.path,
            ])
            #expect(status == 0, "\(output)")
            let (native, compat, http) = (
                try await FreePort.pick(), try await FreePort.pick(), try await FreePort.pick()
            )
            var server = try await ServerProcess.start(data: data, native: native, compat: compat, http: http, log: log)

            func client(_ user: String) throws -> CourierClient {
                var configuration = CourierClient.Configuration(
                    port: native,
                    credentials: .password(user: user, password: "pw-" + user),
                    storePath: folder.appendingPathComponent("\(user).sqlite").path
                )
                configuration.minBackoff = .milliseconds(10)
                configuration.maxBackoff = .milliseconds(300)
                return try CourierClient(configuration: configuration)
            }
            let clients = try ["alice", "bob", "carol"].map(client)
            let tallies = clients.map { _ in SendBurst.Tally() }
            let aliceIDs = try await clients[0].send(contentsOf: (0..<perSender).map { ("a\($0)", .user("bob")) })
            let carolIDs = try await clients[2].send(contentsOf: (0..<perSender).map { ("c\($0)", .group("trio")) })

            try await withThrowingTaskGroup(of: Void.self) { group in
                for (client, tally) in zip(clients, tallies) {
                    group.addTask { await tally.follow(client) }
                }
                // bob first: a device made by a login starts at the present, so bob must exist as a device before
                // the first message to him is committed (older ones are history, not sync).
                group.addTask { await clients[1].run() }
                let caughtUpBy = ContinuousClock.now + .seconds(30)
                while !tallies[1].caughtUp.withLock({ $0 }) {
                    guard ContinuousClock.now < caughtUpBy else {
                        throw TestClientTimeout(description: "bob never caught up")
                    }
                    try await Task.sleep(for: .milliseconds(5))
                }
                group.addTask { await clients[0].run() }
                group.addTask { await clients[2].run() }
                // Three SIGKILLs, each after a seeded number of acknowledgements, then a restart on the same data.
                let total = 2 * perSender
                var marks = (0..<3).map { _ in Int.random(in: 100..<(total - 500), using: &random) }.sorted()
                for index in marks.indices where index > 0 && marks[index] <= marks[index - 1] {
                    marks[index] = marks[index - 1] + 1
                }
                for mark in marks {
                    let deadline = ContinuousClock.now + .seconds(120)
                    while tallies[0].acked.withLock({ $0.count }) + tallies[2].acked.withLock({ $0.count }) < mark {
                        guard ContinuousClock.now < deadline else {
                            throw TestClientTimeout(description: "stalled before \(mark) acks")
                        }
                        try await Task.sleep(for: .milliseconds(2))
                    }
                    await server.kill()
                    print("killAndRestart: SIGKILL after \(mark) acknowledgements")
                    server = try await ServerProcess.start(
                        data: data,
                        native: native,
                        compat: compat,
                        http: http,
                        log: log
                    )
                }
                // Wait until both outboxes are empty and bob has every message.
                let deadline = ContinuousClock.now + .seconds(300)
                var lastReport = ContinuousClock.now
                while true {
                    let pending = (
                        try await clients[0].pendingMessageIDs().count, try await clients[2].pendingMessageIDs().count
                    )
                    if pending == (0, 0), tallies[1].received.withLock({ $0.count }) >= total { break }
                    if ContinuousClock.now - lastReport > .seconds(10) {
                        lastReport = .now
                        print(
                            "killAndRestart: pending \(pending.0) + \(pending.1), bob has "
                                + "\(tallies[1].received.withLock { $0.count })"
                        )
                    }
                    guard ContinuousClock.now < deadline else {
                        throw TestClientTimeout(
                            description: "not done: bob has \(tallies[1].received.withLock { $0.count })"
                        )
                    }
                    try await Task.sleep(for: .milliseconds(20))
                }
                for client in clients { client.stop() }
                try await group.waitForAll()
            }
            #expect(await server.terminate() == 0, "a graceful stop exits 0")

            // Every acknowledged message is stored, once; so is every message of the outboxes.
            let store = try SQLiteStore(folder: data, logger: Logger(label: "verify"))
            try await SendBurst.check(
                store: store,
                perSender: perSender,
                aliceIDs: aliceIDs,
                carolIDs: carolIDs,
                alice: tallies[0],
                bob: tallies[1],
                carol: tallies[2],
                bobsClient: clients[1]
            )
        }
    }
}
