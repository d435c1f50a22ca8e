import ArgumentParser
import CourierStore
import Foundation

/// `courier hook`: incoming webhooks, URLs that post into a group as a bot (docs/BOTS.md).
struct HookCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hook",
        abstract: "Make, list and revoke incoming webhooks, in a data folder or a PostgreSQL database.",
        discussion: """
            An incoming webhook is a URL with a secret in it: a POST of {"text": "…"} (Slack's incoming-webhook \
            shape) posts the text into a group as a bot, which must be a member. The URL is printed once: the store \
            keeps only the secret's SHA-256. Each hook is limited to `hook-posts-per-second` (burst \
            `hook-post-burst`); a wrong secret counts against the address as a failed login.
            """,
        subcommands: [Create.self, List.self, Revoke.self]
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make an incoming webhook and print its URL (once).")
        @OptionGroup var options: DataOptions
        @Option(help: "The group it posts into.") var group: String
        @Option(help: "The bot it posts as (a member of the group).") var bot: String
        @Option(
            help: ArgumentHelp(
                "The server's HTTP address as callers reach it, such as https://chat.example.com (default: "
                    + "http://127.0.0.1:6980).",
                valueName: "url"
            )
        )
        var url: String = "http://127.0.0.1:6980"

        func validate() throws {
            guard url.hasPrefix("http://") || url.hasPrefix("https://"), !url.contains("#"), !url.contains("?") else {
                throw ValidationError("--url is the server's http:// or https:// address, without ?query or #fragment")
            }
        }

        func run() async throws {
            let (token, id) = try await options.withStore { store in
                try await store.createIncomingHook(group: self.group, bot: self.bot, nowMs: nowMs())
            }
            print("\(url.hasSuffix("/") ? String(url.dropLast()) : url)/hooks/\(token)")
            var standardError = StandardError()
            print("hook \(id): posts into \(self.group) as \(self.bot)", to: &standardError)
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List incoming webhooks: id, group, bot, creation time, and whether revoked (never the secret)."
        )
        @OptionGroup var options: DataOptions

        func run() async throws {
            for hook in try await options.withStore({ try await $0.incomingHooks() }) {
                let revoked = hook.revokedMs.map { "\trevoked \(formatTime($0))" } ?? ""
                print(
                    "\(hook.id)\tgroup \(hook.group)\tbot \(hook.bot)\tcreated \(formatTime(hook.createdMs))\(revoked)"
                )
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke an incoming webhook: its URL answers 404 from then on, on every node."
        )
        @OptionGroup var options: DataOptions
        @Argument(help: "The hook's id, as hook list shows it.") var id: Int64

        func run() async throws {
            try await options.withStore { try await $0.revokeIncomingHook(self.id, nowMs: nowMs()) }
            print("revoked hook \(self.id)")
        }
    }
}
