import ArgumentParser
import CourierChat
import CourierClient
import Foundation

/// `courier edit`: a new text for a message this user sent.
struct Edit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Replace the text of a message you sent (a file's caption), within the server's edit window.",
        discussion: """
            ID is the message's id, as `courier send` and `history --json` print it. Every member's devices get the \
            message as edited; its earlier texts stay visible to members (`history`). Refused for a message someone \
            else sent (not-sender), a recalled one (message-recalled), one past the edit window \
            (edit-window-passed) or edited too often already (too-many-edits).
            """
    )

    @OptionGroup var options: ClientOptions
    @Argument(help: "The message's id.") var id: String
    @Argument(help: "The new text.") var text: String

    func validate() throws {
        guard !self.text.isEmpty else { throw ValidationError("the new text is empty") }
    }

    func run() async throws {
        try await ClientSession.run(self.options) { session in
            try await session.connectOrFail()
            do {
                try await session.client.edit(.id(self.id), text: self.text)
            } catch let error as CourierClientError {
                throw CommandFailure(description: "\(error.code): \(error.message)")
            }
        }
        print("edited \(self.id)")
    }
}

/// `courier react`: a reaction put on a message, or taken off.
struct React: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Put a reaction (one emoji, or one short word) on a message, or take it off with --off.",
        discussion: """
            ID is the message's id, as `history --json` prints it. Ids are unique per sender only: when two messages \
            you can see have this id the server answers ambiguous-message, and --from (the sender), --with or \
            --group (the conversation) say which. Reacting twice, or taking off a reaction you did not give, changes \
            nothing and succeeds. A message takes at most 20 different reactions, and 5 from one user \
            (too-many-reactions, the server's limits).
            """
    )

    @OptionGroup var options: ClientOptions
    @Argument(help: "The message's id.") var id: String
    @Argument(help: "The reaction: one emoji (👍) or one word (好, +1).") var key: String

    @Flag(help: "Take the reaction off.")
    var off = false

    @OptionGroup var naming: MessageNaming

    func run() async throws {
        self.checkParsed { try self.naming.check() }
        try await ClientSession.run(self.options) { session in
            try await session.connectOrFail()
            do {
                try await session.client.react(
                    self.naming.reference(to: self.id),
                    key: self.key,
                    on: !self.off
                )
            } catch let error as CourierClientError {
                throw CommandFailure(description: "\(error.code): \(error.message)")
            }
        }
        print("\(self.off ? "took off" : "put") \(ChatText.printable(self.key)) \(self.off ? "from" : "on") \(self.id)")
    }
}

/// `--from`, `--with`, `--group`: which message an id names when ids clash (ids are unique per sender only).
struct MessageNaming: ParsableArguments {
    @Option(help: ArgumentHelp("The message's sender, when ids clash.", valueName: "user"))
    var from: String?

    @Option(help: ArgumentHelp("The other user of the message's direct conversation.", valueName: "user"))
    var with: String?

    @Option(help: ArgumentHelp("The message's group.", valueName: "group"))
    var group: String?

    /// Checked once the whole command line is parsed (``ParsableCommand/checkParsed(_:)``).
    func check() throws {
        guard self.with == nil || self.group == nil else {
            throw ValidationError("name at most one conversation: --with USER or --group GROUP")
        }
    }

    var conversation: Conversation? { self.with.map { .user($0) } ?? self.group.map { .group($0) } }

    func reference(to id: String) -> MessageReference {
        .id(id, from: self.from, in: self.conversation)
    }
}

/// `courier pin`: pin a message for everyone in its conversation to see at the top, or unpin it.
struct PinCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pin",
        abstract: "Pin a message at the top of its conversation for every member, or unpin it with --off.",
        discussion: """
            ID is the message's id, as `history --json` prints it (which says "pinned": true of a pinned one); \
            --from, --with or --group say which when ids clash. In a group only its owner and admins pin \
            (not-admin); in a direct conversation, either of you. A conversation holds at most 50 pinned messages \
            (quota-exceeded, the server's max-pins-per-conversation); a recall unpins. --list prints the pinned \
            messages of --with USER or --group GROUP, the most recently pinned first.
            """
    )

    @OptionGroup var options: ClientOptions
    @Argument(help: "The message's id (none with --list).") var id: String?

    @Flag(help: "Unpin it.")
    var off = false

    @Flag(help: "List the conversation's pinned messages (of --with or --group).")
    var list = false

    @OptionGroup var naming: MessageNaming

    func run() async throws {
        let conversation = self.naming.conversation
        self.checkParsed {
            try self.naming.check()
            if self.list {
                guard conversation != nil, self.id == nil, !self.off else {
                    throw ValidationError("--list takes --with USER or --group GROUP, and no ID")
                }
            } else if self.id == nil {
                throw ValidationError("name the message: courier pin ID")
            }
        }
        let pinned = try await ClientSession.run(self.options) { session -> [ChatMessage] in
            try await session.connectOrFail()
            do {
                if self.list, let conversation { return try await session.client.pins(in: conversation) }
                try await session.client.pin(
                    self.naming.reference(to: self.id ?? ""),
                    on: !self.off
                )
                return []
            } catch let error as CourierClientError {
                throw CommandFailure(description: "\(error.code): \(error.message)")
            }
        }
        guard self.list else {
            print("\(self.off ? "unpinned" : "pinned") \(ChatText.printable(self.id ?? ""))")
            return
        }
        for message in pinned {
            let text = message.media.map { "[\($0.kind.rawValue)] \($0.caption)" } ?? message.text
            print("\(message.seq)\t\(ChatText.printable(message.from))\t\(ChatText.printable(text))")
        }
    }
}

/// `courier search`: the messages you can see that match a query, newest first.
struct Search: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Search the messages you can see, newest first (Chinese and Japanese as well as English).",
        discussion: """
            A message matches when each word of the query begins one of its words (tomor finds tomorrow; a word of \
            one or two letters must be whole), and it holds every run of Chinese, Japanese or Korean characters as \
            a whole, without regard to case or accents (café finds CAFE). Only conversations you are in, and only \
            what was sent after you joined; current text only (an edit re-indexes, a recall removes). A file is \
            found by its caption and its name.

            With --json, one JSON object a line, like history --json: id, from, to (direct) or group, time, text, \
            seq, and fragment (the text around the first match) with marks ([start, length] pairs in Unicode code \
            points of the fragment). Otherwise one line a message, the matches in reverse video on a terminal.
            """
    )

    @OptionGroup var options: ClientOptions
    @Argument(help: "The words to find.") var query: String

    @Option(help: ArgumentHelp("Only the direct conversation with this user.", valueName: "user"))
    var with: String?

    @Option(help: ArgumentHelp("Only this group.", valueName: "group"))
    var group: String?

    @Flag(help: "Print JSON lines.")
    var json = false

    @Option(help: "The most messages to print (asked for a page at a time).")
    var limit = 20

    func validate() throws {
        guard self.limit > 0 else { throw ValidationError("--limit must be positive") }
    }

    func run() async throws {
        self.checkParsed {
            guard self.with == nil || self.group == nil else {
                throw ValidationError("name at most one conversation: --with USER or --group GROUP")
            }
        }
        let conversation: Conversation? = self.with.map { .user($0) } ?? self.group.map { .group($0) }
        let results = try await ClientSession.run(self.options) { session in
            try await session.connectOrFail()
            var results: [SearchResult] = []
            var before: UInt64 = 0
            do {
                while results.count < self.limit {
                    let page = try await session.client.search(
                        self.query,
                        in: conversation,
                        before: before,
                        limit: self.limit - results.count
                    )
                    results += page.results
                    guard page.more else { break }
                    before = page.next
                }
            } catch let error as CourierClientError {
                throw CommandFailure(description: "\(error.code): \(error.message)")
            }
            return results
        }
        let highlight = !self.json && isatty(STDOUT_FILENO) == 1
        for result in results {
            print(
                self.json ? try Self.jsonLine(result, me: self.options.user) : Self.line(result, highlight: highlight)
            )
        }
    }

    /// A result as a terminal shows it: when, where, who, and the fragment with its matches marked.
    static func line(_ result: SearchResult, highlight: Bool) -> String {
        let message = result.message
        let place =
            switch message.conversation {
            case .user(let peer): "@\(peer)"
            case .group(let name): "#\(name)"
            }
        // Others' words reach a terminal: each piece in caret notation for its control characters, the marks ours.
        let scalars = Array(result.fragment.unicodeScalars)
        func piece(_ range: Range<Int>) -> String {
            var text = ""
            text.unicodeScalars.append(contentsOf: scalars[range])
            return ChatText.printable(text)
        }
        var shown = ""
        var at = 0
        for mark in result.marks where highlight && mark.lowerBound >= at && mark.upperBound <= scalars.count {
            shown += piece(at..<mark.lowerBound) + "\u{1B}[7m" + piece(mark) + "\u{1B}[27m"
            at = mark.upperBound
        }
        shown += piece(at..<scalars.count)
        return "\(History.time(message.time))  \(place) #\(message.seq)  \(message.from): \(shown)"
    }

    static func jsonLine(_ result: SearchResult, me: String) throws -> String {
        struct Line: Encodable {
            var seq: UInt64
            var from: String
            var to: String?
            var group: String?
            var text: String
            var time: String
            var id: String
            var fragment: String
            var marks: [[Int]]
        }
        let message = result.message
        var line = Line(
            seq: message.seq,
            from: message.from,
            text: message.media?.caption ?? message.text,
            time: History.time(message.time),
            id: message.id,
            fragment: result.fragment,
            marks: result.marks.map { [$0.lowerBound, $0.count] }
        )
        (line.to, line.group) = History.addressed(message, me: me)
        return try History.json(line)
    }
}

/// `courier forward`: a copy of a message sent to another conversation, marked with its first sender.
struct Forward: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Forward a message you can see to a user or a group, marked \"forwarded from\" its first sender.",
        discussion: """
            ID is the message's id, as `history --json` prints it; --from, --with or --group say which when ids \
            clash. The server copies its text, or its media and caption, as last edited (media is not uploaded \
            again: the file then counts once in your quota), and the copy's `history --json` says forwarded_from. \
            A recalled message is not forwarded (message-recalled); a forwarded message cannot be edited, and its \
            @mentions alert nobody.
            """
    )

    @OptionGroup var options: ClientOptions
    @Argument(help: "The message's id.") var id: String

    @OptionGroup var naming: MessageNaming

    @Option(name: .customLong("to"), help: ArgumentHelp("Forward it to this user.", valueName: "user"))
    var toUser: String?

    @Option(name: .customLong("to-group"), help: ArgumentHelp("Forward it to this group.", valueName: "group"))
    var toGroup: String?

    func run() async throws {
        self.checkParsed {
            try self.naming.check()
            guard (self.toUser == nil) != (self.toGroup == nil) else {
                throw ValidationError("say where it goes: --to USER or --to-group GROUP")
            }
        }
        let destination: Conversation = self.toUser.map { .user($0) } ?? .group(self.toGroup ?? "")
        let copy = try await ClientSession.run(self.options) { session in
            try await session.connectOrFail()
            do {
                return try await session.client.forward(self.naming.reference(to: self.id), to: destination)
            } catch let error as CourierClientError {
                throw CommandFailure(description: "\(error.code): \(error.message)")
            }
        }
        print("forwarded \(ChatText.printable(self.id)) as \(ChatText.printable(copy.id)) (seq \(copy.seq))")
    }
}
