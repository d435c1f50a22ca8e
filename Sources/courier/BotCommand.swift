import ArgumentParser
import CourierStore
import Foundation

/// `courier bot`: accounts a program speaks for, over the HTTP API (docs/BOTS.md).
struct BotCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bot",
        abstract: "Make, list and revoke bots, in a data folder or a PostgreSQL database (also while servers run).",
        discussion: """
            A bot is a user a program speaks for, over the HTTP API on the server's HTTP port (/api/v1, \
            docs/BOTS.md), with its token in `Authorization: Bearer`. Every client shows it as a bot; it is put in \
            groups and limited like anyone. Its token does not expire and is printed once: the store keeps only its \
            SHA-256 (`courier bot token` makes a new one, ending the old).
            """,
        subcommands: [Create.self, List.self, Token.self, Revoke.self]
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make a bot and print its token, alone on one line (once)."
        )
        @OptionGroup var options: DataOptions
        @Argument(help: "The bot's name: a user name (1 to 32 letters, digits, '.', '_' or '-'), unique among users.")
        var name: String
        @Option(help: "The user who answers for the bot (told when its webhook fails for good).") var owner: String

        func run() async throws {
            let token = try await options.withStore { store in
                try await store.addBot(name: self.name, owner: self.owner, nowMs: nowMs())
            }
            print(token)
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List bots: name, owner, creation time, tokens that work, and whether removed."
        )
        @OptionGroup var options: DataOptions

        func run() async throws {
            let now = nowMs()
            for bot in try await options.withStore({ try await $0.bots(nowMs: now) }) {
                let removed = bot.removedMs.map { "\tremoved \(formatTime($0))" } ?? ""
                print(
                    "\(bot.name)\towner \(bot.owner)\tcreated \(formatTime(bot.createdMs))\t"
                        + "\(bot.tokens) token\(bot.tokens == 1 ? "" : "s")\(removed)"
                )
            }
        }
    }

    struct Token: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "End a bot's tokens and print a new one, alone on one line (once)."
        )
        @OptionGroup var options: DataOptions
        @Argument(help: "The bot's name.") var name: String

        func run() async throws {
            let token = try await options.withStore { store in
                try await store.revokeBotTokens(of: self.name, replacing: true, nowMs: nowMs())
            }
            print(token ?? "")
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "End every token of a bot: its requests get 401 from then on, on every node."
        )
        @OptionGroup var options: DataOptions
        @Argument(help: "The bot's name.") var name: String

        func run() async throws {
            try await options.withStore { store in
                try await store.revokeBotTokens(of: self.name, replacing: false, nowMs: nowMs())
            }
            print("revoked every token of bot \(self.name)")
        }
    }
}
