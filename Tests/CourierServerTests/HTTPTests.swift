import CourierServerTesting
import CourierTesting
import Foundation
import Testing

@Suite("The HTTP port", .serialized)
struct HTTPTests {
    /// Runs curl (a real HTTP client nobody here wrote) and returns its output.
    static func curl(_ arguments: [String]) async throws -> String {
        try await ExternalProgram.curl(arguments)
    }

    @Test("/health answers with the version and open connections; /metrics counts messages and commits")
    func healthAndMetrics() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let base = "http://127.0.0.1:\(fixture.ports.http)"
            let idle = try await Self.curl(["\(base)/health"])
            #expect(idle.contains("\"status\":\"ok\"") && idle.contains("\"connections\":0"), "\(idle)")

            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            for index in 1...3 { _ = try await alice.sendText("m\(index)", to: .user("bob")) }
            let busy = try await Self.curl(["\(base)/health"])
            #expect(busy.contains("\"connections\":1"), "\(busy)")

            let metrics = try await Self.curl(["\(base)/metrics"])
            #expect(metrics.contains("courier_messages_in_total 3"), "\(metrics)")
            #expect(metrics.contains("courier_connections_total 1"))
            #expect(metrics.contains("courier_commit_duration_seconds_count"))
            #expect(metrics.contains("courier_commit_batch_size_bucket"))
            // Every family says what it counts.
            let lines = metrics.split(separator: "\n")
            let typed = lines.filter { $0.hasPrefix("# TYPE ") }.map { $0.split(separator: " ")[2] }
            let helped = Set(lines.filter { $0.hasPrefix("# HELP ") }.map { $0.split(separator: " ")[2] })
            #expect(typed.count >= 12 && typed.allSatisfy { helped.contains($0) }, "\(metrics)")
            let headers = try await Self.curl(["--dump-header", "-", "--output", "/dev/null", "\(base)/metrics"])
            #expect(headers.lowercased().contains("content-type: text/plain; version=0.0.4"), "\(headers)")
            let missing = try await Self.curl([
                "--output", "/dev/null", "--write-out", "%{http_code}", "\(base)/nothing",
            ])
            #expect(missing == "404")
            await alice.close()
        }
    }

    @Test("malformed HTTP gets 400 and a close; an oversize header is refused; the port goes on serving")
    func malformedRequests() async throws {
        try await ServerFixture.with { fixture in
            let port = fixture.ports.http
            let garbage = try await RawConnection.connect(port: port)
            try await garbage.write(Array("\u{01}\u{02} not http at all\r\n\r\n".utf8))
            let garbageAnswer = String(decoding: try await garbage.readUntilClosed(), as: UTF8.self)
            #expect(garbageAnswer.hasPrefix("HTTP/1.1 400"), "\(garbageAnswer)")

            // A header larger than the HTTP parser's limit (80 KiB): refused with 400, not buffered without bound
            // (the close may reset the connection before the answer is read, so an empty answer is accepted).
            let huge = try await RawConnection.connect(port: port)
            let header = "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + String(repeating: "a", count: 200_000)
            try? await huge.write(Array(header.utf8))
            let hugeAnswer = String(decoding: try await huge.readUntilClosed(), as: UTF8.self)
            #expect(hugeAnswer.isEmpty || hugeAnswer.hasPrefix("HTTP/1.1 4"), "\(hugeAnswer.prefix(200))")
            #expect(!hugeAnswer.contains("\"status\":\"ok\""))

            let wrongMethod = try await Self.curl([
                "--request", "DELETE", "--output", "/dev/null", "--write-out", "%{http_code}",
                "http://127.0.0.1:\(port)/health",
            ])
            #expect(wrongMethod == "404", "only GET is routed: \(wrongMethod)")
            let health = try await Self.curl(["http://127.0.0.1:\(port)/health"])
            #expect(health.contains("\"status\":\"ok\""), "\(health)")
        }
    }
}
