import CourierProtocol
import CourierTesting
import Foundation
import NIOSSL
import Synchronization
import Testing

@Suite("A client that stops reading", .serialized, .enabled(if: Soak.isAsked, Comment(rawValue: Soak.skipReason)))
struct SlowReaderTests {
    @Test("100 MB sent to a reader that stopped reading: the server's memory stays bounded; the reader syncs later")
    func stoppedReader() async throws {
        // 1,600 messages of 64 KiB: 100 MB. About a minute in a debug build, where SwiftProtobuf's unspecialized
        // UTF-8 validation of each text dominates (perf: ~40% in generic metadata lookups under utf8ToString).
        // COURIER_SLOW_READER_MESSAGES sets another count.
        let messages = Int(ProcessInfo.processInfo.environment["COURIER_SLOW_READER_MESSAGES"] ?? "") ?? 1600
        let text = String(repeating: "x", count: 64 * 1024 - 64)
        try await withTemporaryDirectory { folder in
            let data = folder.appendingPathComponent("data")
            try await CourierExecutable.addUsers(["alice", "bob"], data: data)
            let (server, native, _) = try await ServerProcess.start(
                data: data,
                logFolder: folder,
                arguments: ["--limit", "slow-consumer-timeout=3s"]
            )
            let fixture = PortOnly(native: native)
            let (bob, welcome) = try await fixture.login("bob")
            try await bob.stopReading()
            let (alice, _) = try await fixture.login("alice")
            try await Task.sleep(for: .milliseconds(200))
            let baseline = try #require(server.residentBytes)

            let peak = Mutex(baseline)
            let sampling = Task {
                while !Task.isCancelled {
                    if let now = server.residentBytes { peak.withLock { $0 = max($0, now) } }
                    try? await Task.sleep(for: .milliseconds(50))
                }
            }
            // alice sends ~100 MB to bob, without waiting for each ack (the server applies backpressure).
            let writer = Task {
                for index in 0..<messages {
                    var envelope = ClientEnvelope()
                    envelope.requestID = UInt64(index + 1)
                    envelope.send.id = "big-\(index)"
                    envelope.send.to.user = "bob"
                    envelope.send.body.text = text
                    try await alice.send(envelope)
                }
            }
            let started = ContinuousClock.now
            var acked = 0
            while acked < messages {
                _ = try await alice.expect(timeout: .seconds(120), "acks") { $0.ack }
                acked += 1
            }
            try await writer.value
            sampling.cancel()
            print("stoppedReader: \(messages) sends acknowledged in \(ContinuousClock.now - started)")
            let growth = peak.withLock { $0 } - baseline
            print(
                "stoppedReader: \(messages) messages of 64 KiB; server RSS \(baseline >> 20) MiB → peak \(peak.withLock { $0 } >> 20) MiB (+\(growth >> 20) MiB)"
            )
            #expect(
                growth < 64 << 20,
                "the server grew by \(growth >> 20) MiB while 100 MB went to a client that reads nothing"
            )

            // The server gave up on bob (slow-consumer): reading again, he finds the connection closed after what
            // the socket buffers held. He comes back with his token and syncs everything.
            try await Task.sleep(for: .seconds(4))
            try await bob.resumeReading()
            _ = try await bob.expectClose(timeout: .seconds(60))
            let log = try String(contentsOf: server.log, encoding: .utf8)
            #expect(log.contains("code=slow-consumer"), "the server's log names the reason")
            let (again, _) = try await fixture.resume(token: welcome.token)
            var received = 0
            var ids = Set<String>()
            while received < messages {
                let events = try await again.expect(timeout: .seconds(60), "events") {
                    envelope -> [Courier_V1_Event]? in
                    guard case .events(let events)? = envelope.body, !events.events.isEmpty else { return nil }
                    return events.events
                }
                for event in events { if case .message(let message)? = event.kind { ids.insert(message.id) } }
                received = ids.count
                var ack = ClientEnvelope()
                ack.ack.cursor = events.last!.cursor
                try await again.send(ack)
            }
            #expect(ids == Set((0..<messages).map { "big-\($0)" }))
            print("stoppedReader: synced in \(ContinuousClock.now - started)")
            await again.close()
            await alice.close()
            #expect(await server.terminate() == 0)
        }
    }
}

/// Logs in to a server known only by its native port (a separate process).
struct PortOnly {
    var native: Int
    var tls: TLSConfiguration? = nil

    func login(_ user: String, password: String? = nil) async throws -> (NativeTestClient, Courier_V1_Welcome) {
        try await NativeTestClient.login(port: self.native, user, password: password, tls: self.tls)
    }

    func resume(token: String) async throws -> (NativeTestClient, Courier_V1_Welcome) {
        try await NativeTestClient.resume(port: self.native, token: token, tls: self.tls)
    }
}
