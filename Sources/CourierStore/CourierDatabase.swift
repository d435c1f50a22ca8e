public import Foundation
public import Logging

/// What a Courier server keeps in its database, whichever it is: the SQLite store (`CourierStoreSQLite`: one file,
/// one node), and the PostgreSQL store that several nodes share (`CourierStorePostgres`). The server, the admin
/// commands and the conformance tests see only this.
///
/// Every method is one transaction (or one read); every write that returns is durable. Errors are
/// ``CourierStoreError``s: `storage-failed` when the database itself failed (nothing of that call was written),
/// another code when the request was refused. The rules each method follows are written once, for every database:
/// ``StoreBackend``'s extensions and ``GroupCommit``.
public protocol CourierDatabase: Sendable {
    /// The limits the store enforces, which the server also checks before it asks.
    var limits: StoreLimits { get }

    /// What the store is and where, without credentials.
    var storeDescription: StoreDescription { get }

    // MARK: Accounts (admin)

    func addUser(name: String, password: String, nowMs: Int64) async throws -> User
    func users() async throws -> [User]
    func user(named name: String) async throws -> User?
    func setPassword(user name: String, password: String, nowMs: Int64) async throws
    func removeUser(named name: String, nowMs: Int64) async throws
    func devices(of name: String) async throws -> [Device]
    func revokeDevice(_ device: DeviceID, of name: String, nowMs: Int64) async throws

    // MARK: Bots

    /// Makes a bot and its first token (``StoreBackend/addBot(name:owner:nowMs:)``).
    func addBot(name: String, owner: String, nowMs: Int64) async throws -> String
    /// Ends a bot's tokens, and gives it a new one when `replacing`.
    @discardableResult
    func revokeBotTokens(of name: String, replacing: Bool, nowMs: Int64) async throws -> String?
    /// Every bot, removed ones included.
    func bots(nowMs: Int64) async throws -> [Bot]
    /// Whether a user is a bot.
    func isBot(_ user: UserID) async throws -> Bool
    /// The owner of a bot, by name.
    func botOwner(of bot: UserID) async throws -> String?

    // MARK: Webhooks

    /// Sets a bot's outgoing webhook (``StoreBackend/setWebhook(url:for:nowMs:)``).
    func setWebhook(url: String, for session: DeviceSession, nowMs: Int64) async throws -> WebhookRow
    func removeWebhook(of user: UserID, nowMs: Int64) async throws -> WebhookRow?
    func webhook(of user: UserID) async throws -> WebhookRow?
    func claimWebhooks(node: String, nowMs: Int64, leaseMs: Int64, limit: Int) async throws -> [WebhookRow]
    func releaseWebhooks(node: String) async throws
    @discardableResult
    func recordWebhook(_ row: WebhookRow, node: String) async throws -> Bool
    func createIncomingHook(group: String, bot: String, nowMs: Int64) async throws -> (token: String, id: Int64)
    func incomingHook(token: String) async throws -> (id: Int64, bot: User, group: String)?
    func incomingHooks() async throws -> [IncomingHook]
    func revokeIncomingHook(_ id: Int64, nowMs: Int64) async throws

    // MARK: Registration and one's own account

    /// Registers a device's Web Push subscription (its endpoint and keys, checked by the caller), or moves one
    /// registered before to it: from another user only with the same keys. Past
    /// ``StoreLimits/maxPushSubscriptionsPerDevice`` or ``StoreLimits/maxPushSubscriptionsPerUser`` the oldest goes.
    ///
    /// - Throws: `invalid-request` (an endpoint past ``StoreLimits/maxPushEndpointBytes``; another user's endpoint
    ///   with other keys), `token-revoked` (the device was logged out meanwhile), `storage-failed`.
    func addPushSubscription(
        endpoint: String,
        p256dh: [UInt8],
        auth: [UInt8],
        for session: DeviceSession,
        nowMs: Int64
    ) async throws
    /// Removes one of the session's user's push subscriptions; whether it had it.
    func removePushSubscription(endpoint: String, for session: DeviceSession) async throws -> Bool
    /// Registers a phone's pushkey with a push gateway for a device (``StoreBackend/addPushGateway(_:for:nowMs:)``).
    func addPushGateway(_ gateway: PushGateway, for session: DeviceSession, nowMs: Int64) async throws
    /// Removes one of the session's user's gateway registrations; whether it had it.
    func removePushGateway(appID: String, pushkey: String, for session: DeviceSession) async throws -> Bool
    /// A user's push subscriptions, oldest first. A revoked device has none.
    func pushSubscriptions(of user: UserID) async throws -> [PushSubscriptionRow]
    /// Takes the push outbox's due rows for a while, and what each owes (``StoreBackend/claimPushes(node:nowMs:leaseMs:limit:maxClaims:)``).
    func claimPushes(
        node: String,
        nowMs: Int64,
        leaseMs: Int64,
        limit: Int,
        maxClaims: Int

    ) async throws
        -> (jobs: [PushJob], nextDueMs: Int64?)
    /// Keeps rows a node is still sending taken (``StoreBackend/renewPushes(_:node:untilMs:)``).
    func renewPushes(_ rows: [Int64], node: String, untilMs: Int64) async throws
    /// Records what became of a node's pushes (``StoreBackend/finishPushes(_:node:)``).
    func finishPushes(_ results: PushResults, node: String) async throws
    /// The push outbox's rows, in order (pushes owed, and retries).
    func pushOutbox() async throws -> [PushOutboxRow]
    /// Whether a user's notifications show who wrote and what (on by default).
    func pushPreviews(of user: UserID) async throws -> Bool
    /// Sets whether a user's notifications show who wrote and what ("New message" otherwise).
    func setPushPreviews(_ on: Bool, for user: UserID) async throws

    /// The key kept under `name` for every server on this database (one per SQLite file, one per PostgreSQL
    /// cluster): made by `make` the first time it is asked for, and the same afterwards, on every node, whoever
    /// made it. A credential: never shown, listed or logged.
    ///
    /// - Throws: `storage-failed`.
    func serverKey(named name: String, nowMs: Int64, make: @Sendable () -> [UInt8]) async throws -> [UInt8]

    func createInvite(maxUses: Int, expiresMs: Int64?, nowMs: Int64) async throws -> (invite: Invite, token: String)
    func invites() async throws -> [Invite]
    func revokeInvite(_ id: Int64, nowMs: Int64) async throws
    func checkInvite(_ token: String?, nowMs: Int64) async throws
    func signUp(
        user name: String,
        password: String,
        invite: String?,
        requiresInvite: Bool,
        deviceName: String,
        nowMs: Int64
    ) async throws -> DeviceSession
    func changePassword(
        of user: UserID,
        from device: DeviceID,
        old: String,
        new: String,
        keepDevices: Bool,
        nowMs: Int64
    ) async throws
    func deleteAccount(_ user: UserID, password: String, nowMs: Int64) async throws

    // MARK: Profiles

    @discardableResult
    func setProfile(of user: UserID, _ update: ProfileUpdate, nowMs: Int64) async throws -> [UserID: UInt64]
    func profiles(of names: [String], for viewer: UserID?) async throws -> [UserProfile]

    // MARK: Devices and sessions

    func login(
        user name: String,
        password: String,
        deviceName: String,
        renewing previous: String?,
        reusing reuse: DeviceReuse?,
        nowMs: Int64
    ) async throws -> DeviceSession
    func authenticate(token: String, nowMs: Int64) async throws -> DeviceSession
    func abandonRenewal(of device: DeviceID) async throws
    func recordDeviceActivity(_ changes: [DeviceActivityChange]) async throws
    func clearConnectedDevices() async throws

    // MARK: Changes made by others (admin commands, other nodes)

    func latestChangeID() async throws -> Int64
    func changes(after id: Int64) async throws -> (changes: [StoreChange], latest: Int64)
    func pruneChanges(olderThanMs: Int64) async throws

    // MARK: Groups

    @discardableResult
    func createGroup(
        name: String,
        owner: String,
        members: [String],
        byOwner: Bool,
        nowMs: Int64
    ) async throws -> [UserID: UInt64]
    @discardableResult
    func changeMembers(
        of group: String,
        actor: UserID?,
        add: [String],
        remove: [String],
        nowMs: Int64
    ) async throws -> [UserID: UInt64]
    func group(named name: String) async throws -> Group
    func leaveGroups(
        of user: UserID,
        addedBy name: String,
        nowMs: Int64
    ) async throws -> (groups: [String], appended: [UserID: UInt64])
    @discardableResult
    func setRole(
        in group: String,
        of member: String,
        to role: GroupRole,
        by actor: UserID?,
        nowMs: Int64
    ) async throws
        -> [UserID: UInt64]
    @discardableResult
    func transferOwnership(
        of group: String,
        to member: String,
        by actor: UserID?,
        nowMs: Int64
    ) async throws
        -> [UserID: UInt64]
    func groupMembers(of group: String, for viewer: UserID?) async throws -> [GroupMember]
    func groupRoster(of group: String, for viewer: UserID?) async throws -> GroupRoster
    func groupNames() async throws -> [String]
    @discardableResult
    func setGroupTitle(
        _ title: String,
        of group: String,
        by actor: UserID?,
        nowMs: Int64
    ) async throws
        -> [UserID: UInt64]
    @discardableResult
    func setNotify(
        _ level: NotifyLevel,
        in conversation: Conversation,
        for user: UserID,
        nowMs: Int64
    ) async throws
        -> [UserID: UInt64]

    // MARK: Writes (the group commit)

    /// - Parameter freshRoom: How many fresh events (``AppliedBatch/fresh``) each user's connections can take as they
    ///   are (0 for a user with none connected or none caught up): events are made only for that many, at most
    ///   ``StoreLimits/maxFreshEventsPerUser``. Nil: that limit for every user.
    func apply(
        _ requests: [WriteRequest],
        nowMs: Int64,
        freshRoom: (@Sendable (UserID) -> Int)?
    ) async throws -> AppliedBatch

    // MARK: Reads

    func events(for user: UserID, after cursor: UInt64, limit: Int) async throws -> [StoredEvent]
    /// The same for several users at once, each after its own cursor and up to another, at most `limit` each (at
    /// least 1, at most `maxEventsPerRead`), in one read: what a node reads for its connections when another node
    /// says their logs grew (users with nothing new are left out). A span's width is not its count of events: the
    /// logs share one stream of positions.
    func events(for logs: [UserID: LogSpan], limit: Int) async throws -> [UserID: [StoredEvent]]
    func logCursor(of user: UserID) async throws -> UInt64
    /// The newest cursors of several users' logs (users that do not exist are left out): what a server polls for
    /// its online users when several share the database.
    func logCursors(of users: [UserID]) async throws -> [UserID: UInt64]
    func ackedCursor(of device: DeviceID) async throws -> UInt64
    func history(
        for user: UserID,
        in conversation: Conversation,
        beforeSeq: UInt64,
        limit: Int
    ) async throws -> HistoryPage
    /// A message a user can see (a member, sent after it joined), by place or by the id its sender gave.
    func message(_ name: MessageName, for user: UserID) async throws -> StoredMessage
    /// Who gave a message's reactions, for a member who can see it.
    func reactors(of name: MessageName, for user: UserID) async throws -> [Reactors]
    /// The bodies an edited message had before, oldest first, for a member who can see it.
    func versions(of name: MessageName, for user: UserID) async throws -> [MessageVersion]
    /// The messages a user can see whose text matches a query, newest first, a page at a time.
    func search(
        for user: UserID,
        query: String,
        in conversation: Conversation?,
        before cursor: UInt64,
        limit: Int
    ) async throws -> SearchPage
    /// Indexes for search up to `limit` messages left unindexed (stored before the index existed, or lost from a
    /// ``SearchIndexer``'s queue), the newest first.
    ///
    /// - Returns: How many it indexed; 0 once none is left.
    func indexPending(limit: Int) async throws -> Int
    /// The same, for rows at `upTo` and below by their place in the index.
    func indexPending(limit: Int, upTo: Int64) async throws -> Int
    /// The highest place in the index of a message not indexed yet, or nil when none is.
    func highestPendingSearch() async throws -> Int64?
    /// The queue of new messages' search tokens, written beside the group commit (``SearchIndexer``).
    var searchIndexer: SearchIndexer { get }
    /// Writes the search index's queue as it fills until ``SearchIndexer/finish()`` (at once with an index written
    /// in the group commit's transaction).
    func followSearchIndex(logger: Logger) async
    func unreadCounts(for user: UserID) async throws -> [UnreadCount]
    func peers(of user: UserID) async throws -> Set<UserID>
    func contacts(of user: UserID) async throws -> Set<UserID>
    @discardableResult
    func block(_ name: String, by user: UserID, on: Bool, nowMs: Int64) async throws -> Bool
    func blocks(of user: UserID) async throws -> [BlockedUser]
    func blockRelations(of user: UserID) async throws -> BlockRelations
    func profile(of name: String, seenBy viewer: UserID) async throws -> UserProfile?
    @discardableResult
    func pin(_ name: MessageName, by user: UserID, off: Bool, nowMs: Int64) async throws -> [UserID: UInt64]
    func pins(in conversation: Conversation, for user: UserID) async throws -> [StoredMessage]
    @discardableResult
    func hide(_ name: MessageName, for user: UserID, nowMs: Int64) async throws -> [UserID: UInt64]
    func members(of address: Conversation, for user: UserID) async throws -> [UserID]
    func userName(of id: UserID) async throws -> String
    func namesAndLastSeen(
        of users: some Collection<UserID>
    ) async throws -> [UserID: (name: String, lastSeenMs: Int64?)]

    // MARK: Media

    @discardableResult
    func recordUpload(user: UserID, sha256: String, size: Int64, quota: Int64, nowMs: Int64) async throws -> Int64
    /// Takes back an upload recorded for a forward that did not go, unless a message the user sent carries it.
    func forgetUnsentUpload(user: UserID, sha256: String) async throws
    func mediaUsage(of user: UserID) async throws -> Int64
    func uploadedSize(by user: UserID, sha256: String) async throws -> Int64?
    func mediaAccess(for user: UserID, sha256: String) async throws -> MediaAccess?
    /// Of `sha256s`, the files something keeps (Rules/MediaCollection.swift).
    func referencedMedia(_ sha256s: [String], ownedSinceMs: Int64) async throws -> Set<String>
    /// Dooms a file nothing keeps; false when something keeps it now.
    func doomMedia(_ sha256: String, ownedSinceMs: Int64, nowMs: Int64) async throws -> Bool
    /// The files doomed before `beforeMs` and not yet forgotten.
    func doomedMedia(beforeMs: Int64) async throws -> [String]
    /// Forgets a doomed file whose bytes are deleted.
    func forgetDoomedMedia(_ sha256: String) async throws
    /// Where media bytes are kept with this store: a ``BlobStore`` in `folder` for a store one server owns (the
    /// default); a store several nodes share keeps them where every node reads them (and leaves `folder` alone).
    ///
    /// - Throws: ``CourierStoreError`` with code `storage-failed` when the storage cannot be opened.
    func blobStorage(folder: URL, configuration: BlobStore.Configuration, logger: Logger) throws -> any BlobStorage

    /// Asks the database something trivial: throws when it does not answer (`/health` says so).
    func probe() async throws

    // MARK: Limits across nodes

    /// Where the nodes sharing this database keep the limits that must hold on all of them together; nil for a
    /// database one server owns (its memory is the whole cluster).
    var clusterAdmission: (any ClusterAdmission)? { get }
    /// Where the nodes sharing this store take each other's writes; nil for a store of one server's own.
    var clusterRoutes: (any ClusterRoutes)? { get }

    // MARK: Upkeep

    /// How often the server calls ``maintain()`` while it runs; nil for a store that needs no upkeep of its own.
    var maintenanceInterval: Duration? { get }

    /// Work the store does apart from the writes, so that no write waits for it (SQLite's: copying the
    /// write-ahead log back into the database file). Quick when there is nothing to do.
    func maintain() async throws

    /// Lets go of the database; nothing may be asked afterwards.
    func close() throws
}

extension CourierDatabase {
    public func blobStorage(
        folder: URL,
        configuration: BlobStore.Configuration,
        logger: Logger
    ) throws -> any BlobStorage {
        try BlobStore(folder: folder, configuration: configuration, logger: logger)
    }

    /// A password login that renews the device of the token a client held (`renewing`), else makes one.
    public func login(
        user name: String,
        password: String,
        deviceName: String,
        renewing previous: String?,
        nowMs: Int64
    ) async throws -> DeviceSession {
        try await self.login(
            user: name,
            password: password,
            deviceName: deviceName,
            renewing: previous,
            reusing: nil,
            nowMs: nowMs
        )
    }

    /// A password login that makes a new device.
    public func login(
        user name: String,
        password: String,
        deviceName: String,
        nowMs: Int64
    ) async throws
        -> DeviceSession
    {
        try await self.login(user: name, password: password, deviceName: deviceName, renewing: nil, nowMs: nowMs)
    }

    /// A group made by an admin (not by its owner's request).
    @discardableResult
    public func createGroup(
        name: String,
        owner: String,
        members: [String],
        nowMs: Int64
    ) async throws
        -> [UserID: UInt64]
    {
        try await self.createGroup(name: name, owner: owner, members: members, byOwner: false, nowMs: nowMs)
    }
}

extension CourierDatabase {
    /// Reads the newest change's id: a read of the smallest kind.
    public func probe() async throws {
        _ = try await self.latestChangeID()
    }

    /// One server owns the database.
    public var clusterAdmission: (any ClusterAdmission)? { nil }
    public var clusterRoutes: (any ClusterRoutes)? { nil }

    /// No upkeep of its own.
    public var maintenanceInterval: Duration? { nil }

    public func maintain() async throws {}
}

/// What every store applies alike, whatever its database: its limits and policies, and its password work. A server
/// carries these; each database's configuration takes them (with settings of its own).
public struct StoreSettings: Sendable {
    /// The limits and policies.
    public var limits: StoreLimits = .init()
    /// How the search index is written beside the group commit.
    public var searchIndex: SearchIndexer.Configuration = .init()
    /// The cost of password hashes written from now on.
    public var passwordHasher: PasswordHasher = .standard
    /// Threads that hash and check passwords (scrypt costs about 32 MiB and 0.1 s each), apart from the threads
    /// that deliver messages. The default is a quarter of the processors, at least one; at most
    /// ``maxPasswordThreads`` are started, whatever this says (each check holds its hash's memory).
    public var passwordThreads: Int = max(1, ProcessInfo.processInfo.activeProcessorCount / 4)
    /// The most password threads a store starts: 64 checks at once hold about 2 GiB.
    public static let maxPasswordThreads = 64
    /// Password checks that may wait for a thread; one more is refused at once with `throttled`.
    public var maxQueuedPasswordChecks: Int = 16
    /// On PostgreSQL: the planner's cost of a page read at random for the store's connections (their
    /// `random_page_cost`); nil keeps the database's own (see `PostgresStore.Configuration.randomPageCost`).
    public var postgresRandomPageCost: Double? = 1.1
    /// On SQLite: the most rows its group commit carries from one batch to the next instead of reading them again
    /// (`SQLiteStore.Configuration.maxCarriedRows`; 0: none). Under a steady load of small batches, reading each
    /// batch's conversations, members, users and devices afresh was nearly half of the writer's time.
    public var sqliteMaxCarriedRows: Int = 262_144

    public init() {}
}

/// The limits a store enforces and the policies it applies, the same for every ``CourierDatabase``.
public struct StoreLimits: Sendable, Hashable {
    /// How long a session token lasts after the login that made it.
    public var tokenLifetime: Duration = .seconds(30 * 24 * 3600)
    /// After a device is renewed (a password login with the token it held), how long its previous token still
    /// works unless the new one is used first (never past its own expiry).
    public var renewalGrace: Duration = .seconds(600)
    /// How long after sending a sender may recall a message.
    public var recallWindow: Duration = .seconds(120)
    /// Rows read per query when paging through an event log.
    public var maxEventsPerRead: Int = 512
    /// The longest message id a client may choose, in UTF-8 bytes.
    public var maxMessageIDBytes: Int = 128
    /// The longest device name, in UTF-8 bytes.
    public var maxDeviceNameBytes: Int = 64
    /// The most devices of one user that can connect (not revoked, not expired); a password login that would make
    /// one more is refused with `quota-exceeded` (renewing a device's token is not a new device).
    public var maxDevicesPerUser: Int = 100
    /// The most push targets (Web Push subscriptions and gateway pushkeys) one device keeps (a browser has one per
    /// site; a few allow for reinstalls): past it the device's oldest goes.
    public var maxPushSubscriptionsPerDevice: Int = 4
    /// The most push targets one user keeps, over all its devices: past it the user's oldest goes.
    public var maxPushSubscriptionsPerUser: Int = 32
    /// The longest push endpoint taken, in bytes of UTF-8 (the push services' are a few hundred).
    public var maxPushEndpointBytes: Int = 1024
    /// The longest app id of a push gateway registration (Matrix's limit).
    public var maxPushAppIDBytes: Int = 64
    /// The longest pushkey of a push gateway registration (Matrix's limit).
    public var maxPushKeyBytes: Int = 512
    /// The most events of one user a group commit returns as they were written (``AppliedBatch/fresh``); a user
    /// with more has them read back. 0 returns none.
    public var maxFreshEventsPerUser: Int = 4096
    /// The most members' receipt marks a history page carries (``HistoryPage/receipts``), the furthest read
    /// first: in a larger group, "read by N" counts these.
    public var maxReceiptMarks: Int = 256
    /// How long after sending a sender may edit a message (zero: for ever).
    public var editWindow: Duration = .seconds(48 * 3600)
    /// The most groups one user may have made (and asked for over a session) that still have a member; one more is
    /// refused with `quota-exceeded`. Groups the administrator makes are not counted.
    public var maxGroupsPerMaker: Int = 200
    /// The most messages one conversation may have pinned at once; one more is refused with `quota-exceeded`.
    public var maxPinsPerConversation: Int = 50
    /// The most users one user may block; one more is refused with `quota-exceeded`.
    public var maxBlocksPerUser: Int = 1_000
    /// The most times one message may be edited: each edit keeps the text it replaced.
    public var maxEditsPerMessage: Int = 20
    /// The most different reaction keys one message may carry.
    public var maxReactionKeysPerMessage: Int = 20
    /// The most users listed under each key of a message's reactions (``StoreBackend/reactors(of:for:)``), the
    /// earliest first; the count says how many gave it.
    public var maxReactorsListed: Int = 100
    /// The most reactions one user may put on one message.
    public var maxReactionsPerUser: Int = 5
    /// The most earlier versions of a message one request returns.
    public var maxVersionsPerRead: Int = 64
    /// The most candidates one search request looks at (the index's tokens carry no positions, so some fail the
    /// exact check): a page that reaches it ends early, saying where to go on.
    public var maxSearchScan: Int = 2_000
    /// The most hits one search page holds.
    public var maxSearchPage: Int = 50
    /// The longest display name, in characters (what a reader sees as one) and in UTF-8 bytes.
    public var maxDisplayNameCharacters: Int = 64
    public var maxDisplayNameBytes: Int = 256
    /// The largest avatar, and the largest thumbnail of one, in bytes.
    public var maxAvatarBytes: Int64 = 5 * 1024 * 1024
    public var maxThumbnailBytes: Int64 = 64 * 1024
    /// The fewest characters a password a user chooses (signing up, changing it) may have; shorter is refused with
    /// `weak-password`. An administrator's `courier user add --password` is not held to it.
    public var minPasswordCharacters: Int = 8
    /// The longest password a user may choose, in UTF-8 bytes.
    public var maxPasswordBytes: Int = 1_024

    public init() {}
}

extension CourierDatabase {
    /// Anyone's profiles by name (``StoreBackend/profiles(of:for:)`` with no viewer).
    public func profiles(of names: [String]) async throws -> [UserProfile] {
        try await self.profiles(of: names, for: nil)
    }

    /// Applies writes, returning fresh events for every user up to ``StoreLimits/maxFreshEventsPerUser``.
    public func apply(_ requests: [WriteRequest], nowMs: Int64) async throws -> AppliedBatch {
        try await self.apply(requests, nowMs: nowMs, freshRoom: nil)
    }
}

/// The entries of a user's log after one cursor, up to another (both its own).
public struct LogSpan: Hashable, Sendable {
    public var after: UInt64
    public var upTo: UInt64

    public init(after: UInt64, upTo: UInt64) {
        self.after = after
        self.upTo = upTo
    }
}
