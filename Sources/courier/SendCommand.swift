import ArgumentParser
import CourierChat
import CourierClient
import CourierVocabulary
import Foundation

/// `courier send`: one text or file, acknowledged (or a text queued while the server is away).
struct Send: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Send a text or a file; exits once the server has committed it (a text is queued while the server is away).",
        discussion: """
            A message queued in the outbox (the server unreachable) keeps its id and is sent, once, by the next \
            client command that connects as the same user. Only a server this user has reached from here before \
            queues: for one never reached (a wrong address, an unchecked password) the command fails instead.

            --file sends an image, voice clip, video or any file as a media message (its kind and MIME type from \
            its extension, unless --kind and --mime say). It is uploaded in chunks, with a progress bar on a \
            terminal (plain lines otherwise); an upload a broken connection cut resumes where the server stands \
            when the command is run again. A text beside --file is the file's caption (`courier send --to bob \
            --file beach.jpg "海边 🌊"`). The file's size limit and the user's quota are the server's \
            (media-too-large, quota-exceeded; by default 2 GiB a file and 20 GiB a user: `courier serve --help`).
            """
    )

    @OptionGroup var options: ClientOptions
    @OptionGroup var target: ConversationOptions
    @Argument(help: "The text; with --file, the file's caption (optional).") var text: String?

    @Option(help: ArgumentHelp("A file to send as a media message.", valueName: "path"))
    var file: String?

    @Option(help: ArgumentHelp("With --file: image, voice, video or file.", valueName: "kind"))
    var kind: String?

    @Option(help: ArgumentHelp("With --file: the MIME type, e.g. image/png.", valueName: "type"))
    var mime: String?

    @Option(
        help: ArgumentHelp(
            "The message's id (at most 128 bytes; default: a new UUID): sent again with the same id, it is stored once.",
            valueName: "id"
        )
    )
    var id: String?

    @Option(
        name: .customLong("reply-to"),
        help: ArgumentHelp("The id of the message this one answers, in the same conversation.", valueName: "id")
    )
    var replyTo: String?

    @Option(
        name: .customLong("reply-from"),
        help: ArgumentHelp("With --reply-to: that message's sender, when two senders used the id.", valueName: "user")
    )
    var replyFrom: String?

    func validate() throws {
        guard self.text != nil || self.file != nil else {
            throw ValidationError("give a text, or --file PATH (and a caption if you like)")
        }
        if self.replyTo == nil, self.replyFrom != nil {
            throw ValidationError("--reply-from goes with --reply-to")
        }
        if self.file != nil, self.replyTo != nil {
            throw ValidationError("--reply-to goes with a text, not with --file")
        }
        if let id = self.id, id.isEmpty || id.utf8.count > 128 {
            throw ValidationError("--id has 1 to 128 bytes")
        }
        if self.file == nil, self.kind != nil || self.mime != nil {
            throw ValidationError("--kind and --mime go with --file")
        }
        if let kind = self.kind, MediaInfo.Kind(rawValue: kind) == nil {
            throw ValidationError("--kind is image, voice, video or file")
        }
    }

    func run() async throws {
        self.checkParsed { try self.target.check() }
        let conversation = self.target.conversation
        if let file = self.file {
            try await self.sendFile(URL(fileURLWithPath: file), to: conversation)
            return
        }
        let text = self.text ?? ""
        let replyTo = self.replyTo.map { ReplyTarget.id($0, from: self.replyFrom) }
        let chosenID = self.id ?? UUID().uuidString
        let (id, outcomes) = try await ClientSession.run(self.options) { session -> (String, Outcome) in
            // Queued for later only for a server this user has reached from here (a saved token): for one never
            // reached, the address or the password may be wrong, and a queue would hide it.
            guard session.paths.savedToken() != nil else {
                if case .unreachable(let reason) = try await session.connect() {
                    throw CommandFailure(
                        description: "\(reason); \(self.options.user) has never reached this server from here, so "
                            + "nothing is queued"
                    )
                }
                let id = try await session.client.send(text, to: conversation, id: chosenID, replyTo: replyTo)
                return (id, .flushed(try await session.flushOutbox(including: [id])))
            }
            let id = try await session.client.send(text, to: conversation, id: chosenID, replyTo: replyTo)
            let connected: ClientSession.Outcome
            do {
                connected = try await session.connect()
            } catch {
                // The login was refused before anything was sent: the text leaves the outbox (a retry would send it
                // twice otherwise).
                _ = try? await session.client.withdraw(id: id)
                throw error
            }
            switch connected {
            case .connected:
                do {
                    return (id, .flushed(try await session.flushOutbox(including: [id])))
                } catch let failure as CommandFailure {
                    throw CommandFailure(
                        description: "\(failure.description); \(id) stays queued (it may have reached the server: "
                            + "the next command after a login sends it, once)"
                    )
                }
            case .unreachable(let reason): return (id, .unreachable(reason))
            }
        }
        let flushed: [String: ClientEvent]? = if case .flushed(let flushed) = outcomes { flushed } else { nil }
        switch flushed?[id] {
        case .sent(_, _, let seq, _)?:
            print("sent to \(conversation): seq \(seq), id \(id)")
        case .sendFailed(_, let code, let message)?:
            throw CommandFailure(description: "\(code): \(message)")
        default:
            // Not refused: it stays in the outbox, which the next command (or a chat open meanwhile) sends.
            let why =
                if case .unreachable(let reason) = outcomes { reason } else {
                    "the server has not confirmed it within \(ClientSession.outboxTimeout)"
                }
            print(
                "queued \(id) for \(conversation): \(why); the next courier command for \(self.options.user) that "
                    + "connects (or a chat open meanwhile) sends it, once"
            )
        }
    }
}

extension Send {
    /// What came of a text's send.
    enum Outcome: Sendable {
        /// Connected: the acknowledgements and refusals that came (the text's among them, unless not yet).
        case flushed([String: ClientEvent])
        /// The server could not be reached, for this reason: the text stays queued.
        case unreachable(String)
    }

    private func sendFile(_ file: URL, to conversation: Conversation) async throws {
        guard FileManager.default.isReadableFile(atPath: file.path) else {
            throw CommandFailure(description: "cannot read \(file.path)")
        }
        let (kind, mime) = (self.kind.flatMap(MediaInfo.Kind.init(rawValue:)), self.mime)
        let (id, media, outcomes) = try await ClientSession.run(self.options) {
            session -> (String, MediaInfo?, [String: ClientEvent]) in
            try await session.connectOrFail()
            let bar = ProgressBar(label: "sending \(file.lastPathComponent)")
            var queued: (String, MediaInfo)?
            do {
                let steps = session.client.sendMedia(
                    file: file,
                    to: conversation,
                    kind: kind,
                    mime: mime,
                    caption: self.text ?? "",
                    id: self.id ?? UUID().uuidString
                )
                for try await step in steps {
                    switch step {
                    case .hashed: break
                    case .uploading(let sent, let total): bar.show(sent, of: total)
                    case .queued(let id, let media): queued = (id, media)
                    }
                }
            } catch let error as CourierClientError {
                bar.end()
                throw CommandFailure(description: "\(error.code): \(error.message)")
            }
            bar.end()
            guard let (id, media) = queued else { throw CommandFailure(description: "the upload did not finish") }
            return (id, media, try await session.flushOutbox(including: [id]))
        }
        let what = media.map(ChatText.describe) ?? file.lastPathComponent
        switch outcomes[id] {
        case .sent(_, _, let seq, _)?:
            print("sent \(what) to \(conversation): seq \(seq), id \(id)")
        case .sendFailed(_, let code, let message)?:
            throw CommandFailure(description: "\(code): \(message)")
        default:
            print(
                "queued \(what) as \(id) for \(conversation): the server has not confirmed it within "
                    + "\(ClientSession.outboxTimeout); the next courier command for \(self.options.user) that connects "
                    + "(or a chat open meanwhile) sends it, once"
            )
        }
    }
}
