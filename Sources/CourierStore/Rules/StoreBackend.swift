/// What a database gives the store's rules: transactions of ``StoreTransaction``s, each a narrow set of reads and
/// writes in the database's own SQL. The rules (who may log in, renew, revoke, change a group, upload, read) are
/// written once, in extensions of this protocol, and every ``CourierDatabase`` that is a backend follows them;
/// the group commit's rules are ``GroupCommit``'s.
package protocol StoreBackend: CourierDatabase {
    associatedtype Transaction: StoreTransaction

    /// The store's password hashing and checking.
    var passwords: Passwords { get }

    /// Runs `body` as one write transaction: everything it wrote commits when it returns, nothing when it throws.
    /// Where the database aborts a transaction for a conflict with another writer, `body` runs again from the
    /// start, so it must read everything it decides on through the transaction.
    ///
    /// - Throws: What `body` throws when it is a refusal (a ``CourierStoreError`` of another code than
    ///   `storage-failed`); `storage-failed` for everything else.
    func transaction<T: Sendable>(
        doing: String,
        _ body: @escaping @Sendable (Transaction) async throws -> T
    ) async throws -> T

    /// Runs reads outside a write transaction (each may see what was committed when it began).
    ///
    /// - Throws: As ``transaction(doing:_:)``.
    func reading<T: Sendable>(
        doing: String,
        _ body: @escaping @Sendable (Transaction) async throws -> T
    ) async throws -> T
}

/// The reads and writes of one transaction of a ``StoreBackend``, in its database's SQL. Each says what it reads or
/// writes and nothing of why: that is the rules'. Names are matched as the database matches them (without regard to
/// case); a method that writes is called only inside ``StoreBackend/transaction(doing:_:)``. A `locking` read
/// locks the rows it reads until the transaction ends, where the database has several writers.
package protocol StoreTransaction: Sendable {
    // MARK: Users

    /// A user by name (removed ones included), or nil. The name follows the naming rule.
    func user(named name: String) async throws -> User?
    /// Every user, removed ones included, by name.
    func users() async throws -> [User]
    /// A user's password hash, or nil when it has none (removed).
    func passwordHash(of user: UserID) async throws -> String?
    /// Adds a user, unless its name is taken (by any user, removed or not, in any case).
    ///
    /// - Returns: The new user's id, or nil when the name is taken.
    func insertUser(name: String, passwordHash: String, nowMs: Int64) async throws -> UserID?
    func setPasswordHash(_ hash: String, of user: UserID) async throws
    /// Sets what a device acknowledged (a bot's new token taking over from its old ones).
    func setAckedCursor(_ cursor: Int64, of device: DeviceID) async throws
    /// Makes a user a bot, answered for by `owner`.
    func setBotOwner(_ owner: UserID, of bot: UserID) async throws
    /// Every bot, with its owner, by id.
    func botOwners() async throws -> [(bot: UserID, owner: UserID)]
    /// Marks a user removed and drops its password hash.
    func markRemoved(_ user: UserID, nowMs: Int64) async throws
    /// The newest cursor of a user's event log.
    func logCursor(of user: UserID) async throws -> Int64

    // MARK: Invitations

    /// Adds an invitation, keeping its token's SHA-256.
    ///
    /// - Returns: Its id.
    func insertInvite(tokenHash: [UInt8], maxUses: Int, expiresMs: Int64?, nowMs: Int64) async throws -> Int64
    /// The invitation whose token has this digest, or nil.
    func invite(holding tokenHash: [UInt8], locking: Bool) async throws -> Invite?
    /// Every invitation, oldest first.
    func invites() async throws -> [Invite]
    /// Counts one more use of an invitation.
    func useInvite(_ id: Int64) async throws
    /// Revokes an invitation that is not revoked yet.
    ///
    /// - Returns: Whether one was.
    func revokeInvite(_ id: Int64, nowMs: Int64) async throws -> Bool

    // MARK: Push subscriptions

    /// A user's push subscriptions, of devices not revoked, oldest first.
    func pushSubscriptions(of user: UserID) async throws -> [PushSubscriptionRow]
    /// The subscription with this endpoint, whoever's it is, or nil.
    func pushSubscription(at endpoint: String) async throws -> PushSubscriptionRow?
    /// Stores a subscription, replacing one with the same endpoint (of any device).
    func putPushSubscription(_ row: PushSubscriptionRow) async throws
    /// Deletes a user's subscription by endpoint.
    ///
    /// - Returns: Whether there was one.
    func deletePushSubscription(endpoint: String, of user: UserID) async throws -> Bool
    /// Deletes every subscription of these devices.
    func deletePushSubscriptions(of devices: [DeviceID]) async throws
    /// Sets users' count of places to be pushed to (``UserRow/pushable``) to what they have now.
    func recountPushTargets(of users: [UserID]) async throws
    /// Whether a user's notifications show who wrote and what (true for a user never asked).
    func pushPreviews(of user: UserID) async throws -> Bool
    func setPushPreviews(_ on: Bool, of user: UserID) async throws

    // MARK: Webhooks

    /// Adds a user's webhook (unclaimed), or replaces it (the node that holds it keeps it: its round of the one
    /// replaced stops, and it sends the new one's updates in order).
    func putWebhook(_ row: WebhookRow) async throws
    /// Removes a user's webhook; whether there was one.
    func deleteWebhook(of user: UserID) async throws -> Bool
    func webhook(of user: UserID) async throws -> WebhookRow?
    /// Takes the webhooks that are not disabled and that no other node holds (or this one does), until
    /// `nowMs + leaseMs`.
    func claimWebhooks(node: String, nowMs: Int64, leaseMs: Int64, limit: Int) async throws -> [WebhookRow]
    /// Lets go of the webhooks a node holds.
    func releaseWebhooks(node: String) async throws
    /// Writes a webhook's delivery state (cursor, attempts, due, failing, disabled, error), if `node` holds it and it
    /// is still the one set at `createdMs`; whether it did.
    func updateWebhook(_ row: WebhookRow, node: String) async throws -> Bool
    func insertIncomingHook(tokenHash: [UInt8], bot: UserID, group: String, nowMs: Int64) async throws -> Int64
    /// The incoming hook with this token's digest, not revoked: its bot and group.
    func incomingHook(tokenHash: [UInt8]) async throws -> (id: Int64, bot: UserID, group: String)?
    func incomingHooks() async throws -> [(id: Int64, bot: UserID, group: String, createdMs: Int64, revokedMs: Int64?)]
    func revokeIncomingHook(_ id: Int64, nowMs: Int64) async throws -> Bool

    // MARK: The push outbox

    /// Takes up to `limit` rows due at `nowMs` (the earliest first) that no other transaction holds, making them
    /// due again only after `nowMs + leaseMs`.
    func claimPushOutbox(node: String, nowMs: Int64, leaseMs: Int64, limit: Int) async throws -> [PushOutboxRow]
    /// The earliest time a row is due, or nil for an empty outbox.
    func nextPushDueMs() async throws -> Int64?
    /// Deletes the rows among `ids` that `node` holds.
    ///
    /// - Returns: The ids deleted.
    func finishPushOutbox(_ ids: [Int64], node: String) async throws -> [Int64]
    /// Makes the rows among `ids` that `node` holds due at `untilMs`.
    func renewPushOutbox(_ ids: [Int64], node: String, untilMs: Int64) async throws
    func insertPushRetries(_ retries: [PushResults.Retry]) async throws
    /// Every row, in order.
    func pushOutboxRows() async throws -> [PushOutboxRow]
    /// The members of a conversation joined before `seq` that have somewhere to be pushed and are not removed
    /// (only `user`, when given), with their mute, their preview setting, and whether the message at `seq`
    /// mentions them.
    func pushRecipients(of conversation: Int64, seq: Int64, only user: UserID?) async throws -> [PushRecipientRow]
    /// The subscriptions of these users' devices that are neither revoked nor expired, with whether each device
    /// has a live session.
    func pushTargets(of users: [UserID], nowMs: Int64) async throws -> [PushTargetRow]

    // MARK: Server keys

    /// A key the servers keep (the Web Push signing key), by name, or nil.
    func serverKey(named name: String) async throws -> [UInt8]?
    /// Keeps a key under a name, unless one is kept under it already (then nothing changes).
    func insertServerKey(named name: String, value: [UInt8], nowMs: Int64) async throws

    // MARK: Profiles

    /// Users' profiles, of those that set one, by id.
    func profiles(of users: [UserID]) async throws -> [UserID: ProfileRow]
    /// Sets a user's profile, or deletes it (nil).
    func setProfile(_ profile: ProfileRow?, of user: UserID) async throws
    /// A picture (an avatar or a thumbnail) of the profile of a user that was not removed, by digest; nil when no
    /// profile shows it.
    func profileImage(sha256: String) async throws -> ProfileImage?

    // MARK: Devices

    /// A user's devices, revoked ones included, oldest first.
    func devices(of user: UserID) async throws -> [Device]
    /// The device whose token has this digest, or whose previous token has it and is still good at `nowMs`
    /// (``DeviceTokens/previousUntilMs``), with its tokens and user.
    func device(holding tokenHash: [UInt8], nowMs: Int64, locking: Bool) async throws -> HeldDevice?
    /// A device's tokens, or nil when there is no such device.
    func tokens(of device: DeviceID, locking: Bool) async throws -> DeviceTokens?
    func setTokens(_ tokens: DeviceTokens, of device: DeviceID) async throws
    /// Adds a device.
    ///
    /// - Returns: Its id.
    func insertDevice(_ device: NewDevice) async throws -> DeviceID
    /// Marks a user's devices revoked, those that are not yet: the ones given, or all of them (nil). The rules call
    /// ``revokeDevices(_:of:nowMs:)``, which drops their push subscriptions too.
    ///
    /// - Returns: The devices revoked now, by id.
    func markDevicesRevoked(_ devices: [DeviceID]?, of user: UserID, nowMs: Int64) async throws -> [DeviceID]

    /// How many devices of a user can connect: not revoked, token not expired at `nowMs`.
    func usableDevices(of user: UserID, nowMs: Int64) async throws -> Int
    /// Users' rows, locked in the order of their ids: their logs grow in this transaction alone until it ends.
    ///
    /// - Throws: `storage-failed` when one does not exist.
    func lockUsers(_ users: [UserID]) async throws -> [UserID: UserRow]
    /// Takes the entries' positions from the database's one counter (``LogWrites/positions(after:)``), then writes
    /// them and the grown logs' newest cursors. Where several writers share the database, the counter's row stays
    /// locked until the commit, so positions are taken in commit order: call it as the transaction's last
    /// statement, after every other lock it takes (a holder of the counter must never wait for anything).
    func writeLog(_ log: inout LogWrites) async throws

    // MARK: Groups and members

    /// Adds a group, unless its name is taken (in any case), made by `maker` (nil: the administrator's).
    ///
    /// - Returns: The group's conversation id, or nil when the name is taken.
    func insertGroup(name: String, owner: UserID, madeBy maker: UserID?, nowMs: Int64) async throws -> Int64?
    /// A group by name, or nil.
    func group(named name: String, locking: Bool) async throws -> GroupRow?
    /// The groups a user is a member of, by id (locked in that order when `locking`).
    func groups(of user: UserID, locking: Bool) async throws -> [GroupRow]
    /// The members of conversations, each conversation's by id.
    func members(of conversations: [Int64]) async throws -> [Int64: [UserID]]
    /// Adds members to a conversation, as having joined (and read, and been delivered) at a seq, put there by
    /// `addedBy` (nil: the administrator).
    func insertMembers(_ users: [UserID], into conversation: Int64, atSeq seq: Int64, addedBy: UserID?) async throws
    /// The groups a user is a member of because another put it there (made the group with it, or added it), by id
    /// (locked in that order when `locking`), with their names.
    func groups(of member: UserID, addedBy: UserID, locking: Bool) async throws -> [(row: GroupRow, name: String)]
    /// How many groups a user made that still have a member.
    func groupsMade(by user: UserID) async throws -> Int
    func deleteMember(_ user: UserID, from conversation: Int64) async throws
    /// A group's members with their roles (member or admin, as kept: the owner is the group's) and where they joined,
    /// the longest-standing first (by joined seq, then id).
    func memberRoles(of group: Int64) async throws -> [MemberRole]
    /// Sets a member's kept role (member or admin).
    func setRole(_ role: GroupRole, of user: UserID, in group: Int64) async throws
    /// Sets a group's owner.
    func setOwner(_ owner: UserID, of group: Int64) async throws
    /// Sets a group's title (nil: none).
    func setTitle(_ title: String?, of group: Int64) async throws
    /// Sets how a conversation alerts a member.
    ///
    /// - Returns: The level it had, or nil when the user is not a member.
    func setNotify(_ level: NotifyLevel, of user: UserID, in conversation: Int64) async throws -> NotifyLevel?
    /// Records a new user's name's skeleton (``NameSkeleton``).
    ///
    /// - Returns: False when another user's name has that skeleton.
    func claimSkeleton(_ skeleton: String, for user: UserID) async throws -> Bool
    /// The blocks a user is in, either side (only those with one of `others`, when given).
    func blockPairs(involving user: UserID, with others: [UserID]?) async throws -> [BlockRow]
    /// Blocks or unblocks a user, and marks the blocker's row of their direct conversation (where there is one) as
    /// blocking, with its read and delivered marks as they are, or no longer.
    ///
    /// - Returns: Whether it changed anything.
    func setBlock(_ blocker: UserID, _ blocked: UserID, on: Bool, nowMs: Int64) async throws -> Bool
    /// Locks two users' direct conversation's row, where they have one, as a send's batch locks it (before any
    /// user's row).
    func lockDirect(_ pair: UserPair) async throws
    /// Locks a conversation's row, as a send's batch locks it (before any user's row).
    func lockConversation(_ id: Int64) async throws
    /// A conversation's pinned messages: seq, who pinned it and when, the most recently pinned first.
    func pins(in conversation: Int64) async throws -> [(seq: Int64, by: UserID, pinnedMs: Int64)]
    /// Pins or unpins a message.
    func setPin(in conversation: Int64, seq: Int64, by user: UserID, on: Bool, nowMs: Int64) async throws
    /// Hides messages from users (nothing for a row that is there already).
    func insertHidden(_ rows: [HiddenRow]) async throws

    /// Whether a user's name has this skeleton.
    func skeletonTaken(_ skeleton: String) async throws -> Bool
    /// The other members of every conversation a user is in (of its direct ones only, with `directOnly`; only
    /// `peer`, when given), with whether each of the two has written there.
    func companions(of user: UserID, directOnly: Bool, with peer: UserID?) async throws -> [Companion]
    /// A group by name, with its owner's name and its members' names (by name).
    func groupWithMembers(named name: String) async throws -> Group?
    /// The names of every group, sorted.
    func groupNames() async throws -> [String]

    // MARK: Logs, history and what users see

    /// The entries of a user's log after a cursor, oldest first, at most `limit`.
    func events(of user: UserID, after cursor: Int64, limit: Int) async throws -> [LogRead]
    /// The entries of several users' logs, each after its own cursor and up to another, oldest first, at most
    /// `limit` each.
    func events(of logs: [UserID: (after: Int64, upTo: Int64)], limit: Int) async throws -> [UserID: [LogRead]]
    /// Users' names by id (the ones that exist), from the store's cache where it has them.
    func names(of users: Set<UserID>) async throws -> [UserID: String]
    /// The newest cursors of users' logs (the users that exist).
    func logCursors(of users: [UserID]) async throws -> [UserID: Int64]
    /// The cursor a device last acknowledged, or nil when there is no such device.
    func ackedCursor(of device: DeviceID) async throws -> Int64?
    /// The seq at which a user joined a conversation, or nil when it is not a member.
    func joinedSeq(of user: UserID, in conversation: Int64) async throws -> Int64?
    /// Two users' direct conversation, or nil when they have none.
    func directID(of pair: UserPair) async throws -> Int64?
    /// How far a conversation's other members received and read it, for the members (other than `user`) whose
    /// delivered or read mark is at `seq` or past it, and past where they joined (joining marks a member as having
    /// read everything before, which says nothing): the furthest read first (then delivered, then by user id), at
    /// most `limit`.
    func receiptMarks(
        in conversation: Int64,
        excluding user: UserID,
        from seq: Int64,
        limit: Int
    ) async throws -> [MarkRow]
    /// A conversation's messages with seqs after `after` and before `before`, newest first, at most `limit`, but
    /// the ones hidden from `reader`.
    func messages(
        in conversation: Int64,
        after: Int64,
        before: Int64,
        limit: Int,
        hiddenFrom reader: UserID
    ) async throws -> [MessageRead]
    /// Which of these messages are hidden from a user.
    func hidden(from user: UserID, among positions: [MessagePosition]) async throws -> Set<MessagePosition>
    /// The messages a user can see (a member, sent after it joined, not hidden from it) with an id, from a sender and in a conversation
    /// when given, at most `limit`.
    func messages(
        withID id: String,
        from sender: UserID?,
        in conversation: Int64?,
        visibleTo user: UserID,
        limit: Int
    ) async throws -> [FoundMessage]
    /// The message at a place, if a user can see it.
    func message(in conversation: Int64, seq: Int64, visibleTo user: UserID) async throws -> FoundMessage?
    /// The per-key reaction counts of a conversation's messages from one seq to another (both included), each
    /// message's keys in the order they were first given, with whether `reader` gave each.
    func reactionCounts(
        in conversation: Int64,
        from: Int64,
        to: Int64,
        reader: UserID
    ) async throws -> [Int64: [ReactionCount]]
    /// Who gave a message's reactions: each key once, the first given first, with how many gave it and the first
    /// `perKey` of them, the earliest first.
    func reactors(in conversation: Int64, seq: Int64, perKey: Int) async throws -> [ReactorRows]
    /// A message's earlier versions, oldest first, at most `limit`.
    func versions(in conversation: Int64, seq: Int64, limit: Int) async throws -> [MessageVersion]

    // MARK: Search

    /// The ids of the conversations a user is in.
    func conversationIDs(of user: UserID) async throws -> [Int64]
    /// The indexed messages a user can see (a member, sent after it joined) that hold every token, in the given
    /// conversations (nil: all of the user's), with index positions below `before`, the highest first, at most
    /// `limit`.
    func searchCandidates(
        _ tokens: [String],
        in conversations: [Int64]?,
        for user: UserID,
        before: Int64,
        limit: Int
    ) async throws -> [FoundMessage]
    /// Messages not indexed yet at index positions up to `upTo`, the highest first, at most `limit`, with their
    /// bodies.
    func pendingSearch(limit: Int, upTo: Int64) async throws -> [(doc: Int64, conversation: Int64, body: [UInt8])]
    /// The highest index position of a message not indexed yet, or nil.
    func highestPendingSearch() async throws -> Int64?
    /// Sets the tokens of index positions that have none yet; skips a row another transaction holds, never waits
    /// for one.
    ///
    /// - Returns: How many rows it set.
    func setSearchTokens(_ tokens: [(doc: Int64, tokens: [String])]) async throws -> Int
    /// Sets the tokens of messages, by place, that have none yet; skips a row another transaction holds (it is
    /// editing or recalling the message, or indexing it too), and never waits for one.
    func setSearchTokens(at documents: [(conversation: Int64, seq: Int64, tokens: [String])]) async throws
    /// Every conversation a user is in, the one with the newest message first.
    func memberships(of user: UserID) async throws -> [Membership]
    /// Users' names and when each was last seen: the latest disconnect of any of its devices (nil if never).
    func namesAndLastSeen(of users: [UserID]) async throws -> [UserID: (name: String, lastSeenMs: Int64?)]

    // MARK: Media

    /// The bytes of media a user has uploaded (each file once).
    func mediaUsage(of user: UserID) async throws -> Int64
    /// The size of a file a user uploaded, or nil when it did not.
    func uploadedSize(by user: UserID, sha256: String) async throws -> Int64?
    /// Records a user's upload of a file (nothing when it is recorded already).
    func insertUpload(user: UserID, sha256: String, size: Int64, nowMs: Int64) async throws
    /// Deletes a user's upload record of a file unless a message the user sent carries it.
    func deleteUnsentUpload(user: UserID, sha256: String) async throws
    /// The messages carrying a file in the conversations a user is in (not recalled: a recall takes its media
    /// away), with the size its sender uploaded.
    func mediaCarriers(of sha256: String, for user: UserID) async throws -> [MediaCarrier]
    /// Takes the files' locks until the transaction ends: shared by what comes to name a file (a send, an upload's
    /// record, a profile picture), exclusive by the collection of files nothing names
    /// (``StoreBackend/doomMedia(_:ownedSinceMs:nowMs:)``). Nothing where one writer runs at a time.
    func lockMedia(_ sha256s: [String], exclusive: Bool) async throws
    /// Of `sha256s`, the files something keeps: a message, a profile picture of a user not removed, or an upload
    /// record made at or after `ownedSinceMs`.
    func referencedMedia(_ sha256s: [String], ownedSinceMs: Int64) async throws -> Set<String>
    /// Deletes every upload record of a file.
    func deleteMediaOwners(of sha256: String) async throws
    /// Records that a file is being deleted.
    ///
    /// - Returns: false when it is recorded already (by another collection).
    func insertDoomedMedia(_ sha256: String, nowMs: Int64) async throws -> Bool
    /// Whether a file is being deleted.
    func isDoomedMedia(_ sha256: String) async throws -> Bool
    /// The files being deleted, doomed before `beforeMs`.
    func doomedMedia(beforeMs: Int64) async throws -> [String]
    /// Makes a user's upload record of a file as young as `nowMs` (an upload of it again).
    func touchUpload(user: UserID, sha256: String, nowMs: Int64) async throws
    /// Forgets that a file was being deleted (it is gone).
    func deleteDoomedMedia(_ sha256: String) async throws

    // MARK: Changes a running server reacts to

    /// Records changes, ids given in order: a server reading after the newest id it saw never skips one that
    /// commits later (called last in a transaction, after its other writes).
    func recordChanges(_ changes: [StoreChange], nowMs: Int64) async throws
    /// The id of the newest recorded change; 0 when there is none.
    func latestChangeID() async throws -> Int64
    /// Recorded changes after an id, oldest first, at most `limit`.
    func changes(after id: Int64, limit: Int) async throws -> [(id: Int64, change: StoreChange?)]
    /// Deletes changes recorded before a time.
    func pruneChanges(olderThanMs: Int64) async throws
}
