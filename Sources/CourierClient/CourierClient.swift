import CourierProtocol
import CourierWire
public import Foundation
public import Logging
import NIOCore
import NIOPosix
public import NIOSSL
public import ServiceLifecycle
import Synchronization

/// A Courier client: connects to a server's native port, keeps a local SQLite outbox and message store, and
/// reconnects with a jittered backoff until stopped.
///
/// Call ``run()`` (or run it as a ServiceLifecycle service: a graceful shutdown stops it) and read ``events``.
/// ``send(_:to:id:)`` writes a message to the outbox first: it is sent whenever the client is connected, resent with
/// the same id after a reconnect or a restart of the process until the server acknowledges it, and the server never
/// stores it twice.
///
/// Several clients may share one local store, in one process or in several (a chat window and commands run beside
/// it): they are one device of the user, with a connection each. Each client sends the messages written through it,
/// takes over those of a client that is gone (a process that ended before they were acknowledged), and reports
/// every message of the user's event log it receives, the user's own from the other clients included.
public final class CourierClient: Service, Sendable {
    /// Settings of a client.
    public struct Configuration: Sendable {
        public enum Credentials: Sendable {
            case password(user: String, password: String)
            case token(String)
            /// Makes the account (where the server takes sign-ups: `invite` is the invitation's token where it takes
            /// them by invitation), then goes on as a password login would: the client holds the new device's
            /// token and forgets the password. A sign-up the server refuses (`name-taken`, `invite-expired`, …)
            /// ends ``CourierClient/run()`` with ``ClientEvent/loginRefused(code:message:)``, as does one retried
            /// after a connection lost before the server's answer, when that answer would have made the account
            /// (`name-taken`): log in with the password then.
            case signUp(user: String, password: String, invite: String?)
        }

        public var host: String
        public var port: Int
        /// How to log in the first time; afterwards the client uses the token it stored. A password is kept only
        /// until the client's first login succeeds: it never holds it after, and never uses it to come back as a new
        /// device once its own was revoked. A stored token revoked (or expired, once the password is gone) ends
        /// ``CourierClient/run()`` with ``ClientEvent/loginRefused(code:message:)``: the app asks its user for the
        /// password again.
        public var credentials: Credentials
        /// Log in with the configured password even when the store holds a token (`courier login`): the device the
        /// stored token names is renewed (it gets a new token, and stays one device) unless it was revoked, in which
        /// case the login makes a new device. A refused password leaves the stored token as it was.
        public var passwordFirst: Bool = false
        /// Whether the device token is kept in the store (an app's one place for it, read by the next client of
        /// the store). False for a host that keeps it itself (the `courier` command's token file): the token lives
        /// in memory only, a token an earlier version stored there is forgotten, and a client whose host has no
        /// token logs in with the password, which the server checks.
        public var storesToken: Bool = true
        /// With ``storesToken`` false: a token the host holds for this client's device (an expired one too), so
        /// that a password login renews that device instead of making another.
        public var renewing: String?
        /// Where the local database lives (created if missing). Clients of one user on one machine may share it.
        public var storePath: String
        public var deviceName: String = "courier-client"
        /// Whether to receive typing and presence notices.
        public var ephemeral: Bool = false
        /// Whether to receive the user's events (messages, receipts, recalls). False for a client that only sends
        /// and asks, beside another client of the same store that receives them: the server then sends it none, and
        /// ``ClientEvent/caughtUp`` never comes.
        public var receivesEvents: Bool = true
        /// How long a write to the local store may wait for other processes' writes to the same store.
        public var storeBusyTimeout: Duration = .seconds(60)
        /// How often a connected client looks for outbox messages of clients that are gone (a process killed, or
        /// one that stopped before its messages were acknowledged), and sends them. It also looks on connecting.
        public var takeoverInterval: Duration = .seconds(5)
        /// The first reconnect delay; each failure doubles it up to `maxBackoff`, and each delay is drawn at
        /// random between zero and it (full jitter).
        public var minBackoff: Duration = .milliseconds(100)
        public var maxBackoff: Duration = .seconds(10)
        /// How long a connection attempt may take.
        public var connectTimeout: Duration = .seconds(5)
        /// TLS to the server, or nil (the default) for plain TCP. `TLSConfiguration.makeClientConfiguration()`
        /// verifies the server's certificate against the system's roots; set `trustRoots` for a private CA.
        public var tls: TLSConfiguration? = nil
        /// The name the server's certificate must carry (and SNI sends). Nil: `host` when it is a name; when it is
        /// an IP address, the certificate must list that address.
        public var tlsServerName: String? = nil
        /// Where downloaded media is kept; nil: beside the store, in `<storePath>.media/`.
        public var mediaFolder: String? = nil
        /// The most bytes of downloaded media kept on disk; the least recently used files go first.
        public var mediaCacheBytes: Int64 = 512 * 1024 * 1024
        /// The most bytes of small media (thumbnails, voice clips) kept in memory, and the largest file kept there.
        public var memoryCacheBytes: Int = 16 * 1024 * 1024
        public var memoryCacheItemBytes: Int = 512 * 1024
        /// The window a download grants the server: the most bytes of one file in flight to this client.
        public var fetchWindowBytes: Int = 4 * 1024 * 1024

        public init(host: String = "127.0.0.1", port: Int = 6970, credentials: Credentials, storePath: String) {
            self.host = host
            self.port = port
            self.credentials = credentials
            self.storePath = storePath
        }
    }

    /// What happens, in order. Single consumer.
    public let events: AsyncStream<ClientEvent>
    private let eventSink: AsyncStream<ClientEvent>.Continuation
    let configuration: Configuration
    let store: ClientStore
    /// This client's mark among the clients of its store: the outbox rows it sends carry its id.
    let instance: InstanceLock
    /// Where the marks of the store's clients are.
    let instancesFolder: URL
    let logger: Logger
    /// Acknowledged sends waiting for their bookkeeping (see `recordAcknowledgements()`).
    let acknowledgements = Handoff<ClientStore.Acknowledgement>()
    /// The TLS context, when configured: made once, as it holds the parsed trust roots.
    let tls: NIOSSLContext?
    let state = Mutex(State())
    /// Downloaded media: files on disk, small ones also in memory.
    let media: MediaFileCache

    struct State {
        var link: Link?
        var stopped = false
        /// Tasks waiting for a connection (``waitForLink(after:)``), woken by the next one or by the stop.
        var linkWaiters: [Int: CheckedContinuation<Link, any Error>] = [:]
        var nextLinkWaiter = 0
        var user: String?
        var outboxSignal: CheckedContinuation<Void, Never>?
        var outboxDirty = false
        /// The cursor up to which this client has received (and stored) events; nil before its first page. It
        /// starts the next connection, whatever other clients of the store have stored meanwhile: this client
        /// reports every event after it.
        var cursor: UInt64?
        /// Sends acknowledged whose local bookkeeping is under way: not sent again meanwhile.
        var recording: Set<String> = []
        /// Sends refused with a retryable code, and when to send them again.
        var retries: [String: ContinuousClock.Instant] = [:]
        /// The newest messages this client sent, on any of its connections: their events, should the server pass
        /// them back, are reported by `.sent` (or as taken over), not as messages.
        var sentByThisClient = RecentSet<String>(capacity: CourierClient.recentSends)
        /// Whether a password login succeeded (with ``Configuration/passwordFirst``, the first does).
        var passwordLoginDone = false
        /// The configured password, until the first login succeeds (nil for a token, and once one did).
        var password: (user: String, password: String)?
        /// The configured invitation of a sign-up, until it succeeds.
        var invite: String?
        /// Sign-up hellos sent; and whether the next attempt logs in with the password instead (an earlier one may
        /// have made the account).
        var signUpsSent = 0
        var signUpAsLogin = false
        /// Why the stored token stopped working, if it did (the code the server said).
        var signedOut: String?
        /// A stored token the server refused as expired: the password login that follows renews its device.
        var expiredToken: String?
        /// The device token, where the store does not keep it (``Configuration/storesToken`` false).
        var token: String?
        /// Whether a token an earlier version left in the store has been forgotten.
        var tokenPurged = false
        /// Messages taken back by ``withdraw(id:)`` before they were sent: never sent now.
        var withdrawn: Set<String> = []
        /// Outbox messages taken over from clients of the store that are gone: reported, once acknowledged, as
        /// messages of the user's (this client did not write them), with what they hold.
        var takenOver: [String: ClientStore.OutboxEntry] = [:]
    }

    /// How many of its newest sends a client remembers as its own.
    static let recentSends = 4096

    /// Opens the local store (creating it if needed) and marks this client alive among its clients.
    ///
    /// - Throws: if the local database cannot be opened, or `NIOSSLError` if the TLS configuration is unusable.
    public init(configuration: Configuration, logger: Logger = Logger(label: "courier.client")) throws {
        // The password lives in the state only, to be dropped once used; the configuration kept has none.
        var kept = configuration
        switch configuration.credentials {
        case .password(let user, let password):
            self.state.withLock { $0.password = (user, password) }
            kept.credentials = .password(user: user, password: "")
        case .signUp(let user, let password, let invite):
            self.state.withLock {
                $0.password = (user, password)
                $0.invite = invite
            }
            kept.credentials = .signUp(user: user, password: "", invite: nil)
        case .token:
            break
        }
        self.configuration = kept
        self.logger = logger
        self.tls = try configuration.tls.map { try NIOSSLContext(configuration: $0) }
        self.store = try ClientStore(path: configuration.storePath, busyTimeout: configuration.storeBusyTimeout)
        self.instancesFolder = URL(fileURLWithPath: configuration.storePath + ".clients", isDirectory: true)
        self.instance = try InstanceLock(folder: self.instancesFolder)
        // This client reports the events after where the store stands now: what is stored is the app's to load.
        let cursor = try self.store.storedCursor()
        self.state.withLock { $0.cursor = cursor }
        self.media = try MediaFileCache(
            folder: URL(fileURLWithPath: configuration.mediaFolder ?? configuration.storePath + ".media"),
            maxBytes: configuration.mediaCacheBytes,
            memoryBytes: configuration.memoryCacheBytes,
            memoryItemBytes: configuration.memoryCacheItemBytes
        )
        (self.events, self.eventSink) = AsyncStream.makeStream(of: ClientEvent.self)
    }

    func emit(_ event: ClientEvent) {
        self.eventSink.yield(event)
    }

    func finishEvents() {
        self.eventSink.finish()
    }

    // MARK: The public calls

    /// Writes a text to the outbox and returns its id; ``ClientEvent/sent(id:conversation:seq:time:)`` follows
    /// once the server has committed it.
    ///
    /// - Parameters:
    ///   - text: The text.
    ///   - conversation: Where to.
    ///   - id: The message id (at most 128 bytes); by default a new UUID.
    ///   - replyTo: The message it answers, in the same conversation (one this user can see, not recalled).
    @discardableResult
    public func send(
        _ text: String,
        to conversation: Conversation,
        id: String = UUID().uuidString,
        replyTo: ReplyTarget? = nil
    ) async throws
        -> String
    {
        try await self.store.enqueue(
            [.init(id: id, conversation: conversation, text: text, replyTo: replyTo)],
            instance: self.instance.id
        )
        self.outboxChanged()
        return id
    }

    /// Writes many texts to the outbox in one local transaction, in order, and returns their ids.
    @discardableResult
    public func send(contentsOf messages: [(text: String, conversation: Conversation)]) async throws -> [String] {
        let entries = messages.map {
            ClientStore.OutboxEntry(id: UUID().uuidString, conversation: $0.conversation, text: $0.text)
        }
        try await self.store.enqueue(entries, instance: self.instance.id)
        self.outboxChanged()
        return entries.map(\.id)
    }

    /// Takes a message written through this client back out of the outbox, if it has not been sent yet: then it
    /// never is. A message sent already (on any connection) stays, and may be stored by the server.
    ///
    /// - Returns: Whether the message was withdrawn.
    public func withdraw(id: String) async throws -> Bool {
        let unsent = self.state.withLock { state -> Bool in
            guard !state.sentByThisClient.contains(id) else { return false }
            state.withdrawn.insert(id)
            return true
        }
        guard unsent else { return false }
        return try await self.store.remove(id: id, of: self.instance.id)
    }

    /// The device token the server gave this client's store at its last password login, if it still holds one.
    public func deviceToken() async throws -> String? {
        try await self.heldToken()
    }

    /// Forgets the stored device token: the next connection logs in with the configured credentials (a password
    /// login makes a new device).
    public func forgetDeviceToken() async throws {
        self.state.withLock { $0.token = nil }
        try await self.store.setValue(nil, for: "token")
    }

    /// The device token this client holds: the store's, or with ``Configuration/storesToken`` false the one in
    /// memory (and none is left in the store).
    func heldToken() async throws -> String? {
        guard self.configuration.storesToken else {
            // A token an earlier version stored is forgotten, once.
            if self.state.withLock({ state in
                defer { state.tokenPurged = true }
                return !state.tokenPurged
            }) {
                try await self.store.setValue(nil, for: "token")
            }
            return self.state.withLock { $0.token }
        }
        return try await self.store.value("token")
    }

    /// Keeps the token a welcome gave, where ``Configuration/storesToken`` says.
    func keep(token: String) async throws {
        guard self.configuration.storesToken else {
            self.state.withLock { $0.token = token }
            return
        }
        try await self.store.setValue(token, for: "token")
    }

    /// Forgets a refused token, unless another client of the store has put a new one there meanwhile.
    func forget(token: String) async throws {
        guard self.configuration.storesToken else {
            self.state.withLock { if $0.token == token { $0.token = nil } }
            return
        }
        try await self.store.forgetToken(token)
    }

    /// The messages not yet acknowledged by the server, oldest first (whichever client of the store sends them).
    public func pendingMessageIDs() async throws -> [String] {
        try await self.store.outbox().map(\.id)
    }

    /// The messages not yet acknowledged by the server, oldest first (whichever client of the store sends them).
    public func pendingMessages() async throws -> [PendingMessage] {
        try await self.store.outbox().map {
            PendingMessage(
                id: $0.id,
                conversation: $0.conversation,
                text: $0.text,
                media: $0.media,
                replyTo: $0.replyTo
            )
        }
    }

    /// The messages this client sends that the server has not acknowledged: those written through it, and those it
    /// took over from clients of the store that are gone (on connecting, before ``ClientEvent/connected(user:)``,
    /// and every `takeoverInterval` after).
    public func sendingMessageIDs() async throws -> [String] {
        try await self.store.outbox(of: self.instance.id, after: 0, limit: .max).map(\.entry.id)
    }

    /// The messages of a conversation stored on this device, oldest first: all of them, or the newest `limit`.
    public func storedMessages(in conversation: Conversation, limit: Int? = nil) async throws -> [ChatMessage] {
        try await self.store.messages(in: conversation, limit: limit)
    }

    /// The newest stored message of every conversation this device holds messages of.
    public func storedConversations() async throws -> [ChatMessage] {
        try await self.store.conversations()
    }

    /// A page of a conversation's history from the server, newest first, with how far the other members received
    /// and read it (the members whose marks reach the page's oldest message; in a large group, the furthest read).
    public func history(
        of conversation: Conversation,
        beforeSeq: UInt64 = 0,
        limit: Int = 50
    ) async throws -> (
        messages: [ChatMessage], more: Bool, receipts: [ReceiptMark]
    ) {
        var envelope = ClientEnvelope()
        envelope.history.conversation = Courier_V1_Conversation(conversation)
        envelope.history.beforeSeq = beforeSeq
        envelope.history.limit = UInt32(clamping: limit)
        let answer = try await self.request(envelope)
        guard case .history(let page)? = answer.body else { throw Self.unexpected(answer) }
        let receipts = page.receipts.map {
            ReceiptMark(
                user: $0.user,
                deliveredSeq: max($0.deliveredSeq, $0.readSeq),
                readSeq: $0.readSeq,
                joinedSeq: $0.joinedSeq
            )
        }
        let messages = page.messages.map(ChatMessage.init)
        // The page is the server's word on these messages now: the store takes their edits, reactions and
        // recalls (a chat started again shows them), and the quotes of replies to messages edited since.
        try await self.store.store(page: messages)
        return (messages, page.more, receipts)
    }

    /// Unread counts of every conversation, most recently active first (asked for a page at a time).
    public func unreadCounts() async throws -> [UnreadCount] {
        var counts: [UnreadCount] = []
        var offset: UInt32 = 0
        while true {
            var envelope = ClientEnvelope()
            envelope.unread.offset = offset
            let answer = try await self.request(envelope)
            guard case .unread(let page)? = answer.body else { throw Self.unexpected(answer) }
            counts += page.entries.map {
                var count = UnreadCount(
                    conversation: Conversation(received: $0.conversation),
                    unread: $0.unread,
                    lastSeq: $0.lastSeq,
                    peerDeliveredSeq: $0.peerDeliveredSeq,
                    peerReadSeq: $0.peerReadSeq
                )
                count.mentions = $0.mentions
                count.notify = NotifyLevel($0.notify) ?? .all
                count.title = $0.title
                return count
            }
            // A server that does not page sends everything at once (no `more`).
            guard page.more, page.nextOffset > offset else { return counts }
            offset = page.nextOffset
        }
    }

    /// Marks a conversation read up to a sequence number.
    public func markRead(_ conversation: Conversation, upToSeq: UInt64) async throws {
        var envelope = ClientEnvelope()
        envelope.markRead.conversation = Courier_V1_Conversation(conversation)
        envelope.markRead.upToSeq = upToSeq
        try Self.expectDone(try await self.request(envelope))
    }

    /// Tells the conversation's connected members that this user is (or stopped) typing.
    public func setTyping(_ typing: Bool, in conversation: Conversation) async throws {
        var envelope = ClientEnvelope()
        envelope.typing.conversation = Courier_V1_Conversation(conversation)
        envelope.typing.typing = typing
        try Self.expectDone(try await self.request(envelope))
    }

    /// Recalls a message this user sent, within the server's recall window.
    public func recall(id: String, in conversation: Conversation) async throws {
        var envelope = ClientEnvelope()
        envelope.recall.conversation = Courier_V1_Conversation(conversation)
        envelope.recall.id = id
        try Self.expectDone(try await self.request(envelope))
    }

    /// Replaces the text of a message this user sent (a media message's caption), within the server's edit window.
    /// Every member's devices get ``ClientEvent/edited(_:)``, this one's too. By id, the message is this user's own.
    public func edit(_ message: MessageReference, text: String) async throws {
        var envelope = ClientEnvelope()
        envelope.edit.message = Courier_V1_MessageRef(message)
        envelope.edit.text = text
        try Self.expectDone(try await self.request(envelope))
    }

    /// Puts a reaction (one emoji, or one short word) on a message, or takes it off (`on` false). Doing it twice is
    /// a success that changes nothing. Every member's devices get ``ClientEvent/reaction(_:)``.
    public func react(_ message: MessageReference, key: String, on: Bool = true) async throws {
        var envelope = ClientEnvelope()
        envelope.react.message = Courier_V1_MessageRef(message)
        envelope.react.key = key
        envelope.react.off = !on
        try Self.expectDone(try await self.request(envelope))
    }

    /// Pins a message of a conversation for every member to see at the top, or unpins it (`on` false): in a group,
    /// only its owner and admins (`not-admin`); in a direct conversation, either side.
    public func pin(_ message: MessageReference, on: Bool = true) async throws {
        var envelope = ClientEnvelope()
        envelope.pin.message = Courier_V1_MessageRef(message)
        envelope.pin.off = !on
        try Self.expectDone(try await self.request(envelope))
    }

    /// A conversation's pinned messages, the most recently pinned first.
    public func pins(in conversation: Conversation) async throws -> [ChatMessage] {
        var envelope = ClientEnvelope()
        envelope.pins.conversation = Courier_V1_Conversation(conversation)
        let answer = try await self.request(envelope)
        guard case .pins(let pinned)? = answer.body else { throw Self.unexpected(answer) }
        return pinned.messages.map(ChatMessage.init)
    }

    /// Deletes a message for this user alone, on all its devices (the others keep it).
    public func hide(_ message: MessageReference) async throws {
        var envelope = ClientEnvelope()
        envelope.hide.message = Courier_V1_MessageRef(message)
        try Self.expectDone(try await self.request(envelope))
    }

    /// The texts an edited message had before, oldest first.
    public func versions(of message: MessageReference) async throws -> [EarlierVersion] {
        var envelope = ClientEnvelope()
        envelope.versions.message = Courier_V1_MessageRef(message)
        let answer = try await self.request(envelope)
        guard case .versions(let versions)? = answer.body else { throw Self.unexpected(answer) }
        return versions.versions.map {
            EarlierVersion(
                version: Int($0.version),
                text: $0.body.text,
                media: $0.body.carriedMedia.map(MediaInfo.init),
                replaced: Date(timeIntervalSince1970: Double($0.replacedMs) / 1000)
            )
        }
    }

    /// The messages this user can see whose text (a caption for media) matches `query`, newest first: every word of
    /// it, and every run of Chinese, Japanese or Korean characters as a whole.
    ///
    /// - Parameters:
    ///   - conversation: Only this one; nil for all.
    ///   - before: The ``SearchResults/next`` of the page before; 0 for the newest.
    public func search(
        _ query: String,
        in conversation: Conversation? = nil,
        before: UInt64 = 0,
        limit: Int = 20
    ) async throws -> SearchResults {
        var envelope = ClientEnvelope()
        envelope.search.query = query
        if let conversation { envelope.search.conversation = Courier_V1_Conversation(conversation) }
        envelope.search.before = before
        envelope.search.limit = UInt32(clamping: limit)
        let answer = try await self.request(envelope)
        guard case .search(let page)? = answer.body else { throw Self.unexpected(answer) }
        return SearchResults(
            results: page.hits.map { hit in
                SearchResult(
                    message: ChatMessage(hit.message),
                    fragment: hit.fragment,
                    marks: hit.marks.map { Int($0.start)..<Int($0.start + $0.length) }
                )
            },
            more: page.more,
            next: page.next
        )
    }

    /// Stops ``run()``: the connection closes and it returns.
    public func stop() {
        let (link, signals) = self.state.withLock { state in
            state.stopped = true
            defer { state.outboxSignal = nil }
            return (state.link, [state.outboxSignal])
        }
        for signal in signals { signal?.resume() }
        self.wakeLinkWaiters(nil)
        link?.close()
    }

    static func expectDone(_ answer: ServerEnvelope) throws {
        guard case .done? = answer.body else { throw Self.unexpected(answer) }
    }

    static func unexpected(_ answer: ServerEnvelope) -> CourierClientError {
        if case .error(let error)? = answer.body {
            return CourierClientError(code: error.code, message: error.message)
        }
        return CourierClientError(code: "invalid-response", message: "unexpected answer \(answer)")
    }

    /// Sends a request on the current connection and waits for its answer.
    func request(_ envelope: ClientEnvelope) async throws -> ServerEnvelope {
        guard let link = self.state.withLock({ $0.link }) else { throw CourierClientError.notConnected }
        return try await link.request(envelope)
    }

    func outboxChanged() {
        let signal = self.state.withLock { state in
            state.outboxDirty = true
            defer { state.outboxSignal = nil }
            return state.outboxSignal
        }
        signal?.resume()
    }
}

extension Conversation {
    /// The conversation the server named (one that names none, which a correct server never sends, reads as a user
    /// with an empty name, which matches nothing).
    init(received conversation: Courier_V1_Conversation) {
        self = Conversation(conversation) ?? .user("")
    }
}

extension ChatMessage {
    init(_ message: Courier_V1_Message) {
        self.init(
            id: message.id,
            from: message.from,
            conversation: Conversation(received: message.conversation),
            seq: message.seq,
            time: Date(timeIntervalSince1970: Double(message.timeMs) / 1000),
            text: message.body.text,
            media: message.body.carriedMedia.map(MediaInfo.init),
            recalled: message.recalled,
            edited: message.editedMs > 0 ? Date(timeIntervalSince1970: Double(message.editedMs) / 1000) : nil,
            replyTo: message.hasReplyTo ? ChatReply(message.replyTo) : nil,
            reactions: message.reactions.map { ChatReaction(key: $0.key, count: Int($0.count), mine: $0.mine) }
        )
        self.pinned = message.pinned
        self.forwardedFrom = message.body.forwardedFrom.isEmpty ? nil : message.body.forwardedFrom
    }
}

extension Courier_V1_MessageRef {
    init(_ reference: MessageReference) {
        self.init()
        switch reference {
        case .seq(let seq, let conversation):
            self.conversation = Courier_V1_Conversation(conversation)
            self.seq = seq
        case .id(let id, let from, let conversation):
            self.id = id
            self.from = from ?? ""
            if let conversation { self.conversation = Courier_V1_Conversation(conversation) }
        }
    }
}

extension ChatReply {
    init(_ reply: Courier_V1_Reply) {
        self.init(
            seq: reply.seq,
            visible: reply.visible,
            id: reply.id,
            from: reply.from,
            text: reply.body.text,
            media: reply.body.carriedMedia.map(MediaInfo.init),
            recalled: reply.recalled
        )
    }
}

extension Courier_V1_Reply {
    init(_ reply: ChatReply) {
        self.init()
        self.seq = reply.seq
        self.visible = reply.visible
        self.id = reply.id
        self.from = reply.from
        self.recalled = reply.recalled
        if let media = reply.media {
            self.body.media = Courier_V1_Media(media)
        } else if !reply.text.isEmpty {
            self.body.text = reply.text
        }
    }
}

extension Courier_V1_Body {
    /// The media, when the body carries media.
    var carriedMedia: Courier_V1_Media? {
        if case .media(let media)? = self.content { return media }
        return nil
    }
}

extension MediaInfo {
    init(_ media: Courier_V1_Media) {
        let kind: Kind =
            switch media.kind {
            case .image: .image
            case .voice: .voice
            case .video: .video
            default: .file
            }
        self.init(
            kind: kind,
            sha256: media.sha256,
            size: Int64(clamping: media.size),
            mime: media.mime,
            name: media.name,
            durationMs: Int(media.durationMs),
            width: Int(media.width),
            height: Int(media.height),
            caption: media.caption
        )
    }
}

extension Courier_V1_Media {
    init(_ media: MediaInfo) {
        self.init()
        switch media.kind {
        case .image: self.kind = .image
        case .voice: self.kind = .voice
        case .video: self.kind = .video
        case .file: self.kind = .file
        }
        self.sha256 = media.sha256
        self.size = UInt64(max(0, media.size))
        self.mime = media.mime
        self.name = media.name
        self.durationMs = UInt32(clamping: media.durationMs)
        self.width = UInt32(clamping: media.width)
        self.height = UInt32(clamping: media.height)
        self.caption = media.caption
    }
}
