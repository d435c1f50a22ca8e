/// The rules of one group commit, written once for every database: what a send, an acknowledgement, a read mark and
/// a recall may do, and what each writes.
///
/// The rules read and write nothing themselves. They decide over the rows a database's driver has loaded into this
/// value (conversations with their members, users' log cursors, names, messages by their senders' ids, devices):
/// when a rule meets a row that is not loaded yet, ``step(_:)`` returns what it needs (``BatchNeed``) and the driver
/// loads it, in its own SQL and under its own locks, then asks again. A rule checks everything it reads before it
/// changes anything, so asking again is always safe. What the batch writes (new messages, recalls, receipts'
/// cursors, events) is gathered here, and the driver writes it when every request is applied.
///
/// Drivers do not wait for the misses: every request first declares what it will read (``declareNeeds(of:into:)``),
/// and the loop every driver runs (``Run``) loads what the whole batch declares in one round per wave, so a rule
/// finds its rows loaded and asks for nothing; a miss is left for what no declaration foresaw (a conversation the
/// batch makes). PostgreSQL's plan takes the locks, in their order, before the first wave.
package struct GroupCommit: Sendable {
    /// The server's clock, in milliseconds since 1970.
    package let nowMs: Int64
    package let limits: StoreLimits
    /// The entries the batch appends to users' logs, given their positions as it is written.
    package var log = LogWrites()
    /// The users this batch made peers.
    package var introductions: [Introduction] = []

    // MARK: What the rules read, as the driver loaded it

    /// Conversations with their members (under their rows' locks where the database has several writers), as the
    /// batch changes them.
    package internal(set) var conversations: [Int64: BatchConversation] = [:]
    /// Conversations' names and users, for a conversation the batch only names (a resend's original).
    var headers: [Int64: ConversationHeader] = [:]
    /// Group ids by name as the requests give it; nil when there is no such group.
    var groupIDs: [String: Int64?] = [:]
    /// User ids by name as the requests give it; nil when there is no such user.
    var userIDs: [String: UserID?] = [:]
    /// The direct conversation of each pair of users; nil when they have none.
    var directIDs: [UserPair: Int64?] = [:]
    /// Users' rows (under their locks where the database has several writers).
    package internal(set) var users: [UserID: UserRow] = [:]
    /// Users' names by id; nil when there is no such user.
    var names: [UserID: String?] = [:]
    /// Messages by their senders' ids; nil when the sender stored none under that id.
    var messages: [MessageKey: MessageRow?] = [:]
    /// The size of each upload asked about; nil when the user uploaded no such file.
    var uploads: [UploadKey: Int64?] = [:]
    /// Devices (under their locks where the database has several writers); nil when there is no such device.
    var devices: [DeviceID: DeviceRow?] = [:]
    /// What each acknowledgement's range of a user's log delivers.
    var deliveries: [AckRange: [Delivery]] = [:]
    /// Messages by their place, as edits, replies and reactions name them (as the batch changed them); nil when
    /// there is none.
    var positioned: [MessagePosition: TargetRow?] = [:]
    /// The seqs of the messages a conversation holds under an id (at most two: one is all a rule wants).
    var withIDs: [IDLookup: [Int64]] = [:]
    /// Messages the batch recalled: a row read of one later in the batch is read recalled.
    var recalledPositions: Set<MessagePosition> = []
    /// Each message's reactions by key, with how many users gave each (as the batch changed them).
    var reactionCounts: [MessagePosition: [String: Int]] = [:]
    /// The keys a user put on a message (as the batch changed them).
    var myReactions: [ReactionOwner: Set<String>] = [:]

    // MARK: What the batch writes

    /// The messages the batch stores, in the order they were sent.
    package internal(set) var newMessages: [NewMessage] = []
    /// Where each new message is in ``newMessages``.
    var newMessageIndex: [MessageKey: Int] = [:]
    /// Messages stored before the batch that it recalls.
    package internal(set) var recalledMessages: [MessagePosition] = []
    /// The devices' acknowledged cursors as the batch moved them.
    package internal(set) var ackedCursors: [DeviceID: Int64] = [:]
    /// The conversations whose rows or members the batch changed (a seq, a time, a mark): the ones to write, found
    /// without looking at every conversation loaded (or carried from the batch before, ``CarriedRows``).
    package internal(set) var touched: Set<Int64> = []
    /// How many members the conversations held here have: carried in, and loaded by this batch (``CarriedRows``).
    var loadedMembers = 0
    /// The batch's edits, in order: each writes the message's new body and keeps the one it replaced.
    package internal(set) var edits: [EditWrite] = []
    /// The reactions the batch puts on or takes off, in order.
    package internal(set) var reactionWrites: [ReactionWrite] = []
    /// The new messages withheld from a member who blocks their sender.
    package internal(set) var withheld: [HiddenRow] = []

    /// - Parameters:
    ///   - freshRoom: How many fresh events each user's connections can take (nil: the limit for every user).
    package init(nowMs: Int64, limits: StoreLimits, freshRoom: (@Sendable (UserID) -> Int)?) {
        self.nowMs = nowMs
        self.limits = limits
        self.log.book.maxFreshPerUser = limits.maxFreshEventsPerUser
        self.log.book.freshRoom = freshRoom
    }

    /// How many times a driver loads rows for one request before it gives up on the batch: more than the longest
    /// chain of reads a rule makes (a name, a user, a conversation, its members, their names) could need.
    package static let maxRoundsPerRequest = 16

    /// Applies one request, or says what it needs loaded first.
    ///
    /// - Returns: The request's outcome (a refusal among them: a refused request changed nothing), or the rows to
    ///   load before asking again (nothing was changed).
    /// - Throws: ``CourierStoreError`` with code `storage-failed` only.
    package mutating func step(_ request: WriteRequest) throws -> Step {
        do {
            let outcome: WriteOutcome =
                switch request {
                case .send(let send): try self.send(send)
                case .ack(let user, let device, let cursor): try self.ack(user: user, device: device, cursor: cursor)
                case .markRead(let user, let address, let upTo): try self.markRead(user: user, address, upTo: upTo)
                case .recall(let user, let address, let id): try self.recall(user: user, address, id: id)
                case .edit(let edit): try self.edit(edit)
                case .react(let react): try self.react(react)
                }
            return .applied(outcome)
        } catch let miss as Miss {
            return .needs(miss.needs)
        } catch let error as CourierStoreError where error.code != .storageFailed {
            return .applied(.refused(error))
        }
    }

    /// What ``step(_:)`` came to.
    package enum Step: Sendable {
        case applied(WriteOutcome)
        case needs([BatchNeed])
    }

    /// The batch's result, once the driver has written it.
    /// - Parameter queuesSearch: Whether the new messages' search tokens go to a ``SearchIndexer`` (they are kept in
    ///   ``AppliedBatch/searchEntries``).
    package func result(_ outcomes: [WriteOutcome], queuesSearch: Bool = false) -> AppliedBatch {
        var batch = AppliedBatch(
            outcomes: outcomes,
            appended: self.log.appended,
            fresh: self.log.book.fresh,
            introductions: self.introductions
        )
        batch.pushes = self.newMessages.count { $0.pushes && !$0.recalled }
        guard queuesSearch else { return batch }
        let now = ContinuousClock.now
        batch.searchEntries = self.newMessages.compactMap { message in
            message.recalled
                ? nil
                : SearchIndexer.Entry(
                    conversation: message.conversation,
                    seq: message.seq,
                    prepared: message.searchTokens,
                    body: message.body,
                    queued: now
                )
        }
        return batch
    }

    /// Thrown by a rule that met a row not loaded, before it changed anything.
    struct Miss: Error {
        var needs: [BatchNeed]
    }
}

// MARK: Rows

/// A row a rule needs that the driver has not loaded into the ``GroupCommit`` yet.
package enum BatchNeed: Hashable, Sendable {
    /// A group's id by its name (``GroupCommit/loadGroup(named:id:)``).
    case groupID(named: String)
    /// A user's id by name (``GroupCommit/loadUser(named:id:)``).
    case userID(named: String)
    /// A user's row: its log's cursor and whether it was removed (``GroupCommit/loadUser(_:)``). On a database with
    /// several writers, under the row's lock: the user's log grows in this batch alone until it commits.
    case user(UserID)
    /// A user's name (``GroupCommit/loadName(of:_:)``).
    case name(UserID)
    /// Two users' direct conversation, if they have one (``GroupCommit/loadDirect(_:id:)``).
    case directID(UserPair)
    /// Two users' direct conversation, to make now: they have none, and the rows of both are loaded. The driver
    /// inserts it with both as members and loads it (``GroupCommit/loadDirect(_:id:)``, ``GroupCommit/load(_:)``).
    case newDirect(UserPair)
    /// A conversation with its members (``GroupCommit/load(_:)``); under its row's lock where the database has
    /// several writers.
    case conversation(Int64)
    /// A conversation's name and users, without a lock: they never change (``GroupCommit/loadHeader(_:_:)``).
    case header(Int64)
    /// A message by its sender's id (``GroupCommit/loadMessage(_:_:)``). Under the sender's lock: no other writer
    /// stores a message under that id meanwhile.
    case message(MessageKey)
    /// The size of a user's upload (``GroupCommit/loadUpload(_:size:)``).
    case upload(UploadKey)
    /// A device's owner and acknowledged cursor (``GroupCommit/loadDevice(_:_:)``); under its lock where the
    /// database has several writers.
    case device(DeviceID)
    /// The delivered receipts an acknowledgement makes (``GroupCommit/loadDeliveries(_:_:)``): for each
    /// conversation of the user's events in the range, the newest message there from someone else, and the senders
    /// of those messages.
    case deliveries(AckRange)
    /// A message by its place (``GroupCommit/loadMessage(at:_:)``), read under its conversation's lock.
    case messageAt(MessagePosition)
    /// The seqs of the messages in a conversation with an id (and sender, when given), at most two
    /// (``GroupCommit/loadSeqs(_:_:)``).
    case withID(IDLookup)
    /// A message's reactions: how many users gave each key, and the keys one user gave
    /// (``GroupCommit/loadReactions(_:counts:mine:)``).
    case reactions(ReactionOwner)
}

/// A message a rule names by place, as it reads it.
package struct TargetRow: Hashable, Sendable {
    package var sender: UserID
    package var id: String
    package var timeMs: Int64
    package var recalled: Bool
    /// The body as last edited (empty once recalled).
    package var body: [UInt8]
    package var editCount: Int64
    package var editedMs: Int64?
    /// The members it is hidden from (withheld from a blocker): they cannot name it, and get nothing of it.
    package var hiddenFrom: [UserID]

    package init(
        sender: UserID,
        id: String,
        timeMs: Int64,
        recalled: Bool,
        body: [UInt8],
        editCount: Int64,
        editedMs: Int64?,
        hiddenFrom: [UserID] = []
    ) {
        self.hiddenFrom = hiddenFrom
        self.sender = sender
        self.id = id
        self.timeMs = timeMs
        self.recalled = recalled
        self.body = body
        self.editCount = editCount
        self.editedMs = editedMs
    }
}

/// Messages of a conversation by the id their senders gave (compared byte for byte), and by sender when given.
package struct IDLookup: Hashable, Sendable {
    package var conversation: Int64
    package var id: [UInt8]
    package var sender: UserID?
    /// Only messages after this seq (where the user asking joined).
    package var after: Int64

    package var text: String { String(decoding: self.id, as: UTF8.self) }
}

/// A user's reactions on a message.
package struct ReactionOwner: Hashable, Sendable {
    package var position: MessagePosition
    package var user: UserID
}

/// An edit the batch writes.
package struct EditWrite: Sendable {
    package var position: MessagePosition
    package var body: [UInt8]
    /// The body it replaces, kept as this version (0: as first sent).
    package var replaced: [UInt8]
    package var version: Int64
    package var editedMs: Int64
    /// The new body's search tokens, when the request came with them.
    package var searchTokens: [String]? = nil
}

/// A reaction the batch puts on (`on`) or takes off.
package struct ReactionWrite: Sendable {
    package var position: MessagePosition
    package var key: String
    package var user: UserID
    package var on: Bool
    package var timeMs: Int64
}

/// Two users, the lower id first: how a direct conversation is keyed.
package struct UserPair: Hashable, Sendable {
    package var a: UserID
    package var b: UserID

    package init(_ one: UserID, _ other: UserID) {
        self.a = min(one, other)
        self.b = max(one, other)
    }
}

/// A user's row as a batch reads it.
package struct UserRow: Hashable, Sendable {
    /// The newest cursor of its log as the batch read it: no acknowledgement covers more. Where the row was read
    /// without the user's lock (PostgreSQL's members), another node may have appended since; the head the new
    /// entries follow is read again under the positions' counter (``EventLogBook/follow(_:)``).
    package var cursor: Int64
    package var removed: Bool
    /// Whether the user has somewhere to be pushed (a Web Push subscription): a message to it is written to the
    /// push outbox.
    package var pushable: Bool

    package init(cursor: Int64, removed: Bool, pushable: Bool = false) {
        self.cursor = cursor
        self.removed = removed
        self.pushable = pushable
    }
}

/// A conversation's name and users, which never change.
package struct ConversationHeader: Hashable, Sendable {
    package var groupName: String?
    package var userA: UserID?
    package var userB: UserID?

    package init(groupName: String?, userA: UserID?, userB: UserID?) {
        self.groupName = groupName
        self.userA = userA
        self.userB = userB
    }
}

/// A message's sender and the id it gave, compared byte for byte (as the databases compare ids: Swift's `String`
/// would take two spellings of one accented letter for the same id).
package struct MessageKey: Hashable, Sendable {
    package var sender: UserID
    package var id: [UInt8]

    package init(sender: UserID, id: String) {
        self.sender = sender
        self.id = Array(id.utf8)
    }

    /// The id as the sender gave it.
    package var text: String { String(decoding: self.id, as: UTF8.self) }
}

/// A stored message as the rules read it.
package struct MessageRow: Hashable, Sendable {
    package var conversation: Int64
    package var seq: Int64
    package var timeMs: Int64
    package var recalled: Bool

    package init(conversation: Int64, seq: Int64, timeMs: Int64, recalled: Bool) {
        self.conversation = conversation
        self.seq = seq
        self.timeMs = timeMs
        self.recalled = recalled
    }
}

/// A message's place: its conversation and sequence number.
package struct MessagePosition: Hashable, Sendable {
    package var conversation: Int64
    package var seq: Int64

    package init(conversation: Int64, seq: Int64) {
        self.conversation = conversation
        self.seq = seq
    }
}

/// A user's upload of a file, by digest.
package struct UploadKey: Hashable, Sendable {
    package var user: UserID
    package var sha256: String

    package init(user: UserID, sha256: String) {
        self.user = user
        self.sha256 = sha256
    }
}

/// A device's row as an acknowledgement reads it.
package struct DeviceRow: Hashable, Sendable {
    package var user: UserID
    package var ackedCursor: Int64

    package init(user: UserID, ackedCursor: Int64) {
        self.user = user
        self.ackedCursor = ackedCursor
    }
}

/// The events of a user's log an acknowledgement newly covers: after `from`, up to `to`.
package struct AckRange: Hashable, Sendable {
    package var user: UserID
    package var from: Int64
    package var to: Int64

    package init(user: UserID, from: Int64, to: Int64) {
        self.user = user
        self.from = from
        self.to = to
    }
}

/// A delivered receipt an acknowledgement makes: up to a message in a conversation, for the members whose messages
/// it newly covers.
package struct Delivery: Hashable, Sendable {
    package var conversation: Int64
    package var seq: Int64
    /// The senders of the messages from others among the events the acknowledgement covers there.
    package var senders: Set<UserID>

    package init(conversation: Int64, seq: Int64, senders: Set<UserID>) {
        self.conversation = conversation
        self.seq = seq
        self.senders = senders
    }
}

/// A message the batch stores.
package struct NewMessage: Sendable {
    package var conversation: Int64
    package var seq: Int64
    package var sender: UserID
    package var device: DeviceID?
    package var id: String
    package var timeMs: Int64
    /// Empty once recalled.
    package var body: [UInt8]
    /// Nil once recalled.
    package var media: MediaReference?
    package var recalled: Bool
    /// The seq of the message it answers.
    package var replySeq: Int64?
    /// Its search tokens, when the request came with them.
    package var searchTokens: [String]? = nil
    /// The members it mentions (by user id; 0 for `@all`).
    package var mentioned: [Int64] = []
    /// Whether a member other than its sender has somewhere to be pushed: it goes to the push outbox (unless
    /// recalled in the same batch).
    package var pushes = false
}

/// An entry the batch appends to a user's log.
package struct EventRow: Sendable {
    package var user: UserID
    package var cursor: Int64
    package var kind: LogEventKind
    package var conversation: Int64
    package var seq: Int64
    package var actor: UserID?
    /// A receipt's kind (``ReceiptKind``), a membership change's (``MembershipChange``), a reaction's (1 on, 2 off);
    /// nil for other entries.
    package var detail: Int64?
    /// A reaction's key.
    package var key: String?

    package init(
        user: UserID,
        cursor: Int64,
        kind: LogEventKind,
        conversation: Int64,
        seq: Int64,
        actor: UserID?,
        detail: Int64?,
        key: String? = nil
    ) {
        self.user = user
        self.cursor = cursor
        self.kind = kind
        self.conversation = conversation
        self.seq = seq
        self.actor = actor
        self.detail = detail
        self.key = key
    }
}
