import ArgumentParser
import CourierChat
import CourierClient
import CourierVocabulary
import Foundation

/// `courier login`: a password login that saves the device token for later commands.
struct Login: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Log in with a password and save the device token for the other client commands.",
        discussion: """
            The token goes to $XDG_CONFIG_HOME/courier/HOST_PORT/NAME.token (default ~/.config), readable by you \
            alone; the local message store and outbox to $XDG_DATA_HOME/courier/HOST_PORT/NAME.sqlite (default \
            ~/.local/share). A login from here again renews this machine's device (a new token, the old one good \
            until the new one is used or for ten minutes; connections already open stay) rather than adding one; \
            `courier user devices NAME` lists the devices on the server, and `courier user revoke` ends one. A \
            refused password keeps the token saved before.
            """
    )

    @OptionGroup var options: ClientOptions

    func run() async throws {
        try await ClientSession.run(self.options, freshLogin: true) { session in
            try await session.connectOrFail()
            print("logged in as \(self.options.user); token saved to \(session.paths.tokenFile.path)")
            // Messages queued by earlier commands go now.
            try await session.flushOutbox()
        }
    }
}

/// Where a message goes: `--to USER` or `--group G`.
struct ConversationOptions: ParsableArguments {
    /// `--to` or `--with` (as `history` and `chat` name it): either way.
    @Option(
        name: [.customLong("to"), .customLong("with")],
        help: ArgumentHelp("A user, for a direct conversation (--with works too).", valueName: "user")
    )
    var to: String?

    @Option(help: ArgumentHelp("A group, by name.", valueName: "group"))
    var group: String?

    /// Checked once the whole command line is parsed (``ParsableCommand/checkParsed(_:)``): a mistyped flag
    /// (`--too bob`) is named as the unknown option it is, not taken for a missing conversation.
    func check() throws {
        guard (self.to == nil) != (self.group == nil) else {
            throw ValidationError("name one conversation: --to USER (or --with USER) or --group GROUP")
        }
    }

    var conversation: Conversation {
        if let to { .user(to) } else { .group(self.group ?? "") }
    }
}

/// `courier media get`: a media file, by its id.
struct MediaCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "media",
        abstract: "Fetch media files.",
        subcommands: [Get.self]
    )

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Download a media file by its id (its SHA-256, as history --json shows) into a file.",
            discussion: """
                The download goes through the local media cache (beside the message store): a download a broken \
                connection cut resumes from the bytes already there, and a file downloaded before is copied from \
                it. The bytes are checked against the id. Media the user may not see is unknown-media, as if it \
                did not exist.
                """
        )

        @OptionGroup var options: ClientOptions
        @Argument(help: "The media id: 64 hex digits.") var id: String
        @Option(name: .shortAndLong, help: ArgumentHelp("Where to write the file.", valueName: "file"))
        var output: String

        func validate() throws {
            guard SHA256Hex.isValid(self.id.lowercased()) else {
                throw ValidationError("a media id is 64 hex digits")
            }
        }

        func run() async throws {
            let id = self.id.lowercased()
            let destination = URL(fileURLWithPath: self.output)
            let size = try await ClientSession.run(self.options) { session -> Int64 in
                try await session.connectOrFail()
                let bar = ProgressBar(label: "fetching \(id.prefix(12))…")
                var cached: URL?
                do {
                    for try await step in session.client.download(sha256: id) {
                        switch step {
                        case .downloading(let received, let total): bar.show(received, of: total)
                        case .finished(let url): cached = url
                        }
                    }
                } catch let error as CourierClientError {
                    bar.end()
                    throw CommandFailure(description: "\(error.code): \(error.message)")
                }
                bar.end()
                guard let cached else { throw CommandFailure(description: "the download did not finish") }
                try? FileManager.default.removeItem(at: destination)
                try FileManager.default.copyItem(at: cached, to: destination)
                // The owner's alone, like the cache it came from, whatever the umask.
                try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: destination.path)
                return Int64(
                    (try? FileManager.default.attributesOfItem(atPath: destination.path)[.size] as? NSNumber)??
                        .int64Value ?? 0
                )
            }
            print("wrote \(self.output): \(ChatText.size(size)), sha256 \(id)")
        }
    }
}

/// A progress bar on standard error: redrawn in place on a terminal, a line every 10% otherwise.
final class ProgressBar {
    private let label: String
    private let terminal = isatty(STDERR_FILENO) == 1
    private var lastStep = -1
    private var drawn = false

    init(label: String) {
        self.label = label
    }

    func show(_ done: Int64, of total: Int64) {
        let fraction = total > 0 ? min(1, Double(done) / Double(total)) : 1
        let percent = Int(fraction * 100)
        if self.terminal {
            let width = 30
            let filled = Int(fraction * Double(width))
            let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
            let line = "\r\(self.label) [\(bar)] \(percent)% \(ChatText.size(done)) / \(ChatText.size(total))\u{1B}[K"
            FileHandle.standardError.write(Data(line.utf8))
            self.drawn = true
        } else if percent / 10 > self.lastStep {
            self.lastStep = percent / 10
            FileHandle.standardError.write(Data("\(self.label): \(percent)% (\(done) of \(total) bytes)\n".utf8))
        }
    }

    /// Ends the bar's line.
    func end() {
        if self.terminal, self.drawn { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}

/// `courier history`: a page of a conversation, oldest first.
struct History: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a page of a conversation's history from the server, oldest first.",
        discussion: """
            With --json, one JSON object a line: seq, from, from_name (the sender's display name, when set), to \
            (direct) or group, kind ("text", "recalled", or a \
            media kind: "image", "voice", "video", "file", with sha256, size, mime and name; `courier media get \
            SHA256` fetches it), \
            text (a file's caption), time (RFC 3339, UTC), id; edited_at (when edited), reply_to (when a reply: \
            the answered message's seq, and its id and from when you may see it), reactions ({"KEY": COUNT, …}, \
            when any), pinned (true, when pinned: courier pin), forwarded_from (the first sender's name, when \
            forwarded: courier forward).
            """
    )

    @OptionGroup var options: ClientOptions

    @Option(help: ArgumentHelp("The other user of a direct conversation.", valueName: "user"))
    var with: String?

    @Option(help: ArgumentHelp("A group, by name.", valueName: "group"))
    var group: String?

    @Flag(help: "Print JSON lines.")
    var json = false

    @Option(help: "The most messages to print (asked for a page at a time, as the server allows).")
    var limit = 50

    @Option(help: ArgumentHelp("Only messages before this sequence number (for paging back).", valueName: "seq"))
    var before: UInt64 = 0

    func validate() throws {
        guard self.limit > 0 else { throw ValidationError("--limit must be positive") }
    }

    func run() async throws {
        self.checkParsed {
            guard (self.with == nil) != (self.group == nil) else {
                throw ValidationError("name one conversation: --with USER or --group GROUP")
            }
        }
        let conversation: Conversation = if let with { .user(with) } else { .group(self.group ?? "") }
        let page = try await ClientSession.run(self.options) { session in
            try await session.connectOrFail()
            try await session.flushOutbox()
            // Page after page (the server caps each, by count and by bytes) until --limit or the first message.
            var messages: [ChatMessage] = []
            var before = self.before
            var more = false
            do {
                while messages.count < self.limit {
                    let page = try await session.client.history(
                        of: conversation,
                        beforeSeq: before,
                        limit: self.limit - messages.count
                    )
                    messages += page.messages
                    more = page.more
                    guard page.more, let oldest = page.messages.last else { break }
                    before = oldest.seq
                }
            } catch let error as CourierClientError {
                throw CommandFailure(description: "\(error.code): \(error.message)")
            }
            // The senders' display names, for --json's from_name.
            var names: [String: String] = [:]
            if self.json {
                let senders = Array(Set(messages.map { $0.from.lowercased() })).sorted()
                for start in stride(from: 0, to: senders.count, by: 100) {
                    let chunk = Array(senders[start..<min(start + 100, senders.count)])
                    for profile in try await session.client.profiles(of: chunk) {
                        if let name = profile.displayName { names[profile.user.lowercased()] = name }
                    }
                }
            }
            return (messages: messages, more: more, names: names)
        }
        for message in page.messages.reversed() {
            print(
                self.json
                    ? try Self.jsonLine(message, me: self.options.user, fromName: page.names[message.from.lowercased()])
                    : Self.line(message, me: self.options.user)
            )
        }
        if page.more, let oldest = page.messages.last {
            // With --json, on standard error: the lines on standard output stay JSON.
            if self.json {
                var standardError = StandardError()
                print("(older: --before \(oldest.seq))", to: &standardError)
            } else {
                print("(older: --before \(oldest.seq))")
            }
        }
    }

    /// A message as the terminal shows it; this user's own are "you", as in the chat (`--json` names everyone).
    static func line(_ message: ChatMessage, me: String) -> String {
        var text =
            message.recalled
            ? "(recalled)" : message.media.map { ChatText.describe($0) + " " + $0.sha256 } ?? message.text
        if let caption = message.media?.caption, !caption.isEmpty, !message.recalled { text += " " + caption }
        if message.edited != nil, !message.recalled { text += " (edited)" }
        if let reply = message.replyTo { text = "(re #\(reply.seq)) " + text }
        if !message.reactions.isEmpty, !message.recalled {
            text += "  " + message.reactions.map { "\($0.key) \($0.count)" }.joined(separator: " ")
        }
        // Others' words reach a terminal: control characters in caret notation (no retitling, clearing, moving).
        return
            "\(Self.time(message.time))  #\(message.seq)  \(message.from.lowercased() == me.lowercased() ? "you" : message.from): \(ChatText.printable(text))"
    }

    static func jsonLine(_ message: ChatMessage, me: String, fromName: String? = nil) throws -> String {
        struct Line: Encodable {
            var seq: UInt64
            var from: String
            // swift-format-ignore: AlwaysUseLowerCamelCase
            var from_name: String?
            var to: String?
            var group: String?
            var kind: String
            var text: String
            var time: String
            var id: String
            var sha256: String?
            var size: Int64?
            var mime: String?
            var name: String?
            // swift-format-ignore: AlwaysUseLowerCamelCase
            var edited_at: String?
            // swift-format-ignore: AlwaysUseLowerCamelCase
            var reply_to: Reply?
            var reactions: [String: Int]?
            var pinned: Bool?
            // swift-format-ignore: AlwaysUseLowerCamelCase
            var forwarded_from: String?
        }
        struct Reply: Encodable {
            var seq: UInt64
            var id: String?
            var from: String?
            var recalled: Bool?
        }
        var line = Line(
            seq: message.seq,
            from: message.from,
            kind: message.recalled ? "recalled" : message.media?.kind.rawValue ?? "text",
            text: message.text,
            time: Self.time(message.time),
            id: message.id
        )
        if let media = message.media, !message.recalled {
            line.sha256 = media.sha256
            line.size = media.size
            line.mime = media.mime
            line.name = media.name
            line.text = media.caption
        }
        line.from_name = fromName
        if let edited = message.edited, !message.recalled { line.edited_at = Self.time(edited) }
        if let reply = message.replyTo {
            line.reply_to = Reply(
                seq: reply.seq,
                id: reply.visible ? reply.id : nil,
                from: reply.visible ? reply.from : nil,
                recalled: reply.recalled ? true : nil
            )
        }
        if !message.reactions.isEmpty, !message.recalled {
            line.reactions = Dictionary(message.reactions.map { ($0.key, $0.count) }) { first, _ in first }
        }
        if message.pinned { line.pinned = true }
        line.forwarded_from = message.forwardedFrom
        (line.to, line.group) = Self.addressed(message, me: me)
        return try Self.json(line)
    }

    /// Where a message went, as a JSON line says it: `to` the other user of a direct conversation (from either
    /// side), or `group`.
    static func addressed(_ message: ChatMessage, me: String) -> (to: String?, group: String?) {
        switch message.conversation {
        case .user(let peer): (message.from.lowercased() == me.lowercased() ? peer : me, nil)
        case .group(let name): (nil, name)
        }
    }

    /// One JSON object on one line, its keys sorted (what every `--json` of these commands prints).
    static func json(_ line: some Encodable) throws -> String {
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

extension ParsableCommand {
    /// Runs a check that would belong in `validate()` but must come after the parser has named unknown options
    /// (ArgumentParser validates before it looks for them): a failure exits as a failed `validate()` would, with
    /// this command's usage.
    func checkParsed(_ check: () throws -> Void) {
        do {
            try check()
        } catch {
            // As ArgumentParser says it, under the command's full name (its own `exit(withError:)` leaves out the
            // root's).
            let name = Self.configuration.commandName ?? "\(Self.self)".lowercased()
            var standardError = StandardError()
            print("Error: \(error)", to: &standardError)
            print("Usage: courier \(Self.usageString())", to: &standardError)
            print("  See 'courier \(name) --help' for more information.", to: &standardError)
            Self.exit(withError: ExitCode.validationFailure)
        }
    }
}
