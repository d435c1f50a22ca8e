import CourierPostgresTesting
import CourierTesting
import Foundation
import Testing

/// `courier block`, `unblock`, `blocks`, `pin` and `forward`, against a server on a data folder and on PostgreSQL.
extension CommandLineTests {
    /// Adds users to a store named by `store` (`--data FOLDER` or `--database URL`), serves it, and checks blocking
    /// through the client commands as processes.
    static func checkBlockCommands(_ folder: URL, store: [String]) async throws {
        for name in ["alice", "bob", "carol"] {
            let added = try await CourierExecutable.run(["user", "add", name, "--password", "pw-" + name] + store)
            #expect(added.status == 0, "\(added)")
        }
        let ports = (try await FreePort.pick(), try await FreePort.pick(), try await FreePort.pick())
        let server = try await ServerProcess.start(
            data: folder.appendingPathComponent("data"),
            native: ports.0,
            compat: ports.1,
            http: ports.2,
            log: folder.appendingPathComponent("server.log"),
            // The data folder is the server's own argument; a database is said beside it.
            arguments: store.first == "--database" ? store : []
        )
        defer { server.stop() }
        let home = [
            "HOME": folder.path, "XDG_CONFIG_HOME": folder.appendingPathComponent("config").path,
            "XDG_DATA_HOME": folder.appendingPathComponent("share").path,
        ]
        func run(_ user: String, _ arguments: [String]) async throws -> (status: Int32, output: String) {
            try await CourierExecutable.run(
                Array(arguments.prefix(1)) + ["--as", user] + arguments.dropFirst()
                    + ["--server", "127.0.0.1:\(ports.0)"],
                environment: home.merging(["COURIER_PASSWORD": "pw-" + user]) { $1 }
            )
        }
        var result = try await run("bob", ["send", "--to", "alice", "你好 alice"])
        #expect(result.status == 0, "\(result)")
        result = try await run("alice", ["block", "bob"])
        #expect(result.status == 0 && result.output == "blocked bob\n", "\(result)")
        result = try await run("alice", ["block", "carol"])
        #expect(result.status == 0, "\(result)")
        result = try await run("alice", ["blocks"])
        #expect(result.output.wholeMatch(of: /bob\t\d{4}-[^\n]+\ncarol\t\d{4}-[^\n]+\n/) != nil, "\(result)")
        result = try await run("alice", ["blocks", "--json"])
        #expect(result.output.hasPrefix("{\"since\":\"") && result.output.contains("\"user\":\"carol\""), "\(result)")
        // Bob's send is committed (exit 0) and he sees it; alice never does.
        result = try await run("bob", ["send", "--to", "alice", "被拦截 withheld"])
        #expect(result.status == 0, "\(result)")
        result = try await run("bob", ["history", "--with", "alice"])
        #expect(result.output.contains("被拦截 withheld"), "\(result)")
        result = try await run("alice", ["history", "--with", "bob"])
        #expect(result.output.contains("你好 alice") && !result.output.contains("withheld"), "\(result)")
        // Refusals, with their codes.
        result = try await run("alice", ["block", "alice"])
        #expect(result.status != 0 && result.output.contains("invalid-request"), "\(result)")
        result = try await run("alice", ["block", "nobody"])
        #expect(result.status != 0 && result.output.contains("unknown-user"), "\(result)")
        // Unblocked: the next message arrives; the withheld one stays away.
        result = try await run("alice", ["unblock", "bob"])
        #expect(result.status == 0 && result.output == "unblocked bob\n", "\(result)")
        result = try await run("bob", ["send", "--to", "alice", "after 之后"])
        #expect(result.status == 0, "\(result)")
        result = try await run("alice", ["history", "--with", "bob"])
        #expect(result.output.contains("after 之后") && !result.output.contains("withheld"), "\(result)")
        result = try await run("alice", ["blocks"])
        #expect(!result.output.contains("bob") && result.output.contains("carol"), "\(result)")

        // Pins: either side of a direct conversation pins; history --json says so; --list; --off.
        result = try await run("alice", ["history", "--with", "bob", "--json"])
        let first = try #require(result.output.split(separator: "\n").first)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(first.utf8)) as? [String: Any])
        let id = try #require(object["id"] as? String)
        #expect(object["pinned"] == nil, "\(result)")
        result = try await run("alice", ["pin", id])
        #expect(result.status == 0 && result.output == "pinned \(id)\n", "\(result)")
        result = try await run("bob", ["history", "--with", "alice", "--json"])
        let pinnedLine = result.output.split(separator: "\n").first { $0.contains("\"id\":\"\(id)\"") } ?? ""
        #expect(pinnedLine.contains("\"pinned\":true"), "\(result)")
        result = try await run("bob", ["pin", "--list", "--with", "alice"])
        #expect(result.status == 0 && result.output.hasSuffix("\tbob\t你好 alice\n"), "\(result)")
        result = try await run("bob", ["pin", id, "--off"])
        #expect(result.status == 0 && result.output == "unpinned \(id)\n", "\(result)")
        result = try await run("alice", ["pin", "--list", "--with", "bob"])
        #expect(result.status == 0 && result.output.isEmpty, "\(result)")
        result = try await run("alice", ["pin", "no-such-id"])
        #expect(result.status != 0 && result.output.contains("unknown-message"), "\(result)")

        // Forward: alice sends bob's message on to carol, who sees it marked with bob's name.
        result = try await run("alice", ["unblock", "carol"])
        #expect(result.status == 0, "\(result)")
        result = try await run("alice", ["forward", id, "--to", "carol"])
        #expect(result.status == 0 && result.output.hasPrefix("forwarded \(id) as "), "\(result)")
        result = try await run("carol", ["history", "--with", "alice", "--json"])
        let forwarded = try #require(result.output.split(separator: "\n").last)
        let copy = try #require(try JSONSerialization.jsonObject(with: Data(forwarded.utf8)) as? [String: Any])
        #expect(copy["forwarded_from"] as? String == "bob" && copy["from"] as? String == "alice", "\(result)")
        #expect(copy["text"] as? String == "你好 alice", "\(result)")
        result = try await run("carol", ["forward", id, "--to", "bob"])
        #expect(result.status != 0 && result.output.contains("unknown-message"), "\(result)")
        result = try await run("alice", ["forward", id])
        #expect(result.status != 0 && result.output.contains("--to USER or --to-group GROUP"), "\(result)")
    }

    @Test(
        "block, blocks, unblock, pin and forward on a data folder: the blocked user's message is committed and never reaches"
    )
    func blockCommands() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli-blocks") { folder in
            try await Self.checkBlockCommands(folder, store: ["--data", folder.appendingPathComponent("data").path])
        }
    }

    @Test(
        "block, blocks, unblock, pin and forward on PostgreSQL",
        .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
    )
    func blockCommandsOnPostgres() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli-blocks") { folder in
            try await TestDatabase.with { location in
                try await Self.checkBlockCommands(folder, store: ["--database", TestDatabase.url(of: location)])
            }
        }
    }
}
