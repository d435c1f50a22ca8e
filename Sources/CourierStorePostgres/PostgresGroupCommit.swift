public import CourierStore
internal import Logging
internal import PostgresNIO

extension PostgresStore {
    /// Applies many writes in one transaction (group commit), with ``GroupCommit``'s rules.
    ///
    /// Before any request is applied, the batch locks every row it plans to write, in one order: the
    /// conversations, then the users whose logs grow (their members, the senders, the acknowledging users), then
    /// the acknowledging devices, each by id. Another node's batch touching the same users waits for this one's
    /// commit, and no two batches wait for each other in a circle. What is applied is read under the locks. A row
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
                commit: GroupCommit(nowMs: nowMs, limits: self.limits, freshRoom: freshRoom),
                store: self
            )
            try await batch.plan(requests, connection)
            var outcomes: [WriteOutcome] = []
            outcomes.reserveCapacity(requests.count)
            for request in requests {
                var rounds = 0
                while true {
                    switch try batch.commit.step(request) {
                    case .applied(let outcome):
                        outcomes.append(outcome)
                    case .needs(let needs):
                        rounds += 1
                        guard rounds <= GroupCommit.maxRoundsPerRequest else {
                            throw CourierStoreError(.storageFailed, "a write's rows could not be read: \(needs)")
                        }
                        try await batch.load(needs, connection)
                        continue
                    }
                    break
                }
            }
            try await batch.write(connection)
            return batch.commit.result(outcomes, queuesSearch: queuesSearch)
        }
        if queuesSearch { self.searchIndexer.committed(applied.searchEntries) }
        return applied
    }
}

/// One group commit on PostgreSQL: the rows of ``GroupCommit``'s rules, locked and read in a few statements for the
/// whole batch (the plan), then as the rules ask for more, and the batch's writes in one statement per table.
struct PostgresGroupCommit {
    var commit: GroupCommit
    let store: PostgresStore
    var logger: Logger { self.store.logger }
    /// Whether the plan's locks are taken: a row locked after them is locked out of their order, without waiting.
    private(set) var planned = false

    init(commit: GroupCommit, store: PostgresStore) {
        self.commit = commit
        self.store = store
    }

    // MARK: The plan

    /// Locks the rows the requests will write, in the order every write takes them, and reads them.
    mutating func plan(_ requests: [WriteRequest], _ connection: PostgresConnection) async throws {
        try await self.lookUpNames(requests, connection)
        var conversations: Set<Int64> = []
        var users: Set<UserID> = []
        var acks: [(user: UserID, device: DeviceID, cursor: UInt64)] = []
        for request in requests {
            switch request {
            case .send(let send):
                users.insert(send.sender)
                let (conversation, peer) = self.planned(send.to, for: send.sender)
                if let conversation { conversations.insert(conversation) }
                if let peer { users.insert(peer) }
            case .markRead, .recall, .edit, .react:
                // A read mark, a recall, an edit or a reaction locks the conversation's row, not the other user's
                // (an edit or a reaction is read under that lock: no recall comes between).
                guard let user = request.user, let address = request.address else { continue }
                users.insert(user)
                if let conversation = self.planned(address, for: user).conversation {
                    conversations.insert(conversation)
                }
            case .ack(let user, let device, let cursor):
                users.insert(user)
                acks.append((user, device, cursor))
            }
        }
        if !acks.isEmpty {
            // The conversations whose delivered receipts the acknowledgements would make, as they stand before the
            // locks (read again under them).
            conversations.formUnion(
                try await connection.values(
                    """
                    SELECT DISTINCT e.conversation_id FROM unnest(\(acks.map(\.user.rawValue))::bigint[],
                        \(acks.map(\.device.rawValue))::bigint[], \(acks.map { Int64(clamping: $0.cursor) })::bigint[])
                        AS a(u, d, c)
                    JOIN devices v ON v.id = a.d AND v.user_id = a.u
                    JOIN events e ON e.user_id = a.u AND e.kind = 1 AND e.cursor <= a.c AND e.cursor > v.acked_cursor
                    JOIN messages m ON m.conversation_id = e.conversation_id AND m.seq = e.seq
                    WHERE m.sender_id != a.u
                    """,
                    as: Int64.self,
                    logger: self.logger
                )
            )
        }
        // The conversations' rows locked and read with their members, two statements for the batch; then every
        // member's row, then the devices.
        let members = try await self.lockConversations(conversations.sorted(), connection)
        try await self.lockUsers(members.union(users), connection)
        try await self.lockDevices(acks.map(\.device), connection)
        try await self.planDeliveries(acks, connection)
        try await self.lookForResends(requests, connection)
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

    /// Reads, in one query for the batch, the delivered receipts each acknowledgement makes, for the ranges its
    /// rule will ask for (``GroupCommit/ackRange(of:from:to:stored:)``, each starting where the one before left its
    /// device). The users' and devices' rows are locked: what this reads cannot change while the batch runs.
    private mutating func planDeliveries(
        _ acks: [(user: UserID, device: DeviceID, cursor: UInt64)],
        _ connection: PostgresConnection
    ) async throws {
        var cursors: [DeviceID: Int64] = [:]
        var ranges: [AckRange] = []
        for ack in acks {
            guard let device = self.commit.loadedDevice(ack.device), device.user == ack.user,
                let stored = self.commit.users[ack.user]?.cursor
            else { continue }
            let old = cursors[ack.device] ?? device.ackedCursor
            guard let range = GroupCommit.ackRange(of: ack.user, from: old, to: ack.cursor, stored: stored) else {
                continue
            }
            cursors[ack.device] = range.to
            ranges.append(range)
        }
        try await self.loadDeliveries(ranges, connection)
    }

    /// Reads, in one query under the senders' locks, what they stored before under the ids they send now.
    private mutating func lookForResends(_ requests: [WriteRequest], _ connection: PostgresConnection) async throws {
        var keys: [MessageKey] = []
        for case .send(let send) in requests where !send.id.isEmpty {
            // An id the send will be refused for goes nowhere near the database (PostgreSQL refuses a NUL in text,
            // which would fail the whole batch).
            guard
                (try? StoreText.check(send.id, what: "message id", maxBytes: self.commit.limits.maxMessageIDBytes))
                    != nil
            else { continue }
            keys.append(MessageKey(sender: send.sender, id: send.id))
        }
        try await self.loadMessages(keys, connection)
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
