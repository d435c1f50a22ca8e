import ArgumentParser
import CourierClient
import Foundation

/// `courier login`: a password login that saves the device token for later commands.
struct Login: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Log in with a password and save the device token for the other client commands.",
        discussion: """
            The token goes to $XDG_CONFIG_HOME/courier/HOST_PORT/NAME.token (default ~/.config), readable by you \
            alone; the local message store and outbox to $XDG_DATA_HOME/courier/HOST_PORT/NAME.sqlite (default \
            ~/.local/share). Each login is a new device; `courier user devices NAME` lists them on the server.
            """
    )

    @OptionGroup var options: ClientOptions

    func run() async throws {
        try await ClientSession.run(self.options, freshLogin: true) { session in
            guard case .connected = try await session.connect() else {
                throw CommandFailure(description: "cannot reach the server at \(self.options.serverText())")
            }
            print("logged in as \(self.options.user); token saved to \(session.paths.tokenFile.path)")
        }
    }
}

/// Where a message goes: `--to USER` or `--group G`.
struct ConversationOptions: ParsableArguments {
    @Option(help: ArgumentHelp("A user, for a direct conversation.", valueName: "user"))
    var to: String?

    @Option(help: ArgumentHelp("A group, by name.", valueName: "group"))
    var group: String?

    func validate() throws {
        guard (self.to == nil) != (self.group == nil) else {
            throw ValidationError("name one conversation: --to USER or --group GROUP")
        }
    }

    var conversation: Conversation {
        if let to { .user(to) } else { .group(self.group ?? "") }
    }
}

/// `courier send`: one text, acknowledged (or queued while the server is away).
struct Send: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send a text; exits once the server has committed it, or queues it while the server is away.",
        discussion: """
            A message queued in the outbox (the server unreachable) keeps its id and is sent, once, by the next \
            client command that connects as the same user.
            """
    )

    @OptionGroup var options: ClientOptions
    @OptionGroup var target: ConversationOptions
    @Argument(help: "The text.") var text: String

    func run() async throws {
        let conversation = self.target.conversation
        let text = self.text
        let (id, outcomes) = try await ClientSession.run(self.options) {
            session -> (String, [String: ClientEvent]?) in
            let id = try session.client.send(text, to: conversation)
            guard case .connected = try await session.connect() else { return (id, nil) }
            return (id, try await session.flushOutbox(including: [id]))
        }
        guard let outcomes else {
            print(
                "queued \(id) for \(conversation): the server is unreachable; the next command that connects sends it"
            )
            return
        }
        switch outcomes[id] {
        case .sent(_, _, let seq, _)?:
            print("sent to \(conversation): seq \(seq), id \(id)")
        case .sendFailed(_, let code, let message)?:
            throw CommandFailure(description: "\(code): \(message)")
        default:
            throw CommandFailure(description: "no answer for \(id); it stays in the outbox")
        }
    }
}

/// `courier history`: a page of a conversation, oldest first.
struct History: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a page of a conversation's history from the server, oldest first.",
        discussion: """
            With --json, one JSON object a line: seq, from, to (direct) or group, kind ("text", or "recalled"), \
            text, time (RFC 3339, UTC), id.
            """
    )

    @OptionGroup var options: ClientOptions

    @Option(help: ArgumentHelp("The other user of a direct conversation.", valueName: "user"))
    var with: String?

    @Option(help: ArgumentHelp("A group, by name.", valueName: "group"))
    var group: String?

    @Flag(help: "Print JSON lines.")
    var json = false

    @Option(help: "The most messages to print (the server caps a page at its max-history-page, 200 by default).")
    var limit = 50

    @Option(help: ArgumentHelp("Only messages before this sequence number (for paging back).", valueName: "seq"))
    var before: UInt64 = 0

    func validate() throws {
        guard (self.with == nil) != (self.group == nil) else {
            throw ValidationError("name one conversation: --with USER or --group GROUP")
        }
        guard self.limit > 0 else { throw ValidationError("--limit must be positive") }
    }

    func run() async throws {
        let conversation: Conversation = if let with { .user(with) } else { .group(self.group ?? "") }
        let page = try await ClientSession.run(self.options) { session in
            guard case .connected = try await session.connect() else {
                throw CommandFailure(description: "cannot reach the server at \(self.options.serverText())")
            }
            try await session.flushOutbox()
            do {
                return try await session.client.history(of: conversation, beforeSeq: self.before, limit: self.limit)
            } catch let error as CourierClientError {
                throw CommandFailure(description: "\(error.code): \(error.message)")
            }
        }
        for message in page.messages.reversed() {
            print(self.json ? try Self.jsonLine(message, me: self.options.user) : Self.line(message))
        }
        if page.more, !self.json, let oldest = page.messages.last {
            print("(older: --before \(oldest.seq))")
        }
    }

    static func line(_ message: ChatMessage) -> String {
        let text = message.recalled ? "(recalled)" : message.text
        return "\(Self.time(message.time))  #\(message.seq)  \(message.from): \(text)"
    }

    static func jsonLine(_ message: ChatMessage, me: String) throws -> String {
        struct Line: Encodable {
            var seq: UInt64
            var from: String
            var to: String?
            var group: String?
            var kind: String
            var text: String
            var time: String
            var id: String
        }
        var line = Line(
            seq: message.seq,
            from: message.from,
            kind: message.recalled ? "recalled" : "text",
            text: message.text,
            time: Self.time(message.time),
            id: message.id
        )
        switch message.conversation {
        case .user(let peer): line.to = message.from.lowercased() == me.lowercased() ? peer : me
        case .group(let name): line.group = name
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(line), as: UTF8.self)
    }

    /// RFC 3339 in UTC, with milliseconds.
    static func time(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter.string(from: date)
    }
}
