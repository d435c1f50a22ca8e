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
        /// The file the message carries, if it does (`/save`, `/view`).
        var media: MediaInfo?
        var recalled = false
        /// Why the server refused it, if it did.
        var failure: String?
        /// Whether its sender edited it.
        var edited = false
        /// The message it answers.
        var replyTo: ChatReply?
        /// Its reactions, each key once, the first given first.
        var reactions: [ChatReaction] = []
    }

    /// A line in a group's history from its events: who joined or left, what it was named.
    struct Notice: Hashable {
        /// The newest message before it.
        var afterSeq: UInt64
        var text: String
    }

    /// A conversation as the chat holds it.
    struct Thread {
        var conversation: Conversation
        /// Acknowledged messages by sequence number, then those waiting in the outbox, in order written.
        var lines: [Line] = []
        /// Membership and title lines heard while the chat runs (the newest ``maxNotices``).
        var notices: [Notice] = []
        var unread: UInt64 = 0
        /// Up to where each other member's devices received and read the conversation, by lowercased name.
        var delivered: [String: UInt64] = [:]
        var read: [String: UInt64] = [:]
        /// Where members joined a group, by lowercased name, as far as this chat knows: their marks count only for
        /// the messages after it.
        var joined: [String: UInt64] = [:]
        /// Who is typing, until when (a typing notice lasts ``ChatState/typingShownFor`` unless renewed).
        var typing: [String: Date] = [:]
        /// Whether a page of history has been asked of the server, and whether older pages remain.
        var historyRequested = false
        var moreHistory = false
        /// Up to where this user has read (as last told to the server).
        var readUpTo: UInt64 = 0
        /// How many unread messages mention this user.
        var mentions: UInt64 = 0
        /// How it alerts this user (``ChatState/bell``).
        var notify: NotifyLevel = .all

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
    /// The conversation open before `/open` made a new one: open again if the server knows no such one.
    var openBefore: String?
    /// Whether the chat opened the open conversation by itself (the next after `/close`): it is shown, but nothing
    /// in it is read (no read receipt goes to its senders) until the user does something in it (``ChatState/handle(_:now:)``).
    var glancing = false
    var input = LineEditor()
    /// How many rows the open conversation is scrolled up from its newest message.
    var scroll = 0
    var connection = Connection.connecting
    /// When the client tries to connect again, while offline.
    var reconnectAt: Date?
    /// Users seen online (true) or offline, by lowercased name. While this side is offline, everyone shows offline.
    var online: [String: Bool] = [:]
    /// When users were last seen online, by lowercased name, as the server said.
    var lastSeen: [String: Date] = [:]
    /// Users' display names (by user name, lowercased), as their profiles say.
    var displayNames: [String: String] = [:]
    /// The users whose profiles say they are bots, by lower-cased name.
    var bots: Set<String> = []
    /// Groups' titles, by key, as the server said them.
    var titles: [String: String] = [:]
    /// The users whose profiles were asked for (by user name, lowercased): each once.
    var profilesAsked: Set<String> = []
    /// When each profile known here last changed, as the server said.
    var profilesUpdated: [String: Date] = [:]
    /// Conversations closed with `/close`, by key, with their newest sequence number then: hidden from the list
    /// until a newer message comes (or `/open`).
    var closed: [String: UInt64] = [:]
    /// Whether the help (keys and commands) covers the open conversation, until the next key.
    var helpShown = false
    /// A one-line notice shown above the input (an error, what a command did); cleared by the next key.
    var notice: String?
    /// The terminal's size; the screen lays out to it.
    var columns = 80
    var rows = 24
    /// The files `/send` is uploading: message id → file name.
    var uploads: [String: String] = [:]
    /// When this user last said it is typing, and where.
    var typingSent: (conversation: Conversation, at: Date)?
    /// The message of ours the line edits (↑ on an empty line, `/edit`), if it does.
    var editing: Editing?
    /// The message the next line sent answers (`/reply`), if any.
    var replying: Replying?
    /// The message highlighted in the open conversation (`/reply`, `/react`, a search result), if one is.
    var picking: Picking?
    /// A search's results, shown in place of the open conversation (`/search`).
    var search: SearchView?
    /// How many searches were made: each one's number.
    var searches = 0
    /// A search result being opened, while its conversation's history loads back to it.
    var jump: Jump?

    /// How long a typing notice shows without a renewal, and how often ours is renewed while typing.
    static let typingShownFor: TimeInterval = 6
    static let typingRenewal: TimeInterval = 3
    /// The messages asked of the server when a conversation opens or scrolls past its oldest.
    static let historyPage = 50
    /// The search results asked of the server at a time.
    static let searchPage = 20

    init(me: String, server: String) {
        self.me = me
        self.server = server
    }

    static func key(_ conversation: Conversation) -> String {
        conversation.description.lowercased()
    }

    /// The conversations in the order listed: the most recently active first; closed ones not (the open one
    /// always).
    var ordered: [Thread] {
        self.threads.values.filter { thread in
            let key = Self.key(thread.conversation)
            return key == self.open || self.closed[key].map { thread.lastSeq > $0 } ?? true
        }.sorted {
            ($0.lastActivity, Self.key($1.conversation)) > ($1.lastActivity, Self.key($0.conversation))
        }
    }

    /// Whether this user wrote a line (ours are labelled "you").
    func isMine(_ line: Line) -> Bool {
        line.from.lowercased() == self.me.lowercased()
    }

    var openThread: Thread? { self.open.flatMap { self.threads[$0] } }

    /// The server knows no such user or group: a conversation the chat made for it (`/open NAME`, nothing in it)
    /// leaves the list, and the chat says so.
    mutating func noSuchConversation(_ conversation: Conversation) {
        let key = Self.key(conversation)
        self.notice =
            switch conversation {
            case .user(let name): "no such user: \(name)"
            case .group(let name): "no such group: #\(name)"
            }
        guard let thread = self.threads[key], thread.lines.isEmpty else { return }
        self.threads[key] = nil
        if self.open == key { self.open = self.openBefore.flatMap { self.threads[$0] == nil ? nil : $0 } }
    }

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
                    text: message.media.map(ChatText.describe) ?? message.text,
                    media: message.media
                )
            )
        }
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
            self.threads[key]!.lines[index].text = ChatText.describe(media)
            self.threads[key]!.lines[index].media = media
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

    /// Merges a page of history from the server, with how far the other members received and read it (so a chat
    /// started afresh shows "read by 3" as the one that saw the receipts did); the open conversation is then read up
    /// to its newest message.
    mutating func merge(
        history messages: [ChatMessage],
        more: Bool,
        receipts: [ReceiptMark] = [],
        of conversation: Conversation,
        before: UInt64 = 0,
        now: Date = Date()
    ) -> [ChatAction] {
        for message in messages {
            self.add(message)
        }
        let key = Self.key(conversation)
        var thread = self[thread: conversation]
        thread.moreHistory = more
        for mark in receipts {
            let name = mark.user.lowercased()
            if mark.joinedSeq > 0 { thread.joined[name] = max(thread.joined[name] ?? 0, mark.joinedSeq) }
            thread.delivered[name] = max(thread.delivered[name] ?? 0, mark.deliveredSeq, mark.readSeq)
            thread.read[name] = max(thread.read[name] ?? 0, mark.readSeq)
        }
        var actions: [ChatAction] = []
        if key == self.open, !self.glancing, thread.lastSeq > thread.readUpTo {
            thread.readUpTo = thread.lastSeq
            thread.unread = 0
            thread.mentions = 0
            actions.append(.markRead(conversation, upToSeq: thread.lastSeq))
        }
        self.threads[key] = thread
        if let jump = self.jump, Self.key(jump.conversation) == key {
            actions += self.continueJump(answering: before, now: now)
        }
        return actions
    }

    /// Sets the unread counts the server reported (on each connection).
    /// The server's counts, and in direct conversations how far the other user received and read: the receipts
    /// shown come from the server, whatever this chat saw (it may have been closed, or its store made afresh).
    mutating func setUnread(_ counts: [UnreadCount]) {
        for count in counts {
            let key = Self.key(count.conversation)
            let reading = key == self.open && !self.glancing
            self[thread: count.conversation].unread = reading ? 0 : count.unread
            self[thread: count.conversation].mentions = reading ? 0 : count.mentions
            self[thread: count.conversation].notify = count.notify
            if case .group = count.conversation { self.titles[key] = count.title.isEmpty ? nil : count.title }
            guard case .user(let peer) = count.conversation else { continue }
            let name = peer.lowercased()
            var thread = self[thread: count.conversation]
            thread.delivered[name] = max(thread.delivered[name] ?? 0, count.peerDeliveredSeq, count.peerReadSeq)
            thread.read[name] = max(thread.read[name] ?? 0, count.peerReadSeq)
            self[thread: count.conversation] = thread
        }
    }

    // MARK: Events

    mutating func apply(_ event: ClientEvent, now: Date) -> [ChatAction] {
        switch event {
        case .connected:
            self.connection = .connected
            var actions: [ChatAction] = [.refreshUnread]
            guard let thread = self.openThread else { return actions }
            // Read marks made while offline were not delivered: say again how far the open one is read.
            if thread.lastSeq > 0, !self.glancing {
                actions.append(.markRead(thread.conversation, upToSeq: thread.lastSeq))
            }
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
            // Nobody can be seen online from here while offline; presence comes again on connecting.
            for user in self.online.keys { self.online[user] = false }
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
            // A closed conversation comes back with its next message.
            var reopened: [ChatAction] = []
            if let closedAt = self.closed[key], message.seq > closedAt {
                self.closed[key] = nil
                reopened = [.closedChanged(self.closed)]
            }
            guard added, message.from.lowercased() != self.me.lowercased() else { return reopened }
            if key == self.open, !self.glancing {
                let readUpTo = self.threads[key]?.readUpTo ?? 0
                self.threads[key]?.readUpTo = max(readUpTo, message.seq)
                return reopened + [.markRead(message.conversation, upToSeq: message.seq)]
            }
            self.threads[key]?.unread += 1
            let level = self.threads[key]?.notify ?? .all
            if case .group = message.conversation, message.mentions.mention(self.me) {
                self.threads[key]?.mentions += 1
            }
            return reopened + (CourierClient.alerts(message, user: self.me, level: level) ? [.bell] : [])
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
                    if upToSeq >= thread.lastSeq {
                        self.threads[key]?.unread = 0
                        self.threads[key]?.mentions = 0
                    }
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
            self.forget(seq, in: key)
            if let index = self.threads[key]?.lines.firstIndex(where: { $0.seq == seq }) {
                self.threads[key]?.lines[index].recalled = true
                self.threads[key]?.lines[index].text = ""
                self.threads[key]?.lines[index].media = nil
            }
            return []
        case .edited(let message):
            // Only a message the chat shows changes: an edit is never a new line.
            let key = Self.key(message.conversation)
            if let index = self.threads[key]?.lines.firstIndex(where: { $0.seq == message.seq }),
                !message.recalled
            {
                self.threads[key]?.lines[index].text = message.media.map(ChatText.describe) ?? message.text
                self.threads[key]?.lines[index].media = message.media
                self.threads[key]?.lines[index].edited = true
            }
            // The replies quoting it quote it as it now reads.
            for index in self.threads[key]?.lines.indices ?? 0..<0
            where self.threads[key]?.lines[index].replyTo?.seq == message.seq && !message.recalled {
                self.threads[key]?.lines[index].replyTo?.text = message.text
                self.threads[key]?.lines[index].replyTo?.media = message.media
            }
            return []
        case .reaction(let change):
            let key = Self.key(change.conversation)
            guard let index = self.threads[key]?.lines.firstIndex(where: { $0.seq == change.seq }) else { return [] }
            // Counted from the events: what the server counted is in the next page of history.
            self.threads[key]?.lines[index].reactions.apply(
                change,
                mine: change.user.lowercased() == self.me.lowercased()
            )
            return []
        case .membership(let group, let user, let joined):
            let key = Self.key(.group(group))
            if user.lowercased() == self.me.lowercased(), joined {
                // Joined (again): a new membership alerts on everything until muted.
                if self.threads[key] == nil { self.threads[key] = Thread(conversation: .group(group)) }
                self.threads[key]?.notify = .all
            }
            // Joined after the newest message known here: what the newcomer's marks say counts from there on.
            if joined, let thread = self.threads[key] {
                self.threads[key]?.joined[user.lowercased()] = thread.lastSeq
            }
            self.notice = "\(user) \(joined ? "joined" : "left") #\(group)"
            let who = user.lowercased() == self.me.lowercased() ? "you" : self.shown(user)
            self.addNotice("\(who) \(joined ? "joined" : "left")", to: .group(group))
            return []
        case .typing(let conversation, let user, let typing):
            // Shown in a conversation this chat knows (one just opened, with nothing in it yet, too); a notice never
            // puts a conversation in the list by itself.
            guard user.lowercased() != self.me.lowercased(),
                self.threads[Self.key(conversation)] != nil || self.open == Self.key(conversation)
            else { return [] }
            self[thread: conversation].typing[user.lowercased()] =
                typing ? now.addingTimeInterval(Self.typingShownFor) : nil
            return []
        case .presence(let user, let online, let lastSeen):
            self.online[user.lowercased()] = online
            if let lastSeen { self.lastSeen[user.lowercased()] = lastSeen }
            return []
        case .profile(let profile):
            self.setProfiles([profile])
            return []
        case .role(let group, let user, let role):
            let who = user.lowercased() == self.me.lowercased() ? "you are" : "\(user) is"
            self.notice =
                switch role {
                case .owner: "\(who) now the owner of #\(group)"
                case .admin: "\(who) now an admin of #\(group)"
                case .member: "\(who) no longer an admin of #\(group)"
                }
            return []
        case .groupTitle(let group, let title, let by):
            let key = Self.key(.group(group))
            self.titles[key] = title.isEmpty ? nil : title
            let printable = ChatText.printable(title)
            let who = by.isEmpty ? "the administrator" : self.shown(by)
            self.notice =
                title.isEmpty ? "\(who) took the title of #\(group) away" : "\(who) named #\(group) “\(printable)”"
            self.addNotice(
                title.isEmpty ? "\(who) took the group's title away" : "\(who) named the group “\(printable)”",
                to: .group(group)
            )
            return []
        case .notify(let conversation, let level):
            self[thread: conversation].notify = level
            return []
        case .pinned(let conversation, let seq, _, let by, let pinned):
            // Said where it is seen: in the open conversation.
            if let open = self.openThread, Self.key(open.conversation) == Self.key(conversation) {
                let who = by.lowercased() == self.me.lowercased() ? "you" : ChatText.printable(by)
                self.notice = "\(who) \(pinned ? "pinned" : "unpinned") message \(seq)"
            }
            return []
        case .hidden(let conversation, let seq):
            // Deleted for this user: gone from its screen (an edit of it ends; the others keep it, so no quote of
            // it is touched).
            let key = Self.key(conversation)
            if let editing = self.editing, editing.seq == seq, Self.key(editing.conversation) == key {
                self.editing = nil
                _ = self.input.take()
            }
            self.threads[key]?.lines.removeAll { $0.seq == seq }
            return []
        }
    }

    /// A message recalled: an edit, a pick or a reply of it ends (a reply whose line is sent goes on: its quote shows
    /// the recall).
    private mutating func forget(_ seq: UInt64, in key: String) {
        if let editing = self.editing, editing.seq == seq, Self.key(editing.conversation) == key {
            self.editing = nil
            _ = self.input.take()
            self.notice = "the message you were editing was recalled"
        }
        if let picking = self.picking, picking.seq == seq, key == self.open { self.picking = nil }
        if let replying = self.replying, replying.quote.seq == seq, Self.key(replying.conversation) == key {
            self.replying = nil
            self.notice = "the message you were answering was recalled"
        }
        for index in self.threads[key]?.lines.indices ?? 0..<0
        where self.threads[key]?.lines[index].replyTo?.seq == seq {
            self.threads[key]?.lines[index].replyTo?.recalled = true
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
            if thread.lines[index].media == nil { thread.lines[index].media = message.media }
            if thread.lines[index].replyTo == nil { thread.lines[index].replyTo = message.replyTo }
            // A page of history is newer news than what the line holds: its text as edited, its reactions.
            if message.edited != nil, !message.recalled {
                thread.lines[index].edited = true
                thread.lines[index].text = message.media.map(ChatText.describe) ?? message.text
                thread.lines[index].media = message.media
            }
            if !message.reactions.isEmpty { thread.lines[index].reactions = message.reactions }
            if message.recalled {
                thread.lines[index].text = ""
                thread.lines[index].media = nil
            }
            thread.lines.sort(by: Self.order)
            return false
        }
        thread.lines.append(
            Line(
                id: message.id,
                from: message.from,
                seq: message.seq,
                time: message.time,
                text: message.recalled ? "" : message.media.map(ChatText.describe) ?? message.text,
                media: message.recalled ? nil : message.media,
                recalled: message.recalled,
                edited: message.edited != nil,
                replyTo: message.replyTo,
                reactions: message.reactions
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

    /// The most membership and title lines a thread keeps.
    static let maxNotices = 100

    /// A membership or title line after the thread's newest message.
    mutating func addNotice(_ text: String, to conversation: Conversation) {
        var thread = self[thread: conversation]
        thread.notices.append(Notice(afterSeq: thread.lastSeq, text: text))
        if thread.notices.count > Self.maxNotices { thread.notices.removeFirst(thread.notices.count - Self.maxNotices) }
        self[thread: conversation] = thread
    }

    /// The thread of a conversation, made if new.
    subscript(thread conversation: Conversation) -> Thread {
        get { self.threads[Self.key(conversation), default: Thread(conversation: conversation)] }
        set { self.threads[Self.key(conversation)] = newValue }
    }
}

/// What the chat asks to be done.
enum ChatAction: Hashable {
    case send(id: String, text: String, to: Conversation)
    /// Send a text answering the message `replyTo` of the same conversation.
    case sendReply(id: String, text: String, to: Conversation, replyTo: UInt64)
    /// Replace the text of one of this user's messages (`/edit`, ↑).
    case edit(MessageReference, text: String)
    /// Put a reaction on a message, or take it off (`/react`).
    case react(MessageReference, key: String, on: Bool)
    /// Ask for a page of search results (`/search`, its `number`): the newest first, or those before `before`.
    case search(String, before: UInt64, number: Int)
    /// Send a file as a media message (its line, with this id, shows the upload).
    case sendFile(id: String, path: String, to: Conversation)
    case markRead(Conversation, upToSeq: UInt64)
    case typing(Bool, Conversation)
    case loadHistory(Conversation, beforeSeq: UInt64)
    /// Ask for these users' profiles (their display names).
    case loadProfiles([String])
    case refreshUnread
    /// Recall one of this user's messages.
    case recall(id: String, in: Conversation)
    /// Save a file (to a path given, else to the downloads folder), or open it with the system's opener.
    case save(MediaInfo, to: String?)
    case view(MediaInfo)
    /// The closed conversations changed: keep them for the next chat.
    case closedChanged([String: UInt64])
    /// A change to a group (`/group`).
    case manageGroup(GroupChange)
    /// How a conversation alerts this user (`/mute`).
    case setNotify(Conversation, NotifyLevel)
    /// Block a user, or unblock it (`/block`, `/block --off`).
    case setBlocked(String, Bool)
    /// This user's display name (`/name`).
    case setDisplayName(String)
    /// Ring the terminal's bell: a message that alerts came.
    case bell
    case redraw
    case quit
}

/// What `/group` asks of the server.
enum GroupChange: Hashable {
    case create(String, members: [String])
    case add(String, [String])
    case remove(String, [String])
    case promote(String, [String])
    case demote(String, [String])
    case transfer(String, to: String)
    case leave(String)
    /// Leave every group a user put this one in.
    case leaveFrom(String)
    case members(String)
    case title(String, String)
}
