import ArgumentParser
import CourierStore
import Foundation

/// `courier invite`: invitations to sign up, for a server run with `--registration invite`.
struct InviteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "invite",
        abstract: "Make, list and revoke invitations to sign up, in a data folder or a PostgreSQL database.",
        discussion: """
            A server run with `--registration invite` takes a new user who holds an invitation's token \
            (`courier signup --invite TOKEN`). The token is printed once, when it is made: the store keeps only \
            its SHA-256, so a lost one cannot be shown again (revoke it and make another).
            """,
        subcommands: [Create.self, List.self, Revoke.self]
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make an invitation and print its token (once)."
        )
        @OptionGroup var options: DataOptions
        @Option(help: "How many accounts it may make.") var uses: Int = 1
        @Option(
            help: ArgumentHelp("How long it works, such as 12h or 7d (default: until revoked).", valueName: "duration")
        )
        var expires: DurationValue?
        @Option(
            help: ArgumentHelp(
                "The web chat's address, such as https://chat.example.com: prints the sign-up link "
                    + "(URL/#invite=TOKEN) instead of the bare token.",
                valueName: "url"
            )
        )
        var url: String?

        func validate() throws {
            guard self.uses >= 1, self.uses <= 1_000_000 else { throw ValidationError("--uses is 1 to 1000000") }
            if let url, !(url.hasPrefix("http://") || url.hasPrefix("https://")) || url.contains("#") {
                throw ValidationError("--url is the web chat's http:// or https:// address, without a #fragment")
            }
        }

        func run() async throws {
            let now = nowMs()
            let (invite, token) = try await options.withStore { store in
                try await store.createInvite(
                    maxUses: self.uses,
                    expiresMs: self.expires.map { now + $0.duration.wholeMilliseconds },
                    nowMs: now
                )
            }
            // The token rides in the link's fragment, which a browser never sends to a server (nor to its logs).
            if let url { print("\(url.hasSuffix("/") ? url : url + "/")#invite=\(token)") } else { print(token) }
            var standardError = StandardError()
            print(
                "invitation \(invite.id): \(invite.maxUses) use\(invite.maxUses == 1 ? "" : "s"), "
                    + (invite.expiresMs.map { "until \(formatTime($0))" } ?? "no expiry"),
                to: &standardError
            )
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List invitations (never their tokens): id, state, uses, created, expires.",
            discussion: """
                One a line (under a header in columns on a terminal, else tab-separated; --json: one object a \
                line): id, state (usable, used-up, expired or revoked), uses made of uses \
                allowed, created, and expires ("-" for none).
                """
        )
        @OptionGroup var options: DataOptions
        @Flag(help: "One JSON object a line.") var json = false

        func run() async throws {
            let now = nowMs()
            var table = Table(columns: ["id", "state", "uses", "created", "expires"])
            for invite in try await options.withStore({ try await $0.invites() }) {
                let state =
                    if invite.revokedMs != nil { "revoked" } else if invite.uses >= invite.maxUses {
                        "used-up"
                    } else if let expires = invite.expiresMs, expires <= now { "expired" } else { "usable" }
                if self.json {
                    var object: [String: Any] = [
                        "id": invite.id, "state": state, "uses": invite.uses, "max_uses": invite.maxUses,
                        "created": formatTime(invite.createdMs),
                    ]
                    object["expires"] = invite.expiresMs.map(formatTime)
                    try printJSON(object)
                    continue
                }
                table.add([
                    .number(invite.id), .text(state), .text("\(invite.uses)/\(invite.maxUses)"),
                    .text("created \(formatTime(invite.createdMs))"),
                    .text("expires \(invite.expiresMs.map(formatTime) ?? "-")"),
                ])
            }
            if !self.json { table.print() }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke an invitation: no account is made with it.")
        @OptionGroup var options: DataOptions
        @Argument(help: "The invitation's id, from `courier invite list`.") var id: Int64

        func run() async throws {
            try await options.withStore { try await $0.revokeInvite(self.id, nowMs: nowMs()) }
            print("revoked invitation \(self.id)")
        }
    }
}
