import CourierTesting
import Foundation
import Testing

@Suite("The HTTP port", .serialized)
struct HTTPTests {
    /// Runs curl (a real HTTP client nobody here wrote) and returns its output. The wait happens on a Dispatch
    /// thread, not on the few threads of Swift's cooperative pool that the server's handlers need.
    static func curl(_ arguments: [String]) async throws -> String {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try Self.runCurl(arguments) })
            }
        }
    }

    private static func runCurl(_ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        process.arguments = ["--silent", "--show-error", "--max-time", "10"] + arguments
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw FixtureFailure(description: "curl \(arguments) exited with \(process.terminationStatus)")
        }
        return String(decoding: data, as: UTF8.self)
    }

    struct FixtureFailure: Error, CustomStringConvertible {
        var description: String
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
            let headers = try await Self.curl(["--dump-header", "-", "--output", "/dev/null", "\(base)/metrics"])
            #expect(headers.lowercased().contains("content-type: text/plain; version=0.0.4"), "\(headers)")
            let missing = try await Self.curl([
                "--output", "/dev/null", "--write-out", "%{http_code}", "\(base)/nothing",
            ])
            #expect(missing == "404")
            await alice.close()
        }
    }
}
