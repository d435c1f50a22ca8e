internal import CourierStore
internal import Logging
internal import PostgresNIO

extension PostgresGroupCommit {
    // MARK: What the rules ask for

    /// Reads (and locks, where the rows are written) what the rules asked for, one statement for each kind of row.
    /// After the plan, a lock is taken out of the batch's order: without waiting.
    mutating func load(_ needs: [BatchNeed], _ connection: PostgresConnection) async throws {
        var userNames: Set<String> = []
        var groupNames: Set<String> = []
        var users: Set<UserID> = []
        var names: Set<UserID> = []
        var pairs: Set<UserPair> = []
        var newPairs: Set<UserPair> = []
        var conversations: Set<Int64> = []
        var headers: Set<Int64> = []
        var messages: [MessageKey] = []
        var uploads: [UploadKey] = []
        var devices: [DeviceID] = []
        var ranges: [AckRange] = []
        var positions: [MessagePosition] = []
        var lookups: [IDLookup] = []
        var owners: [ReactionOwner] = []
        for need in needs where !self.commit.has(need) {
            switch need {
            case .userID(let name): userNames.insert(name)
            case .groupID(let name): groupNames.insert(name)
            case .user(let user): users.insert(user)
            case .name(let user): names.insert(user)
            case .directID(let pair): pairs.insert(pair)
            case .newDirect(let pair): newPairs.insert(pair)
            case .conversation(let id): conversations.insert(id)
            case .header(let id): headers.insert(id)
            case .message(let key): messages.append(key)
            case .upload(let key): uploads.append(key)
            case .device(let device): devices.append(device)
            case .deliveries(let range): ranges.append(range)
            case .messageAt(let position): positions.append(position)
            case .withID(let lookup): lookups.append(lookup)
            case .reactions(let owner): owners.append(owner)
            }
        }
        if !userNames.isEmpty {
            let found = try await self.userIDs(named: userNames, connection)
            for name in userNames { self.commit.loadUser(named: name, id: found[name]) }
        }
        if !groupNames.isEmpty {
            let found = try await self.groupIDs(named: groupNames, connection)
            for name in groupNames { self.commit.loadGroup(named: name, id: found[name]) }
        }
        if !pairs.isEmpty {
            let found = try await self.directIDs(pairs, connection)
            for pair in pairs { self.commit.loadDirect(pair, id: found[pair]) }
        }
        try self.requireLocked(by: userNames.union(groupNames), pairs)
        for pair in newPairs.sorted(by: { ($0.a, $0.b) < ($1.a, $1.b) }) {
            try await self.makeDirect(pair, connection)
        }
        _ = try await self.lockConversations(conversations.sorted(), connection)
        // The users whose acknowledgements the batch applies were locked by the plan: the users the rules ask for
        // later are ones whose logs grow, whose member rows' marks are merged, or whose names they show.
        try await self.readUsers(users, connection)
        try await self.loadNames(names, connection)
        try await self.loadHeaders(headers, connection)
        try await self.loadMessages(messages, connection)
        try await self.loadUploads(uploads, connection)
        try await self.lockDevices(devices, connection)
        try await self.loadDeliveries(ranges, connection)
        try await self.loadPositioned(positions, connection)
        try await self.loadSeqs(lookups, connection)
        try await self.loadReactions(owners, connection)
    }

    // MARK: Reads and locks

    /// Users' ids by name as asked (matched with `lower()` on both sides, in the database's own rules, as
    /// everywhere else), for the names that have one.
    func userIDs(named names: Set<String>, _ connection: PostgresConnection) async throws -> [String: UserID] {
        guard !names.isEmpty else { return [:] }
        var found: [String: UserID] = [:]
        for row in try await connection.rows(
            """
            SELECT n.asked, u.id FROM unnest(\(names.sorted())::text[]) AS n(asked)
            JOIN users u ON lower(u.name) = lower(n.asked)
            """,
            logger: self.logger
        ) {
            found[try row.get("asked", as: String.self)] = UserID(rawValue: try row.get("id"))
        }
        return found
    }

    /// Groups' ids by name as asked, for the names that have one.
    func groupIDs(named names: Set<String>, _ connection: PostgresConnection) async throws -> [String: Int64] {
        guard !names.isEmpty else { return [:] }
        var found: [String: Int64] = [:]
        for row in try await connection.rows(
            """
            SELECT n.asked, c.id FROM unnest(\(names.sorted())::text[]) AS n(asked)
            JOIN conversations c ON c.kind = 2 AND lower(c.name) = lower(n.asked)
            """,
            logger: self.logger
        ) {
            found[try row.get("asked", as: String.self)] = try row.get("id", as: Int64.self)
        }
        return found
    }

    /// The direct conversations of the pairs that have one.
    func directIDs(_ pairs: Set<UserPair>, _ connection: PostgresConnection) async throws -> [UserPair: Int64] {
        guard !pairs.isEmpty else { return [:] }
        let ordered = pairs.sorted { ($0.a, $0.b) < ($1.a, $1.b) }
        var found: [UserPair: Int64] = [:]
        for row in try await connection.rows(
            """
            SELECT id, user_a, user_b FROM conversations WHERE (user_a, user_b) IN (
                SELECT * FROM unnest(\(ordered.map(\.a.rawValue))::bigint[], \(ordered.map(\.b.rawValue))::bigint[]))
            """,
            logger: self.logger
        ) {
            let pair = UserPair(UserID(rawValue: try row.get("user_a")), UserID(rawValue: try row.get("user_b")))
            found[pair] = try row.get("id", as: Int64.self)
        }
        return found
    }

    /// Makes two users' direct conversation, with both users' rows locked: no other transaction makes this pair's
    /// conversation meanwhile. The sender's is the plan's; the peer's is taken here, out of the batch's order and
    /// so without waiting, when the plan did not know the peer (a user who signed up after it looked the name up).
    private mutating func makeDirect(_ pair: UserPair, _ connection: PostgresConnection) async throws {
        _ = try await PostgresTransaction.users(
            Set([pair.a, pair.b]).map(\.rawValue).sorted(),
            lock: .nowait,
            connection,
            logger: self.logger
        )
        guard
            let id = try await connection.value(
                """
                INSERT INTO conversations (kind, user_a, user_b, created_ms)
                VALUES (1, \(pair.a.rawValue), \(pair.b.rawValue), \(self.commit.nowMs)) RETURNING id
                """,
                as: Int64.self,
                logger: self.logger
            )
        else { throw CourierStoreError(.storageFailed, "no id for a new conversation") }
        let members = Set([pair.a, pair.b]).map(\.rawValue).sorted()
        try await connection.run(
            """
            INSERT INTO members (conversation_id, user_id, joined_seq, read_seq, delivered_seq, blocked_at_seq)
            SELECT \(id), m.user_id, 0, 0, 0,
                (SELECT 0 FROM blocks b WHERE b.blocker_id = m.user_id AND b.blocked_id <> m.user_id
                    AND b.blocked_id = ANY(\(members)::bigint[]))
            FROM unnest(\(members)::bigint[]) AS m(user_id)
            """,
            logger: self.logger
        )
        self.commit.loadDirect(pair, id: id)
        _ = try await self.lockConversations([id], connection)
    }

    /// Locks conversations' rows in the order of their ids and reads them with their members (the ones loaded
    /// already are kept as the batch changed them).
    ///
    /// - Returns: Every member of them.
    mutating func lockConversations(_ ids: [Int64], _ connection: PostgresConnection) async throws -> Set<UserID> {
        try await self.loadConversations(ids, lock: self.planned ? .nowait : .wait, connection)
    }

    /// Throws ``StaleBatchRead`` when a conversation a request names, found after the plan, is one the plan read
    /// without its lock (for acknowledgements alone): the request may write it. The batch runs again from a new
    /// plan, which finds the name and locks the row. Rare: the name was taken, or its direct conversation made, in
    /// the moment between the plan's lookups and its read of the acknowledgements' conversations.
    private func requireLocked(by names: Set<String>, _ pairs: Set<UserPair>) throws {
        guard !self.unlocked.isEmpty else { return }
        let found =
            names.compactMap { self.commit.loadedGroupID(named: $0) }
            + pairs.compactMap { self.commit.loadedDirectID($0) }
        if found.contains(where: self.unlocked.contains) { throw StaleBatchRead() }
    }

    /// Reads conversations' rows with their members without locking them (the ones loaded already are kept),
    /// noting each in ``unlocked``.
    ///
    /// - Returns: Every member of them.
    mutating func readConversations(_ ids: [Int64], _ connection: PostgresConnection) async throws -> Set<UserID> {
        try await self.loadConversations(ids.filter { !self.commit.has(.conversation($0)) }, lock: .none, connection)
    }

    private mutating func loadConversations(
        _ ids: [Int64],
        lock: PostgresTransaction.RowLock,
        _ connection: PostgresConnection
    ) async throws -> Set<UserID> {
        guard !ids.isEmpty else { return [] }
        let rows = try await connection.rows(
            """
            SELECT id, name, user_a, user_b, last_seq, last_ms, owner_id FROM conversations WHERE id = ANY(\(ids))
            ORDER BY id \(unescaped: lock.clause())
            """,
            logger: self.logger
        )
        var members: [Int64: [UserID: BatchConversation.Member]] = [:]
        var everyone: Set<UserID> = []
        for member in try await connection.rows(
            """
            SELECT conversation_id, user_id, joined_seq, read_seq, delivered_seq, sent, role::BIGINT AS role,
                blocked_at_seq
            FROM members WHERE conversation_id = ANY(\(ids))
            """,
            logger: self.logger
        ) {
            let user = UserID(rawValue: try member.get("user_id"))
            everyone.insert(user)
            members[try member.get("conversation_id", as: Int64.self), default: [:]][user] = BatchConversation.Member(
                joinedSeq: try member.get("joined_seq"),
                readSeq: try member.get("read_seq"),
                deliveredSeq: try member.get("delivered_seq"),
                sent: try member.get("sent"),
                role: GroupRole(rawValue: try member.get("role", as: Int64.self)) ?? .member,
                blockedAtSeq: try member.get("blocked_at_seq", as: Int64?.self)
            )
        }
        for row in rows {
            let id: Int64 = try row.get("id")
            if lock == .none, !self.commit.has(.conversation(id)) { self.unlocked.insert(id) }
            self.commit.load(
                BatchConversation(
                    id: id,
                    groupName: try row.get("name"),
                    userA: try row.get("user_a", as: Int64?.self).map(UserID.init(rawValue:)),
                    userB: try row.get("user_b", as: Int64?.self).map(UserID.init(rawValue:)),
                    lastSeq: try row.get("last_seq"),
                    lastMs: try row.get("last_ms"),
                    members: members[id] ?? [:],
                    owner: try row.get("owner_id", as: Int64?.self).map(UserID.init(rawValue:))
                )
            )
        }
        if let missing = ids.first(where: { !self.commit.has(.conversation($0)) }) {
            throw CourierStoreError(.storageFailed, "conversation \(missing) is missing")
        }
        return everyone
    }

    /// Locks users' rows in the order of their ids and reads their cursors (the ones loaded already are skipped).
    mutating func lockUsers(_ users: Set<UserID>, _ connection: PostgresConnection) async throws {
        try await self.loadUsers(users, lock: self.planned ? .nowait : .wait, connection)
    }

    /// Reads users' rows without locking them: users whose logs only grow in this batch.
    mutating func readUsers(_ users: Set<UserID>, _ connection: PostgresConnection) async throws {
        try await self.loadUsers(users, lock: .none, connection)
    }

    private mutating func loadUsers(
        _ users: Set<UserID>,
        lock: PostgresTransaction.RowLock,
        _ connection: PostgresConnection
    ) async throws {
        let ids = users.filter { !self.commit.has(.user($0)) }.map(\.rawValue).sorted()
        for (user, row) in try await PostgresTransaction.users(ids, lock: lock, connection, logger: self.logger) {
            self.commit.loadUser(user, row)
        }
    }

    /// Locks devices' rows in the order of their ids and reads their owners and acknowledged cursors.
    mutating func lockDevices(_ devices: [DeviceID], _ connection: PostgresConnection) async throws {
        let ids = Set(devices).filter { !self.commit.has(.device($0)) }.map(\.rawValue).sorted()
        guard !ids.isEmpty else { return }
        let rows =
            self.planned
            ? try await connection.rows(
                "SELECT id, user_id, acked_cursor FROM devices WHERE id = ANY(\(ids)) ORDER BY id FOR UPDATE NOWAIT",
                logger: self.logger
            )
            : try await connection.rows(
                "SELECT id, user_id, acked_cursor FROM devices WHERE id = ANY(\(ids)) ORDER BY id FOR UPDATE",
                logger: self.logger
            )
        for row in rows {
            self.commit.loadDevice(
                DeviceID(rawValue: try row.get("id")),
                DeviceRow(user: UserID(rawValue: try row.get("user_id")), ackedCursor: try row.get("acked_cursor"))
            )
        }
        for id in ids { self.commit.loadDevice(DeviceID(rawValue: id), nil) }
    }

    /// Reads, in one query, the delivered receipts of acknowledgements' ranges: the newest message from someone
    /// else in each conversation of the events each covers, and those messages' senders.
    mutating func loadDeliveries(_ ranges: [AckRange], _ connection: PostgresConnection) async throws {
        let ranges = ranges.filter { !self.commit.has(.deliveries($0)) }
        guard !ranges.isEmpty else { return }
        var found: [Int: [Delivery]] = [:]
        for row in try await connection.rows(
            """
            SELECT range, conversation, MAX(seq) AS seq, array_agg(DISTINCT sender) AS senders
            FROM (
                SELECT a.i AS range, a.u AS reader, e.conversation_id AS conversation, e.seq AS seq,
                    \(unescaped: LogEventKind.messageSenderSQL(events: "e")) AS sender
                FROM unnest(\(ranges.indices.map(Int64.init))::bigint[], \(ranges.map(\.user.rawValue))::bigint[],
                    \(ranges.map(\.from))::bigint[], \(ranges.map(\.to))::bigint[]) AS a(i, u, o, n)
                CROSS JOIN LATERAL (
                    \(unescaped: LogEventKind.userLogSQL(user: "a.u", after: "a.o", upTo: "a.n", messagesOnly: true))
                ) e
            ) covered
            WHERE sender != reader
            GROUP BY range, conversation ORDER BY range, conversation
            """,
            logger: self.logger
        ) {
            found[Int(try row.get("range", as: Int64.self)), default: []].append(
                Delivery(
                    conversation: try row.get("conversation"),
                    seq: try row.get("seq"),
                    senders: Set(try row.get("senders", as: [Int64].self).map(UserID.init(rawValue:)))
                )
            )
        }
        for (index, range) in ranges.enumerated() {
            self.commit.loadDeliveries(range, found[index] ?? [])
        }
    }

    /// Reads messages by their senders' ids, in one query. The senders' rows are not locked: a message of the same
    /// id another transaction commits meanwhile breaks this batch's insert, which then runs again and finds it.
    mutating func loadMessages(_ keys: [MessageKey], _ connection: PostgresConnection) async throws {
        let keys = Array(Set(keys.filter { !self.commit.has(.message($0)) }))
        guard !keys.isEmpty else { return }
        for row in try await connection.rows(
            """
            SELECT sender_id, client_id, conversation_id, seq, time_ms, recalled FROM messages
            WHERE (sender_id, client_id) IN (
                SELECT * FROM unnest(\(keys.map(\.sender.rawValue))::bigint[], \(keys.map(\.text))::text[]))
            """,
            logger: self.logger
        ) {
            self.commit.loadMessage(
                MessageKey(sender: UserID(rawValue: try row.get("sender_id")), id: try row.get("client_id")),
                MessageRow(
                    conversation: try row.get("conversation_id"),
                    seq: try row.get("seq"),
                    timeMs: try row.get("time_ms"),
                    recalled: try row.get("recalled")
                )
            )
        }
        for key in keys { self.commit.loadMessage(key, nil) }
    }

    /// Reads users' names (from the store's cache when it has them).
    private mutating func loadNames(_ users: Set<UserID>, _ connection: PostgresConnection) async throws {
        guard !users.isEmpty else { return }
        let names = try await PostgresTransaction(connection: connection, store: self.store).names(of: users)
        for user in users { self.commit.loadName(of: user, names[user]) }
    }

    /// Reads conversations' names and users, without their rows' locks (they never change).
    private mutating func loadHeaders(_ ids: Set<Int64>, _ connection: PostgresConnection) async throws {
        guard !ids.isEmpty else { return }
        for row in try await connection.rows(
            "SELECT id, name, user_a, user_b FROM conversations WHERE id = ANY(\(ids.sorted()))",
            logger: self.logger
        ) {
            self.commit.loadHeader(
                try row.get("id"),
                ConversationHeader(
                    groupName: try row.get("name"),
                    userA: try row.get("user_a", as: Int64?.self).map(UserID.init(rawValue:)),
                    userB: try row.get("user_b", as: Int64?.self).map(UserID.init(rawValue:))
                )
            )
        }
        if let missing = ids.first(where: { !self.commit.has(.header($0)) }) {
            throw CourierStoreError(.storageFailed, "conversation \(missing) is missing")
        }
    }

    /// Reads the sizes of users' uploads.
    private mutating func loadUploads(_ keys: [UploadKey], _ connection: PostgresConnection) async throws {
        let keys = Array(Set(keys))
        guard !keys.isEmpty else { return }
        // Under the files' shared locks: a collection of one of them waits for this batch, or has deleted the
        // records this reads (Rules/MediaCollection.swift).
        try await PostgresTransaction.lockMedia(keys.map(\.sha256), exclusive: false, connection, logger: self.logger)
        var found: [UploadKey: Int64] = [:]
        for row in try await connection.rows(
            """
            SELECT user_id, sha256, size FROM media_owners WHERE (user_id, sha256) IN (
                SELECT * FROM unnest(\(keys.map(\.user.rawValue))::bigint[], \(keys.map(\.sha256))::text[]))
            """,
            logger: self.logger
        ) {
            let key = UploadKey(user: UserID(rawValue: try row.get("user_id")), sha256: try row.get("sha256"))
            found[key] = try row.get("size", as: Int64.self)
        }
        for key in keys { self.commit.loadUpload(key, size: found[key]) }
    }

    /// Reads messages by their places, in one query (their conversations are locked: no other transaction edits,
    /// recalls or reacts to them until this one ends).
    private mutating func loadPositioned(_ positions: [MessagePosition], _ connection: PostgresConnection) async throws
    {
        let positions = Array(Set(positions))
        guard !positions.isEmpty else { return }
        for row in try await connection.rows(
            """
            SELECT conversation_id, seq, sender_id, client_id, time_ms, recalled, body, edit_count, edited_ms,
                ARRAY(SELECT h.user_id FROM hidden h
                    WHERE h.conversation_id = messages.conversation_id AND h.seq = messages.seq) AS hidden_from
            FROM messages WHERE (conversation_id, seq) IN (
                SELECT * FROM unnest(\(positions.map(\.conversation))::bigint[], \(positions.map(\.seq))::bigint[]))
            """,
            logger: self.logger
        ) {
            self.commit.loadMessage(
                at: MessagePosition(conversation: try row.get("conversation_id"), seq: try row.get("seq")),
                TargetRow(
                    sender: UserID(rawValue: try row.get("sender_id")),
                    id: try row.get("client_id"),
                    timeMs: try row.get("time_ms"),
                    recalled: try row.get("recalled"),
                    body: try row.bytes("body"),
                    editCount: Int64(try row.get("edit_count", as: Int32.self)),
                    editedMs: try row.get("edited_ms", as: Int64?.self),
                    hiddenFrom: try row.get("hidden_from", as: [Int64].self).map(UserID.init(rawValue:))
                )
            )
        }
        for position in positions { self.commit.loadMessage(at: position, nil) }
    }

    /// Reads the seqs of messages by id in their conversations, one query each.
    private mutating func loadSeqs(_ lookups: [IDLookup], _ connection: PostgresConnection) async throws {
        for lookup in Set(lookups) {
            let seqs = try await connection.values(
                """
                SELECT seq FROM messages WHERE client_id = \(lookup.text) AND conversation_id = \(lookup.conversation)
                AND seq > \(lookup.after)
                AND (\(lookup.sender?.rawValue)::bigint IS NULL OR sender_id = \(lookup.sender?.rawValue))
                ORDER BY seq LIMIT 2
                """,
                as: Int64.self,
                logger: self.logger
            )
            self.commit.loadSeqs(lookup, seqs)
        }
    }

    /// Reads messages' reactions, one query each (their conversations are locked).
    private mutating func loadReactions(_ owners: [ReactionOwner], _ connection: PostgresConnection) async throws {
        for owner in Set(owners) {
            var counts: [String: Int] = [:]
            var mine: Set<String> = []
            for row in try await connection.rows(
                """
                SELECT key, COUNT(*) AS count, bool_or(user_id = \(owner.user.rawValue)) AS mine FROM reactions
                WHERE conversation_id = \(owner.position.conversation) AND seq = \(owner.position.seq) GROUP BY key
                """,
                logger: self.logger
            ) {
                let key = try row.get("key", as: String.self)
                counts[key] = Int(try row.get("count", as: Int64.self))
                if try row.get("mine", as: Bool.self) { mine.insert(key) }
            }
            self.commit.loadReactions(owner, counts: counts, mine: mine)
        }
    }
}
