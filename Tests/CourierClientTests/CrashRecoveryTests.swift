import CourierClient
import CourierStore
import CourierTesting
import Foundation
import Logging
import Synchronization
import Testing

@Suite("SIGKILL of the server while clients send", .serialized)
struct CrashRecoveryTests {
    /// The ids acknowledged to one client, and every event it saw.
    final class Tally: Sendable {
        let acked = Mutex<[String: UInt64]>([:])
        let received = Mutex<[String: Int]>([:])
        let failures = Mutex<[String]>([])
        let caughtUp = Mutex(false)
    }

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
            let tallies = clients.map { _ in Tally() }
            let aliceIDs = try await clients[0].send(contentsOf: (0..<perSender).map { ("a\($0)", .user("bob")) })
            let carolIDs = try await clients[2].send(contentsOf: (0..<perSender).map { ("c\($0)", .group("trio")) })

            try await withThrowingTaskGroup(of: Void.self) { group in
                for (client, tally) in zip(clients, tallies) {
                    group.addTask {
                        for await event in client.events {
                            switch event {
                            case .sent(let id, _, let seq, _): tally.acked.withLock { $0[id] = seq }
                            case .message(let message): tally.received.withLock { $0[message.id, default: 0] += 1 }
                            case .sendFailed(let id, let code, _):
                                tally.failures.withLock { $0.append("\(id): \(code)") }
                            case .caughtUp:
                                tally.caughtUp.withLock { $0 = true }
                            default: break
                            }
                        }
                    }
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
            let bob = try #require(try await store.user(named: "bob")).id
            var direct: [String] = []
            var before: UInt64 = 0
            repeat {
                let page = try await store.history(for: bob, in: .user("alice"), beforeSeq: before, limit: 1000)
                direct += page.messages.map(\.id)
                before = page.messages.last?.seq ?? 0
                if !page.more { break }
            } while true
            #expect(direct.count == perSender && Set(direct) == Set(aliceIDs))
            let group = try await store.history(for: bob, in: .group("trio"), beforeSeq: 0, limit: 200)
            #expect(group.messages.first?.seq == UInt64(perSender), "the group holds exactly \(perSender) messages")
            #expect(Set(tallies[0].acked.withLock { Array($0.keys) }) == Set(aliceIDs))
            #expect(Set(tallies[2].acked.withLock { Array($0.keys) }) == Set(carolIDs))
            #expect(tallies[0].failures.withLock { $0 }.isEmpty && tallies[2].failures.withLock { $0 }.isEmpty)
            // bob received each message exactly once, and his device stored them gap-free.
            let received = tallies[1].received.withLock { $0 }
            #expect(Set(received.keys) == Set(aliceIDs + carolIDs))
            #expect(received.values.allSatisfy { $0 == 1 })
            #expect(try await clients[1].storedMessages(in: .user("alice")).map(\.seq) == Array(1...UInt64(perSender)))
            #expect(try await clients[1].storedMessages(in: .group("trio")).map(\.seq) == Array(1...UInt64(perSender)))
            // Messages from one sender keep their order.
            #expect(
                try await clients[1].storedMessages(in: .user("alice")).map(\.text) == (0..<perSender).map { "a\($0)" }
            )
        }
    }
}
