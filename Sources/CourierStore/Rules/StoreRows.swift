/// A stored message as a read returns it.
package struct MessageRead: Sendable {
    package var seq: Int64
    package var sender: UserID
    package var senderDevice: DeviceID?
    package var clientID: String
    package var timeMs: Int64
    /// Empty once recalled.
    package var body: [UInt8]
    package var recalled: Bool
    package var editedMs: Int64?
    /// The message it answers: its seq, and the message when it is still stored.
    package var replySeq: Int64?
    package var reply: ReplyRead?

    package init(
        seq: Int64,
        sender: UserID,
        senderDevice: DeviceID?,
        clientID: String,
        timeMs: Int64,
        body: [UInt8],
        recalled: Bool,
        editedMs: Int64? = nil,
        replySeq: Int64? = nil,
        reply: ReplyRead? = nil
    ) {
        self.seq = seq
        self.sender = sender
        self.senderDevice = senderDevice
        self.clientID = clientID
        self.timeMs = timeMs
        self.body = recalled ? [] : body
        self.recalled = recalled
        self.editedMs = editedMs
        self.replySeq = replySeq
        self.reply = reply
    }
}

/// A message found for a user, with its conversation (and for a search, its position in the index).
package struct FoundMessage: Sendable {
    package var conversation: Int64
    package var header: ConversationHeader
    package var message: MessageRead
    package var doc: Int64

    package init(conversation: Int64, header: ConversationHeader, message: MessageRead, doc: Int64 = 0) {
        self.conversation = conversation
        self.header = header
        self.message = message
        self.doc = doc
    }
}

/// The message a reply answers, as a read returns it.
package struct ReplyRead: Sendable {
    package var sender: UserID
    package var clientID: String
    package var body: [UInt8]
    package var recalled: Bool

    package init(sender: UserID, clientID: String, body: [UInt8], recalled: Bool) {
        self.sender = sender
        self.clientID = clientID
        self.body = recalled ? [] : body
        self.recalled = recalled
    }
}

/// An entry of a user's log as a read returns it, with its conversation and, for a message or a recall, the
/// message.
/// A user's profile as a store keeps it.
package struct ProfileRow: Hashable, Sendable {
    package var displayName: String?
    package var avatar: ProfileImage?
    package var thumbnail: ProfileImage?
    package var updatedMs: Int64
    /// The user is a bot (``StoreBackend/addBot(name:owner:nowMs:)``): every client shows it as one.
    package var bot: Bool

    package init(
        displayName: String?,
        avatar: ProfileImage?,
        thumbnail: ProfileImage?,
        updatedMs: Int64,
        bot: Bool = false
    ) {
        self.displayName = displayName
        self.avatar = avatar
        self.thumbnail = thumbnail
        self.updatedMs = updatedMs
        self.bot = bot
    }
}

package struct LogRead: Sendable {
    package var cursor: Int64
    package var kind: Int64
    package var seq: Int64
    package var actor: UserID?
    package var detail: Int64?
    package var conversation: ConversationHeader
    package var message: MessageRead?
    /// A reaction's key.
    package var key: String?
    /// For a reply, where the log's user joined the conversation (nil when it is no longer a member): whether it may
    /// see what the reply answers.
    package var joinedSeq: Int64?

    package init(
        cursor: Int64,
        kind: Int64,
        seq: Int64,
        actor: UserID?,
        detail: Int64?,
        conversation: ConversationHeader,
        message: MessageRead?,
        key: String? = nil,
        joinedSeq: Int64? = nil
    ) {
        self.cursor = cursor
        self.kind = kind
        self.seq = seq
        self.actor = actor
        self.detail = detail
        self.conversation = conversation
        self.message = message
        self.key = key
        self.joinedSeq = joinedSeq
    }
}

/// A user's membership of a conversation, with the conversation's last seq.
package struct Membership: Sendable {
    package var conversation: ConversationHeader
    package var lastSeq: Int64
    package var readSeq: Int64
    package var joinedSeq: Int64
    /// In a direct conversation, up to where the other user received and read it; 0 otherwise.
    package var peerDeliveredSeq: Int64
    package var peerReadSeq: Int64
    /// The messages after the read mark (and after joining) that mention the user, by name or `@all`.
    package var mentions: Int64 = 0
    /// How many of the messages after the user's read mark are hidden from it (withheld, deleted for it).
    package var hiddenUnread: Int64 = 0
    /// The seq of the newest message the user sees there (``lastSeq`` unless the newest are hidden from it).
    package var lastVisibleSeq: Int64?
    package var notify: NotifyLevel = .all
    /// A group's title; nil when none.
    package var title: String? = nil

    package init(
        conversation: ConversationHeader,
        lastSeq: Int64,
        readSeq: Int64,
        joinedSeq: Int64,
        peerDeliveredSeq: Int64 = 0,
        peerReadSeq: Int64 = 0
    ) {
        self.conversation = conversation
        self.lastSeq = lastSeq
        self.readSeq = readSeq
        self.joinedSeq = joinedSeq
        self.peerDeliveredSeq = peerDeliveredSeq
        self.peerReadSeq = peerReadSeq
    }
}

/// How far one member received and read a conversation.
package struct MarkRow: Sendable {
    package var user: UserID
    package var deliveredSeq: Int64
    package var readSeq: Int64
    /// The seq the member joined at: its marks say nothing of messages at or before it.
    package var joinedSeq: Int64

    package init(user: UserID, deliveredSeq: Int64, readSeq: Int64, joinedSeq: Int64 = 0) {
        self.user = user
        self.deliveredSeq = deliveredSeq
        self.readSeq = readSeq
        self.joinedSeq = joinedSeq
    }
}

/// A message carrying a media file, in a conversation a user is in.
package struct MediaCarrier: Sendable {
    package var seq: Int64
    /// When the user joined the conversation.
    package var joinedSeq: Int64
    package var timeMs: Int64
    /// The size the sender uploaded.
    package var size: Int64
    package var mime: String
    package var name: String

    package init(seq: Int64, joinedSeq: Int64, timeMs: Int64, size: Int64, mime: String, name: String) {
        self.seq = seq
        self.joinedSeq = joinedSeq
        self.timeMs = timeMs
        self.size = size
        self.mime = mime
        self.name = name
    }
}

/// A group's row.
package struct GroupRow: Hashable, Sendable {
    package var id: Int64
    package var owner: UserID?
    package var lastSeq: Int64
    /// Its title; nil when none.
    package var title: String?

    package init(id: Int64, owner: UserID?, lastSeq: Int64, title: String? = nil) {
        self.id = id
        self.owner = owner
        self.lastSeq = lastSeq
        self.title = title
    }
}

/// A member of a group as a store keeps it.
package struct MemberRole: Hashable, Sendable {
    package var user: UserID
    package var role: GroupRole
    package var joinedSeq: Int64

    package init(user: UserID, role: GroupRole, joinedSeq: Int64) {
        self.user = user
        self.role = role
        self.joinedSeq = joinedSeq
    }
}

/// Another member of a conversation a user is in.
package struct Companion: Hashable, Sendable {
    package var user: UserID
    /// Whether the conversation is a group's (else a direct one).
    package var inGroup: Bool
    /// Whether the user asking has written there.
    package var mineSent: Bool
    /// Whether this member has written there.
    package var theirsSent: Bool
    /// Whether the user asking has read there (opened the conversation with something in it).
    package var mineRead: Bool
    /// Whether this member has read there.
    package var theirsRead: Bool

    package init(
        user: UserID,
        inGroup: Bool,
        mineSent: Bool,
        theirsSent: Bool,
        mineRead: Bool = false,
        theirsRead: Bool = false
    ) {
        self.user = user
        self.inGroup = inGroup
        self.mineSent = mineSent
        self.theirsSent = theirsSent
        self.mineRead = mineRead
        self.theirsRead = theirsRead
    }
}

extension StoreTransaction {
    /// A user's name by id, or nil.
    func name(of user: UserID) async throws -> String? {
        try await self.names(of: [user])[user]
    }
}

/// A device found by one of its tokens, with its tokens and its user.
package struct HeldDevice: Sendable {
    package var device: Device
    package var tokens: DeviceTokens
    package var user: User

    package init(device: Device, tokens: DeviceTokens, user: User) {
        self.device = device
        self.tokens = tokens
        self.user = user
    }
}

/// A device's session tokens, as digests: the current one, and after a renewal, the one it replaced, still good
/// for a while (``StoreLimits/renewalGrace``) unless the new one is used first.
package struct DeviceTokens: Hashable, Sendable {
    package var tokenHash: [UInt8]
    package var expiresMs: Int64
    package var previousHash: [UInt8]?
    /// Until when the previous token is good (never past its own expiry).
    package var previousUntilMs: Int64?
    /// The previous token's own expiry: the grace never makes an expired token good again.
    package var previousExpiresMs: Int64?

    package init(
        tokenHash: [UInt8],
        expiresMs: Int64,
        previousHash: [UInt8]? = nil,
        previousUntilMs: Int64? = nil,
        previousExpiresMs: Int64? = nil
    ) {
        self.tokenHash = tokenHash
        self.expiresMs = expiresMs
        self.previousHash = previousHash
        self.previousUntilMs = previousUntilMs
        self.previousExpiresMs = previousExpiresMs
    }
}

/// A device to add.
package struct NewDevice: Sendable {
    package var user: UserID
    package var name: String
    package var tokenHash: [UInt8]
    package var createdMs: Int64
    package var expiresMs: Int64
    package var ackedCursor: Int64
}

extension StoreChange {
    /// How the `changes` table keeps a change: its kind, and the user or device it is about.
    package var columns: (kind: Int64, user: UserID?, device: DeviceID?) {
        switch self {
        case .logAppended(let user): (1, user, nil)
        case .deviceRevoked(let device): (2, nil, device)
        case .userRemoved(let user): (3, user, nil)
        }
    }

    /// A change as the `changes` table keeps it; nil for a kind this version does not know.
    package init?(kind: Int64, user: UserID?, device: DeviceID?) {
        switch (kind, user, device) {
        case (1, let user?, _): self = .logAppended(user)
        case (2, _, let device?): self = .deviceRevoked(device)
        case (3, let user?, _): self = .userRemoved(user)
        default: return nil
        }
    }
}

/// One user blocking another (``CourierDatabase/block(_:by:on:nowMs:)``).
package struct BlockRow: Hashable, Sendable {
    package var blocker: UserID
    package var blocked: UserID
    package var createdMs: Int64

    package init(blocker: UserID, blocked: UserID, createdMs: Int64) {
        self.blocker = blocker
        self.blocked = blocked
        self.createdMs = createdMs
    }
}

/// A message one user does not see: withheld from it (it blocks the sender) or deleted for it alone.
package struct HiddenRow: Hashable, Sendable {
    package var user: UserID
    package var conversation: Int64
    package var seq: Int64

    package init(user: UserID, conversation: Int64, seq: Int64) {
        self.user = user
        self.conversation = conversation
        self.seq = seq
    }
}
