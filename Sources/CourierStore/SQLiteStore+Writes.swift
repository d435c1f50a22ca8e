internal import Foundation
internal import GRDB

extension SQLiteStore {
    /// Applies many writes in one transaction: one fsync for all (group commit).
    ///
    /// Each request is checked before it writes anything, so a refused request changes nothing while the others
    /// commit. If the database itself fails (disk full, I/O error), the whole transaction rolls back and this throws:
    /// none of the requests is committed, and none may be acknowledged.
    ///
    /// - Parameters:
    ///   - requests: The writes, applied in order.
    ///   - nowMs: The server's clock, in milliseconds since 1970; a conversation's times never go backwards.
    ///   - freshRoom: How many fresh events each user can take (see ``CourierDatabase/apply(_:nowMs:freshRoom:)``).
    /// - Throws: ``CourierStoreError`` with code `storage-failed`.
    public func apply(
        _ requests: [WriteRequest],
        nowMs: Int64,
        freshRoom: (@Sendable (UserID) -> Int)?
    ) async throws -> AppliedBatch {
        let recallWindowMs = self.limits.recallWindow.wholeMilliseconds
        return try await self.write { db in
            var batch = WriteBatch(nowMs: nowMs, recallWindowMs: recallWindowMs, store: self)
            batch.log.book.maxFreshPerUser = self.limits.maxFreshEventsPerUser
            batch.log.book.freshRoom = freshRoom
            var outcomes: [WriteOutcome] = []
            outcomes.reserveCapacity(requests.count)
            for request in requests {
                do {
                    outcomes.append(try batch.apply(request, db))
                } catch let error as CourierStoreError where error.code != .storageFailed {
                    outcomes.append(.refused(error))
                }
            }
            try batch.finish(db)
            return AppliedBatch(outcomes: outcomes, appended: batch.log.appended, fresh: batch.log.fresh)
        }
    }
}

/// The state of one group commit: conversations, members and logs read once and written back once.
struct WriteBatch {
    typealias Member = BatchConversation.Member
    typealias ConversationRow = BatchConversation

    let nowMs: Int64
    let recallWindowMs: Int64
    let store: SQLiteStore
    var log = EventLogWriter()
    private var conversations: [Int64: ConversationRow] = [:]
    private var groupIDs: [String: Int64] = [:]
    private var directIDs: [Pair: Int64] = [:]

    private struct Pair: Hashable {
        var a: UserID
        var b: UserID
    }

    init(nowMs: Int64, recallWindowMs: Int64, store: SQLiteStore) {
        self.nowMs = nowMs
        self.recallWindowMs = recallWindowMs
        self.store = store
    }

    mutating func apply(_ request: WriteRequest, _ db: Database) throws -> WriteOutcome {
        switch request {
        case .send(let send): try self.send(send, db)
        case .ack(let user, let device, let cursor): try self.ack(user: user, device: device, cursor: cursor, db)
        case .markRead(let user, let address, let upTo): try self.markRead(user: user, address, upTo: upTo, db)
        case .recall(let user, let address, let id): try self.recall(user: user, address, id: id, db)
        }
    }

    // MARK: Requests

    private mutating func send(_ send: WriteRequest.Send, _ db: Database) throws -> WriteOutcome {
        try StoreText.check(send.id, what: "message id", maxBytes: self.store.limits.maxMessageIDBytes)
        let id = send.id.isEmpty ? WriteRequest.Send.assignedID() : send.id
        if let row = try Row.fetchOne(
            db.cachedStatement(
                sql: "SELECT conversation_id, seq, time_ms FROM messages WHERE sender_id = ? AND client_id = ?"
            ),
            arguments: [send.sender.rawValue, id]
        ) {
            let conversation = try self.conversation(row["conversation_id"], db)
            return .sent(
                SendReceipt(
                    id: id,
                    conversation: try self.address(of: conversation, for: send.sender, db),
                    seq: UInt64(row["seq"] as Int64),
                    timeMs: row["time_ms"],
                    duplicate: true
                )
            )
        }
        if let media = send.media {
            let size = try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT size FROM media_owners WHERE user_id = ? AND sha256 = ?"),
                arguments: [send.sender.rawValue, media.sha256]
            )
            guard size == media.size else {
                throw CourierStoreError(
                    .unknownMedia,
                    "no upload of \(media.size) bytes with sha256 \(media.sha256) by this user: upload it first"
                )
            }
        }
        let key = try self.resolve(send.to, for: send.sender, createDirect: true, db)
        var conversation = self.conversations[key]!
        // Names first: nothing below may fail once the message is written.
        let sender = try self.store.name(of: send.sender, db)
        let naming = try self.naming(of: conversation, db)
        let (seq, time) = conversation.send(by: send.sender, nowMs: self.nowMs)
        try db.cachedStatement(
            sql: """
                INSERT INTO messages (conversation_id, seq, sender_id, sender_device_id, client_id, time_ms, body)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """
        ).execute(arguments: [key, seq, send.sender.rawValue, send.device?.rawValue, id, time, Data(send.body)])
        if let media = send.media {
            try db.cachedStatement(
                sql: "INSERT INTO message_media (sha256, conversation_id, seq, mime, name) VALUES (?, ?, ?, ?, ?)"
            ).execute(arguments: [media.sha256, key, seq, media.mime, media.name])
        }
        self.conversations[key] = conversation
        for member in conversation.members.keys.sorted() {
            try self.log.append(
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
                db
            )
        }
        return .sent(
            SendReceipt(
                id: id,
                conversation: try self.address(of: conversation, for: send.sender, db),
                seq: UInt64(seq),
                timeMs: time,
                duplicate: false,
                recipients: conversation.members.count
            )
        )
    }

    private mutating func ack(user: UserID, device: DeviceID, cursor: UInt64, _ db: Database) throws -> WriteOutcome {
        guard
            let old = try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT acked_cursor FROM devices WHERE id = ? AND user_id = ?"),
                arguments: [device.rawValue, user.rawValue]
            )
        else { throw CourierStoreError(.invalidRequest, "no device \(device.rawValue) of user \(user.rawValue)") }
        let newest =
            try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT log_cursor FROM users WHERE id = ?"),
                arguments: [user.rawValue]
            ) ?? 0
        let new = min(Int64(clamping: cursor), newest)
        guard new > old else { return .done }
        let reader = try self.store.name(of: user, db)
        try db.cachedStatement(sql: "UPDATE devices SET acked_cursor = ? WHERE id = ?").execute(arguments: [
            new, device.rawValue,
        ])
        // The newest message from someone else per conversation among the events this ack covers.
        let delivered = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT e.conversation_id AS conversation, MAX(e.seq) AS seq FROM events e
                    JOIN messages m ON m.conversation_id = e.conversation_id AND m.seq = e.seq
                    WHERE e.user_id = ? AND e.cursor > ? AND e.cursor <= ? AND e.kind = 1 AND m.sender_id != ?
                    GROUP BY e.conversation_id ORDER BY e.conversation_id
                    """
            ),
            arguments: [user.rawValue, old, new, user.rawValue]
        )
        for row in delivered {
            let key: Int64 = row["conversation"]
            let seq: Int64 = row["seq"]
            var conversation = try self.conversation(key, db)
            guard var member = conversation.members[user], seq > member.deliveredSeq else { continue }
            member.deliveredSeq = seq
            member.dirty = true
            conversation.members[user] = member
            self.conversations[key] = conversation
            let naming = try self.naming(of: conversation, db)
            for other in conversation.members.keys.sorted() where other != user {
                try self.log.append(
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
                    db
                )
            }
        }
        return .done
    }

    private mutating func markRead(
        user: UserID,
        _ address: Conversation,
        upTo: UInt64,
        _ db: Database
    ) throws -> WriteOutcome {
        let key = try self.resolve(address, for: user, createDirect: false, db)
        var conversation = self.conversations[key]!
        let seq = min(Int64(clamping: upTo), conversation.lastSeq)
        guard var member = conversation.members[user], seq > member.readSeq else { return .done }
        member.readSeq = seq
        member.dirty = true
        conversation.members[user] = member
        self.conversations[key] = conversation
        // Everyone, the reader included: its other devices update their unread counts from it.
        let reader = try self.store.name(of: user, db)
        let naming = try self.naming(of: conversation, db)
        for recipient in conversation.members.keys.sorted() {
            try self.log.append(
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
                db
            )
        }
        return .done
    }

    private mutating func recall(
        user: UserID,
        _ address: Conversation,
        id: String,
        _ db: Database
    ) throws -> WriteOutcome {
        let key = try self.resolve(address, for: user, createDirect: false, db)
        guard StoreText.isClean(id),
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql:
                        "SELECT seq, time_ms, recalled FROM messages WHERE sender_id = ? AND client_id = ? AND conversation_id = ?"
                ),
                arguments: [user.rawValue, id, key]
            )
        else { throw CourierStoreError(.unknownMessage, "you sent no message \(id.debugDescription) to \(address)") }
        if row["recalled"] as Bool { return .done }
        guard self.nowMs - (row["time_ms"] as Int64) <= self.recallWindowMs else {
            throw CourierStoreError(
                .recallWindowPassed,
                "messages can be recalled for \(self.recallWindowMs / 1000) s after sending"
            )
        }
        let seq: Int64 = row["seq"]
        let conversation = self.conversations[key]!
        let by = try self.store.name(of: user, db)
        let naming = try self.naming(of: conversation, db)
        try db.cachedStatement(
            sql: "UPDATE messages SET recalled = 1, body = x'' WHERE conversation_id = ? AND seq = ?"
        )
        .execute(arguments: [key, seq])
        // A recalled message's media is no longer anyone's to fetch (the bytes stay for other messages and the quota).
        try db.cachedStatement(sql: "DELETE FROM message_media WHERE conversation_id = ? AND seq = ?")
            .execute(arguments: [key, seq])
        // Sent in this batch: its fresh events show it recalled, as a read after the commit would.
        self.log.book.markRecalled(id: id, from: by)
        for member in conversation.members.keys.sorted() {
            try self.log.append(
                to: member,
                .recall,
                conversation: key,
                seq: seq,
                actor: user,
                event: .recall(
                    conversation: naming(member),
                    seq: UInt64(seq),
                    id: id,
                    by: by
                ),
                db
            )
        }
        return .done
    }

    // MARK: State

    /// Writes back what the batch changed.
    func finish(_ db: Database) throws {
        let conversationUpdate = try db.cachedStatement(
            sql: "UPDATE conversations SET last_seq = ?, last_ms = ? WHERE id = ?"
        )
        let memberUpdate = try db.cachedStatement(
            sql:
                "UPDATE members SET read_seq = ?, delivered_seq = ?, sent = ? WHERE conversation_id = ? AND user_id = ?"
        )
        for conversation in self.conversations.values {
            if conversation.dirty {
                try conversationUpdate.execute(arguments: [conversation.lastSeq, conversation.lastMs, conversation.id])
            }
            for (user, member) in conversation.members where member.dirty {
                try memberUpdate.execute(arguments: [
                    member.readSeq, member.deliveredSeq, member.sent, conversation.id, user.rawValue,
                ])
            }
        }
        try self.log.finish(db)
    }

    private mutating func conversation(_ id: Int64, _ db: Database) throws -> ConversationRow {
        if let conversation = self.conversations[id] { return conversation }
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT id, name, user_a, user_b, last_seq, last_ms FROM conversations WHERE id = ?"
                ),
                arguments: [id]
            )
        else { throw CourierStoreError(.storageFailed, "conversation \(id) is missing") }
        var members: [UserID: Member] = [:]
        for member in try Row.fetchAll(
            db.cachedStatement(
                sql:
                    "SELECT user_id, joined_seq, read_seq, delivered_seq, sent FROM members WHERE conversation_id = ?"
            ),
            arguments: [id]
        ) {
            members[UserID(rawValue: member["user_id"])] = Member(
                joinedSeq: member["joined_seq"],
                readSeq: member["read_seq"],
                deliveredSeq: member["delivered_seq"],
                sent: member["sent"]
            )
        }
        let conversation = ConversationRow(
            id: id,
            groupName: row["name"],
            userA: (row["user_a"] as Int64?).map(UserID.init(rawValue:)),
            userB: (row["user_b"] as Int64?).map(UserID.init(rawValue:)),
            lastSeq: row["last_seq"],
            lastMs: row["last_ms"],
            members: members
        )
        self.conversations[id] = conversation
        return conversation
    }

    /// The conversation a user means by an address, which the user must be a member of.
    private mutating func resolve(
        _ address: Conversation,
        for user: UserID,
        createDirect: Bool,
        _ db: Database
    ) throws -> Int64 {
        try address.checkNames()
        switch address {
        case .group(let name):
            let key: Int64
            if let cached = self.groupIDs[name] {
                key = cached
            } else {
                guard
                    let found = try Int64.fetchOne(
                        db.cachedStatement(sql: "SELECT id FROM conversations WHERE kind = 2 AND name = ?"),
                        arguments: [name]
                    )
                else { throw CourierStoreError(.unknownGroup, "no group named \(name)") }
                self.groupIDs[name] = found
                key = found
            }
            guard try self.conversation(key, db).members[user] != nil else {
                throw CourierStoreError(.notMember, "you are not a member of \(name)")
            }
            return key
        case .user(let name):
            guard
                let row = try Row.fetchOne(
                    db.cachedStatement(sql: "SELECT id, removed_ms FROM users WHERE name = ?"),
                    arguments: [name]
                ), createDirect ? (row["removed_ms"] as Int64?) == nil : true
            else { throw CourierStoreError(.unknownUser, "no user named \(name)") }
            let peer = UserID(rawValue: row["id"])
            let pair = Pair(a: min(user, peer), b: max(user, peer))
            if let key = self.directIDs[pair] { return key }
            if let key = try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT id FROM conversations WHERE user_a = ? AND user_b = ?"),
                arguments: [pair.a.rawValue, pair.b.rawValue]
            ) {
                self.directIDs[pair] = key
                _ = try self.conversation(key, db)
                return key
            }
            guard createDirect else {
                throw CourierStoreError(.notMember, "you have no conversation with \(name)")
            }
            try db.cachedStatement(
                sql: "INSERT INTO conversations (kind, user_a, user_b, created_ms) VALUES (1, ?, ?, ?)"
            )
            .execute(arguments: [pair.a.rawValue, pair.b.rawValue, self.nowMs])
            let key = db.lastInsertedRowID
            let insertMember = try db.cachedStatement(
                sql:
                    "INSERT INTO members (conversation_id, user_id, joined_seq, read_seq, delivered_seq) VALUES (?, ?, 0, 0, 0)"
            )
            for member in Set([pair.a, pair.b]) {
                try insertMember.execute(arguments: [key, member.rawValue])
            }
            self.directIDs[pair] = key
            _ = try self.conversation(key, db)
            return key
        }
    }

    /// How each member names a conversation, with the names looked up now (so that making events later cannot
    /// fail half-way through a request's writes).
    private func naming(of conversation: ConversationRow, _ db: Database) throws -> (UserID) -> Conversation {
        if conversation.groupName != nil { return conversation.naming(nameA: nil, nameB: nil) }
        return conversation.naming(
            nameA: try self.store.name(of: conversation.userA!, db),
            nameB: try self.store.name(of: conversation.userB!, db)
        )
    }

    /// How a user names a conversation.
    private func address(of conversation: ConversationRow, for user: UserID, _ db: Database) throws -> Conversation {
        guard let peer = conversation.peer(of: user) else { return .group(conversation.groupName!) }
        return .user(try self.store.name(of: peer, db))
    }
}
