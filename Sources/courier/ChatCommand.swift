import ArgumentParser
import CourierChat
import CourierClient
import CourierProtocol
import CourierStore
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
            seen. Signed out (the device revoked, the password changed) or given a wrong password, the chat says so \
            and asks for the password again; it keeps none. With no saved login, a server that cannot be reached \
            ends it, as it ends `courier send`. `/save` puts a file in $XDG_DOWNLOAD_DIR, ~/Downloads or the \
            current folder; `/view` opens it with the system's opener. ↑ on an empty line puts your newest message \
            in the line to correct (a photo's caption); `/reply` and `/react` pick a message with ↑ ↓ and Enter; \
            edited messages are marked "(edited)", answers show what they answer above them, reactions show under \
            the message. `/search` finds messages in every conversation you are in, in Chinese and Japanese as in \
            English; Enter on a result opens its conversation at it. People who set a display name (`courier \
            profile`) show as "王小明 (xiaoming)": the name they chose beside the user name that is theirs alone; \
            a change shows as soon as it is made.


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
        var options = self.options
        var refusals = 0
        while true {
            let mustConnect = (try? options.paths().savedToken()) == nil
            do {
                try await ClientSession.run(options, notices: true, events: true) { session in
                    try await ChatLoop(
                        client: session.client,
                        me: options.user,
                        server: options.serverText(),
                        host: session,
                        settings: session.paths.chatSettingsFile,
                        mustConnect: mustConnect
                    ).run(opening: initial)
                }
                return
            } catch let signedOut as SignedOut {
                // Signed out (the device revoked, the password changed) or a wrong password: say so, and ask for
                // the password again; the client held none (the SDK keeps no password past its login). Counted
                // in a row: a session that connected starts the count again.
                refusals = signedOut.connectedFirst ? 1 : refusals + 1
                print(signedOut.description)
                guard refusals <= Self.maxPasswordPrompts,
                    let password = Terminal.readSecret(prompt: "password for \(options.user): ")
                else { throw CommandFailure(description: signedOut.description) }
                options.password = password
            }
        }
    }

    /// How many times in a row the chat asks for the password again after a refused login.
    static let maxPasswordPrompts = 3
}

/// The chat's login was refused: it asks for the password again (or ends, saying why).
struct SignedOut: Error, CustomStringConvertible {
    var description: String
    /// Whether the session had connected before (a sign-out, not a wrong password at the start).
    var connectedFirst: Bool
}

extension ClientSession: ChatHost {
    func connected() async throws {
        self.connectedOnce = true
        try await self.saveToken()
    }

    func loginRefused(code: String, message: String) -> any Error {
        let failure = self.refused(code: code, message: message, asking: true)
        // A removed account, or a login refused for the moment (throttled), is not helped by another password.
        guard code == ErrorCodes.authFailed || code == ErrorCodes.tokenRevoked || code == ErrorCodes.tokenExpired,
            message != CourierStoreError.accountRemovedMessage
        else { return failure }
        return SignedOut(description: failure.description, connectedFirst: self.connectedOnce)
    }
}
