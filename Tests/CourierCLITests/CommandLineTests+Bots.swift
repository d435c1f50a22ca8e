import CourierPostgresTesting
import CourierTesting
import Foundation
import Testing

/// `courier bot`: made, listed, given a new token and revoked, in a data folder and in a PostgreSQL database.
extension CommandLineTests {
    /// Runs the bot commands against a store named by `store` (`--data FOLDER`, or `--database` through the
    /// environment) and checks what each prints.
    static func checkBotCommands(_ store: [String], environment: [String: String] = [:]) async throws {
        func run(_ arguments: [String]) async throws -> String {
            let result = try await CourierExecutable.run(arguments + store, environment: environment)
            #expect(result.status == 0, "\(arguments): \(result)")
            return result.output
        }
        _ = try await run(["user", "add", "alice", "--password", "alice-pw-1"])
        // Only the token, on one line: `TOKEN=$(courier bot create …)` takes it whole.
        let token = try await run(["bot", "create", "helper", "--owner", "alice"])
        #expect(token.wholeMatch(of: /ct_[A-Za-z0-9_-]{20,}\n/) != nil, "\(token)")
        let listed = try await run(["bot", "list"])
        #expect(listed.wholeMatch(of: /helper\towner alice\tcreated [^\t]+\t1 token\n/) != nil, "\(listed)")
        // Not a second bot of the name, nor one owned by a bot or nobody; the refusals say why.
        for (arguments, words) in [
            (["bot", "create", "HELPER", "--owner", "alice"], "exists"),
            (["bot", "create", "other", "--owner", "helper"], "bot"),
            (["bot", "create", "other", "--owner", "nobody"], "nobody"),
            (["bot", "token", "alice"], "not a bot"),
        ] {
            let refused = try await CourierExecutable.run(arguments + store, environment: environment)
            #expect(refused.status != 0 && refused.output.contains(words), "\(arguments): \(refused)")
        }
        let renewed = try await run(["bot", "token", "helper"])
        #expect(renewed.hasPrefix("ct_") && renewed != token)
        #expect(try await run(["bot", "revoke", "helper"]) == "revoked every token of bot helper\n")
        #expect(try await run(["bot", "list"]).contains("\t0 tokens"))
        // A bot is a user, listed with the others.
        #expect(try await run(["user", "list"]).contains("helper\t"))
    }

    @Test("bot create prints only the token; list, token and revoke; refusals named (a data folder)")
    func botCommands() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli-bots") { folder in
            try await Self.checkBotCommands(["--data", folder.appendingPathComponent("data").path])
        }
    }

    @Test(
        "bot create, list, token and revoke on PostgreSQL",
        .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
    )
    func botCommandsOnPostgres() async throws {
        try await TestDatabase.with { location in
            try await Self.checkBotCommands([], environment: ["COURIER_DATABASE": TestDatabase.url(of: location)])
        }
    }
}
