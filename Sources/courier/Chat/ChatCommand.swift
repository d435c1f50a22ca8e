import ArgumentParser
import CourierClient
import Foundation

/// `courier chat`: the full-screen terminal chat.
struct Chat: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Chat in a full-screen terminal view: conversations, unread counts, receipts and typing.",
        discussion: """
            Keys: Enter sends the line; Tab / Shift-Tab (or Ctrl-N / Ctrl-P, Alt-↓ / Alt-↑) switch conversations; \
            PgUp / PgDn and ↑ / ↓ scroll; ←, →, Home, End, Backspace, Delete, Ctrl-A/E/U/K/W edit the line; \
            Ctrl-L redraws; Ctrl-C, Ctrl-D on an empty line, or /quit leave. /open NAME (or @NAME) opens a direct \
            conversation, /open #GROUP a group's; /send PATH sends a photo, voice clip, video or any file to the \
            open conversation (its line shows the upload's progress, then the kind, name and size, as media from \
            others shows); /help shows the keys.

            Your messages are marked … (waiting in the outbox), ✓ (committed by the server), ✓✓ (on the other \
            side's device), and the newest one read "✓✓ read". Messages written while the server is away wait in \
            the outbox and go when it is back. Times show relative: "just now", "3 min ago", "yesterday 14:02".
            """
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
            try await ChatLoop(session: session, options: self.options).run(opening: initial)
        }
    }
}

/// The chat's loop: keys, the client's events and the answers to its requests go through one stream into the
/// ``ChatState``; what it asks for is carried out, and the screen redrawn (at most every ``ChatLoop/frameInterval``).
struct ChatLoop {
    let session: ClientSession
    let options: ClientOptions
    /// The least time between two screens drawn while events stream in.
    static let frameInterval: TimeInterval = 0.03
    /// How many of each conversation's stored messages the chat starts with.
    static let storedPerConversation = 200

    enum Input: Sendable {
        case terminal(Terminal.Input)
        case event(ClientEvent)
        case eventsEnded
        case history(Conversation, [ChatMessage], more: Bool)
        case unread([UnreadCount])
        case failed(String)
        case upload(id: String, UploadProgress)
        case uploadFailed(id: String, String)
        case tick
        case draw
    }

    func run(opening initial: Conversation?) async throws {
        let client = self.session.client
        var state = ChatState(me: self.options.user, server: self.options.serverText())
        let now = Date()
        var stored: [ChatMessage] = []
        for conversation in try await client.storedConversations() {
            stored += try await client.storedMessages(in: conversation.conversation, limit: Self.storedPerConversation)
        }
        state.load(stored: stored, pending: try await client.pendingMessages(), now: now)
        if let initial { _ = state.select(initial, now: now) }

        let terminal: Terminal = try .open()
        defer { terminal.restore() }
        (state.columns, state.rows) = terminal.size()
        terminal.draw(ChatScreen(state, now: now))

        let (inputs, sink) = AsyncStream<Input>.makeStream(bufferingPolicy: .unbounded)
        // Texts go to the outbox one after the other, in the order written.
        let (outgoing, outbox) = AsyncStream<(id: String, text: String, to: Conversation)>.makeStream()
        let failure = await withTaskGroup(of: Void.self, returning: CommandFailure?.self) { group in
            group.addTask {
                for await message in outgoing {
                    do {
                        try await client.send(message.text, to: message.to, id: message.id)
                    } catch {
                        sink.yield(.failed("not sent: \(error)"))
                    }
                }
            }
            group.addTask {
                for await input in terminal.inputs { sink.yield(.terminal(input)) }
                sink.yield(.terminal(.hangUp))
            }
            group.addTask {
                while let event = await self.session.nextEvent() { sink.yield(.event(event)) }
                sink.yield(.eventsEnded)
            }
            group.addTask {
                while (try? await Task.sleep(for: .seconds(1))) != nil { sink.yield(.tick) }
            }
            defer {
                outbox.finish()
                group.cancelAll()
            }

            var lastDrawn = Date.distantPast
            var drawScheduled = false
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
                    return self.session.refused(code: code, message: message)
                case .event(let event):
                    if case .connected = event {
                        do { try await self.session.saveToken() } catch { state.notice = "token not saved: \(error)" }
                    }
                    actions = state.apply(event, now: now)
                case .eventsEnded:
                    return nil
                case .history(let conversation, let messages, let more):
                    actions = state.merge(history: messages, more: more, of: conversation)
                case .unread(let counts):
                    state.setUnread(counts)
                case .failed(let message):
                    state.notice = message
                case .upload(let id, let progress):
                    state.upload(id: id, progress)
                case .uploadFailed(let id, let message):
                    state.uploadFailed(id: id, message)
                case .tick:
                    state.expire(now: now)
                case .draw:
                    drawScheduled = false
                }
                for action in actions {
                    switch action {
                    case .quit:
                        return nil
                    case .redraw:
                        full = true
                    default:
                        Self.perform(action, client: client, in: &group, sink: sink, outbox: outbox)
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
        sink.finish()
        if let failure { throw failure }
    }

    /// Carries out an action: a send goes to the outbox at once; requests to the server run in their own tasks and
    /// come back as inputs. Read marks and typing notices that fail (offline) are dropped: they are said again.
    private static func perform(
        _ action: ChatAction,
        client: CourierClient,
        in group: inout TaskGroup<Void>,
        sink: AsyncStream<Input>.Continuation,
        outbox: AsyncStream<(id: String, text: String, to: Conversation)>.Continuation
    ) {
        switch action {
        case .send(let id, let text, let conversation):
            outbox.yield((id, text, conversation))
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
                    sink.yield(.history(conversation, page.messages, more: page.more))
                } catch let error as CourierClientError {
                    sink.yield(.failed("\(conversation): \(error.code): \(error.message)"))
                } catch {
                    sink.yield(.failed("\(conversation): \(error)"))
                }
            }
        case .refreshUnread:
            group.addTask {
                if let counts = try? await client.unreadCounts() { sink.yield(.unread(counts)) }
            }
        case .redraw, .quit:
            break
        }
    }
}
