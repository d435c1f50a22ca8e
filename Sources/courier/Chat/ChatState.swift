import CourierClient
import Foundation

/// What the terminal chat knows and shows: its conversations, the one open, the input line, who is typing and
/// online. A value that keys and the client's events change; it returns what to do (``ChatAction``) and never does
/// it, so it is tested without a terminal or a server.
struct ChatState {
    /// A message as the chat shows it: the server's, or one of ours still in the outbox.
    struct Line: Hashable {
        var id: String
        var from: String
        /// Nil while the message waits in the outbox.
        var seq: UInt64?
        /// The server's time, or when it was written while it waits.
        var time: Date
        var text: String
        var recalled = false
        /// Why the server refused it, if it did.
        var failure: String?
    }

    /// A conversation as the chat holds it.
    struct Thread {
        var conversation: Conversation
        /// Acknowledged messages by sequence number, then those waiting in the outbox, in order written.
        var lines: [Line] = []
        var unread: UInt64 = 0
        /// Up to where each other member's devices received and read the conversation, by lowercased name.
        var delivered: [String: UInt64] = [:]
        var read: [String: UInt64] = [:]
        /// Who is typing, until when (a typing notice lasts ``ChatState/typingShownFor`` unless renewed).
        var typing: [String: Date] = [:]
        /// Whether a page of history has been asked of the server, and whether older pages remain.
        var historyRequested = false
        var moreHistory = false
        /// Up to where this user has read (as last told to the server).
        var readUpTo: UInt64 = 0

        var lastSeq: UInt64 { self.lines.lazy.compactMap(\.seq).max() ?? 0 }
        var lastActivity: Date { self.lines.last?.time ?? .distantPast }
    }

    enum Connection: Hashable {
        case connecting
        case connected
        case offline(String)
    }

    let me: String
    let server: String
    var threads: [String: Thread] = [:]
    /// The open conversation's key (``ChatState/key(_:)``).
    var open: String?
    var input = LineEditor()
    /// How many rows the open conversation is scrolled up from its newest message.
    var scroll = 0
    var connection = Connection.connecting
    /// When the client tries to connect again, while offline.
    var reconnectAt: Date?
    /// Users seen online (true) or offline, by lowercased name.
    var online: [String: Bool] = [:]
    /// A one-line notice shown above the input (an error, a help text); cleared by the next key.
    var notice: String?
    /// The terminal's size; the screen lays out to it.
    var columns = 80
    var rows = 24
    /// The files `/send` is uploading: message id → file name.
    private var uploads: [String: String] = [:]
    /// When this user last said it is typing, and where.
    private var typingSent: (conversation: Conversation, at: Date)?

    /// How long a typing notice shows without a renewal, and how often ours is renewed while typing.
    static let typingShownFor: TimeInterval = 6
    static let typingRenewal: TimeInterval = 3
    /// The messages asked of the server when a conversation opens or scrolls past its oldest.
    static let historyPage = 50
    static let help =
        "Enter sends · Tab/Shift-Tab switch · PgUp/PgDn scroll · /open NAME or #GROUP · /send PATH · Ctrl-C quits"

    init(me: String, server: String) {
        self.me = me
        self.server = server
    }

    static func key(_ conversation: Conversation) -> String {
        conversation.description.lowercased()
    }

    /// The conversations in the order listed: the most recently active first.
    var ordered: [Thread] {
        self.threads.values.sorted {
            ($0.lastActivity, Self.key($1.conversation)) > ($1.lastActivity, Self.key($0.conversation))
        }
    }

    var openThread: Thread? { self.open.flatMap { self.threads[$0] } }

    // MARK: Loading

    /// Adds what this device stored: each conversation's newest messages and the outbox.
    mutating func load(stored: [ChatMessage], pending: [PendingMessage], now: Date) {
        for message in stored {
            self.add(message)
        }
        for message in pending {
            self[thread: message.conversation].lines.append(
                Line(
                    id: message.id,
                    from: self.me,
                    seq: nil,
                    time: now,
                    text: message.media.map(Self.describe) ?? message.text
                )
            )
        }
    }

    /// A media message as its line shows it: kind, name and size.
    static func describe(_ media: MediaInfo) -> String {
        "[\(media.kind.rawValue) \(media.name.isEmpty ? media.sha256.prefix(12) + "…" : media.name), \(Self.size(media.size))]"
    }

    /// A byte count for people: `512 B`, `2.4 MB`, `1.1 GB` (decimal units).
    static func size(_ bytes: Int64) -> String {
        if bytes < 1000 { return "\(bytes) B" }
        let units = ["kB", "MB", "GB", "TB"]
        var value = Double(bytes) / 1000
        var unit = 0
        while value >= 999.5, unit < units.count - 1 {
            value /= 1000
            unit += 1
        }
        return String(format: value < 10 ? "%.1f %@" : "%.0f %@", value, units[unit])
    }

    /// How an upload started by `/send` goes: its line shows the progress, then the media.
    mutating func upload(id: String, _ progress: UploadProgress) {
        guard let key = self.threads.first(where: { $0.value.lines.contains { $0.id == id } })?.key,
            let index = self.threads[key]?.lines.firstIndex(where: { $0.id == id })
        else { return }
        switch progress {
        case .hashed:
            break
        case .uploading(let sent, let total):
            let percent = total > 0 ? sent * 100 / total : 100
            self.threads[key]!.lines[index].text = "[sending \(self.uploads[id] ?? "") \(percent)%]"
        case .queued(_, let media):
            self.uploads[id] = nil
            self.threads[key]!.lines[index].text = Self.describe(media)
        }
    }

    /// An upload started by `/send` failed: its line goes, and the notice says why.
    mutating func uploadFailed(id: String, _ message: String) {
        self.uploads[id] = nil
        for key in self.threads.keys {
            self.threads[key]!.lines.removeAll { $0.id == id && $0.seq == nil }
        }
        self.notice = "not sent: \(message)"
    }

    /// Merges a page of history from the server; the open conversation is then read up to its newest message.
    mutating func merge(history messages: [ChatMessage], more: Bool, of conversation: Conversation) -> [ChatAction] {
        for message in messages {
            self.add(message)
        }
        let key = Self.key(conversation)
        var thread = self[thread: conversation]
        thread.moreHistory = more
        defer { self.threads[key] = thread }
        guard key == self.open, thread.lastSeq > thread.readUpTo else { return [] }
        thread.readUpTo = thread.lastSeq
        thread.unread = 0
        return [.markRead(conversation, upToSeq: thread.lastSeq)]
    }

    /// Sets the unread counts the server reported (on each connection).
    mutating func setUnread(_ counts: [UnreadCount]) {
        for count in counts {
            let key = Self.key(count.conversation)
            self[thread: count.conversation].unread = key == self.open ? 0 : count.unread
        }
    }

    // MARK: Keys

    mutating func handle(_ key: Key, now: Date) -> [ChatAction] {
        if key != .escape, self.notice != nil, !self.isEditing(key) { self.notice = nil }
        switch key {
        case .character(let character):
            self.input.insert(String(character))
            return self.typed(now: now)
        case .paste(let text):
            self.input.insert(text)
            return self.typed(now: now)
        case .enter: return self.submit(now: now)
        case .backspace:
            self.input.backspace()
            return self.typed(now: now)
        case .delete:
            self.input.delete()
            return self.typed(now: now)
        case .left, .control("b"): self.input.left()
        case .right, .control("f"): self.input.right()
        case .home, .control("a"): self.input.home()
        case .end, .control("e"): self.input.end()
        case .control("u"):
            self.input.deleteToStart()
            return self.typed(now: now)
        case .control("k"):
            self.input.deleteToEnd()
            return self.typed(now: now)
        case .control("w"):
            self.input.deleteWord()
            return self.typed(now: now)
        case .tab, .altDown, .control("n"): return self.switchConversation(by: 1, now: now)
        case .backTab, .altUp, .control("p"): return self.switchConversation(by: -1, now: now)
        case .up: return self.scroll(by: 1, now: now)
        case .down: self.scroll = max(0, self.scroll - 1)
        case .pageUp: return self.scroll(by: max(1, self.messageRows - 1), now: now)
        case .pageDown: self.scroll = max(0, self.scroll - max(1, self.messageRows - 1))
        case .escape: self.notice = nil
        case .control("c"): return [.quit]
        case .control("d") where self.input.isEmpty: return [.quit]
        case .control("l"): return [.redraw]
        default: break
        }
        return []
    }

    private func isEditing(_ key: Key) -> Bool {
        switch key {
        case .character, .paste, .backspace, .delete: true
        default: false
        }
    }

    /// After the input changed: says we are typing (renewed every few seconds), or that we stopped.
    private mutating func typed(now: Date) -> [ChatAction] {
        guard let thread = self.openThread else { return [] }
        if self.input.isEmpty || self.input.text.hasPrefix("/") { return self.stopTyping() }
        if let sent = self.typingSent, Self.key(sent.conversation) == Self.key(thread.conversation),
            now.timeIntervalSince(sent.at) < Self.typingRenewal
        {
            return []
        }
        self.typingSent = (thread.conversation, now)
        return [.typing(true, thread.conversation)]
    }

    private mutating func stopTyping() -> [ChatAction] {
        guard let sent = self.typingSent else { return [] }
        self.typingSent = nil
        return [.typing(false, sent.conversation)]
    }

    private mutating func submit(now: Date) -> [ChatAction] {
        let text = self.input.text
        if text.hasPrefix("/") {
            _ = self.input.take()
            return self.stopTyping() + self.command(text, now: now)
        }
        guard !text.trimmingCharacters(in: .whitespaces).isEmpty else { return [] }
        guard let thread = self.openThread else {
            self.notice = "open a conversation first: /open NAME or /open #GROUP"
            return []
        }
        _ = self.input.take()
        let id = UUID().uuidString
        self.threads[Self.key(thread.conversation)]?.lines.append(
            Line(id: id, from: self.me, seq: nil, time: now, text: text)
        )
        self.scroll = 0
        self.typingSent = nil
        return [.send(id: id, text: text, to: thread.conversation)]
    }

    private mutating func command(_ line: String, now: Date) -> [ChatAction] {
        let words = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        switch words.first {
        case "/open", "/o":
            guard words.count == 2, let target = Self.conversation(named: words[1]) else {
                self.notice = "usage: /open NAME (a user) or /open #GROUP"
                return []
            }
            if let existing = self.threads.values.first(where: { Self.key($0.conversation) == Self.key(target) }) {
                return self.select(existing.conversation, now: now)
            }
            self[thread: target].historyRequested = false
            return self.select(target, now: now)
        case "/send", "/s":
            let path = line.drop { $0 != " " }.trimmingCharacters(in: .whitespaces)
            guard !path.isEmpty else {
                self.notice = "usage: /send PATH (an image, voice clip, video or any file)"
                return []
            }
            guard let thread = self.openThread else {
                self.notice = "open a conversation first: /open NAME or /open #GROUP"
                return []
            }
            let expanded = path.hasPrefix("~/") ? NSHomeDirectory() + path.dropFirst() : path
            let id = UUID().uuidString
            let name = (expanded as NSString).lastPathComponent
            self.uploads[id] = name
            self.threads[Self.key(thread.conversation)]?.lines.append(
                Line(id: id, from: self.me, seq: nil, time: now, text: "[sending \(name)]")
            )
            self.scroll = 0
            return [.sendFile(id: id, path: expanded, to: thread.conversation)]
        case "/quit", "/q":
            return [.quit]
        case "/help", "/h", "/?":
            self.notice = Self.help
            return []
        default:
            self.notice = "unknown command \(words.first ?? line); try /help"
            return []
        }
    }

    /// `#team` is a group, `@bob` or `bob` a user.
    static func conversation(named name: String) -> Conversation? {
        if name.hasPrefix("#") {
            let group = String(name.dropFirst())
            return group.isEmpty ? nil : .group(group)
        }
        let user = name.hasPrefix("@") ? String(name.dropFirst()) : name
        return user.isEmpty ? nil : .user(user)
    }

    private mutating func switchConversation(by step: Int, now: Date) -> [ChatAction] {
        let ordered = self.ordered
        guard !ordered.isEmpty else {
            self.notice = "no conversations yet: /open NAME or /open #GROUP"
            return []
        }
        let current = ordered.firstIndex { Self.key($0.conversation) == self.open }
        let next =
            if let current { (current + step + ordered.count) % ordered.count } else {
                step > 0 ? 0 : ordered.count - 1
            }
        return self.select(ordered[next].conversation, now: now)
    }

    /// Opens a conversation: its unread messages are read, and its history is asked for the first time.
    mutating func select(_ conversation: Conversation, now: Date) -> [ChatAction] {
        var actions = self.stopTyping()
        let key = Self.key(conversation)
        self.open = key
        self.scroll = 0
        var thread = self[thread: conversation]
        thread.unread = 0
        if thread.lastSeq > thread.readUpTo {
            thread.readUpTo = thread.lastSeq
            actions.append(.markRead(conversation, upToSeq: thread.lastSeq))
        }
        if !thread.historyRequested, self.connection == .connected {
            thread.historyRequested = true
            actions.append(.loadHistory(conversation, beforeSeq: 0))
        }
        self.threads[key] = thread
        if !self.input.isEmpty, !self.input.text.hasPrefix("/") { actions += self.typed(now: now) }
        return actions
    }

    private mutating func scroll(by rows: Int, now: Date) -> [ChatAction] {
        self.scroll += rows
        guard let thread = self.openThread else { return [] }
        let total = ChatScreen.messageRows(of: thread, state: self, now: now).count
        self.scroll = max(0, min(self.scroll, total - self.messageRows))
        // Near the top of what is loaded: ask for the page before it.
        if self.scroll + self.messageRows >= total, thread.moreHistory, self.connection == .connected,
            let oldest = thread.lines.lazy.compactMap(\.seq).min()
        {
            self.threads[Self.key(thread.conversation)]?.moreHistory = false
            return [.loadHistory(thread.conversation, beforeSeq: oldest)]
        }
        return []
    }

    /// The rows the open conversation's messages have on screen.
    var messageRows: Int { max(1, self.rows - 5) }

    // MARK: Events

    mutating func apply(_ event: ClientEvent, now: Date) -> [ChatAction] {
        switch event {
        case .connected:
            self.connection = .connected
            var actions: [ChatAction] = [.refreshUnread]
            guard let thread = self.openThread else { return actions }
            // Read marks made while offline were not delivered: say again how far the open one is read.
            if thread.lastSeq > 0 { actions.append(.markRead(thread.conversation, upToSeq: thread.lastSeq)) }
            if !thread.historyRequested {
                self.threads[Self.key(thread.conversation)]?.historyRequested = true
                actions.append(.loadHistory(thread.conversation, beforeSeq: 0))
            }
            return actions
        case .caughtUp, .loginRefused:
            return []
        case .disconnected(let disconnection):
            self.connection = .offline(disconnection.reason)
            self.reconnectAt = nil
            return []
        case .reconnecting(let delay):
            self.reconnectAt = now.addingTimeInterval(
                Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18
            )
            return []
        case .message(let message):
            let added = self.add(message)
            let key = Self.key(message.conversation)
            self.threads[key]?.typing[message.from.lowercased()] = nil
            guard added, message.from.lowercased() != self.me.lowercased() else { return [] }
            if key == self.open {
                let readUpTo = self.threads[key]?.readUpTo ?? 0
                self.threads[key]?.readUpTo = max(readUpTo, message.seq)
                return [.markRead(message.conversation, upToSeq: message.seq)]
            }
            self.threads[key]?.unread += 1
            return []
        case .sent(let id, let conversation, let seq, let time):
            let key = Self.key(conversation)
            guard let index = self.threads[key]?.lines.firstIndex(where: { $0.id == id }) else { return [] }
            self.threads[key]?.lines[index].seq = seq
            self.threads[key]?.lines[index].time = time
            self.threads[key]?.lines.sort(by: Self.order)
            return []
        case .sendFailed(let id, let code, let message):
            for key in self.threads.keys {
                guard let index = self.threads[key]?.lines.firstIndex(where: { $0.id == id }) else { continue }
                self.threads[key]?.lines[index].failure = code
            }
            self.notice = "not sent: \(code): \(message)"
            return []
        case .receipt(let conversation, let user, let read, let upToSeq):
            let key = Self.key(conversation)
            let member = user.lowercased()
            if member == self.me.lowercased() {
                // Read on another of this user's devices.
                if read, let thread = self.threads[key] {
                    self.threads[key]?.readUpTo = max(thread.readUpTo, upToSeq)
                    if upToSeq >= thread.lastSeq { self.threads[key]?.unread = 0 }
                }
                return []
            }
            var thread = self[thread: conversation]
            if read {
                thread.read[member] = max(thread.read[member] ?? 0, upToSeq)
            }
            thread.delivered[member] = max(thread.delivered[member] ?? 0, upToSeq)
            self.threads[key] = thread
            return []
        case .recalled(let conversation, let seq, _, _):
            let key = Self.key(conversation)
            if let index = self.threads[key]?.lines.firstIndex(where: { $0.seq == seq }) {
                self.threads[key]?.lines[index].recalled = true
                self.threads[key]?.lines[index].text = ""
            }
            return []
        case .membership(let group, let user, let joined):
            let key = Self.key(.group(group))
            if user.lowercased() == self.me.lowercased(), joined, self.threads[key] == nil {
                self.threads[key] = Thread(conversation: .group(group))
            }
            self.notice = "\(user) \(joined ? "joined" : "left") #\(group)"
            return []
        case .typing(let conversation, let user, let typing):
            guard user.lowercased() != self.me.lowercased() else { return [] }
            self[thread: conversation].typing[user.lowercased()] =
                typing ? now.addingTimeInterval(Self.typingShownFor) : nil
            return []
        case .presence(let user, let online, _):
            self.online[user.lowercased()] = online
            return []
        }
    }

    /// Forgets typing notices that were not renewed in time.
    mutating func expire(now: Date) {
        for (key, thread) in self.threads where !thread.typing.isEmpty {
            self.threads[key]?.typing = thread.typing.filter { $0.value > now }
        }
    }

    /// Adds a message the server has, once; returns whether it was new.
    @discardableResult
    private mutating func add(_ message: ChatMessage) -> Bool {
        var thread = self[thread: message.conversation]
        defer { self.threads[Self.key(message.conversation)] = thread }
        if let index = thread.lines.firstIndex(where: { $0.seq == message.seq || $0.id == message.id }) {
            // Ours, acknowledged before its event was read; or a recall seen in a later page.
            thread.lines[index].seq = message.seq
            thread.lines[index].time = message.time
            thread.lines[index].recalled = message.recalled
            if message.recalled { thread.lines[index].text = "" }
            thread.lines.sort(by: Self.order)
            return false
        }
        thread.lines.append(
            Line(
                id: message.id,
                from: message.from,
                seq: message.seq,
                time: message.time,
                text: message.recalled ? "" : message.media.map(Self.describe) ?? message.text,
                recalled: message.recalled
            )
        )
        thread.lines.sort(by: Self.order)
        return true
    }

    /// Acknowledged messages by sequence number, then waiting ones (in the order written: the sort is stable).
    private static func order(_ a: Line, _ b: Line) -> Bool {
        switch (a.seq, b.seq) {
        case (let x?, let y?): x < y
        case (.some, nil): true
        default: false
        }
    }

    /// The thread of a conversation, made if new.
    private subscript(thread conversation: Conversation) -> Thread {
        get { self.threads[Self.key(conversation), default: Thread(conversation: conversation)] }
        set { self.threads[Self.key(conversation)] = newValue }
    }
}

/// What the chat asks to be done.
enum ChatAction: Hashable {
    case send(id: String, text: String, to: Conversation)
    /// Send a file as a media message (its line, with this id, shows the upload).
    case sendFile(id: String, path: String, to: Conversation)
    case markRead(Conversation, upToSeq: UInt64)
    case typing(Bool, Conversation)
    case loadHistory(Conversation, beforeSeq: UInt64)
    case refreshUnread
    case redraw
    case quit
}
