public import CourierStore
internal import Logging
internal import PostgresNIO

extension PostgresStore {
    /// Applies many writes in one transaction (group commit), with ``GroupCommit``'s rules.
    ///
    /// Before any request is applied, the batch locks every row it plans to write, in one order: the
    /// conversations, then the users whose acknowledgements it applies (and both users of a direct conversation it
    /// makes), then the acknowledging devices, each by id; the log's counter last, at its end. Another node's
    /// batch on the same rows waits for this one's commit, and no two batches wait for each other in a circle. The
    /// users whose logs only grow are read without a lock (``PostgresTransaction/writeLog(_:_:logger:)``), and so
    /// are the conversations acknowledgements alone deliver into (they write only their users' member rows, whose
    /// marks every batch merges, never taking one back). What is applied is read under the locks. A row
    /// the plan did not foresee (a conversation another node made since the plan read, and its members) is locked
    /// out of order without waiting: when another transaction holds it, the batch is rolled back and runs again from
    /// a new plan, which foresees it. (Waiting there could close a circle, which PostgreSQL breaks only after its
    /// `deadlock_timeout`, a second by default.)
    public func apply(
        _ requests: [WriteRequest],
        nowMs: Int64,
        freshRoom: (@Sendable (UserID) -> Int)?
    ) async throws -> AppliedBatch {
        guard !requests.isEmpty else { return AppliedBatch(outcomes: [], appended: [:]) }
        let queuesSearch = self.configuration.indexesForSearch && self.searchIndexer.isDeferred
        let applied = try await self.write(doing: "store \(requests.count) writes") { connection in
            var batch = PostgresGroupCommit(
                run: GroupCommit.Run(GroupCommit(nowMs: nowMs, limits: self.limits, freshRoom: freshRoom), requests),
                store: self
            )
            try await batch.plan(requests, connection)
            while case .load(let needs) = try batch.run.next() {
                try await batch.load(needs, connection)
            }
            try await batch.write(connection)
            return batch.run.result(queuesSearch: queuesSearch)
        }
        if queuesSearch { self.searchIndexer.committed(applied.searchEntries) }
        return applied
    }
}

/// One group commit on PostgreSQL: the plan takes the rows' locks in the batch's order (the conversations, the
/// users, the devices, reading them as it locks them); then the step/load loop every database shares
/// (``GroupCommit/Run``) reads what the requests declare, in one statement per kind of row for the whole batch each
/// wave, and what the rules still ask for; then the batch's writes, one statement per table.
struct PostgresGroupCommit {
    /// The batch's step/load loop, with its rules and rows.
    var run: GroupCommit.Run
    let store: PostgresStore
    var logger: Logger { self.store.logger }
    /// Whether the plan's locks are taken: a row locked after them is locked out of their order, without waiting.
    private(set) var planned = false
    /// The conversations read without their rows' locks (the ones only acknowledgements deliver into): a request
    /// that names one after the plan, or a send into one, sends the batch to a new plan (``StaleBatchRead``).
    var unlocked: Set<Int64> = []

    /// The batch's rules and rows, loaded in place.
    var commit: GroupCommit {
        get { self.run.commit }
        _modify { yield &self.run.commit }
    }

    init(run: GroupCommit.Run, store: PostgresStore) {
        self.run = run
        self.store = store
    }

    // MARK: The plan

    /// Locks the rows the requests will write, in the order every write takes them, and reads them. What else the
    /// requests read (a resend's original, an acknowledgement's deliveries, uploads) the waves read after it, under
    /// these locks.
    mutating func plan(_ requests: [WriteRequest], _ connection: PostgresConnection) async throws {
        try await self.lookUpNames(requests, connection)
        var conversations: Set<Int64> = []
        var users: Set<UserID> = []
        var acks: [(user: UserID, device: DeviceID, cursor: UInt64)] = []
        for request in requests {
            switch request {
            case .send(let send):
                // The sender's row is not locked: its log grows without a lock, its member rows' marks are merged
                // (never taken back), and a resend of the same id committed meanwhile by another node breaks the
                // batch's insert on `messages_by_client_id`, and the batch runs again from a new plan, which finds
                // it (``PostgresStore/isRetryable(_:)``).
                let (conversation, peer) = self.planned(send.to, for: send.sender)
                if let conversation {
                    conversations.insert(conversation)
                } else if let peer {
                    // A direct conversation yet to be made: both users' rows are locked while it is (makeDirect).
                    users.formUnion([send.sender, peer])
                }
            case .markRead, .recall, .edit, .react:
                // A read mark, a recall, an edit or a reaction locks the conversation's row, and no user's (an edit
                // or a reaction is read under that lock: no recall comes between).
                guard let user = request.user, let address = request.address else { continue }
                if let conversation = self.planned(address, for: user).conversation {
                    conversations.insert(conversation)
                }
            case .ack(let user, let device, let cursor):
                users.insert(user)
                acks.append((user, device, cursor))
            }
        }
        var delivering: Set<Int64> = []
        if !acks.isEmpty {
            // The conversations whose delivered receipts the acknowledgements would make. An acknowledgement writes
            // only its user's member rows there, whose marks every batch merges (never taking one back) and locks
            // in one order as it writes them; so these conversations are read without their locks (another node's
            // sends into them do not wait for this batch, nor this batch for them).
            delivering.formUnion(
                try await connection.values(
                    """
                    SELECT DISTINCT e.conversation_id FROM unnest(\(acks.map(\.user.rawValue))::bigint[],
                        \(acks.map(\.device.rawValue))::bigint[], \(acks.map { Int64(clamping: $0.cursor) })::bigint[])
                        AS a(u, d, c)
                    JOIN devices v ON v.id = a.d AND v.user_id = a.u
                    CROSS JOIN LATERAL (
                        \(unescaped: LogEventKind.userLogSQL(
                            user: "a.u", after: "v.acked_cursor", upTo: "a.c", messagesOnly: true))
                    ) e
                    WHERE \(unescaped: LogEventKind.messageSenderSQL(events: "e")) != a.u
                    """,
                    as: Int64.self,
                    logger: self.logger
                )
            )
        }
        // The conversations' rows locked and read with their members, two statements for the batch (the ones only
        // acknowledgements deliver into read without a lock, two more); then the rows of the users whose
        // acknowledgements the batch applies, then their devices. The other users' rows are read without a lock:
        // their logs only grow, and a log's positions are taken under the counter at the batch's end.
        var members = try await self.lockConversations(conversations.sorted(), connection)
        members.formUnion(try await self.readConversations(delivering.subtracting(conversations).sorted(), connection))
        try await self.lockUsers(users, connection)
        try await self.readUsers(members.subtracting(users), connection)
        try await self.lockDevices(acks.map(\.device), connection)
        self.planned = true
    }

    /// Reads, in one query each, the users and groups the requests name and the direct conversations between
    /// them and their senders (the ones found: one not found is looked for again under the locks).
    private mutating func lookUpNames(_ requests: [WriteRequest], _ connection: PostgresConnection) async throws {
        var users: Set<String> = []
        var groups: Set<String> = []
        for request in requests {
            guard let address = request.address, (try? address.checkNames()) != nil else { continue }
            switch address {
            case .user(let name): users.insert(name)
            case .group(let name): groups.insert(name)
            }
        }
        for (name, id) in try await self.userIDs(named: users, connection) {
            self.commit.loadUser(named: name, id: id)
        }
        // The names group messages mention, in the same one query each batch: not found, a name is text.
        var mentioned: Set<String> = []
        for case .send(let send) in requests {
            guard case .group = send.to, let mentions = send.mentions else { continue }
            mentioned.formUnion(mentions.names + mentions.runs.filter { !$0.isEmpty })
        }
        mentioned.subtract(users)
        if !mentioned.isEmpty {
            let found = try await self.userIDs(named: mentioned, connection)
            for name in mentioned { self.commit.loadUser(named: name, id: found[name]) }
        }
        for (name, id) in try await self.groupIDs(named: groups, connection) {
            self.commit.loadGroup(named: name, id: id)
        }
        var pairs: Set<UserPair> = []
        for request in requests {
            guard let user = request.user, case .user(let name) = request.address,
                let peer = self.commit.loadedUserID(named: name)
            else { continue }
            pairs.insert(UserPair(user, peer))
        }
        for (pair, id) in try await self.directIDs(pairs, connection) {
            self.commit.loadDirect(pair, id: id)
        }
    }

    /// The conversation a request addresses as the plan read it (nil when there is none yet, or the address names
    /// nothing: the request is refused later), and for a direct one, the other user.
    private func planned(_ address: Conversation, for user: UserID) -> (conversation: Int64?, peer: UserID?) {
        guard (try? address.checkNames()) != nil else { return (nil, nil) }
        switch address {
        case .group(let name):
            return (self.commit.loadedGroupID(named: name), nil)
        case .user(let name):
            guard let peer = self.commit.loadedUserID(named: name) else { return (nil, nil) }
            return (self.commit.loadedDirectID(UserPair(user, peer)), peer)
        }
    }
}

extension WriteRequest {
    /// The conversation a request names, if it names one.
    fileprivate var address: Conversation? {
        switch self {
        case .send(let send): send.to
        case .markRead(_, let address, _), .recall(_, let address, _): address
        case .edit(let edit): edit.conversation
        case .react(let react): react.conversation
        case .ack: nil
        }
    }

    /// The user a request is from.
    fileprivate var user: UserID? {
        switch self {
        case .send(let send): send.sender
        case .markRead(let user, _, _), .recall(let user, _, _), .ack(let user, _, _): user
        case .edit(let edit): edit.user
        case .react(let react): react.user
        }
    }
}

/// A group commit came to need a lock on a conversation its plan read without one: the transaction is rolled back
/// and runs again from a new plan (``PostgresStore/isRetryable(_:)``).
struct StaleBatchRead: Error {}
