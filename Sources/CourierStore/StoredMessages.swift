// Messages and log entries as a reader sees them: what reads, searches and fresh events return.

/// A stored message, as one user sees it.
public struct StoredMessage: Hashable, Sendable {
    /// The id the sender chose or was given.
    public var id: String
    public var from: String
    /// The device it was sent from, when known.
    public var fromDevice: DeviceID?
    /// The conversation as the reading user names it.
    public var conversation: Conversation
    public var seq: UInt64
    public var timeMs: Int64
    /// The serialized message body (a `courier.v1.Body`), as last edited; empty once recalled.
    public var body: [UInt8]
    public var recalled: Bool
    /// When the sender last edited it; nil when never.
    public var editedMs: Int64? = nil
    /// The message it answers, when it is a reply.
    public var replyTo: StoredReply? = nil
    /// Its reactions, each key once, the first given first: only in a history page (the log carries each change).
    public var reactions: [ReactionCount] = []
    /// Pinned in its conversation: in a history page only (the log carries each change as a `pin` event).
    public var pinned = false

    public init(
        id: String,
        from: String,
        fromDevice: DeviceID?,
        conversation: Conversation,
        seq: UInt64,
        timeMs: Int64,
        body: [UInt8],
        recalled: Bool,
        editedMs: Int64? = nil,
        replyTo: StoredReply? = nil
    ) {
        self.id = id
        self.from = from
        self.fromDevice = fromDevice
        self.conversation = conversation
        self.seq = seq
        self.timeMs = timeMs
        self.body = body
        self.recalled = recalled
        self.editedMs = editedMs
        self.replyTo = replyTo
    }
}

/// The message a reply answers, as the reader may see it: in the same conversation, by seq. A reader who joined the
/// group after it sees only that there was one (`visible` false: no id, sender or body).
public struct StoredReply: Hashable, Sendable {
    public var seq: UInt64
    public var visible: Bool
    public var id: String
    public var from: String
    /// The original's body as last edited; empty when it was recalled or is not visible.
    public var body: [UInt8]
    public var recalled: Bool

    public init(seq: UInt64, visible: Bool, id: String, from: String, body: [UInt8], recalled: Bool) {
        self.seq = seq
        self.visible = visible
        self.id = visible ? id : ""
        self.from = visible ? from : ""
        self.body = visible && !recalled ? body : []
        self.recalled = visible && recalled
    }
}

/// How many users put one reaction on a message, and whether the reader is among them.
public struct ReactionCount: Hashable, Sendable {
    public var key: String
    public var count: Int
    public var mine: Bool

    public init(key: String, count: Int, mine: Bool) {
        self.key = key
        self.count = count
        self.mine = mine
    }
}

/// Who gave one reaction on a message: how many, and the first of them by name, the earliest first.
public struct Reactors: Hashable, Sendable {
    public var key: String
    public var count: Int
    public var users: [String]

    public init(key: String, count: Int, users: [String]) {
        self.key = key
        self.count = count
        self.users = users
    }
}

/// ``Reactors`` as a database reads them, by user id.
package struct ReactorRows: Hashable, Sendable {
    package var key: String
    package var count: Int
    package var users: [UserID]

    package init(key: String, count: Int, users: [UserID]) {
        self.key = key
        self.count = count
        self.users = users
    }
}

/// A reaction put on a message or taken off it.
public struct StoredReaction: Hashable, Sendable {
    /// The message: its conversation as the reader names it, its seq, its id and sender.
    public var conversation: Conversation
    public var seq: UInt64
    public var id: String
    public var from: String
    /// Who reacted, and with what.
    public var user: String
    public var key: String
    public var on: Bool

    public init(
        conversation: Conversation,
        seq: UInt64,
        id: String,
        from: String,
        user: String,
        key: String,
        on: Bool
    ) {
        self.conversation = conversation
        self.seq = seq
        self.id = id
        self.from = from
        self.user = user
        self.key = key
        self.on = on
    }
}

/// How a request names a message: by place (its conversation, as the user names it, and its seq), or by the id its
/// sender gave it, which is unique per sender only (with the sender, the conversation, or both, to tell apart two
/// messages of one id).
public struct MessageName: Hashable, Sendable {
    public var conversation: Conversation?
    public var seq: UInt64
    public var id: String
    public var from: String?

    /// By place.
    public init(conversation: Conversation, seq: UInt64) {
        self.conversation = conversation
        self.seq = seq
        self.id = ""
        self.from = nil
    }

    /// By id.
    public init(id: String, from: String? = nil, in conversation: Conversation? = nil) {
        self.conversation = conversation
        self.seq = 0
        self.id = id
        self.from = from
    }
}

/// A page of search results, newest first.
public struct SearchPage: Hashable, Sendable {
    public var hits: [SearchHit]
    /// Whether older matches may remain: ask again with ``next`` as the cursor.
    public var more: Bool
    /// Where the next page starts (an opaque position in the index, exclusive).
    public var next: UInt64

    public init(hits: [SearchHit], more: Bool, next: UInt64) {
        self.hits = hits
        self.more = more
        self.next = next
    }
}

/// A message a search found, with the piece of its text that matched.
public struct SearchHit: Hashable, Sendable {
    public var message: StoredMessage
    public var fragment: SearchText.Fragment
    /// Its position in the index: a page cut after it goes on from here (``SearchPage/next``).
    public var position: UInt64

    public init(message: StoredMessage, fragment: SearchText.Fragment, position: UInt64) {
        self.message = message
        self.fragment = fragment
        self.position = position
    }
}

/// An earlier version of an edited message: the body an edit replaced, and when.
public struct MessageVersion: Hashable, Sendable {
    /// 0 for the body as first sent.
    public var version: Int
    public var body: [UInt8]
    public var replacedMs: Int64

    public init(version: Int, body: [UInt8], replacedMs: Int64) {
        self.version = version
        self.body = body
        self.replacedMs = replacedMs
    }
}

/// Whether a receipt says "delivered to a device" or "read".
public enum ReceiptKind: Int64, Hashable, Sendable {
    case delivered = 1
    case read = 2
}

/// A change of a group's members.
public enum MembershipChange: Int64, Hashable, Sendable {
    case joined = 1
    case left = 2
}

/// One entry of a user's event log.
public struct StoredEvent: Hashable, Sendable {
    /// Boxed (`indirect`): an event is a cursor and a reference (16 bytes), and one message's event handed to every
    /// member of a group shares one payload instead of copying it.
    public indirect enum Kind: Hashable, Sendable {
        case message(StoredMessage)
        case recall(conversation: Conversation, seq: UInt64, id: String, by: String)
        case receipt(conversation: Conversation, user: String, kind: ReceiptKind, upToSeq: UInt64)
        case membership(group: String, user: String, change: MembershipChange, seq: UInt64)
        /// The sender edited a message: the message as it now is (its body and `editedMs`; recalled, with no body,
        /// when it was recalled since). Never a new message: a client that lacks it has nothing to change.
        case edit(StoredMessage)
        case reaction(StoredReaction)
        /// A user the log's user knows (or the log's user itself) changed its profile: the profile as it is when
        /// read (a user's whose account was deleted since reads with no display name and no avatar).
        case profile(UserProfile)
        /// A member's role in a group changed (promoted, demoted, made owner): at the group's seq then.
        case role(group: String, user: String, role: GroupRole, seq: UInt64)
        /// A member of a group (`by`) gave it a title, or took it away (empty): at the group's seq then.
        case title(group: String, title: String, by: String, seq: UInt64)
        /// The log's user chose how a conversation alerts it (on one of its devices): for its other devices.
        case notify(conversation: Conversation, level: NotifyLevel)
        /// A member (`by`) pinned a message (its id and sender), or unpinned it.
        case pin(conversation: Conversation, seq: UInt64, id: String, from: String, by: String, pinned: Bool)
        /// The log's user deleted a message for itself (on one of its devices): for every device to drop it.
        case hidden(conversation: Conversation, seq: UInt64)
    }
    public var cursor: UInt64
    public var kind: Kind

    public init(cursor: UInt64, kind: Kind) {
        self.cursor = cursor
        self.kind = kind
    }

    /// This event as a read returns it once its message was recalled: a message event matching `matches` without
    /// its body and marked recalled; any other event as it is.
    public func recalled(where matches: (StoredMessage) -> Bool) -> StoredEvent {
        switch self.kind {
        case .message(var message) where matches(message):
            message.recalled = true
            message.body = []
            message.editedMs = nil
            return StoredEvent(cursor: self.cursor, kind: .message(message))
        case .edit(var message) where matches(message):
            message.recalled = true
            message.body = []
            message.editedMs = nil
            return StoredEvent(cursor: self.cursor, kind: .edit(message))
        default:
            return self
        }
    }
}
