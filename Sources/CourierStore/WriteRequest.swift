package import CourierProtocol

/// One durable write of a session: what ``CourierDatabase/apply(_:nowMs:freshRoom:)`` takes many of per transaction,
/// with ``GroupCommit``'s rules.
///
/// A send, an edit and a reaction are boxed (`indirect`): a request is copied at each step of the group commit, and a
/// send's copy retained each of its texts, arrays and tokens.
public enum WriteRequest: Hashable, Sendable {
    /// Store a message and append it to the event log of every member of its conversation.
    indirect case send(Send)
    /// A device has durably stored every event up to a cursor. Messages from others that this newly covers produce
    /// `delivered` receipts for their conversations' other members.
    case ack(user: UserID, device: DeviceID, cursor: UInt64)
    /// A user has read a conversation up to a sequence number; its members (the reader's other devices included)
    /// get a `read` receipt.
    case markRead(user: UserID, conversation: Conversation, upToSeq: UInt64)
    /// The sender withdraws a message for everyone, within the store's recall window.
    case recall(user: UserID, conversation: Conversation, id: String)
    /// The sender replaces a message's text (a media message's caption), within the store's edit window; every
    /// member's log gets the message as it now is.
    indirect case edit(Edit)
    /// A member puts a reaction on a message or takes it off; every member's log gets the change.
    indirect case react(React)

    /// A new text for a message.
    public struct Edit: Hashable, Sendable {
        public var user: UserID
        public var device: DeviceID?
        /// The message: its conversation as the user names it, and its seq.
        public var conversation: Conversation
        public var seq: UInt64
        /// The new serialized body: the message's own, with its text (a media message's caption) replaced. The store
        /// does not rewrite bodies: whoever builds this starts from the message as it is
        /// (``CourierDatabase/message(_:for:)``).
        public var body: [UInt8]
        /// The search index's tokens of the new text, worked out before the batch (``prepareSearch()``); nil: the
        /// store works them out as it writes.
        public var searchTokens: [String]?

        public init(user: UserID, device: DeviceID? = nil, conversation: Conversation, seq: UInt64, body: [UInt8]) {
            self.user = user
            self.device = device
            self.conversation = conversation
            self.seq = seq
            self.body = body
        }

        /// Works out the search index's tokens now, on the caller's thread rather than the writer's.
        public mutating func prepareSearch() {
            self.searchTokens = SearchIndex.textTokens(ofBody: self.body)
        }

        /// The same, from the text of the body this was serialized from (``SearchIndex/text(of:)``): the body is
        /// not parsed a second time.
        public mutating func prepareSearch(text: String) {
            self.searchTokens = SearchText.indexTokens(text)
        }
    }

    /// A reaction put on a message, or taken off.
    public struct React: Hashable, Sendable {
        public var user: UserID
        public var conversation: Conversation
        public var seq: UInt64
        /// One emoji or one short word (``ReactionKey``).
        public var key: String
        public var on: Bool

        public init(user: UserID, conversation: Conversation, seq: UInt64, key: String, on: Bool) {
            self.user = user
            self.conversation = conversation
            self.seq = seq
            self.key = key
            self.on = on
        }
    }

    /// The message a send answers, in the conversation it goes to: by seq, or by the id its sender gave it (with the
    /// sender's name when two senders used one id there).
    public enum ReplyTarget: Hashable, Sendable {
        case seq(UInt64)
        case id(String, from: String?)
    }

    /// A message to store.
    public struct Send: Hashable, Sendable {
        public var sender: UserID
        /// The device that sent it.
        public var device: DeviceID?
        /// The id the client chose; empty for one the store assigns.
        public var id: String
        public var to: Conversation
        /// The serialized body.
        public var body: [UInt8]
        /// The media the body carries, which the sender must have uploaded.
        public var media: MediaReference?
        /// The message this one answers: one the sender can see in the same conversation, not recalled.
        public var replyTo: ReplyTarget?
        /// The search index's tokens of its text, worked out before the batch (``prepareSearch()``); nil: the store
        /// works them out as it writes.
        public var searchTokens: [String]?
        /// The mentions its text makes (``Mentions``), worked out before the batch; nil: the store works them out.
        public var mentions: Mentions?

        /// Works out the search index's tokens and the mentions now, on the caller's thread rather than the
        /// writer's (a session's event loop: the work is spread over the cores, not queued on the one writer).
        public mutating func prepareSearch() {
            self.prepareSearch(body: (try? Courier_V1_Body(serializedBytes: self.body)) ?? Courier_V1_Body())
        }

        /// The same, from the body this was serialized from: it is not parsed a second time.
        package mutating func prepareSearch(body: Courier_V1_Body) {
            self.searchTokens = SearchText.indexTokens(SearchIndex.text(of: body))
            self.mentions = Mentions(in: SearchIndex.fullText(of: body))
        }

        /// An id for a message sent without one: 16 random bytes in hex, prefixed `s-`.
        public static func assignedID() -> String {
            var generator = SystemRandomNumberGenerator()
            let hex = (0..<2).map { _ in String(generator.next() as UInt64, radix: 16) }
            return "s-" + hex.map { String(repeating: "0", count: 16 - $0.count) + $0 }.joined()
        }

        public init(
            sender: UserID,
            device: DeviceID? = nil,
            id: String,
            to: Conversation,
            body: [UInt8],
            media: MediaReference? = nil,
            replyTo: ReplyTarget? = nil
        ) {
            self.sender = sender
            self.device = device
            self.id = id
            self.to = to
            self.body = body
            self.media = media
            self.replyTo = replyTo
        }
    }
}

/// The media a message carries: its digest and size (which the store checks against the sender's uploads), and the
/// type and name its sender gave.
public struct MediaReference: Hashable, Sendable {
    public var sha256: String
    public var size: Int64
    public var mime: String
    public var name: String

    public init(sha256: String, size: Int64, mime: String, name: String) {
        self.sha256 = sha256
        self.size = size
        self.mime = mime
        self.name = name
    }
}

/// What became of one ``WriteRequest``.
public enum WriteOutcome: Hashable, Sendable {
    /// The message is committed (or was, for a resend of a committed id: then `duplicate` is true).
    case sent(SendReceipt)
    /// The ack, read mark, recall, edit or reaction is committed (or had nothing to change: a reaction the user
    /// had put on already, or taken off).
    case done
    /// The request was refused and changed nothing.
    case refused(CourierStoreError)
}

/// The proof of a committed message.
public struct SendReceipt: Hashable, Sendable {
    public var id: String
    /// The conversation as the sender names it.
    public var conversation: Conversation
    public var seq: UInt64
    public var timeMs: Int64
    /// True when this answers a resend of an id committed earlier.
    public var duplicate: Bool
    /// The event rows the message added (one per member of the conversation, the sender included): its fan-out
    /// cost. 0 for a duplicate.
    public var recipients: Int = 0

    package init(
        id: String,
        conversation: Conversation,
        seq: UInt64,
        timeMs: Int64,
        duplicate: Bool,
        recipients: Int = 0
    ) {
        self.id = id
        self.conversation = conversation
        self.seq = seq
        self.timeMs = timeMs
        self.duplicate = duplicate
        self.recipients = recipients
    }
}

/// A user's new events as one batch appended them: every event of the user's log after ``after``, up to the last
/// one's cursor. What they follow is said, not worked out from their cursors: a connection holds them only when it
/// has sent everything up to ``after`` (cursors only grow; nothing says they are consecutive).
public struct FreshRun: Sendable {
    /// The user's newest cursor before these events: the one they follow.
    public var after: UInt64
    /// The events, in the log's order.
    public var events: [StoredEvent]

    public init(after: UInt64, events: [StoredEvent]) {
        self.after = after
        self.events = events
    }
}

/// The result of one group commit.
public struct AppliedBatch: Sendable {
    /// One outcome per request, in order.
    public var outcomes: [WriteOutcome]
    /// The users whose event logs grew, with their newest cursors: their connected devices have events to fetch.
    public var appended: [UserID: UInt64]
    /// The events the batch appended, as a read of each log would return them, for users with at most
    /// ``StoreLimits/maxFreshEventsPerUser`` new ones: the server hands them to connections that are caught up
    /// instead of reading them back. A user missing here has events all the same (``appended``): read them.
    public var fresh: [UserID: FreshRun] = [:]
    /// The users the batch made peers (``CourierDatabase/peers(of:)``): a direct conversation in which one had
    /// written or read, and the other now has too. Each now sees the other's presence.
    public var introductions: [Introduction] = []
    /// How many of the batch's messages it wrote to the push outbox: the node's push sender has work.
    public var pushes = 0
    /// The new messages' search tokens, for the index written beside the commit (``SearchIndexer``).
    package var searchEntries: [SearchIndexer.Entry] = []
    /// How many rounds of reads the batch took (``GroupCommit/Run``).
    package var loads = Loads()

    /// Rounds of reads: the ones the requests declared, and the ones a rule asked for that no declaration foresaw.
    package struct Loads: Hashable, Sendable {
        package var waves = 0
        package var misses = 0
    }

    public init(
        outcomes: [WriteOutcome],
        appended: [UserID: UInt64],
        fresh: [UserID: FreshRun] = [:],
        introductions: [Introduction] = []
    ) {
        self.outcomes = outcomes
        self.appended = appended
        self.fresh = fresh
        self.introductions = introductions
    }
}

/// Two users who have just become peers, by id and by name.
public struct Introduction: Sendable, Hashable {
    public var users: [UserID]
    public var names: [String]

    public init(_ a: UserID, named aName: String, _ b: UserID, named bName: String) {
        self.users = [a, b]
        self.names = [aName, bName]
    }
}
