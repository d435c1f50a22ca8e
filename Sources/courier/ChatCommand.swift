import ArgumentParser
import CourierChat
import CourierClient
import Foundation

/// `courier chat`: the full-screen terminal chat (the `CourierChat` module), on the user's client.
struct Chat: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Chat in a full-screen terminal view: conversations, unread counts, receipts and typing.",
        discussion: """
            Your messages are marked … (waiting in the outbox), ✓ (committed by the server), ✓✓ (on the other \
            side's device), and the newest one read "✓✓ read". Messages written while the server is away wait in \
            the outbox and go when it is back; `courier send` run beside the chat, as the same user, shows in it. \
            Times show relative: "just now", "3 min ago", "yesterday 14:02". A peer offline shows when it was last \
            seen.


            """ + ChatHelp.text
    )

    @OptionGroup var options: ClientOptions

    @Option(help: ArgumentHelp("Open the direct conversation with this user.", valueName: "user"))
    var with: String?

    @Option(help: ArgumentHelp("Open this group's conversation.", valueName: "group"))
    var group: String?

    func validate() throws {
        guard self.with == nil || self.group == nil else {
            throw ValidationError("open one conversation: --with USER or --group GROUP")
        }
    }

    func run() async throws {
        guard Terminal.isInteractive else {
            throw CommandFailure(
                description: "courier chat needs a terminal; in scripts use courier send and courier history"
            )
        }
        let initial: Conversation? = if let with { .user(with) } else { self.group.map(Conversation.group) }
        try await ClientSession.run(self.options, notices: true, events: true) { session in
            try await ChatLoop(
                client: session.client,
                me: self.options.user,
                server: self.options.serverText(),
                host: session,
                settings: session.paths.chatSettingsFile
            ).run(opening: initial)
        }
    }
}

extension ClientSession: ChatHost {
    func connected() async throws {
        try await self.saveToken()
    }

    func loginRefused(code: String, message: String) -> any Error {
        self.refused(code: code, message: message)
    }
}
