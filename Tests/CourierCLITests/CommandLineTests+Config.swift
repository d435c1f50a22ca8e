import CourierTesting
import Foundation
import NIOCore
import NIOPosix
import Testing

@testable import courier

extension CommandLineTests {
    @Test(
        "serve --print-config: the effective configuration, secrets hidden, without a port or the store; it reads back"
    )
    func printConfig() async throws {
        try await withTemporaryDirectory(prefix: "courier-config") { folder in
            // A port something already listens on: a serve that tried to bind it would fail.
            let taken = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .bind(host: "127.0.0.1", port: 0).get()
            let port = try #require(taken.localAddress?.port)
            let data = folder.appendingPathComponent("数据 📁 \"q\"")
            let (status, output) = try await CourierExecutable.run(
                [
                    "serve", "--print-config", "--data", data.path, "--port", String(port), "--limit",
                    "max-text-bytes=1K", "--limit", "idle-timeout=90s", "--limit", "health-probe-timeout=1500ms",
                    "--allow-origin", "https://chat.example",
                ],
                environment: ["COURIER_DATABASE": "postgres://courier:s3cr%C3%A9t@127.0.0.1:5/chat"]
            )
            try await taken.close()
            #expect(status == 0, "\(output)")
            #expect(!FileManager.default.fileExists(atPath: data.path), "the data folder is not made")
            #expect(!output.contains("s3cr"), "the password is hidden: \(output)")
            for line in [
                "port = \(port)", "data = \"\(folder.standardizedFileURL.path)/数据 📁 \\\"q\\\"\"",
                "database = \"postgres://courier@127.0.0.1:5/chat\"", "max-text-bytes = \"1024\"",
                "idle-timeout = \"90s\"", "health-probe-timeout = \"1500ms\"",
                "allow-origin = [\"https://chat.example\"]", "[limits]",
            ] {
                #expect(output.contains("\n" + line + "\n"), "\(line) in \(output)")
            }
            // Every limit once, after [limits].
            let limits = try #require(output.components(separatedBy: "\n[limits]\n").last)
            let named = limits.split(separator: "\n").compactMap { $0.split(separator: " = ").first.map(String.init) }
            #expect(named == LimitOption.all.map(\.name), "\(named)")

            // Given back as --limit, each value is read as the same value: the same configuration again.
            let assignments = limits.split(separator: "\n").flatMap { line -> [String] in
                let parts = line.split(separator: " = ", maxSplits: 1)
                return ["--limit", "\(parts[0])=\(parts[1].dropFirst().dropLast())"]
            }
            let again = try await CourierExecutable.run(
                [
                    "serve", "--print-config", "--data", data.path, "--port", String(port), "--allow-origin",
                    "https://chat.example",
                ] + assignments,
                environment: ["COURIER_DATABASE": "postgres://courier:s3cr%C3%A9t@127.0.0.1:5/chat"]
            )
            #expect(again.status == 0 && again.output == output, "\(again.output)")
        }
    }
}
