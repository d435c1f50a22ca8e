public import CourierClient
import CourierProtocol
public import Foundation

/// What the chat needs from the program that runs it: the client's events, and what to do when it connects or its
/// login is refused.
public protocol ChatHost: Sendable {
    /// The client's next event; nil once it has stopped. Called from one task at a time.
    func nextEvent() async -> ClientEvent?
    /// The client connected: the program keeps what it keeps (the device token, say).
    func connected() async throws
    /// The server refused the login: the error the chat ends with (saying what to do).
    func loginRefused(code: String, message: String) -> any Error
}

/// An error of the chat itself (the terminal), in words for its user.
public struct ChatError: Error, CustomStringConvertible {
    public var description: String
}

/// The chat's loop: keys, the client's events and the answers to its requests go through one stream into the
/// ``ChatState``; what it asks for is carried out, and the screen redrawn (at most every ``ChatLoop/frameInterval``).
public struct ChatLoop: Sendable {
    let client: CourierClient
    let me: String
    let server: String
    let host: any ChatHost
    /// Where the chat keeps its own settings between runs (the closed conversations), if anywhere.
    let settings: ChatSettings?
    /// Whether the chat ends, saying why, when the server cannot be reached before its first connection (a user
    /// with no saved token, whose login needs the server): otherwise it starts offline and connects when it can.
    let mustConnect: Bool
    /// Where `/save` puts files when not told.
    let downloads: URL
    /// What `/view` opens files with, if anything, and where it puts their copies (removed when the chat ends).
    let opener: SystemOpener?
    let viewFolder = FileManager.default.temporaryDirectory.appendingPathComponent("courier-view-\(UUID().uuidString)")

    /// The least time between two screens drawn while events stream in.
    static let frameInterval: TimeInterval = 0.03
    /// The least time between two bells.
    static let bellInterval: TimeInterval = 1
    /// How many of each conversation's stored messages the chat starts with.
    static let storedPerConversation = 200

    /// - Parameters:
    ///   - client: The user's client, running (its events read through `host`).
    ///   - me: The user's name; `server` as the title shows it.
    ///   - settings: A file for what the chat keeps between runs (closed conversations); nil keeps nothing.
    ///   - downloads: Where `/save` puts files by default (by default ``ChatFiles/downloadsFolder()``).
    ///   - opener: What `/view` opens files with (by default the system's, where there is one).
    public init(
        client: CourierClient,
        me: String,
        server: String,
        host: any ChatHost,
        settings: URL?,
        mustConnect: Bool = false,
        downloads: URL = ChatFiles.downloadsFolder(),
        opener: SystemOpener? = SystemOpener.find()
    ) {
        self.mustConnect = mustConnect
        self.client = client
        self.me = me
        self.server = server
        self.host = host
        self.settings = settings.map(ChatSettings.init(file:))
        self.downloads = downloads
        self.opener = opener
    }

    enum Input: Sendable {
        case terminal(Terminal.Input)
        case event(ClientEvent)
        case eventsEnded
        /// A page of history (answering `before`), or why it could not be had.
        case history(Conversation, [ChatMessage], more: Bool, receipts: [ReceiptMark], before: UInt64)
        case historyFailed(Conversation, before: UInt64, String)
        case unread([UnreadCount])
        case notice(String)
        /// A group's title and members, as `/group members` asked.
        case roster(String, title: String, [GroupMemberInfo])
        /// A group this user made: it opens, so that what follows (`/group title`) is about it.
        case groupMade(String)
        /// The server knows no such user or group.
        case noSuchConversation(Conversation)
        case upload(id: String, UploadProgress)
        case uploadFailed(id: String, String)
        /// A page of search `number`'s results (`before` 0: the first), or why it failed.
        case searched(Int, SearchResults, before: UInt64)
        case searchFailed(Int, String)
        case profiles([ProfileInfo])
        case profilesFailed([String])
        case tick
        case draw
    }

    /// A text on its way to the outbox, and the message it answers.
    typealias Outgoing = (id: String, text: String, to: Conversation, replyTo: UInt64?)

    /// Runs the chat on the terminal until the user quits, the terminal goes, or the login is refused.
    public func run(opening initial: Conversation?) async throws {
        let client = self.client
        var state = ChatState(me: self.me, server: self.server)
        let now = Date()
        var stored: [ChatMessage] = []
        for conversation in try await client.storedConversations() {
            stored += try await client.storedMessages(in: conversation.conversation, limit: Self.storedPerConversation)
        }
        state.load(stored: stored, pending: try await client.pendingMessages(), now: now)
        state.closed = self.settings?.closed() ?? [:]
        if let initial {
            state.closed[ChatState.key(initial)] = nil
            _ = state.select(initial, now: now)
        }

        let terminal: Terminal = try .open()
        defer { terminal.restore() }
        (state.columns, state.rows) = terminal.size()
        terminal.draw(ChatScreen(state, now: now))

        let (inputs, sink) = AsyncStream<Input>.makeStream(bufferingPolicy: .unbounded)
        // Texts go to the outbox one after the other, in the order written; the chat ends only once each typed
        // is written (not cancelled halfway by the quit).
        let (outgoing, outbox) = AsyncStream<Outgoing>.makeStream()
        async let sending: Void = Self.write(outgoing, to: client, failures: sink)
        let failure = await withTaskGroup(of: Void.self, returning: (any Error)?.self) { group in
            group.addTask {
                for await input in terminal.inputs { sink.yield(.terminal(input)) }
                sink.yield(.terminal(.hangUp))
            }
            group.addTask {
                while let event = await self.host.nextEvent() { sink.yield(.event(event)) }
                sink.yield(.eventsEnded)
            }
            group.addTask {
                while (try? await Task.sleep(for: .seconds(1))) != nil { sink.yield(.tick) }
            }
            defer { group.cancelAll() }
            return await self.loop(inputs, state: &state, terminal: terminal, group: &group, sink: sink, outbox: outbox)
        }
        outbox.finish()
        await sending
        sink.finish()
        try? FileManager.default.removeItem(at: self.viewFolder)
        if let failure { throw failure }
    }

    /// Writes texts to the outbox in order until the stream ends.
    private static func write(
        _ outgoing: AsyncStream<Outgoing>,
        to client: CourierClient,
        failures: AsyncStream<Input>.Continuation
    ) async {
        for await message in outgoing {
            do {
                try await client.send(
                    message.text,
                    to: message.to,
                    id: message.id,
                    replyTo: message.replyTo.map { .seq($0) }
                )
            } catch {
                failures.yield(.notice("not sent: \(error)"))
            }
        }
    }

    /// Reads the inputs and acts until the chat ends; the error it ends with, if any.
    private func loop(
        _ inputs: AsyncStream<Input>,
        state: inout ChatState,
        terminal: Terminal,
        group: inout TaskGroup<Void>,
        sink: AsyncStream<Input>.Continuation,
        outbox: AsyncStream<Outgoing>.Continuation
    ) async -> (any Error)? {
        var lastDrawn = Date.distantPast
        var lastBell = Date.distantPast
        var drawScheduled = false
        var connectedOnce = false
        for await input in inputs {
            let now = Date()
            var actions: [ChatAction] = []
            var full = false
            switch input {
            case .terminal(.keys(let keys)):
                for key in keys { actions += state.handle(key, now: now) }
            case .terminal(.resized(let columns, let rows)):
                (state.columns, state.rows) = (columns, rows)
                full = true
            case .terminal(.hangUp):
                return nil
            case .event(.loginRefused(let code, let message)):
                return self.host.loginRefused(code: code, message: message)
            case .event(.disconnected(let disconnection))
            where self.mustConnect && !connectedOnce && disconnection.cause == .unreachable:
                return ChatError(description: disconnection.reason)
            case .event(let event):
                if case .connected = event {
                    connectedOnce = true
                    do { try await self.host.connected() } catch { state.notice = "token not saved: \(error)" }
                }
                actions = state.apply(event, now: now)
            case .eventsEnded:
                return nil
            case .history(let conversation, let messages, let more, let receipts, let before):
                actions = state.merge(
                    history: messages,
                    more: more,
                    receipts: receipts,
                    of: conversation,
                    before: before,
                    now: now
                )
            case .historyFailed(let conversation, let before, let message):
                state.historyFailed(conversation, beforeSeq: before)
                state.notice = "\(conversation): \(message)"
            case .searched(let number, let page, let before):
                state.searched(number, page: page, before: before)
            case .searchFailed(let number, let message):
                state.searchFailed(number, message)
            case .profiles(let profiles):
                state.setProfiles(profiles)
            case .profilesFailed(let users):
                state.profilesFailed(users)
            case .unread(let counts):
                state.setUnread(counts)
            case .notice(let message):
                state.notice = message
            case .roster(let group, let title, let members):
                state.notice = state.roster(group, title: title, members)
            case .groupMade(let group):
                actions = state.select(.group(group), now: now)
            case .noSuchConversation(let conversation):
                state.noSuchConversation(conversation)
                full = true
            case .upload(let id, let progress):
                state.upload(id: id, progress)
            case .uploadFailed(let id, let message):
                state.uploadFailed(id: id, message)
            case .tick:
                state.expire(now: now)
            case .draw:
                drawScheduled = false
            }
            // Whom the chat now shows that it knows no display name of (new lines come with these inputs only).
            switch input {
            case .event(.message), .event(.connected), .history, .unread: actions += state.profilesWanted()
            default: break
            }
            for action in actions {
                switch action {
                case .quit:
                    return nil
                case .redraw:
                    full = true
                case .bell:
                    // Once for a burst (a backlog synced after a reconnect rings once, not for every message).
                    if now.timeIntervalSince(lastBell) >= Self.bellInterval {
                        terminal.bell()
                        lastBell = now
                    }
                case .send(let id, let text, let conversation):
                    outbox.yield((id, text, conversation, nil))
                case .sendReply(let id, let text, let conversation, let replyTo):
                    outbox.yield((id, text, conversation, replyTo))
                case .closedChanged(let closed):
                    if let settings = self.settings {
                        do { try settings.save(closed: closed) } catch {
                            state.notice = "cannot keep the closed conversations: \(error.localizedDescription)"
                        }
                    }
                default:
                    self.perform(action, in: &group, sink: sink)
                }
            }
            // Draw now, or soon if a screen was just drawn (a burst of events draws once).
            if full || now.timeIntervalSince(lastDrawn) >= Self.frameInterval {
                terminal.draw(ChatScreen(state, now: now), full: full)
                lastDrawn = now
            } else if !drawScheduled {
                drawScheduled = true
                group.addTask {
                    try? await Task.sleep(for: .milliseconds(Int(Self.frameInterval * 1000)))
                    sink.yield(.draw)
                }
            }
        }
        return nil
    }

    /// Carries out a request to the server (or a file's download) in a task of its own; what comes of it comes back
    /// as an input. Read marks and typing notices that fail (offline) are dropped: they are said again.
    private func perform(_ action: ChatAction, in group: inout TaskGroup<Void>, sink: AsyncStream<Input>.Continuation) {
        let client = self.client
        switch action {
        case .sendFile(let id, let path, let conversation):
            group.addTask {
                do {
                    for try await step in client.sendMedia(file: URL(fileURLWithPath: path), to: conversation, id: id) {
                        sink.yield(.upload(id: id, step))
                    }
                } catch let error as CourierClientError {
                    sink.yield(.uploadFailed(id: id, "\(error.code): \(error.message)"))
                } catch {
                    sink.yield(.uploadFailed(id: id, "\(path): \(error.localizedDescription)"))
                }
            }
        case .markRead(let conversation, let seq):
            group.addTask { try? await client.markRead(conversation, upToSeq: seq) }
        case .typing(let typing, let conversation):
            group.addTask { try? await client.setTyping(typing, in: conversation) }
        case .loadHistory(let conversation, let before):
            group.addTask {
                do {
                    let page = try await client.history(
                        of: conversation,
                        beforeSeq: before,
                        limit: ChatState.historyPage
                    )
                    sink.yield(
                        .history(conversation, page.messages, more: page.more, receipts: page.receipts, before: before)
                    )
                } catch let error as CourierClientError
                    where error.code == ErrorCodes.unknownUser || error.code == ErrorCodes.unknownGroup
                {
                    sink.yield(.noSuchConversation(conversation))
                } catch {
                    sink.yield(.historyFailed(conversation, before: before, Self.words(error)))
                }
            }
        case .loadProfiles(let users):
            group.addTask {
                // A display name is a nicety: a failure leaves user names until it is asked for again.
                do {
                    sink.yield(.profiles(try await client.profiles(of: users)))
                } catch {
                    sink.yield(.profilesFailed(users))
                }
            }
        case .refreshUnread:
            group.addTask {
                if let counts = try? await client.unreadCounts() { sink.yield(.unread(counts)) }
            }
        case .recall(let id, let conversation):
            group.addTask {
                do {
                    try await client.recall(id: id, in: conversation)
                    sink.yield(.notice("recalled"))
                } catch {
                    sink.yield(.notice("not recalled: \(Self.words(error))"))
                }
            }
        case .edit(let message, let text):
            // The line changes when the edit's event comes back, on every device alike.
            group.addTask {
                do {
                    try await client.edit(message, text: text)
                    sink.yield(.notice("edited"))
                } catch {
                    sink.yield(.notice("not edited: \(Self.words(error))"))
                }
            }
        case .react(let message, let key, let on):
            group.addTask {
                do {
                    try await client.react(message, key: key, on: on)
                    sink.yield(.notice(on ? "reacted \(key)" : "took \(key) off"))
                } catch {
                    sink.yield(.notice("no reaction: \(Self.words(error))"))
                }
            }
        case .search(let query, let before, let number):
            group.addTask {
                do {
                    let page = try await client.search(query, before: before, limit: ChatState.searchPage)
                    sink.yield(.searched(number, page, before: before))
                } catch {
                    sink.yield(.searchFailed(number, Self.words(error)))
                }
            }
        case .save(let media, let path):
            let downloads = self.downloads
            group.addTask {
                sink.yield(.notice("saving \(ChatText.describe(media))…"))
                do {
                    let cached = try await Self.download(media, client: client)
                    let destination = try ChatFiles.save(cached, as: media.name, to: path, downloads: downloads)
                    sink.yield(.notice("saved \(ChatText.describe(media)) to \(destination.path)"))
                } catch {
                    sink.yield(.notice("not saved: \(Self.words(error))"))
                }
            }
        case .view(let media):
            guard let opener = self.opener else {
                sink.yield(
                    .notice("no system opener here (\(SystemOpener.needs)); /save the file instead")
                )
                return
            }
            guard let suffix = ChatFiles.viewableExtension(for: media) else {
                sink.yield(
                    .notice(
                        "/view opens images, videos and voice clips of common types, not \(media.mime); /save it instead"
                    )
                )
                return
            }
            let folder = self.viewFolder
            group.addTask {
                sink.yield(.notice("fetching \(ChatText.describe(media))…"))
                do {
                    let cached = try await Self.download(media, client: client)
                    let copy = try ChatFiles.viewable(cached, media: media, extension: suffix, in: folder)
                    try opener.open(copy)
                    sink.yield(.notice("opened \(ChatText.describe(media)) with \(opener.name)"))
                } catch {
                    sink.yield(.notice("not opened: \(Self.words(error))"))
                }
            }
        case .manageGroup(let change):
            group.addTask {
                do {
                    for input in try await Self.manage(change, client: client) { sink.yield(input) }
                } catch {
                    sink.yield(.notice("not done: \(Self.words(error))"))
                }
            }
        case .setNotify(let conversation, let level):
            group.addTask {
                do {
                    try await client.setNotify(level, for: conversation)
                    let words =
                        switch level {
                        case .all: "every message"
                        case .mentions: "mentions of you only"
                        case .none: "nothing"
                        }
                    sink.yield(.notice("\(conversation) alerts on \(words)"))
                } catch {
                    sink.yield(.notice("not changed: \(Self.words(error))"))
                }
            }
        case .setBlocked(let user, let blocked):
            group.addTask {
                do {
                    try await client.setBlocked(user, blocked)
                    let name = ChatText.printable(user)
                    sink.yield(
                        .notice(
                            blocked
                                ? "blocked \(name): its messages no longer reach you (/block --off unblocks)"
                                : "unblocked \(name)"
                        )
                    )
                } catch {
                    sink.yield(.notice("not changed: \(Self.words(error))"))
                }
            }
        case .setDisplayName(let name):
            group.addTask {
                do {
                    try await client.setDisplayName(name)
                    sink.yield(.notice(name.isEmpty ? "no display name" : "your display name is set"))
                } catch {
                    sink.yield(.notice("not set: \(Self.words(error))"))
                }
            }
        case .send, .sendReply, .closedChanged, .bell, .redraw, .quit:
            break
        }
    }

    /// A file downloaded to the client's media cache (checked against its digest).
    private static func download(_ media: MediaInfo, client: CourierClient) async throws -> URL {
        var cached: URL?
        for try await step in client.download(sha256: media.sha256) {
            if case .finished(let url) = step { cached = url }
        }
        guard let cached else { throw ChatError(description: "the download did not finish") }
        return cached
    }

    /// An error in words: the server's code and message, else the error's own words.
    static func words(_ error: any Error) -> String {
        if let error = error as? CourierClientError { return "\(error.code): \(error.message)" }
        if let error = error as? ChatError { return error.description }
        return error.localizedDescription
    }
}
