public import CourierStore
internal import Logging
internal import PostgresNIO

extension PostgresStore {
    /// Applies many writes in one transaction (group commit), with ``SQLiteStore/apply(_:nowMs:freshRoom:)``'s rules.
    ///
    /// Before any request is applied, the batch locks every row it plans to write, in one order: the
    /// conversations, then the users whose logs grow (their members, the senders, the acknowledging users), then
    /// the acknowledging devices, each by id. Another node's batch touching the same users waits for this one's
    /// commit, and no two batches wait for each other in a circle. What is applied is read again under the locks. A
    /// row the plan did not foresee (a conversation another node made since the plan read, and its members) is
    /// locked out of order without waiting: when another transaction holds it, the batch is rolled back and runs
    /// again from a new plan, which foresees it. (Waiting there could close a circle, which PostgreSQL breaks only
    /// after its `deadlock_timeout`, a second by default.)
    public func apply(
        _ requests: [WriteRequest],
        nowMs: Int64,
        freshRoom: (@Sendable (UserID) -> Int)?
    ) async throws -> AppliedBatch {
        guard !requests.isEmpty else { return AppliedBatch(outcomes: [], appended: [:]) }
        return try await self.write(doing: "store \(requests.count) writes") { connection in
            var batch = PostgresWriteBatch(nowMs: nowMs, store: self)
            batch.log.book.maxFreshPerUser = self.limits.maxFreshEventsPerUser
            batch.log.book.freshRoom = freshRoom
            try await batch.lock(for: requests, connection)
            var outcomes: [WriteOutcome] = []
            outcomes.reserveCapacity(requests.count)
            for (index, request) in requests.enumerated() {
                do {
                    outcomes.append(try await batch.apply(request, at: index, connection))
                } catch let error as CourierStoreError where error.code != .storageFailed {
                    outcomes.append(.refused(error))
                }
            }
            try await batch.finish(connection)
            return AppliedBatch(outcomes: outcomes, appended: batch.log.book.appended, fresh: batch.log.book.fresh)
        }
    }
}

/// The state of one group commit on PostgreSQL: conversations, members and logs read once under their locks and
/// written back once.
struct PostgresWriteBatch {
    typealias ConversationRow = BatchConversation

    let nowMs: Int64
    let store: PostgresStore
    var log: PostgresEventLog
    private var logger: Logger { self.store.logger }
    private var limits: StoreLimits { self.store.limits }
    private var conversations: [Int64: ConversationRow] = [:]
    /// Groups by name as the requests gave it, read by the plan or on first use.
    private var groupIDs: [String: Int64] = [:]
    private var directIDs: [Pair: Int64] = [:]
    /// The users the requests name, by name as given, as the plan read them in one query (matched with `lower()` on
    /// both sides, in the database's own rules, as everywhere else): names and ids never change (a removed user's
    /// name is not given again). Whether one was removed is read under its lock.
    private var userIDs: [String: UserID] = [:]
    /// The messages the batch's senders stored before under the ids they send again, read in one query under the
    /// senders' locks, and the messages this batch stores: a resend in the batch answers with the original.
    private var sent: [Sent: (conversation: Int64, seq: Int64, timeMs: Int64)] = [:]
    /// The (sender, id) pairs ``sent`` was read for.
    private var looked: Set<Sent> = []
    /// Message rows (and their media) to insert in one statement each: before a recall (which reads them), and at
    /// the end.
    private var rows = MessageRows()
    /// Each acknowledgement's outcome, read for the whole batch under the locks, by its place among the requests.
    private var acks: [Int: AckPlan] = [:]
    /// The devices' acknowledged cursors as the batch moves them, written back in one statement.
    private var ackedCursors: [Int64: Int64] = [:]

    /// What one acknowledgement does: refused (no such device of the user), or moves its device's cursor and makes
    /// a delivered receipt for each conversation up to a seq.
    private struct AckPlan {
        var refused = false
        var delivered: [(conversation: Int64, seq: Int64)] = []
    }

    /// An acknowledgement as the plan reads it: its place among the batch's requests, and what it asks.
    private struct PlannedAck {
        var request: Int
        var user: UserID
        var device: DeviceID
        var cursor: Int64
    }

    private struct Pair: Hashable {
        var a: UserID
        var b: UserID
    }

    /// A sender's message id, compared byte for byte (as the databases compare it: Swift's `String` would take two
    /// spellings of one accented letter for the same id).
    private struct Sent: Hashable {
        var sender: UserID
        var id: [UInt8]

        init(sender: UserID, id: String) {
            self.sender = sender
            self.id = Array(id.utf8)
        }
    }

    private struct MessageRows {
        var conversations: [Int64] = []
        var seqs: [Int64] = []
        var senders: [Int64] = []
        /// 0 for none (ids start at 1), NULL in the table.
        var devices: [Int64] = []
        var ids: [String] = []
        var times: [Int64] = []
        var bodies: [ByteBuffer] = []
        var media: (sha256: [String], conversations: [Int64], seqs: [Int64], mimes: [String], names: [String]) = (
            [], [], [], [], []
        )
    }

    init(nowMs: Int64, store: PostgresStore) {
        self.nowMs = nowMs
        self.store = store
        self.log = PostgresEventLog(logger: store.logger)
    }

    // MARK: Locks

    /// Locks the rows the requests will write, in the order every write takes them.
    mutating func lock(for requests: [WriteRequest], _ connection: PostgresConnection) async throws {
        try await self.look(up: requests, connection)
        var conversations: Set<Int64> = []
        var users: Set<UserID> = []
        var acks: [PlannedAck] = []
        for (index, request) in requests.enumerated() {
            switch request {
            case .send(let send):
                users.insert(send.sender)
                let (conversation, peer) = try await self.planned(send.to, for: send.sender, connection)
                if let conversation { conversations.insert(conversation) }
                if let peer { users.insert(peer) }
            case .markRead(let user, let address, _), .recall(let user, let address, _):
                users.insert(user)
                if let conversation = try await self.planned(address, for: user, connection).conversation {
                    conversations.insert(conversation)
                }
            case .ack(let user, let device, let cursor):
                users.insert(user)
                acks.append(PlannedAck(request: index, user: user, device: device, cursor: Int64(clamping: cursor)))
            }
        }
        if !acks.isEmpty {
            // The conversations whose delivered receipts the acknowledgements would make, as they stand before the
            // locks (read again under them).
            conversations.formUnion(
                try await connection.values(
                    """
                    SELECT DISTINCT e.conversation_id FROM unnest(\(acks.map(\.user.rawValue))::bigint[],
                        \(acks.map(\.device.rawValue))::bigint[], \(acks.map(\.cursor))::bigint[]) AS a(u, d, c)
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
        // member's row.
        let members = try await self.load(conversations.sorted(), connection)
        try await self.log.lock(members.union(users), connection)
        try await self.plan(acks, connection)
        try await self.lookForResends(requests, connection)
    }

    /// Locks the acknowledging devices and reads, in one query for the batch, the delivered receipts each
    /// acknowledgement makes: the newest message from someone else in each conversation of the events it covers.
    /// An acknowledgement covers only events stored before this batch (the users' cursors as their locks read them),
    /// so what it reads cannot change while the batch runs.
    private mutating func plan(
        _ acks: [PlannedAck],
        _ connection: PostgresConnection
    ) async throws {
        guard !acks.isEmpty else { return }
        var owners: [Int64: (user: UserID, cursor: Int64)] = [:]
        for row in try await connection.rows(
            """
            SELECT id, user_id, acked_cursor FROM devices WHERE id = ANY(\(Set(acks.map(\.device.rawValue)).sorted()))
            ORDER BY id FOR UPDATE
            """,
            logger: self.logger
        ) {
            owners[try row.get("id")] = (UserID(rawValue: try row.get("user_id")), try row.get("acked_cursor"))
        }
        var ranges: (acks: [Int64], users: [Int64], from: [Int64], to: [Int64]) = ([], [], [], [])
        for ack in acks {
            guard let owner = owners[ack.device.rawValue], owner.user == ack.user else {
                self.acks[ack.request] = AckPlan(refused: true)
                continue
            }
            self.acks[ack.request] = AckPlan()
            guard let stored = self.log.stored[ack.user] else {
                throw CourierStoreError(.storageFailed, "user \(ack.user.rawValue) acknowledged without its lock")
            }
            // Acknowledgements of one device in a batch take turns: each starts where the one before left it.
            let old = self.ackedCursors[ack.device.rawValue] ?? owner.cursor
            let new = min(ack.cursor, stored)
            guard new > old else { continue }
            self.ackedCursors[ack.device.rawValue] = new
            ranges.acks.append(Int64(ack.request))
            ranges.users.append(ack.user.rawValue)
            ranges.from.append(old)
            ranges.to.append(new)
        }
        guard !ranges.acks.isEmpty else { return }
        for row in try await connection.rows(
            """
            SELECT a.i AS ack, e.conversation_id AS conversation, MAX(e.seq) AS seq
            FROM unnest(\(ranges.acks)::bigint[], \(ranges.users)::bigint[], \(ranges.from)::bigint[],
                \(ranges.to)::bigint[]) AS a(i, u, o, n)
            JOIN events e ON e.user_id = a.u AND e.cursor > a.o AND e.cursor <= a.n AND e.kind = 1
            JOIN messages m ON m.conversation_id = e.conversation_id AND m.seq = e.seq
            WHERE m.sender_id != a.u
            GROUP BY a.i, e.conversation_id ORDER BY a.i, e.conversation_id
            """,
            logger: self.logger
        ) {
            let request = Int(try row.get("ack", as: Int64.self))
            self.acks[request]?.delivered.append((try row.get("conversation"), try row.get("seq")))
        }
    }

    /// Reads, in one query each, the users and groups the requests name and the direct conversations between
    /// them and their senders: one round trip for the batch, not several for each request.
    private mutating func look(up requests: [WriteRequest], _ connection: PostgresConnection) async throws {
        var users: Set<String> = []
        var groups: Set<String> = []
        for request in requests {
            let address: Conversation
            switch request {
            case .send(let send): address = send.to
            case .markRead(_, let to, _), .recall(_, let to, _): address = to
            case .ack: continue
            }
            guard (try? address.checkNames()) != nil else { continue }
            switch address {
            case .user(let name): users.insert(name)
            case .group(let name): groups.insert(name)
            }
        }
        if !users.isEmpty {
            for row in try await connection.rows(
                """
                SELECT n.asked, u.id FROM unnest(\(users.sorted())::text[]) AS n(asked)
                JOIN users u ON lower(u.name) = lower(n.asked)
                """,
                logger: self.logger
            ) {
                self.userIDs[try row.get("asked", as: String.self)] = UserID(rawValue: try row.get("id"))
            }
        }
        if !groups.isEmpty {
            for row in try await connection.rows(
                """
                SELECT n.asked, c.id FROM unnest(\(groups.sorted())::text[]) AS n(asked)
                JOIN conversations c ON c.kind = 2 AND lower(c.name) = lower(n.asked)
                """,
                logger: self.logger
            ) {
                self.groupIDs[try row.get("asked", as: String.self)] = try row.get("id", as: Int64.self)
            }
        }
        var pairs: Set<Pair> = []
        for request in requests {
            let (user, address): (UserID, Conversation)
            switch request {
            case .send(let send): (user, address) = (send.sender, send.to)
            case .markRead(let by, let to, _), .recall(let by, let to, _): (user, address) = (by, to)
            case .ack: continue
            }
            guard case .user(let name) = address, let peer = self.userIDs[name] else { continue }
            pairs.insert(Pair(a: min(user, peer), b: max(user, peer)))
        }
        if !pairs.isEmpty {
            let ordered = pairs.sorted { ($0.a, $0.b) < ($1.a, $1.b) }
            for row in try await connection.rows(
                """
                SELECT id, user_a, user_b FROM conversations WHERE (user_a, user_b) IN (
                    SELECT * FROM unnest(\(ordered.map(\.a.rawValue))::bigint[], \(ordered.map(\.b.rawValue))::bigint[]))
                """,
                logger: self.logger
            ) {
                let pair = Pair(
                    a: UserID(rawValue: try row.get("user_a")),
                    b: UserID(rawValue: try row.get("user_b"))
                )
                self.directIDs[pair] = try row.get("id", as: Int64.self)
            }
        }
    }

    /// Reads, in one query under the senders' locks, what they stored before under the ids they send now.
    private mutating func lookForResends(_ requests: [WriteRequest], _ connection: PostgresConnection) async throws {
        var senders: [Int64] = []
        var ids: [String] = []
        for case .send(let send) in requests where !send.id.isEmpty {
            // An id the send will be refused for goes nowhere near the database (PostgreSQL refuses a NUL in text,
            // which would fail the whole batch).
            guard (try? StoreText.check(send.id, what: "message id", maxBytes: self.limits.maxMessageIDBytes)) != nil,
                self.looked.insert(Sent(sender: send.sender, id: send.id)).inserted
            else { continue }
            senders.append(send.sender.rawValue)
            ids.append(send.id)
        }
        guard !senders.isEmpty else { return }
        for row in try await connection.rows(
            """
            SELECT sender_id, client_id, conversation_id, seq, time_ms FROM messages
            WHERE (sender_id, client_id) IN (SELECT * FROM unnest(\(senders)::bigint[], \(ids)::text[]))
            """,
            logger: self.logger
        ) {
            let key = Sent(sender: UserID(rawValue: try row.get("sender_id")), id: try row.get("client_id"))
            self.sent[key] = (try row.get("conversation_id"), try row.get("seq"), try row.get("time_ms"))
        }
    }

    /// The conversation a request addresses as it stands before the locks (nil when there is none yet, or the
    /// address names nothing: the request is refused later), and for a direct one, the other user.
    private func planned(
        _ address: Conversation,
        for user: UserID,
        _ connection: PostgresConnection
    ) async throws -> (conversation: Int64?, peer: UserID?) {
        guard (try? address.checkNames()) != nil else { return (nil, nil) }
        switch address {
        case .group(let name):
            return (self.groupIDs[name], nil)
        case .user(let name):
            guard let peer = self.userIDs[name] else { return (nil, nil) }
            return (self.directIDs[Pair(a: min(user, peer), b: max(user, peer))], peer)
        }
    }

    // MARK: Requests

    /// Applies the request at `index` of the batch's requests (the ones ``lock(for:_:)`` was given).
    mutating func apply(
        _ request: WriteRequest,
        at index: Int,
        _ connection: PostgresConnection
    ) async throws
        -> WriteOutcome
    {
        // A recall reads the messages table: the batch's own messages are inserted first. (The other requests read
        // only what was stored before the batch, or what the batch holds.)
        if case .recall = request { try await self.writeMessages(connection) }
        return switch request {
        case .send(let send): try await self.send(send, connection)
        case .ack(let user, let device, _): try await self.ack(user: user, device: device, request: index, connection)
        case .markRead(let user, let address, let upTo):
            try await self.markRead(user: user, address, upTo: upTo, connection)
        case .recall(let user, let address, let id): try await self.recall(user: user, address, id: id, connection)
        }
    }

    private mutating func send(_ send: WriteRequest.Send, _ connection: PostgresConnection) async throws -> WriteOutcome
    {
        try StoreText.check(send.id, what: "message id", maxBytes: self.limits.maxMessageIDBytes)
        let id = send.id.isEmpty ? WriteRequest.Send.assignedID() : send.id
        // The sender's row is locked: no other transaction stores a message of this sender until this one ends.
        let resend = Sent(sender: send.sender, id: id)
        // (An id the store assigns is new: nothing to look for.)
        if !send.id.isEmpty, !self.looked.contains(resend) {
            self.looked.insert(resend)
            if let row = try await connection.row(
                """
                SELECT conversation_id, seq, time_ms FROM messages
                WHERE sender_id = \(send.sender.rawValue) AND client_id = \(id)
                """,
                logger: self.logger
            ) {
                self.sent[resend] = (try row.get("conversation_id"), try row.get("seq"), try row.get("time_ms"))
            }
        }
        if let original = self.sent[resend] {
            return .sent(
                SendReceipt(
                    id: id,
                    conversation: try await self.address(of: original.conversation, for: send.sender, connection),
                    seq: UInt64(original.seq),
                    timeMs: original.timeMs,
                    duplicate: true
                )
            )
        }
        if let media = send.media {
            let size = try await connection.value(
                """
                SELECT size FROM media_owners WHERE user_id = \(send.sender.rawValue) AND sha256 = \(media.sha256)
                """,
                as: Int64.self,
                logger: self.logger
            )
            guard size == media.size else {
                throw CourierStoreError(
                    .unknownMedia,
                    "no upload of \(media.size) bytes with sha256 \(media.sha256) by this user: upload it first"
                )
            }
        }
        let conversationID = try await self.resolve(send.to, for: send.sender, createDirect: true, connection)
        var conversation = self.conversations[conversationID]!
        // Names first: nothing below may be refused once the message is written.
        let sender = try await self.store.name(of: send.sender, connection)
        let naming = try await self.naming(of: conversation, connection)
        let (seq, time) = conversation.send(by: send.sender, nowMs: self.nowMs)
        let key = conversationID
        self.rows.conversations.append(key)
        self.rows.seqs.append(seq)
        self.rows.senders.append(send.sender.rawValue)
        self.rows.devices.append(send.device?.rawValue ?? 0)
        self.rows.ids.append(id)
        self.rows.times.append(time)
        self.rows.bodies.append(ByteBuffer(bytes: send.body))
        if let media = send.media {
            self.rows.media.sha256.append(media.sha256)
            self.rows.media.conversations.append(key)
            self.rows.media.seqs.append(seq)
            self.rows.media.mimes.append(media.mime)
            self.rows.media.names.append(media.name)
        }
        self.sent[resend] = (key, seq, time)
        self.conversations[key] = conversation
        for member in conversation.members.keys.sorted() {
            try await self.log.append(
                to: member,
                .message,
                conversation: key,
                seq: seq,
                event: .message(
                    StoredMessage(
                        id: id,
                        from: sender,
                        fromDevice: send.device,
                        conversation: naming(member),
                        seq: UInt64(seq),
                        timeMs: time,
                        body: send.body,
                        recalled: false
                    )
                ),
                connection
            )
        }
        return .sent(
            SendReceipt(
                id: id,
                conversation: try await self.address(of: conversation, for: send.sender, connection),
                seq: UInt64(seq),
                timeMs: time,
                duplicate: false,
                recipients: conversation.members.count
            )
        )
    }

    /// Applies an acknowledgement as ``plan(_:_:)`` read it.
    private mutating func ack(
        user: UserID,
        device: DeviceID,
        request: Int,
        _ connection: PostgresConnection
    ) async throws -> WriteOutcome {
        guard let plan = self.acks[request] else {
            throw CourierStoreError(.storageFailed, "acknowledgement \(request) of the batch was not planned")
        }
        guard !plan.refused else {
            throw CourierStoreError(.invalidRequest, "no device \(device.rawValue) of user \(user.rawValue)")
        }
        guard !plan.delivered.isEmpty else { return .done }
        let reader = try await self.store.name(of: user, connection)
        for (key, seq) in plan.delivered {
            var conversation = try await self.conversation(key, connection)
            guard var member = conversation.members[user], seq > member.deliveredSeq else { continue }
            member.deliveredSeq = seq
            member.dirty = true
            conversation.members[user] = member
            self.conversations[key] = conversation
            let naming = try await self.naming(of: conversation, connection)
            for other in conversation.members.keys.sorted() where other != user {
                try await self.log.append(
                    to: other,
                    .receipt,
                    conversation: key,
                    seq: seq,
                    actor: user,
                    detail: ReceiptKind.delivered.rawValue,
                    event: .receipt(
                        conversation: naming(other),
                        user: reader,
                        kind: .delivered,
                        upToSeq: UInt64(seq)
                    ),
                    connection
                )
            }
        }
        return .done
    }

    private mutating func markRead(
        user: UserID,
        _ address: Conversation,
        upTo: UInt64,
        _ connection: PostgresConnection
    ) async throws -> WriteOutcome {
        let key = try await self.resolve(address, for: user, createDirect: false, connection)
        var conversation = self.conversations[key]!
        let seq = min(Int64(clamping: upTo), conversation.lastSeq)
        guard var member = conversation.members[user], seq > member.readSeq else { return .done }
        member.readSeq = seq
        member.dirty = true
        conversation.members[user] = member
        self.conversations[key] = conversation
        let reader = try await self.store.name(of: user, connection)
        let naming = try await self.naming(of: conversation, connection)
        for recipient in conversation.members.keys.sorted() {
            try await self.log.append(
                to: recipient,
                .receipt,
                conversation: key,
                seq: seq,
                actor: user,
                detail: ReceiptKind.read.rawValue,
                event: .receipt(
                    conversation: naming(recipient),
                    user: reader,
                    kind: .read,
                    upToSeq: UInt64(seq)
                ),
                connection
            )
        }
        return .done
    }

    private mutating func recall(
        user: UserID,
        _ address: Conversation,
        id: String,
        _ connection: PostgresConnection
    ) async throws -> WriteOutcome {
        let key = try await self.resolve(address, for: user, createDirect: false, connection)
        guard StoreText.isClean(id),
            let row = try await connection.row(
                """
                SELECT seq, time_ms, recalled FROM messages
                WHERE sender_id = \(user.rawValue) AND client_id = \(id) AND conversation_id = \(key)
                """,
                logger: self.logger
            )
        else { throw CourierStoreError(.unknownMessage, "you sent no message \(id.debugDescription) to \(address)") }
        if try row.get("recalled", as: Bool.self) { return .done }
        let recallWindowMs = self.limits.recallWindow.wholeMilliseconds
        guard self.nowMs - (try row.get("time_ms", as: Int64.self)) <= recallWindowMs else {
            throw CourierStoreError(
                .recallWindowPassed,
                "messages can be recalled for \(recallWindowMs / 1000) s after sending"
            )
        }
        let seq: Int64 = try row.get("seq")
        let conversation = self.conversations[key]!
        let by = try await self.store.name(of: user, connection)
        let naming = try await self.naming(of: conversation, connection)
        try await connection.run(
            "UPDATE messages SET recalled = true, body = '' WHERE conversation_id = \(key) AND seq = \(seq)",
            logger: self.logger
        )
        try await connection.run(
            "DELETE FROM message_media WHERE conversation_id = \(key) AND seq = \(seq)",
            logger: self.logger
        )
        self.log.book.markRecalled(id: id, from: by)
        for member in conversation.members.keys.sorted() {
            try await self.log.append(
                to: member,
                .recall,
                conversation: key,
                seq: seq,
                actor: user,
                event: .recall(conversation: naming(member), seq: UInt64(seq), id: id, by: by),
                connection
            )
        }
        return .done
    }

    // MARK: State

    /// Writes back what the batch changed.
    mutating func finish(_ connection: PostgresConnection) async throws {
        try await self.writeMessages(connection)
        let changed = self.conversations.values.filter(\.dirty).sorted { $0.id < $1.id }
        if !changed.isEmpty {
            try await connection.run(
                """
                UPDATE conversations SET last_seq = c.last_seq, last_ms = c.last_ms
                FROM unnest(\(changed.map(\.id))::bigint[], \(changed.map(\.lastSeq))::bigint[],
                    \(changed.map(\.lastMs))::bigint[]) AS c(id, last_seq, last_ms)
                WHERE conversations.id = c.id
                """,
                logger: self.logger
            )
        }
        var conversationIDs: [Int64] = []
        var users: [Int64] = []
        var reads: [Int64] = []
        var delivered: [Int64] = []
        var sent: [Bool] = []
        for conversation in self.conversations.values {
            for (user, member) in conversation.members where member.dirty {
                conversationIDs.append(conversation.id)
                users.append(user.rawValue)
                reads.append(member.readSeq)
                delivered.append(member.deliveredSeq)
                sent.append(member.sent)
            }
        }
        if !users.isEmpty {
            try await connection.run(
                """
                UPDATE members SET read_seq = m.read_seq, delivered_seq = m.delivered_seq, sent = m.sent
                FROM unnest(\(conversationIDs)::bigint[], \(users)::bigint[], \(reads)::bigint[],
                    \(delivered)::bigint[], \(sent)::boolean[]) AS m(conversation_id, user_id, read_seq, delivered_seq, sent)
                WHERE members.conversation_id = m.conversation_id AND members.user_id = m.user_id
                """,
                logger: self.logger
            )
        }
        if !self.ackedCursors.isEmpty {
            let devices = self.ackedCursors.sorted { $0.key < $1.key }
            try await connection.run(
                """
                UPDATE devices SET acked_cursor = d.cursor
                FROM unnest(\(devices.map(\.key))::bigint[], \(devices.map(\.value))::bigint[]) AS d(id, cursor)
                WHERE devices.id = d.id
                """,
                logger: self.logger
            )
        }
        try await self.log.finish(connection)
    }

    /// Inserts the message rows gathered since the last time, in one statement (and their media in another).
    private mutating func writeMessages(_ connection: PostgresConnection) async throws {
        let rows = self.rows
        self.rows = MessageRows()
        if !rows.ids.isEmpty {
            try await connection.run(
                """
                INSERT INTO messages (conversation_id, seq, sender_id, sender_device_id, client_id, time_ms, body)
                SELECT c, s, u, NULLIF(d, 0), i, t, b FROM unnest(\(rows.conversations)::bigint[],
                    \(rows.seqs)::bigint[], \(rows.senders)::bigint[], \(rows.devices)::bigint[], \(rows.ids)::text[],
                    \(rows.times)::bigint[], \(rows.bodies)::bytea[]) AS m(c, s, u, d, i, t, b)
                """,
                logger: self.logger
            )
        }
        if !rows.media.sha256.isEmpty {
            try await connection.run(
                """
                INSERT INTO message_media (sha256, conversation_id, seq, mime, name)
                SELECT * FROM unnest(\(rows.media.sha256)::text[], \(rows.media.conversations)::bigint[],
                    \(rows.media.seqs)::bigint[], \(rows.media.mimes)::text[], \(rows.media.names)::text[])
                """,
                logger: self.logger
            )
        }
    }

    /// Locks conversations' rows in the order of their ids and reads them with their members.
    ///
    /// - Parameter nowait: For a lock taken out of the batch's order, as ``PostgresEventLog/lock(_:nowait:_:)``.
    /// - Returns: Every member of them.
    private mutating func load(
        _ ids: [Int64],
        nowait: Bool = false,
        _ connection: PostgresConnection
    ) async throws -> Set<UserID> {
        guard !ids.isEmpty else { return [] }
        var members: [Int64: [UserID: ConversationRow.Member]] = [:]
        let rows =
            nowait
            ? try await connection.rows(
                """
                SELECT id, name, user_a, user_b, last_seq, last_ms FROM conversations WHERE id = ANY(\(ids))
                ORDER BY id FOR UPDATE NOWAIT
                """,
                logger: self.logger
            )
            : try await connection.rows(
                """
                SELECT id, name, user_a, user_b, last_seq, last_ms FROM conversations WHERE id = ANY(\(ids))
                ORDER BY id FOR UPDATE
                """,
                logger: self.logger
            )
        var everyone: Set<UserID> = []
        for member in try await connection.rows(
            """
            SELECT conversation_id, user_id, joined_seq, read_seq, delivered_seq, sent FROM members
            WHERE conversation_id = ANY(\(ids))
            """,
            logger: self.logger
        ) {
            let user = UserID(rawValue: try member.get("user_id"))
            everyone.insert(user)
            members[try member.get("conversation_id", as: Int64.self), default: [:]][user] = ConversationRow.Member(
                joinedSeq: try member.get("joined_seq"),
                readSeq: try member.get("read_seq"),
                deliveredSeq: try member.get("delivered_seq"),
                sent: try member.get("sent")
            )
        }
        for row in rows {
            let id: Int64 = try row.get("id")
            self.conversations[id] = ConversationRow(
                id: id,
                groupName: try row.get("name"),
                userA: try row.get("user_a", as: Int64?.self).map(UserID.init(rawValue:)),
                userB: try row.get("user_b", as: Int64?.self).map(UserID.init(rawValue:)),
                lastSeq: try row.get("last_seq"),
                lastMs: try row.get("last_ms"),
                members: members[id] ?? [:]
            )
        }
        return everyone
    }

    /// A conversation with its members, read under its row's lock (taken by ``lock(for:_:)``, or here, out of
    /// order and without waiting, for one the plan did not foresee: made by another node since, say).
    private mutating func conversation(_ id: Int64, _ connection: PostgresConnection) async throws -> ConversationRow {
        if let conversation = self.conversations[id] { return conversation }
        _ = try await self.load([id], nowait: true, connection)
        guard let conversation = self.conversations[id] else {
            throw CourierStoreError(.storageFailed, "conversation \(id) is missing")
        }
        return conversation
    }

    /// The conversation a user means by an address, which the user must be a member of.
    private mutating func resolve(
        _ address: Conversation,
        for user: UserID,
        createDirect: Bool,
        _ connection: PostgresConnection
    ) async throws -> Int64 {
        try address.checkNames()
        switch address {
        case .group(let name):
            let key: Int64
            if let cached = self.groupIDs[name] {
                key = cached
            } else {
                guard
                    let found = try await connection.value(
                        "SELECT id FROM conversations WHERE kind = 2 AND lower(name) = lower(\(name))",
                        as: Int64.self,
                        logger: self.logger
                    )
                else { throw CourierStoreError(.unknownGroup, "no group named \(name)") }
                self.groupIDs[name] = found
                key = found
            }
            guard try await self.conversation(key, connection).members[user] != nil else {
                throw CourierStoreError(.notMember, "you are not a member of \(name)")
            }
            return key
        case .user(let name):
            let peer: UserID
            if let known = self.userIDs[name] {
                peer = known
            } else {
                // Not foreseen by the plan (a user made since).
                guard
                    let id = try await connection.value(
                        "SELECT id FROM users WHERE lower(name) = lower(\(name))",
                        as: Int64.self,
                        logger: self.logger
                    )
                else { throw CourierStoreError(.unknownUser, "no user named \(name)") }
                peer = UserID(rawValue: id)
            }
            if createDirect {
                // A conversation may be made with the user: its row is locked (by the plan, or here out of order)
                // before its removal is read. A request that only names an existing conversation (a read mark, a
                // recall) needs no lock on the other user: the conversation's row is the one it writes.
                if self.log.stored[peer] == nil { try await self.log.lock([peer], nowait: true, connection) }
                guard !self.log.removed.contains(peer) else {
                    throw CourierStoreError(.unknownUser, "no user named \(name)")
                }
            }
            let pair = Pair(a: min(user, peer), b: max(user, peer))
            if let key = self.directIDs[pair] {
                _ = try await self.conversation(key, connection)
                return key
            }
            if let key = try await connection.value(
                "SELECT id FROM conversations WHERE user_a = \(pair.a.rawValue) AND user_b = \(pair.b.rawValue)",
                as: Int64.self,
                logger: self.logger
            ) {
                self.directIDs[pair] = key
                _ = try await self.conversation(key, connection)
                return key
            }
            guard createDirect else {
                throw CourierStoreError(.notMember, "you have no conversation with \(name)")
            }
            // Both users' rows are locked (the plan named them): no other transaction makes this pair's
            // conversation meanwhile.
            guard
                let key = try await connection.value(
                    """
                    INSERT INTO conversations (kind, user_a, user_b, created_ms)
                    VALUES (1, \(pair.a.rawValue), \(pair.b.rawValue), \(self.nowMs)) RETURNING id
                    """,
                    as: Int64.self,
                    logger: self.logger
                )
            else { throw CourierStoreError(.storageFailed, "no id for a new conversation") }
            let members = Set([pair.a, pair.b]).map(\.rawValue).sorted()
            try await connection.run(
                """
                INSERT INTO members (conversation_id, user_id, joined_seq, read_seq, delivered_seq)
                SELECT \(key), user_id, 0, 0, 0 FROM unnest(\(members)::bigint[]) AS m(user_id)
                """,
                logger: self.logger
            )
            self.directIDs[pair] = key
            _ = try await self.conversation(key, connection)
            return key
        }
    }

    /// How each member names a conversation, with the names looked up now (so that making events later cannot
    /// fail half-way through a request's writes).
    private func naming(
        of conversation: ConversationRow,
        _ connection: PostgresConnection
    ) async throws -> @Sendable (UserID) -> Conversation {
        if conversation.groupName != nil { return conversation.naming(nameA: nil, nameB: nil) }
        return conversation.naming(
            nameA: try await self.store.name(of: conversation.userA!, connection),
            nameB: try await self.store.name(of: conversation.userB!, connection)
        )
    }

    /// How a user names a conversation.
    private func address(
        of conversation: ConversationRow,
        for user: UserID,
        _ connection: PostgresConnection
    ) async throws -> Conversation {
        guard let peer = conversation.peer(of: user) else { return .group(conversation.groupName!) }
        return .user(try await self.store.name(of: peer, connection))
    }

    /// How a user names a conversation, by id: read without its row's lock when the batch does not hold it (a
    /// resend's original may be in a conversation the batch does not write; its name and users never change).
    private func address(
        of id: Int64,
        for user: UserID,
        _ connection: PostgresConnection
    ) async throws
        -> Conversation
    {
        if let conversation = self.conversations[id] {
            return try await self.address(of: conversation, for: user, connection)
        }
        guard
            let row = try await connection.row(
                "SELECT name, user_a, user_b FROM conversations WHERE id = \(id)",
                logger: self.logger
            )
        else { throw CourierStoreError(.storageFailed, "conversation \(id) is missing") }
        if let name = try row.get("name", as: String?.self) { return .group(name) }
        let (a, b) = (try row.get("user_a", as: Int64.self), try row.get("user_b", as: Int64.self))
        return .user(try await self.store.name(of: UserID(rawValue: a == user.rawValue ? b : a), connection))
    }
}
