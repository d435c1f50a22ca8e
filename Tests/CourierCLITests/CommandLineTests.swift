import CourierPostgresTesting
import CourierProtocol
import CourierStorePostgres
import CourierTesting
import Foundation
import NIOSSL
import PostgresNIO
import Testing

@testable import courier

/// The `courier` executable as a user runs it, one file per family of commands: the admin commands' output and
/// errors and backups (`+Admin`), `serve`'s flags, environment and crash reports (`+Serve`), the client commands
/// (`+Client`) and the bench (`+Bench`). One suite: its tests run one at a time.
@Suite("The courier command", .serialized)
struct CommandLineTests {
    /// Runs `courier` and returns its status and output (stdout and stderr together).
    static func courier(_ arguments: String...) async throws -> (status: Int32, output: String) {
        try await CourierExecutable.run(arguments)
    }

    /// The `--limit` names of docs/PROTOCOL.md's "Limits" table (its second column).
    static func documentedLimits() throws -> [String] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("docs/PROTOCOL.md"), encoding: .utf8)
        let table = try #require(text.range(of: "| field | `--limit` | default | past it |"))
        var names: [String] = []
        for line in text[table.upperBound...].split(separator: "\n").dropFirst() {
            guard line.hasPrefix("|") else { break }
            let column = line.split(separator: "|", omittingEmptySubsequences: false)[2]
            names += column.matches(of: /`([a-z-]+)`/).map { String($0.1) }
        }
        return names
    }

    /// Starts `courier serve` on `data` with free ports and its log in `folder`.
    static func serve(
        _ folder: URL,
        data: URL,
        _ arguments: [String] = [],
        environment: [String: String] = [:]
    ) async throws -> (server: ServerProcess, native: Int, http: Int) {
        try await ServerProcess.start(data: data, logFolder: folder, arguments: arguments, environment: environment)
    }
}

/// A data folder with users, a `courier serve` for it on fixed free ports (so it can be stopped and started again),
/// and the client commands run against it with their own home folders.
final class CLIFixture: @unchecked Sendable {
    let folder: URL
    let data: URL
    /// Chosen free; chosen again should another test take one before the first start (then fixed).
    private(set) var ports: (native: Int, compat: Int, http: Int)
    let home: [String: String]
    private var started = false

    init(folder: URL, users: [String]) async throws {
        self.folder = folder
        self.data = folder.appendingPathComponent("data")
        try await CourierExecutable.addUsers(users, data: self.data)
        self.ports = (try await FreePort.pick(), try await FreePort.pick(), try await FreePort.pick())
        self.home = [
            "HOME": folder.path,
            "XDG_CONFIG_HOME": folder.appendingPathComponent("config").path,
            "XDG_DATA_HOME": folder.appendingPathComponent("share").path,
        ]
    }

    /// Starts `courier serve` on the fixture's ports. A port free a moment ago can be taken by another test before
    /// the first start: then the server starts on others; later starts keep the ports of the first.
    func serve(_ arguments: [String] = []) async throws -> ServerProcess {
        var attempt = 1
        while true {
            do {
                let server = try await ServerProcess.start(
                    data: self.data,
                    native: self.ports.native,
                    compat: self.ports.compat,
                    http: self.ports.http,
                    log: self.folder.appendingPathComponent("server.log"),
                    arguments: arguments
                )
                self.started = true
                return server
            } catch let error as ServerProcess.ServerDidNotStart where error.exited && !self.started && attempt < 3 {
                attempt += 1
                self.ports = (try await FreePort.pick(), try await FreePort.pick(), try await FreePort.pick())
            }
        }
    }

    /// Runs `courier` with `--server` set to this server's native port.
    func run(
        _ arguments: [String],
        environment: [String: String] = [:],
        input: String? = nil
    ) async throws -> (
        status: Int32, output: String
    ) {
        try await CourierExecutable.run(
            arguments + ["--server", "127.0.0.1:\(self.ports.native)"],
            environment: self.home.merging(environment) { $1 },
            input: input
        )
    }
}
