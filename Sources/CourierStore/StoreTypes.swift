// The store speaks of conversations and digests in the words both sides share.
@_exported public import CourierVocabulary

/// A user's row id. Stable for the life of the data folder; never reused.
public struct UserID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public var rawValue: Int64
    public init(rawValue: Int64) { self.rawValue = rawValue }
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { "user#\(self.rawValue)" }
}

/// A device's row id: one per login, revocable on its own.
public struct DeviceID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public var rawValue: Int64
    public init(rawValue: Int64) { self.rawValue = rawValue }
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { "device#\(self.rawValue)" }
}

/// Which of a user's devices a password login takes over instead of making another, for a client that holds no
/// token of its own (``CourierDatabase/login(user:password:deviceName:renewing:reusing:nowMs:)``): it gets a new
/// token, and the one it had stops working.
public enum DeviceReuse: Hashable, Sendable {
    /// The user's newest device of this name that is not logged out: a client that names itself the same each time.
    case named(String)
    /// The user's oldest device of this name that is not logged out and has no open connection.
    case idle(named: String)
}

/// An account.
public struct User: Hashable, Sendable {
    public var id: UserID
    public var name: String
    public var createdMs: Int64
    /// When the user was removed; a removed user cannot log in and its name is not given out again.
    public var removedMs: Int64?

    public init(id: UserID, name: String, createdMs: Int64, removedMs: Int64?) {
        self.id = id
        self.name = name
        self.createdMs = createdMs
        self.removedMs = removedMs
    }
}

/// A picture of a user's profile: an image the user uploaded through the media path.
public struct ProfileImage: Hashable, Sendable {
    public var sha256: String
    public var size: Int64
    /// `image/jpeg`, `image/png`, `image/webp` or `image/gif`.
    public var mime: String
    /// In pixels, as the client said (0: not said).
    public var width: Int
    public var height: Int

    public init(sha256: String, size: Int64, mime: String, width: Int = 0, height: Int = 0) {
        self.sha256 = sha256
        self.size = size
        self.mime = mime
        self.width = width
        self.height = height
    }
}

/// What a user shows others of itself beside its name.
public struct UserProfile: Hashable, Sendable {
    /// The user's name, as spelled.
    public var user: String
    /// Its display name, in any script; nil when none is set.
    public var displayName: String?
    /// Its avatar and the avatar's small thumbnail, or neither.
    public var avatar: ProfileImage?
    public var thumbnail: ProfileImage?
    /// When it last changed (0: never set).
    public var updatedMs: Int64
    /// The user is a bot, a program's account (`courier bot create`): shown as one by every client.
    public var bot: Bool

    public init(
        user: String,
        displayName: String? = nil,
        avatar: ProfileImage? = nil,
        thumbnail: ProfileImage? = nil,
        updatedMs: Int64 = 0,
        bot: Bool = false
    ) {
        self.user = user
        self.displayName = displayName
        self.avatar = avatar
        self.thumbnail = thumbnail
        self.updatedMs = updatedMs
        self.bot = bot
    }
}

/// A change of one's profile (``StoreBackend/setProfile(of:_:nowMs:)``): what is nil stays as it is.
public struct ProfileUpdate: Hashable, Sendable {
    public enum Avatar: Hashable, Sendable {
        /// An avatar with its thumbnail (both uploaded by the user).
        case set(avatar: ProfileImage, thumbnail: ProfileImage)
        case remove
    }

    /// The display name: an empty one removes it.
    public var displayName: String?
    public var avatar: Avatar?
    /// Whether the user's push notifications show who wrote and what: a setting of its own, not part of the profile
    /// others see (``CourierDatabase/setPushPreviews(_:for:)``).
    public var pushPreviews: Bool?

    public init(displayName: String? = nil, avatar: Avatar? = nil, pushPreviews: Bool? = nil) {
        self.displayName = displayName
        self.avatar = avatar
        self.pushPreviews = pushPreviews
    }

    /// Whether it changes the profile others see (not only the push setting).
    public var changesProfile: Bool { self.displayName != nil || self.avatar != nil }
}

/// An invitation to sign up (``StoreBackend/createInvite(maxUses:expiresMs:nowMs:)``). Its token is shown once, when
/// it is made: the store keeps only the token's SHA-256.
public struct Invite: Hashable, Sendable {
    public var id: Int64
    public var createdMs: Int64
    /// When it stops working; nil: never.
    public var expiresMs: Int64?
    /// How many accounts it may make, and how many it made.
    public var maxUses: Int
    public var uses: Int
    public var revokedMs: Int64?

    public init(id: Int64, createdMs: Int64, expiresMs: Int64?, maxUses: Int, uses: Int, revokedMs: Int64?) {
        self.id = id
        self.createdMs = createdMs
        self.expiresMs = expiresMs
        self.maxUses = maxUses
        self.uses = uses
        self.revokedMs = revokedMs
    }

    /// Whether it can make an account at a time.
    public func usable(atMs nowMs: Int64) -> Bool {
        self.revokedMs == nil && self.uses < self.maxUses && (self.expiresMs.map { $0 > nowMs } ?? true)
    }
}

/// A logged-in device of a user.
public struct Device: Hashable, Sendable {
    public var id: DeviceID
    public var userID: UserID
    public var userName: String
    public var name: String
    public var createdMs: Int64
    public var expiresMs: Int64
    public var revokedMs: Int64?
    /// When its last connection ended.
    public var lastSeenMs: Int64?
    /// When its first connection to the running server came, while it has one.
    public var connectedSinceMs: Int64? = nil
    /// Every event at or below this cursor is durably stored by the device.
    public var ackedCursor: UInt64

    public init(
        id: DeviceID,
        userID: UserID,
        userName: String,
        name: String,
        createdMs: Int64,
        expiresMs: Int64,
        revokedMs: Int64?,
        lastSeenMs: Int64?,
        ackedCursor: UInt64
    ) {
        self.id = id
        self.userID = userID
        self.userName = userName
        self.name = name
        self.createdMs = createdMs
        self.expiresMs = expiresMs
        self.revokedMs = revokedMs
        self.lastSeenMs = lastSeenMs
        self.ackedCursor = ackedCursor
    }
}

/// A group.
public struct Group: Hashable, Sendable {
    public var name: String
    public var owner: String?
    public var members: [String]
    public var lastSeq: UInt64

    package init(name: String, owner: String?, members: [String], lastSeq: UInt64) {
        self.name = name
        self.owner = owner
        self.members = members
        self.lastSeq = lastSeq
    }
}

/// What a member of a group may do: a member writes; an admin also adds and removes members (not the owner nor
/// other admins); the owner also promotes and demotes admins and hands the group on. A group has one owner, a member.
public enum GroupRole: Int64, Hashable, Sendable, Comparable, CustomStringConvertible {
    case member = 0
    case admin = 1
    case owner = 2

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String {
        switch self {
        case .member: "member"
        case .admin: "admin"
        case .owner: "owner"
        }
    }
}

/// A group's title and members, the owner first, then the admins, then the members.
public struct GroupRoster: Hashable, Sendable {
    /// Empty when it has none.
    public var title: String
    public var members: [GroupMember]

    public init(title: String, members: [GroupMember]) {
        self.title = title
        self.members = members
    }
}

/// A member of a group, with its role and where it joined.
public struct GroupMember: Hashable, Sendable {
    public var user: String
    public var role: GroupRole
    /// The group's seq when it joined: it sees the messages after it.
    public var joinedSeq: UInt64

    public init(user: String, role: GroupRole, joinedSeq: UInt64) {
        self.user = user
        self.role = role
        self.joinedSeq = joinedSeq
    }
}

/// A page of a conversation's history, newest first.
public struct HistoryPage: Hashable, Sendable {
    public var messages: [StoredMessage]
    /// True when older messages visible to the reader remain.
    public var more: Bool
    /// How far the conversation's other members received and read it: the members whose marks reach the page's
    /// oldest message, by name. The receipts a client shows for the page come from these, whatever it saw before.
    public var receipts: [ReceiptMark]

    package init(messages: [StoredMessage], more: Bool, receipts: [ReceiptMark] = []) {
        self.messages = messages
        self.more = more
        self.receipts = receipts
    }
}

/// How far one member received and read a conversation (up to a seq; 0 for nothing yet), and where it joined it:
/// its marks say nothing of the messages at or before that seq (0 in a direct conversation).
public struct ReceiptMark: Hashable, Sendable {
    public var user: String
    public var deliveredSeq: UInt64
    public var readSeq: UInt64
    public var joinedSeq: UInt64

    public init(user: String, deliveredSeq: UInt64, readSeq: UInt64, joinedSeq: UInt64 = 0) {
        self.user = user
        self.deliveredSeq = deliveredSeq
        self.readSeq = readSeq
        self.joinedSeq = joinedSeq
    }
}

/// A conversation's unread count for one user.
public struct UnreadCount: Hashable, Sendable {
    public var conversation: Conversation
    public var unread: UInt64
    public var lastSeq: UInt64
    public var readSeq: UInt64
    /// In a direct conversation, up to where the other user's devices received and read it; 0 in a group.
    public var peerDeliveredSeq: UInt64 = 0
    public var peerReadSeq: UInt64 = 0
    /// How many of the unread messages mention the user (by name, or `@all`).
    public var mentions: UInt64 = 0
    /// How the conversation alerts the user.
    public var notify: NotifyLevel = .all
    /// A group's title (empty: none, or a direct conversation).
    public var title: String = ""

    package init(
        conversation: Conversation,
        unread: UInt64,
        lastSeq: UInt64,
        readSeq: UInt64,
        peerDeliveredSeq: UInt64 = 0,
        peerReadSeq: UInt64 = 0,
        mentions: UInt64 = 0,
        notify: NotifyLevel = .all,
        title: String = ""
    ) {
        self.conversation = conversation
        self.unread = unread
        self.lastSeq = lastSeq
        self.readSeq = readSeq
        self.peerDeliveredSeq = peerDeliveredSeq
        self.peerReadSeq = peerReadSeq
        self.mentions = mentions
        self.notify = notify
        self.title = title
    }
}

/// A device session established by a login or a token.
public struct DeviceSession: Hashable, Sendable {
    public var user: User
    public var device: Device
    /// The token, present only right after a password login made or renewed the device (it is stored only as a
    /// hash).
    public var token: String?
    /// Whether the password login renewed a device the client held (rather than making one).
    public var renewed = false

    public init(user: User, device: Device, token: String?, renewed: Bool = false) {
        self.user = user
        self.device = device
        self.token = token
        self.renewed = renewed
    }
}

/// Something that happened in the data folder that a running server must react to.
public enum StoreChange: Hashable, Sendable {
    /// A user's event log grew (an admin command changed a group).
    case logAppended(UserID)
    /// A device's token was revoked: its connection must close.
    case deviceRevoked(DeviceID)
    /// A user was removed: all its connections must close.
    case userRemoved(UserID)
}

/// A device that came online (its first connection) or went (its last), and when.
public struct DeviceActivityChange: Hashable, Sendable {
    public var device: DeviceID
    public var connected: Bool
    public var ms: Int64

    public init(device: DeviceID, connected: Bool, ms: Int64) {
        self.device = device
        self.connected = connected
        self.ms = ms
    }
}

/// A Web Push subscription of a device (`PushSubscription.toJSON()` of a browser): where to push, and the keys a
/// push is sealed with. The store keeps the bytes as they came; the server checks them before they are stored.
/// A phone app's registration with a push gateway (Matrix's Push Gateway API): the gateway forwards each push to
/// APNs or FCM as the app and pushkey say.
public struct PushGateway: Hashable, Sendable {
    /// The app, reverse-DNS style (`org.example.courier.ios`), as the gateway knows it.
    public var appID: String
    /// The phone's token with its platform's push service (an APNs device token, an FCM registration id).
    public var pushkey: String
    /// The gateway's `notify` URL.
    public var url: String

    public init(appID: String, pushkey: String, url: String) {
        self.appID = appID
        self.pushkey = pushkey
        self.url = url
    }

    /// The row's key among the user's push targets: one per user, app and pushkey (a pushkey is never moved to
    /// another user as a browser's endpoint is: nothing proves the phone's), never an URL a browser could give.
    public static func key(user: UserID, appID: String, pushkey: String) -> String {
        "gateway:\(user.rawValue):\(appID.utf8.count):\(appID):\(pushkey)"
    }
}

public struct PushSubscriptionRow: Hashable, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The push service's URL for this subscription: its identity (a subscription registered again moves to the
    /// device that registers it).
    public var endpoint: String
    public var device: DeviceID
    public var user: UserID
    /// The user agent's P-256 public key, uncompressed (65 bytes).
    public var p256dh: [UInt8]
    /// The authentication secret (16 bytes).
    public var auth: [UInt8]
    public var createdMs: Int64
    /// For a phone's registration with a push gateway (Matrix's Push Gateway API) instead of a browser's Web Push
    /// subscription: the gateway, app and pushkey (the keys are empty, and ``endpoint`` is
    /// ``PushGateway/key(user:appID:pushkey:)``).
    public var gateway: PushGateway?

    public init(
        endpoint: String,
        device: DeviceID,
        user: UserID,
        p256dh: [UInt8],
        auth: [UInt8],
        createdMs: Int64,
        gateway: PushGateway? = nil
    ) {
        self.endpoint = endpoint
        self.device = device
        self.user = user
        self.p256dh = p256dh
        self.auth = auth
        self.createdMs = createdMs
        self.gateway = gateway
    }

    /// Where and whose, never the keys nor a pushkey: the authentication secret is a credential, and a pushkey
    /// lets whoever holds it reach the phone.
    public var description: String {
        let place = self.gateway.map { "gateway: \($0.url), app: \($0.appID)" } ?? "endpoint: \(self.endpoint)"
        return "PushSubscriptionRow(\(place), device: \(self.device.rawValue), user: \(self.user.rawValue))"
    }
    public var debugDescription: String { self.description }
}
