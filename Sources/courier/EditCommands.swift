import ArgumentParser
import CourierChat
import CourierClient

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

    @Option(help: ArgumentHelp("The message's sender, when ids clash.", valueName: "user"))
    var from: String?

    @Option(help: ArgumentHelp("The other user of the message's direct conversation.", valueName: "user"))
    var with: String?

    @Option(help: ArgumentHelp("The message's group.", valueName: "group"))
    var group: String?

    func run() async throws {
        self.checkParsed {
            guard self.with == nil || self.group == nil else {
                throw ValidationError("name at most one conversation: --with USER or --group GROUP")
            }
        }
        let conversation: Conversation? = self.with.map { .user($0) } ?? self.group.map { .group($0) }
        try await ClientSession.run(self.options) { session in
            try await session.connectOrFail()
            do {
                try await session.client.react(
                    .id(self.id, from: self.from, in: conversation),
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
