// The rules of the push outbox, for every database: what a committed message owes the devices that are away, taken
// by one node at a time, sent, and then done, retried or dropped.
//
// A batch that stores a message writes an outbox row for it when a member other than its sender has a push target
// (``UserRow/pushable``), in the message's own transaction: a node killed after the commit leaves the row for
// another (or for itself, restarted). A node takes rows under a lease (``claimPushes(node:nowMs:leaseMs:limit:maxClaims:)``):
// no other node takes them while it lasts, and a node that dies with them leaves them to be taken again once it
// ends. What a row owes is worked out when it is taken, not when it was written: who is a member, who muted the
// conversation, who hides previews, which devices have a subscription and no live session.

internal import CourierProtocol
internal import Foundation

/// A row of the push outbox: a message whose recipients are to be pushed (``user`` nil), or the retry of one
/// subscription's push of it.
public struct PushOutboxRow: Hashable, Sendable {
    public var id: Int64
    public var conversation: Int64
    public var seq: Int64
    public var user: UserID?
    public var endpoint: String?
    /// The failed attempts before this row (0 for a message's first).
    public var attempts: Int
    /// How many times a node has taken it, this time included.
    public var claims: Int

    public init(
        id: Int64,
        conversation: Int64,
        seq: Int64,
        user: UserID?,
        endpoint: String?,
        attempts: Int,
        claims: Int = 0
    ) {
        self.id = id
        self.conversation = conversation
        self.seq = seq
        self.user = user
        self.endpoint = endpoint
        self.attempts = attempts
        self.claims = claims
    }
}

/// A member a message may be pushed to, as the outbox reads it: one with a push target, joined before the message.
package struct PushRecipientRow: Hashable, Sendable {
    package var user: UserID
    package var notify: NotifyLevel
    /// Whether the user's notifications show who wrote and what (``CourierDatabase/setPushPreviews(_:for:)``).
    package var previews: Bool
    /// Whether the message mentions the user, by name or with `@all`.
    package var mentioned: Bool

    package init(user: UserID, notify: NotifyLevel, previews: Bool, mentioned: Bool) {
        self.user = user
        self.notify = notify
        self.previews = previews
        self.mentioned = mentioned
    }
}

/// A push subscription with whether its device has a live session now (on any node that is alive).
package struct PushTargetRow: Sendable {
    package var subscription: PushSubscriptionRow
    package var live: Bool

    package init(subscription: PushSubscriptionRow, live: Bool) {
        self.subscription = subscription
        self.live = live
    }
}

/// One message's pushes, as a node takes them from the outbox.
public struct PushJob: Sendable {
    /// The outbox row, to finish with ``CourierDatabase/finishPushes(_:node:)``.
    public var row: Int64
    /// The failed attempts before this one.
    public var attempts: Int
    public var conversationID: Int64
    public var seq: UInt64
    /// The id the sender gave the message.
    public var messageID: String
    public var timeMs: Int64
    /// The sender's name, and the display name it chose (nil for none).
    public var from: String
    public var fromDisplayName: String?
    /// What a notification says of the message: its text, or its media's caption or kind.
    public var text: String
    public var deliveries: [PushDelivery]
    /// Taken too many times without being done (``StoreBackend/claimPushes(node:nowMs:leaseMs:limit:maxClaims:)``):
    /// given up, with no deliveries.
    public var givenUp = false
}

/// One subscription's push of a message.
public struct PushDelivery: Sendable {
    public var user: UserID
    /// The conversation as the recipient names it.
    public var conversation: Conversation
    /// A direct message or a mention: the push service delivers it at once (`Urgency: high`).
    public var urgent: Bool
    /// Whether the notification may show the sender and the text (the recipient's setting).
    public var previews: Bool
    public var subscription: PushSubscriptionRow
    /// For a gateway's pushkey: the recipient's unread messages over all its conversations (the app's badge).
    public var unread: Int = 0
}

/// What became of a job's pushes, for ``CourierDatabase/finishPushes(_:node:)``.
public struct PushResults: Sendable {
    /// A subscription to try again, not before a time.
    public struct Retry: Sendable, Hashable {
        /// The outbox row it retries a push of: dropped unless this node still holds that row.
        public var row: Int64
        public var conversationID: Int64
        public var seq: UInt64
        public var user: UserID
        public var endpoint: String
        public var attempts: Int
        public var dueMs: Int64

        public init(
            row: Int64,
            conversationID: Int64,
            seq: UInt64,
            user: UserID,
            endpoint: String,
            attempts: Int,
            dueMs: Int64
        ) {
            self.row = row
            self.conversationID = conversationID
            self.seq = seq
            self.user = user
            self.endpoint = endpoint
            self.attempts = attempts
            self.dueMs = dueMs
        }
    }

    /// The outbox rows done with (sent, refused for good, or retried in a row of their own).
    public var done: [Int64] = []
    public var retries: [Retry] = []
    /// Subscriptions their push service no longer knows (404, 410): dropped.
    public var gone: [(endpoint: String, user: UserID)] = []

    public init() {}

    public var isEmpty: Bool { self.done.isEmpty && self.retries.isEmpty && self.gone.isEmpty }
}

extension StoreBackend {
    /// Takes outbox rows that are due, for `leaseMs` (no other node takes them meanwhile), and works out their
    /// pushes: for each message, every member other than its sender, joined before it, whose mute lets it alert
    /// (all: always; mentions: a mention, `@all`, or a direct message; none: never), on each subscription of a
    /// device with no live session (a retry: its one subscription, if it is still there). A row that owes nothing
    /// (a recalled message, every device online, every member muted) comes back as a job without deliveries.
    ///
    /// The transaction that takes the rows does only that (the writer is free again at once: SQLite has one); their
    /// pushes are worked out in reads after it.
    ///
    /// A row taken more than `maxClaims` times was never done (its job failed each time, or killed its node): it comes
    /// back given up, with no deliveries. A row whose pushes cannot be worked out now is left out, taken, to be tried
    /// again when its lease ends.
    ///
    /// - Returns: A job for every row taken, in order (one that owes nothing has no deliveries: finish it like the
    ///   others), and the time the next row not taken is due (nil for none).
    public func claimPushes(
        node: String,
        nowMs: Int64,
        leaseMs: Int64,
        limit: Int,
        maxClaims: Int = 10
    ) async throws -> (jobs: [PushJob], nextDueMs: Int64?) {
        let (rows, nextDueMs) = try await self.transaction(doing: "take pushes") { transaction in
            let rows = try await transaction.claimPushOutbox(
                node: node,
                nowMs: nowMs,
                leaseMs: leaseMs,
                limit: max(1, limit)
            )
            return (rows, try await transaction.nextPushDueMs())
        }
        guard !rows.isEmpty else { return ([], nextDueMs) }
        let jobs = try await self.reading(doing: "work out pushes") { transaction in
            var jobs: [PushJob] = []
            for row in rows {
                let nothing = PushJob(
                    row: row.id,
                    attempts: row.attempts,
                    conversationID: row.conversation,
                    seq: UInt64(row.seq),
                    messageID: "",
                    timeMs: 0,
                    from: "",
                    fromDisplayName: nil,
                    text: "",
                    deliveries: [],
                    givenUp: row.claims > max(1, maxClaims)
                )
                guard !nothing.givenUp else {
                    jobs.append(nothing)
                    continue
                }
                do {
                    jobs.append(try await Self.pushJob(for: row, nowMs: nowMs, transaction) ?? nothing)
                } catch {
                    // This row alone waits for its lease to end (and counts one more claim); the others go on.
                    continue
                }
            }
            return jobs
        }
        return (jobs, nextDueMs)
    }

    /// Keeps rows a node is still sending taken: due again only after `untilMs`, unless another node took them
    /// meanwhile (then they are that node's).
    public func renewPushes(_ rows: [Int64], node: String, untilMs: Int64) async throws {
        guard !rows.isEmpty else { return }
        try await self.transaction(doing: "keep pushes taken") { transaction in
            try await transaction.renewPushOutbox(rows, node: node, untilMs: untilMs)
        }
    }

    /// Records what became of a node's jobs: the rows it still holds done, with their retries due later (the retries
    /// of a row another node took meanwhile go: that node sends it all again); subscriptions gone, dropped.
    public func finishPushes(_ results: PushResults, node: String) async throws {
        guard !results.isEmpty else { return }
        try await self.transaction(doing: "finish pushes") { transaction in
            // The users first, as every writer of their subscriptions takes them, in order.
            let users = Set(results.gone.map(\.user)).sorted()
            if !users.isEmpty { _ = try await transaction.lockUsers(users) }
            let held = Set(try await transaction.finishPushOutbox(results.done, node: node))
            try await transaction.insertPushRetries(results.retries.filter { held.contains($0.row) })
            var changed: Set<UserID> = []
            for (endpoint, user) in results.gone {
                if try await transaction.deletePushSubscription(endpoint: endpoint, of: user) { changed.insert(user) }
            }
            try await transaction.recountPushTargets(of: changed.sorted())
        }
    }

    /// The rows of the outbox, in order.
    public func pushOutbox() async throws -> [PushOutboxRow] {
        try await self.reading(doing: "read the push outbox") { transaction in
            try await transaction.pushOutboxRows()
        }
    }

    /// Whether a user's notifications show who wrote and what (on by default).
    public func pushPreviews(of user: UserID) async throws -> Bool {
        try await self.reading(doing: "read a push setting") { transaction in
            try await transaction.pushPreviews(of: user)
        }
    }

    /// Sets whether a user's notifications show who wrote and what; they say "New message" otherwise.
    public func setPushPreviews(_ on: Bool, for user: UserID) async throws {
        try await self.transaction(doing: "set a push setting") { transaction in
            try await transaction.setPushPreviews(on, of: user)
        }
    }

    /// One row's pushes, or nil when its message is gone or recalled.
    private static func pushJob(
        for row: PushOutboxRow,
        nowMs: Int64,
        _ transaction: Transaction
    ) async throws -> PushJob? {
        var recipients = try await transaction.pushRecipients(of: row.conversation, seq: row.seq, only: row.user)
        guard let first = recipients.first,
            let found = try await transaction.message(in: row.conversation, seq: row.seq, visibleTo: first.user),
            !found.message.recalled
        else { return nil }
        let message = found.message
        let direct = found.header.groupName == nil
        recipients.removeAll { recipient in
            guard recipient.user != message.sender else { return true }
            switch recipient.notify {
            case .all: return false
            case .mentions: return !(direct || recipient.mentioned)
            case .none: return true
            }
        }
        guard !recipients.isEmpty else { return nil }
        var targets = try await transaction.pushTargets(of: recipients.map(\.user), nowMs: nowMs)
        targets.removeAll { $0.live || (row.endpoint != nil && $0.subscription.endpoint != row.endpoint) }
        guard !targets.isEmpty else { return nil }
        let names = try await transaction.names(of: [message.sender])
        let profiles = try await transaction.profiles(of: [message.sender])
        let from = names[message.sender] ?? ""
        let byUser = Dictionary(recipients.map { ($0.user, $0) }, uniquingKeysWith: { first, _ in first })
        // A gateway's push carries the app's badge: the recipient's unread messages, everywhere.
        var unread: [UserID: Int] = [:]
        for user in Set(targets.filter { $0.subscription.gateway != nil }.map(\.subscription.user)) {
            // Not the messages hidden from it.
            unread[user] = try await transaction.memberships(of: user).reduce(0) { total, membership in
                let read = max(membership.readSeq, membership.joinedSeq)
                return total + Int(max(0, membership.lastSeq - read - membership.hiddenUnread))
            }
        }
        let deliveries = targets.compactMap { target -> PushDelivery? in
            guard let recipient = byUser[target.subscription.user] else { return nil }
            return PushDelivery(
                user: recipient.user,
                conversation: found.header.groupName.map(Conversation.group) ?? .user(from),
                urgent: direct || recipient.mentioned,
                previews: recipient.previews,
                subscription: target.subscription,
                unread: unread[recipient.user] ?? 0
            )
        }
        return PushJob(
            row: row.id,
            attempts: row.attempts,
            conversationID: row.conversation,
            seq: UInt64(row.seq),
            messageID: message.clientID,
            timeMs: message.timeMs,
            from: from,
            fromDisplayName: profiles[message.sender]?.displayName,
            text: Self.pushText(ofBody: message.body),
            deliveries: deliveries
        )
    }

    /// What a notification says of a message: its text, or its media's caption, or the media's kind.
    static func pushText(ofBody body: [UInt8]) -> String {
        guard let parsed = try? Courier_V1_Body(serializedBytes: body) else { return "" }
        switch parsed.content {
        case .text(let text)?:
            return text
        case .media(let media)?:
            guard media.caption.isEmpty else { return media.caption }
            switch MediaType(media.mime)?.type {
            case "image": return "Photo"
            case "audio": return "Voice message"
            case "video": return "Video"
            default: return media.name.isEmpty ? "File" : media.name
            }
        case nil:
            return ""
        }
    }
}
