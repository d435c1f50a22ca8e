import CourierClient
import CourierTesting
import Foundation
import Synchronization
import Testing

/// Commands of one user run at once on one machine, as scripts run beside an open chat: they share the user's local
/// store and device, and nothing is lost, duplicated or falsely failed.
@Suite("Concurrent commands of one user", .serialized, .enabled(if: Soak.isAsked, Comment(rawValue: Soak.skipReason)))
struct ConcurrentCommandsTests {
    /// Counts what an open client of alice's store reports: messages by id, and its own sends' acknowledgements.
    final class Window: Sendable {
        let client: CourierClient
        let messages = Mutex<[String: Int]>([:])
        let sent = Mutex<[String: Int]>([:])
        let connected = Mutex(false)

        init(_ client: CourierClient) {
            self.client = client
        }

        func count(_ event: ClientEvent) {
            switch event {
            case .message(let message): self.messages.withLock { $0[message.id, default: 0] += 1 }
            case .sent(let id, _, _, _): self.sent.withLock { $0[id, default: 0] += 1 }
            case .connected: self.connected.withLock { $0 = true }
            default: break
            }
        }

        /// Every id reported, as a message or as its own acknowledgement, with how often.
        var reported: [String: Int] {
            self.messages.withLock { $0 }.merging(self.sent.withLock { $0 }, uniquingKeysWith: +)
        }
    }

    @Test("500 sends at once beside two open clients of the same user: each exits 0, each stored once, both see all")
    func fiveHundredSends() async throws {
        let count = Int(ProcessInfo.processInfo.environment["COURIER_CONCURRENT_SENDS"] ?? "") ?? 500
        try await withTemporaryDirectory(prefix: "courier-concurrent") { folder in
            let cli = try await CLIFixture(folder: folder, users: ["alice", "bob"])
            let server = try await cli.serve()
            var result = try await cli.run(["login", "--as", "alice", "--password", "pw-alice"])
            #expect(result.status == 0, "\(result)")

            // Two windows on alice's store, as `courier chat` opens it: the device the login saved, by the token in
            // the token file (the one place a token is kept: the store holds none).
            let store = folder.appendingPathComponent("share/courier/127.0.0.1_\(cli.ports.native)/alice.sqlite")
            #expect(FileManager.default.fileExists(atPath: store.path))
            let token = try String(
                contentsOf: folder.appendingPathComponent("config/courier/127.0.0.1_\(cli.ports.native)/alice.token"),
                encoding: .utf8
            ).trimmingCharacters(in: .whitespacesAndNewlines)
            let windows = try (0..<2).map { _ in
                var configuration = CourierClient.Configuration(
                    port: cli.ports.native,
                    credentials: .token(token),
                    storePath: store.path
                )
                configuration.storesToken = false
                configuration.ephemeral = true
                configuration.maxBackoff = .seconds(1)
                return Window(try CourierClient(configuration: configuration))
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for window in windows {
                    group.addTask { for await event in window.client.events { window.count(event) } }
                    group.addTask { await window.client.run() }
                }
                let deadline = ContinuousClock.now + .seconds(30)
                while !windows.allSatisfy({ $0.connected.withLock { $0 } }), ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                }
                // One window writes too while the commands run.
                let fromWindow = try await windows[0].client.send("from the window", to: .user("bob"))

                let started = ContinuousClock.now
                let commands = try (0..<count).map { index in
                    try CourierExecutable.start(
                        [
                            "send", "--as", "alice", "--to", "bob", "concurrent \(index)", "--server",
                            "127.0.0.1:\(cli.ports.native)",
                        ],
                        environment: cli.home,
                        output: folder.appendingPathComponent("send-\(index).txt")
                    )
                }
                var ids: [String: String] = [:]
                var outcomes: [String: Int] = [:]
                for (index, command) in commands.enumerated() {
                    let (status, output) = try await command.result()
                    #expect(status == 0, "send \(index): \(output)")
                    // "sent to @bob: seq N, id ID", or "queued ID for @bob: …" (taken over by a later client).
                    let words = output.split(whereSeparator: \.isWhitespace).map(String.init)
                    if output.hasPrefix("sent to @bob: seq "), let id = words.last {
                        ids[id] = "concurrent \(index)"
                        outcomes["sent", default: 0] += 1
                    } else if output.hasPrefix("queued "), words.count > 1 {
                        ids[words[1]] = "concurrent \(index)"
                        outcomes["queued", default: 0] += 1
                    } else {
                        Issue.record("send \(index) said: \(output)")
                    }
                }
                print("fiveHundredSends: \(count) commands in \(ContinuousClock.now - started): \(outcomes)")
                #expect(ids.count == count)
                let expected = Set(ids.keys).union([fromWindow])

                // Both windows show every message, each once: the commands' as messages of alice's, the window's
                // own as its acknowledgement (or, in the other window, as a message).
                let shown = ContinuousClock.now + .seconds(120)
                while !windows.allSatisfy({ Set($0.reported.keys).isSuperset(of: expected) }),
                    ContinuousClock.now < shown
                {
                    try await Task.sleep(for: .milliseconds(50))
                }
                for (number, window) in windows.enumerated() {
                    let reported = window.reported
                    let missing = expected.subtracting(reported.keys)
                    #expect(missing.isEmpty, "window \(number) misses \(missing.count): \(missing.prefix(5))")
                    let repeated = reported.filter { $0.value > 1 }
                    #expect(repeated.isEmpty, "window \(number) shows twice: \(repeated.prefix(5))")
                }
                #expect(windows[0].sent.withLock { $0[fromWindow] } == 1)
                #expect(windows[1].messages.withLock { $0[fromWindow] } == 1)
                for window in windows { window.client.stop() }
                try await group.waitForAll()

                // The server holds each text once (bob's history of alice), the window's included.
                result = try await cli.run(
                    ["history", "--as", "bob", "--with", "alice", "--json", "--limit", "\(count + 10)"],
                    environment: ["COURIER_PASSWORD": "pw-bob"]
                )
                let texts = result.output.split(separator: "\n").filter { $0.hasPrefix("{") }.compactMap { line in
                    (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["text"] as? String
                }
                #expect(texts.count == count + 1, "\(texts.count) messages in history")
                #expect(Set(texts) == Set(ids.values).union(["from the window"]))
                // Nothing is left to send.
                #expect(try await windows[0].client.pendingMessageIDs().isEmpty)
            }
            #expect(await server.terminate() == 0)
        }
    }
}
