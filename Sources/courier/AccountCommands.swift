import ArgumentParser
import CourierChat
import CourierClient
import Foundation

/// Passwords a command asks for: on a terminal without echo, else one a line from standard input.
enum Secrets {
    /// Reads one secret for each prompt: on a terminal, asked for without echo; otherwise the next line of standard
    /// input (the prompts are not shown).
    ///
    /// - Throws: when standard input ends before all are read.
    static func read(_ prompts: [String]) throws -> [String] {
        try prompts.map { prompt in
            let line = Terminal.readSecret(prompt: prompt) ?? readLine(strippingNewline: true)
            guard let line else {
                throw CommandFailure(
                    description:
                        "standard input ended before the \(prompt.trimmingCharacters(in: .punctuationCharacters.union(.whitespaces)))"
                )
            }
            return line
        }
    }

    /// Whether passwords are asked for on a terminal (then a new one is asked for twice).
    static var onTerminal: Bool { isatty(STDIN_FILENO) == 1 }

    /// The fewest characters a chosen password has: the server's default (`store.minPasswordCharacters`), checked
    /// here as soon as it is typed; a server that asks for more says so when it refuses.
    static let minPasswordCharacters = 8

    /// A new password: asked for twice on a terminal (the two must match), else one line of standard input. On a
    /// terminal one that is too short is said to be at once, and asked for again, before it is asked to be repeated.
    static func newPassword(prompt: String) throws -> String {
        guard self.onTerminal else { return try self.read([prompt])[0] }
        var first = try self.read([prompt])[0]
        var tries = 1
        while first.count < self.minPasswordCharacters {
            guard tries < 3 else {
                throw CommandFailure(
                    description: "a password has at least \(self.minPasswordCharacters) characters; nothing changed"
                )
            }
            FileHandle.standardError.write(
                Data("a password has at least \(self.minPasswordCharacters) characters; try another\n".utf8)
            )
            first = try self.read([prompt])[0]
            tries += 1
        }
        let again = try self.read(["again: "])[0]
        guard first == again else {
            throw CommandFailure(description: "the two passwords differ; nothing changed")
        }
        return first
    }
}

/// `courier signup`: makes an account on a server that takes sign-ups.
struct Signup: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "signup",
        abstract: "Make an account on a server that takes sign-ups, and log in as it.",
        discussion: """
            The server's administrator chooses who may sign up (`courier serve --registration`): nobody (closed, \
            the default: ask the administrator for an account), whoever holds an invitation (invite: pass its \
            token with --invite), or anyone (open). The name has 1 to 32 ASCII letters, digits, '.', '_' or '-' \
            and is yours for good: no one else can ever take it, in any case, nor one that reads as it (O1iver \
            beside oliver, rnary beside mary, oliver. beside oliver; all, everyone, here, channel, admin, root, \
            system, support and courier are reserved). The password (at least 8 \
            characters) is asked for twice on a terminal, else read from one line of standard input, unless \
            --password or $COURIER_PASSWORD gives it. The device token is saved as `courier login` saves it. \
            Refusals: registration-closed, invite-invalid, invite-expired, invite-used-up, weak-password, \
            invalid-name, name-taken, throttled (too many sign-ups from your address, or on the server).
            """
    )

    @OptionGroup var options: ClientOptions

    @Option(
        help: ArgumentHelp(
            "The invitation's token, from `courier invite create` (default: $COURIER_INVITE, which keeps it out of "
                + "the process list and the shell's history).",
            valueName: "token"
        )
    )
    var invite: String?

    func run() async throws {
        let password =
            try self.options.password ?? ProcessInfo.processInfo.environment["COURIER_PASSWORD"]
            ?? Secrets.newPassword(prompt: "password for \(self.options.user): ")
        let invite = self.invite ?? ProcessInfo.processInfo.environment["COURIER_INVITE"]
        try await ClientSession.run(self.options, signUp: (password, invite)) { session in
            try await session.connectOrFail()
            print("signed up as \(self.options.user); token saved to \(session.paths.tokenFile.path)")
        }
    }
}

/// `courier password`: changes one's own password.
struct PasswordCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "password",
        abstract: "Change your password; your other devices are logged out unless --keep-devices.",
        discussion: """
            The present password is --password or $COURIER_PASSWORD when given; else, on a terminal, it asks for \
            it, then for the new one twice; otherwise it reads the present one and the new one from standard \
            input, one a line. The new one has at least 8 characters. This device stays logged in (with no token \
            saved here, it logs in with the present password first: a wrong one is then "login refused"). A \
            wrong present password counts as a failed login of yours (wrong-password), and so does each change; \
            past the login limits the server says rate-limited.
            """
    )

    @OptionGroup var options: ClientOptions

    @Flag(help: "Keep your other devices logged in.")
    var keepDevices = false

    func run() async throws {
        let old =
            try self.options.password ?? ProcessInfo.processInfo.environment["COURIER_PASSWORD"]
            ?? Secrets.read(["present password for \(self.options.user): "])[0]
        let new = try Secrets.newPassword(prompt: "new password: ")
        var options = self.options
        // Without a saved token, the login itself takes the present password.
        if options.password == nil { options.password = old }
        try await ClientSession.run(options) { session in
            try await session.connectOrFail()
            do {
                try await session.client.changePassword(from: old, to: new, keepDevices: self.keepDevices)
            } catch let error as CourierClientError {
                throw CommandFailure(description: "\(error.code): \(error.message)")
            }
        }
        print(
            self.keepDevices
                ? "password changed for \(self.options.user)"
                : "password changed for \(self.options.user); your other devices are logged out"
        )
    }
}

/// `courier devices`: one's own devices, and logging one out.
struct DevicesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devices",
        abstract: "List your devices (logins), or log one out with --revoke.",
        discussion: """
            One device a line, newest first (under a header in columns on a terminal, else tab-separated; --json: one \
            object a line): id, name, "active" or "expired", created, and \
            "connected since TIME" or "last seen TIME"; the one you are using is marked "(this one)". Logged-out \
            devices are not listed. --revoke ID logs that device out: its connections close within a second.
            """
    )

    @OptionGroup var options: ClientOptions

    @Option(help: ArgumentHelp("Log this device out.", valueName: "id"))
    var revoke: Int64?

    @Flag(help: "One JSON object a line.")
    var json = false

    func run() async throws {
        try await ClientSession.run(self.options) { session in
            try await session.connectOrFail()
            do {
                if let revoke = self.revoke {
                    let own = try await session.client.devices().first { $0.current }?.id == revoke
                    try await session.client.revokeDevice(revoke)
                    if own {
                        // This machine's token no longer works: forgotten, so the next command asks for the password.
                        session.paths.removeToken()
                        print("logged out device \(revoke) (this one: log in again to use it)")
                    } else {
                        print("logged out device \(revoke)")
                    }
                    return
                }
                let now = Date()
                var table = Table(columns: ["id", "name", "state", "created", "seen"])
                for device in try await session.client.devices() {
                    let state = device.expires <= now ? "expired" : "active"
                    if self.json {
                        var object: [String: Any] = [
                            "id": device.id, "name": device.name, "current": device.current, "state": state,
                            "created": Self.time(device.created),
                        ]
                        object["connected_since"] = device.connectedSince.map(Self.time)
                        object["last_seen"] = device.lastSeen.map(Self.time)
                        try printJSON(object)
                        continue
                    }
                    let seen =
                        device.connectedSince.map { "connected since \(Self.time($0))" }
                        ?? "last seen \(device.lastSeen.map(Self.time) ?? "-")"
                    table.add([
                        .number(device.id), .text(device.name + (device.current ? " (this one)" : "")), .text(state),
                        .text("created \(Self.time(device.created))"), .text(seen),
                    ])
                }
                if !self.json { table.print() }
            } catch let error as CourierClientError {
                throw CommandFailure(description: "\(error.code): \(error.message)")
            }
        }
    }

    static func time(_ date: Date) -> String {
        formatTime(Int64(date.timeIntervalSince1970 * 1000))
    }
}

/// `courier delete-account`: deletes one's own account.
struct DeleteAccount: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete-account",
        abstract: "Delete your account: every device logged out, out of every group, the name never given again.",
        discussion: """
            Your messages stay in the history of those you wrote to, under your name, as they are: they are their \
            history too (recall the ones you want gone first, within the recall window). The password is \
            --password or $COURIER_PASSWORD when given; else it is asked for on a terminal, or read from a line of \
            standard input. On a terminal it asks for your user name to confirm; otherwise it needs --yes.
            """
    )

    @OptionGroup var options: ClientOptions

    @Flag(help: "Do not ask for the user name to confirm (needed when standard input is not a terminal).")
    var yes = false

    func run() async throws {
        guard self.yes || Secrets.onTerminal else {
            throw CommandFailure(description: "not on a terminal: pass --yes to delete \(self.options.user)")
        }
        let password =
            try self.options.password ?? ProcessInfo.processInfo.environment["COURIER_PASSWORD"]
            ?? Secrets.read(["password for \(self.options.user): "])[0]
        if !self.yes {
            FileHandle.standardError.write(Data("type \(self.options.user) to delete it for good: ".utf8))
            guard readLine(strippingNewline: true) == self.options.user else {
                throw CommandFailure(description: "not confirmed; nothing deleted")
            }
        }
        var options = self.options
        if options.password == nil { options.password = password }
        try await ClientSession.run(options) { session in
            try await session.connectOrFail()
            do {
                try await session.client.deleteAccount(password: password)
            } catch let error as CourierClientError {
                throw CommandFailure(description: "\(error.code): \(error.message)")
            }
            session.paths.removeToken()
        }
        print("deleted the account \(self.options.user)")
    }
}

/// `courier find-user`: a user by exact name.
struct FindUser: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "find-user",
        abstract:
            "Look a user up by exact name (without regard to case): prints the name as spelled, and its display name.",
        discussion: """
            There is no listing of users: only a name you already know is found. Exits with 1 when there is no \
            such user. Lookups are limited per user and per address (rate-limited).
            """
    )

    @OptionGroup var options: ClientOptions
    @Argument(help: "The user name.") var name: String

    func run() async throws {
        let found = try await ClientSession.run(self.options) { session in
            try await session.connectOrFail()
            do {
                return try await session.client.findUser(self.name)
            } catch let error as CourierClientError {
                throw CommandFailure(description: "\(error.code): \(error.message)")
            }
        }
        guard let found else {
            throw CommandFailure(description: "no user named \(ChatText.printable(self.name))")
        }
        // The name as spelled, and the display name when set.
        print(([found.user] + (found.displayName.map { [$0] } ?? [])).map(ChatText.printable).joined(separator: "\t"))
    }
}
