// An app using the SDK names conversations with the type the whole system shares.
@_exported public import CourierVocabulary
public import Foundation

extension Conversation {
    /// The key the local store files the conversation under.
    var key: String {
        switch self {
        case .user(let name): "u:" + name.lowercased()
        case .group(let name): "g:" + name.lowercased()
        }
    }
}

/// The media a message carries: what it is, and how to fetch it (``CourierClient/download(_:)``).
public struct MediaInfo: Hashable, Sendable {
    public enum Kind: String, Hashable, Sendable, CaseIterable {
        case image, voice, video, file
    }

    public var kind: Kind
    /// The SHA-256 of the bytes, 64 lowercase hex digits: the media's id on the server.
    public var sha256: String
    public var size: Int64
    public var mime: String
    public var name: String
    /// Where known: a voice clip's or video's length, in milliseconds, and an image's or video's pixels.
    public var durationMs: Int
    public var width: Int
    public var height: Int
    /// Text shown with it (what an edit of a media message changes).
    public var caption: String

    public init(
        kind: Kind,
        sha256: String,
        size: Int64,
        mime: String,
        name: String,
        durationMs: Int = 0,
        width: Int = 0,
        height: Int = 0,
        caption: String = ""
    ) {
        self.kind = kind
        self.sha256 = sha256
        self.size = size
        self.mime = mime
        self.name = name
        self.durationMs = durationMs
        self.width = width
        self.height = height
        self.caption = caption
    }
}

/// The message a reply answers, as the reader may see it: `visible` false for a reader who joined the group after
/// it (then only `seq` is known); `recalled` once its sender recalled it (show the quote as recalled).
public struct ChatReply: Hashable, Sendable {
    public var seq: UInt64
    public var visible: Bool
    public var id: String
    public var from: String
    public var text: String
    public var media: MediaInfo?
    public var recalled: Bool

    public init(
        seq: UInt64,
        visible: Bool = true,
        id: String = "",
        from: String = "",
        text: String = "",
        media: MediaInfo? = nil,
        recalled: Bool = false
    ) {
        self.seq = seq
        self.visible = visible
        self.id = id
        self.from = from
        self.text = text
        self.media = media
        self.recalled = recalled
    }
}

/// A reaction on a message: its key, how many gave it, and whether this user did.
public struct ChatReaction: Hashable, Sendable {
    public var key: String
    public var count: Int
    public var mine: Bool

    public init(key: String, count: Int, mine: Bool) {
        self.key = key
        self.count = count
        self.mine = mine
    }
}

extension [ChatReaction] {
    /// A message's reactions with a change the event log tells applied (`mine`: the change is this user's, whose
    /// own reaction is marked): a key's count up or down, gone at zero, a new key last. A change of one's own that
    /// changes nothing (told twice) is ignored.
    public mutating func apply(_ change: ReactionChange, mine: Bool) {
        if let at = self.firstIndex(where: { $0.key == change.key }) {
            if mine, self[at].mine == change.on { return }
            self[at].count += change.on ? 1 : -1
            if mine { self[at].mine = change.on }
            if self[at].count <= 0 { self.remove(at: at) }
        } else if change.on {
            self.append(ChatReaction(key: change.key, count: 1, mine: mine))
        }
    }
}

/// A reaction put on a message or taken off, as the event log tells it.
public struct ReactionChange: Hashable, Sendable {
    public var conversation: Conversation
    public var seq: UInt64
    /// The message's id and sender.
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

/// A message a search found, with the piece of its text that matched.
public struct SearchResult: Hashable, Sendable {
    public var message: ChatMessage
    /// The text around the first match (`…` where cut), and the matches in it, in Unicode scalars from its start.
    public var fragment: String
    public var marks: [Range<Int>]

    public init(message: ChatMessage, fragment: String, marks: [Range<Int>]) {
        self.message = message
        self.fragment = fragment
        self.marks = marks
    }
}

/// A page of search results, newest first.
public struct SearchResults: Hashable, Sendable {
    public var results: [SearchResult]
    /// Whether older matches may remain: ask again with `before` = ``next``.
    public var more: Bool
    public var next: UInt64

    public init(results: [SearchResult], more: Bool, next: UInt64) {
        self.results = results
        self.more = more
        self.next = next
    }
}

/// An earlier version of an edited message.
public struct EarlierVersion: Hashable, Sendable {
    /// 0: as first sent.
    public var version: Int
    public var text: String
    public var media: MediaInfo?
    /// When an edit replaced it.
    public var replaced: Date
}

/// A message, as stored on this device: a text, or media (then `text` is empty).
public struct ChatMessage: Hashable, Sendable {
    /// The id the sender chose (or the server assigned).
    public var id: String
    public var from: String
    public var conversation: Conversation
    /// The conversation's sequence number: gap-free and increasing.
    public var seq: UInt64
    /// The server's time of the message.
    public var time: Date
    public var text: String
    public var media: MediaInfo?
    public var recalled: Bool
    /// When its sender last edited it (the text is the edited one); nil when never.
    public var edited: Date?
    /// The message it answers, when it is a reply.
    public var replyTo: ChatReply?
    /// Its reactions: as a page of ``CourierClient/history(of:beforeSeq:limit:)`` says them, and in stored messages
    /// (``CourierClient/storedMessages(in:limit:)``) as the last page and the reaction events since left them.
    public var reactions: [ChatReaction]
    /// Pinned in its conversation (from a history page; the store of this device does not keep it).
    public var pinned = false
    /// The user name of the sender whose message this forwards (``CourierClient/forward(_:to:id:)``); nil when it
    /// is not a forward. The store of this device does not keep it: a history page says it.
    public var forwardedFrom: String?

    /// The mentions its text (or its media's caption) makes, as the server read them (``Mentions``): in a group
    /// message a name there is a member's, and `@all` came from an admin or the owner.
    public var mentions: Mentions {
        Mentions(in: self.media.map(\.caption) ?? self.text)
    }

    public init(
        id: String,
        from: String,
        conversation: Conversation,
        seq: UInt64,
        time: Date,
        text: String,
        media: MediaInfo? = nil,
        recalled: Bool = false,
        edited: Date? = nil,
        replyTo: ChatReply? = nil,
        reactions: [ChatReaction] = []
    ) {
        self.id = id
        self.from = from
        self.conversation = conversation
        self.seq = seq
        self.time = time
        self.text = text
        self.media = media
        self.recalled = recalled
        self.edited = edited
        self.replyTo = replyTo
        self.reactions = reactions
    }
}

/// A message in this device's outbox: written, not yet acknowledged by the server.
public struct PendingMessage: Hashable, Sendable {
    public var id: String
    public var conversation: Conversation
    public var text: String
    public var media: MediaInfo? = nil
    /// The message it answers, in the same conversation.
    public var replyTo: ReplyTarget? = nil
}

/// Names a message for an edit, a reaction or its versions: by place (its seq in a conversation), or by the id its
/// sender gave it (unique per sender only: the sender, the conversation, or both, tell apart two messages of one id;
/// the server refuses a name that fits two with `ambiguous-message`).
public enum MessageReference: Hashable, Sendable {
    case seq(UInt64, in: Conversation)
    case id(String, from: String? = nil, in: Conversation? = nil)
}

/// The message a new one answers, in the conversation it goes to: by seq, or by the id its sender gave it.
public enum ReplyTarget: Hashable, Sendable {
    case seq(UInt64)
    /// With the sender's name when two senders used that id there.
    case id(String, from: String? = nil)
}

/// Why a connection ended, or could not start.
public struct Disconnection: Hashable, Sendable, CustomStringConvertible {
    public enum Cause: Hashable, Sendable {
        /// The server could not be reached: refused, timed out, no route, or the TLS handshake failed.
        case unreachable
        /// The server answered but took no connection for now (`server-full`, `shutting-down`, or `auth-timeout`
        /// when this side was too slow to log in): a later attempt can succeed.
        case refused(code: String)
        /// A connection that was up ended.
        case closed
        /// ``CourierClient/stop()`` was called (or the task running the client was cancelled).
        case stopped
    }

    public var cause: Cause
    /// What happened, in plain words.
    public var reason: String

    public init(_ cause: Cause, _ reason: String) {
        self.cause = cause
        self.reason = reason
    }

    public var description: String { self.reason }
}

/// What happens on the connection and in the user's conversations, in order.
/// A member's role in a group.
public enum GroupRoleInfo: String, Sendable, Hashable, Comparable {
    case member
    case admin
    case owner

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rank < rhs.rank }

    private var rank: Int {
        switch self {
        case .member: 0
        case .admin: 1
        case .owner: 2
        }
    }
}

public enum ClientEvent: Sendable, Hashable {
    /// Authenticated; `caughtUp` follows when the backlog has been received.
    case connected(user: String)
    /// Every event missed while offline has been received and stored.
    case caughtUp
    /// The connection ended, or an attempt failed; ``reconnecting(after:)`` follows unless the client stopped.
    case disconnected(Disconnection)
    /// The next attempt to connect starts after this delay (a jittered backoff that grows with each failure).
    case reconnecting(after: Duration)
    /// The server refused the configured credentials (`auth-failed`, `token-expired`, `token-revoked`,
    /// `throttled`), or the stored token stopped working once the client held no password (it keeps one only until
    /// its first login; a revoked device never comes back as a new one): ``CourierClient/run()`` returns, and the
    /// app asks its user for the password again. An expired stored token is renewed with a password still held.
    case loginRefused(code: String, message: String)
    /// A message of the user's event log: from someone else, or the user's own written by another device or by
    /// another client of the same store (also one this client took over from a client that is gone, once the
    /// server acknowledged it). Each once per client, from where the store stood when the client was made: it may
    /// also be among what ``CourierClient/storedMessages(in:limit:)`` and ``CourierClient/pendingMessages()``
    /// return, so an app that shows both drops repeats by id (or by conversation and sequence number).
    case message(ChatMessage)
    /// A message written through this client is committed by the server, and moved from the local outbox to the
    /// local messages. The client records acknowledgements in batches (one local transaction for all that arrived
    /// meanwhile), so this event may follow events that arrived after the acknowledgement.
    case sent(id: String, conversation: Conversation, seq: UInt64, time: Date)
    /// The server refused a message for good (`not-member`, `text-too-large`, …); it left the outbox.
    case sendFailed(id: String, code: String, message: String)
    /// A member's devices received (`read` false) or read (`read` true) a conversation up to a sequence number.
    case receipt(conversation: Conversation, user: String, read: Bool, upToSeq: UInt64)
    /// A message was recalled by its sender.
    case recalled(conversation: Conversation, seq: UInt64, id: String, by: String)
    /// Its sender edited a message: the message as it now is (the local store holds it so, when it holds it). Never
    /// a new message: one this device never had is not to be shown.
    case edited(ChatMessage)
    /// A member put a reaction on a message, or took it off.
    case reaction(ReactionChange)
    /// A user joined or left a group.
    case membership(group: String, user: String, joined: Bool)
    /// A user this one sees (or this user itself) changed its profile: the profile as it now is.
    case profile(ProfileInfo)
    /// A member's role in a group changed: made an admin, a member again, or the owner.
    case role(group: String, user: String, role: GroupRoleInfo)
    /// A group's title changed (empty: taken away), by an admin or its owner.
    case groupTitle(group: String, title: String, by: String)
    /// This user chose how a conversation alerts it (on this device or another).
    case notify(conversation: Conversation, level: NotifyLevel)
    /// A member (`by`) pinned a message of a conversation, or unpinned it.
    case pinned(conversation: Conversation, seq: UInt64, id: String, by: String, pinned: Bool)
    /// This user deleted a message for itself (on this device or another): it is gone from this store.
    case hidden(conversation: Conversation, seq: UInt64)
    /// A peer is typing (or stopped).
    case typing(conversation: Conversation, user: String, typing: Bool)
    /// A peer came online or went offline (`lastSeen`: when it went, if the server says).
    case presence(user: String, online: Bool, lastSeen: Date?)
}

/// An error of a client call.
public struct CourierClientError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The server's error code (docs/PROTOCOL.md), or `not-connected`, `invalid-response`, `stopped`.
    public var code: String
    public var message: String

    public init(code: String, message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(self.code): \(self.message)" }

    static let notConnected = CourierClientError(code: "not-connected", message: "not connected to the server")
    static let stopped = CourierClientError(code: "stopped", message: "the client was stopped")
}

/// How far another member received and read a conversation, as the server keeps it: what `receipt` events said while
/// this client was away, or before its store existed.
public struct ReceiptMark: Hashable, Sendable {
    public var user: String
    /// Up to this seq the member's devices received the conversation (never below ``readSeq``).
    public var deliveredSeq: UInt64
    public var readSeq: UInt64
    /// Where the member joined the group: its marks say nothing of the messages at or before it (0 in a direct
    /// conversation).
    public var joinedSeq: UInt64

    public init(user: String, deliveredSeq: UInt64, readSeq: UInt64, joinedSeq: UInt64 = 0) {
        self.user = user
        self.deliveredSeq = deliveredSeq
        self.readSeq = readSeq
        self.joinedSeq = joinedSeq
    }
}

/// A conversation's unread count.
public struct UnreadCount: Hashable, Sendable {
    public var conversation: Conversation
    public var unread: UInt64
    public var lastSeq: UInt64
    /// In a direct conversation, up to where the other user's devices received and read it, as the server keeps it
    /// (what `receipt` events said while this client was away, or before its store existed); 0 in a group.
    public var peerDeliveredSeq: UInt64 = 0
    public var peerReadSeq: UInt64 = 0
    /// How many of the unread messages mention this user (by name, or `@all`).
    public var mentions: UInt64 = 0
    /// How the conversation alerts this user.
    public var notify: NotifyLevel = .all
    /// A group's title (empty: none, or a direct conversation).
    public var title: String = ""

    public init(
        conversation: Conversation,
        unread: UInt64,
        lastSeq: UInt64,
        peerDeliveredSeq: UInt64 = 0,
        peerReadSeq: UInt64 = 0
    ) {
        self.conversation = conversation
        self.unread = unread
        self.lastSeq = lastSeq
        self.peerDeliveredSeq = peerDeliveredSeq
        self.peerReadSeq = peerReadSeq
    }
}
