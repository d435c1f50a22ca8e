public import CourierStore
internal import Foundation
internal import GRDB

extension SQLiteStore {
    /// Applies many writes in one transaction: one fsync for all (group commit), with ``GroupCommit``'s rules.
    ///
    /// Each request is checked before it writes anything, so a refused request changes nothing while the others
    /// commit. If the database itself fails (disk full, I/O error), the whole transaction rolls back and this throws:
    /// none of the requests is committed, and none may be acknowledged. Only this process writes while the
    /// transaction is open (SQLite's write lock): rows are read as the requests declare them and the rules ask for
    /// them (``GroupCommit/Run``), one statement each.
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
        let limits = self.limits
        let queuesSearch = self.configuration.indexesForSearch && self.searchIndexer.isDeferred
        let maxCarried = self.configuration.maxCarriedRows
        let (applied, _) = try await self.write(
            keepingRows: true,
            { db -> (AppliedBatch, CarriedRows?) in
                // The rows the batch before carried, unless another process wrote since (its `data_version`). Each
                // table is held by the batch alone from here (consumed, not copied): one changed while another
                // reference lives would be copied whole.
                var taken = self.carried.withLock { carried in
                    defer { carried = nil }
                    return carried
                }
                let version = try Int64.fetchOne(db, sql: "PRAGMA data_version") ?? 0
                var commit = GroupCommit(nowMs: nowMs, limits: limits, freshRoom: freshRoom)
                if let carried = taken.take(), carried.dataVersion == version {
                    commit.start(carrying: (consume carried).rows)
                }
                var run = GroupCommit.Run(consume commit, requests)
                while case .load(let needs) = try run.next() {
                    try self.load(needs, into: &run.commit, db)
                }
                try self.write(&run.commit, db)
                let applied = run.result(queuesSearch: queuesSearch)
                guard maxCarried > 0 else { return (applied, nil) }
                let rows = run.commit.takeCarriedRows()
                return (applied, rows.count <= maxCarried ? CarriedRows(rows: rows, dataVersion: version) : nil)
            },
            committed: { result in
                self.carried.withLock { $0 = result.1.take() }
            }
        )
        if queuesSearch { self.searchIndexer.committed(applied.searchEntries) }
        return applied
    }

    /// Reads the rows a rule asked for.
    private func load(_ needs: [BatchNeed], into commit: inout GroupCommit, _ db: Database) throws {
        for need in needs {
            switch need {
            case .groupID(let name):
                commit.loadGroup(
                    named: name,
                    id: try Int64.fetchOne(
                        db.cachedStatement(sql: "SELECT id FROM conversations WHERE kind = 2 AND name = ?"),
                        arguments: [name]
                    )
                )
            case .userID(let name):
                commit.loadUser(
                    named: name,
                    id: try Int64.fetchOne(
                        db.cachedStatement(sql: "SELECT id FROM users WHERE name = ?"),
                        arguments: [name]
                    ).map(UserID.init(rawValue:))
                )
            case .user(let user):
                guard
                    let row = try Row.fetchOne(
                        db.cachedStatement(sql: SQLiteStore.userRowSQL),
                        arguments: [user.rawValue]
                    )
                else { throw CourierStoreError(.storageFailed, "user \(user.rawValue) is missing") }
                commit.loadUser(
                    user,
                    UserRow(
                        cursor: row["log_cursor"],
                        removed: (row["removed_ms"] as Int64?) != nil,
                        pushable: row["push_targets"] > 0
                    )
                )
            case .name(let user):
                do {
                    commit.loadName(of: user, try self.name(of: user, db))
                } catch let error as CourierStoreError where error.code == .unknownUser {
                    commit.loadName(of: user, nil)
                }
            case .directID(let pair):
                commit.loadDirect(
                    pair,
                    id: try Int64.fetchOne(
                        db.cachedStatement(sql: "SELECT id FROM conversations WHERE user_a = ? AND user_b = ?"),
                        arguments: [pair.a.rawValue, pair.b.rawValue]
                    )
                )
            case .newDirect(let pair):
                try db.cachedStatement(
                    sql: "INSERT INTO conversations (kind, user_a, user_b, created_ms) VALUES (1, ?, ?, ?)"
                ).execute(arguments: [pair.a.rawValue, pair.b.rawValue, commit.nowMs])
                let id = db.lastInsertedRowID
                // A member that blocked the other before they had a conversation blocks it from the start.
                let insertMember = try db.cachedStatement(
                    sql: """
                        INSERT INTO members (conversation_id, user_id, joined_seq, read_seq, delivered_seq, blocked_at_seq)
                        VALUES (?, ?, 0, 0, 0,
                            (SELECT 0 FROM blocks WHERE blocker_id = ? AND blocked_id = ?))
                        """
                )
                for (member, other) in pair.a == pair.b ? [(pair.a, pair.b)] : [(pair.a, pair.b), (pair.b, pair.a)] {
                    try insertMember.execute(arguments: [id, member.rawValue, member.rawValue, other.rawValue])
                }
                commit.loadDirect(pair, id: id)
                commit.load(try Self.conversation(id, db))
            case .conversation(let id):
                commit.load(try Self.conversation(id, db))
            case .header(let id):
                guard
                    let row = try Row.fetchOne(
                        db.cachedStatement(sql: "SELECT name, user_a, user_b FROM conversations WHERE id = ?"),
                        arguments: [id]
                    )
                else { throw CourierStoreError(.storageFailed, "conversation \(id) is missing") }
                commit.loadHeader(
                    id,
                    ConversationHeader(
                        groupName: row["name"],
                        userA: (row["user_a"] as Int64?).map(UserID.init(rawValue:)),
                        userB: (row["user_b"] as Int64?).map(UserID.init(rawValue:))
                    )
                )
            case .message(let key):
                let row = try Row.fetchOne(
                    db.cachedStatement(
                        sql: """
                            SELECT conversation_id, seq, time_ms, recalled FROM messages
                            WHERE sender_id = ? AND client_id = ?
                            """
                    ),
                    arguments: [key.sender.rawValue, key.text]
                )
                commit.loadMessage(
                    key,
                    row.map {
                        MessageRow(
                            conversation: $0["conversation_id"],
                            seq: $0["seq"],
                            timeMs: $0["time_ms"],
                            recalled: $0["recalled"]
                        )
                    }
                )
            case .upload(let key):
                commit.loadUpload(
                    key,
                    size: try Int64.fetchOne(
                        db.cachedStatement(sql: "SELECT size FROM media_owners WHERE user_id = ? AND sha256 = ?"),
                        arguments: [key.user.rawValue, key.sha256]
                    )
                )
            case .device(let device):
                let row = try Row.fetchOne(
                    db.cachedStatement(sql: "SELECT user_id, acked_cursor FROM devices WHERE id = ?"),
                    arguments: [device.rawValue]
                )
                commit.loadDevice(
                    device,
                    row.map { DeviceRow(user: UserID(rawValue: $0["user_id"]), ackedCursor: $0["acked_cursor"]) }
                )
            case .deliveries(let range):
                // The newest message from someone else per conversation among the events the range covers.
                let rows = try Row.fetchAll(
                    db.cachedStatement(
                        sql: """
                            SELECT conversation, MAX(seq) AS seq, group_concat(DISTINCT sender) AS senders
                            FROM (
                                SELECT e.conversation_id AS conversation, e.seq AS seq,
                                    \(LogEventKind.messageSenderSQL(events: "e")) AS sender
                                FROM (\(LogEventKind.userLogSQL(user: "?1", after: "?2", upTo: "?3", messagesOnly: true))) e
                            )
                            WHERE sender != ?1
                            GROUP BY conversation ORDER BY conversation
                            """
                    ),
                    arguments: [range.user.rawValue, range.from, range.to]
                )
                commit.loadDeliveries(
                    range,
                    rows.map {
                        Delivery(
                            conversation: $0["conversation"],
                            seq: $0["seq"],
                            senders: Set(
                                ($0["senders"] as String).split(separator: ",").compactMap { Int64($0) }
                                    .map(UserID.init(rawValue:))
                            )
                        )
                    }
                )
            case .messageAt(let position):
                let row = try Row.fetchOne(
                    db.cachedStatement(
                        sql: """
                            SELECT sender_id, client_id, time_ms, recalled, body, edit_count, edited_ms,
                                (SELECT group_concat(h.user_id) FROM hidden h
                                    WHERE h.conversation_id = messages.conversation_id AND h.seq = messages.seq)
                                    AS hidden_from
                            FROM messages WHERE conversation_id = ? AND seq = ?
                            """
                    ),
                    arguments: [position.conversation, position.seq]
                )
                commit.loadMessage(
                    at: position,
                    row.map {
                        TargetRow(
                            sender: UserID(rawValue: $0["sender_id"]),
                            id: $0["client_id"],
                            timeMs: $0["time_ms"],
                            recalled: $0["recalled"],
                            body: [UInt8]($0["body"] as Data),
                            editCount: $0["edit_count"],
                            editedMs: $0["edited_ms"],
                            hiddenFrom: (($0["hidden_from"] as String?) ?? "").split(separator: ",").compactMap {
                                Int64($0).map(UserID.init(rawValue:))
                            }
                        )
                    }
                )
            case .withID(let lookup):
                commit.loadSeqs(
                    lookup,
                    try Int64.fetchAll(
                        db.cachedStatement(
                            sql: """
                                SELECT seq FROM messages WHERE client_id = ? AND conversation_id = ? AND seq > ?
                                AND (? IS NULL OR sender_id = ?) ORDER BY seq LIMIT 2
                                """
                        ),
                        arguments: [
                            lookup.text, lookup.conversation, lookup.after, lookup.sender?.rawValue,
                            lookup.sender?.rawValue,
                        ]
                    )
                )
            case .reactions(let owner):
                var counts: [String: Int] = [:]
                var mine: Set<String> = []
                for row in try Row.fetchAll(
                    db.cachedStatement(
                        sql: """
                            SELECT key, COUNT(*) AS count, MAX(user_id = ?) AS mine FROM reactions
                            WHERE conversation_id = ? AND seq = ? GROUP BY key
                            """
                    ),
                    arguments: [owner.user.rawValue, owner.position.conversation, owner.position.seq]
                ) {
                    let key: String = row["key"]
                    counts[key] = row["count"]
                    if row["mine"] { mine.insert(key) }
                }
                commit.loadReactions(owner, counts: counts, mine: mine)
            }
        }
    }

    /// A conversation with its members.
    private static func conversation(_ id: Int64, _ db: Database) throws -> BatchConversation {
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT id, name, user_a, user_b, last_seq, last_ms, owner_id FROM conversations WHERE id = ?"
                ),
                arguments: [id]
            )
        else { throw CourierStoreError(.storageFailed, "conversation \(id) is missing") }
        var members: [UserID: BatchConversation.Member] = [:]
        for member in try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT user_id, joined_seq, read_seq, delivered_seq, sent, role, blocked_at_seq FROM members
                    WHERE conversation_id = ?
                    """
            ),
            arguments: [id]
        ) {
            members[UserID(rawValue: member["user_id"])] = BatchConversation.Member(
                joinedSeq: member["joined_seq"],
                readSeq: member["read_seq"],
                deliveredSeq: member["delivered_seq"],
                sent: member["sent"],
                role: GroupRole(rawValue: member["role"]) ?? .member,
                blockedAtSeq: member["blocked_at_seq"]
            )
        }
        return BatchConversation(
            id: id,
            groupName: row["name"],
            userA: (row["user_a"] as Int64?).map(UserID.init(rawValue:)),
            userB: (row["user_b"] as Int64?).map(UserID.init(rawValue:)),
            lastSeq: row["last_seq"],
            lastMs: row["last_ms"],
            members: members,
            owner: (row["owner_id"] as Int64?).map(UserID.init(rawValue:))
        )
    }

    /// Writes what the batch changed.
    private func write(_ commit: inout GroupCommit, _ db: Database) throws {
        let insertMessage = try db.cachedStatement(
            sql: """
                INSERT INTO messages (conversation_id, seq, sender_id, sender_device_id, client_id, time_ms, body,
                    recalled, reply_seq)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """
        )
        let insertMedia = try db.cachedStatement(
            sql: "INSERT INTO message_media (sha256, conversation_id, seq, mime, name) VALUES (?, ?, ?, ?, ?)"
        )
        for message in commit.newMessages {
            try insertMessage.execute(arguments: [
                message.conversation, message.seq, message.sender.rawValue, message.device?.rawValue, message.id,
                message.timeMs, Data(message.body), message.recalled, message.replySeq,
            ])
            if let media = message.media {
                try insertMedia.execute(arguments: [
                    media.sha256, message.conversation, message.seq, media.mime, media.name,
                ])
            }
            if message.pushes && !message.recalled {
                try db.cachedStatement(
                    sql: "INSERT INTO push_outbox (conversation_id, seq, due_ms) VALUES (?, ?, ?)"
                ).execute(arguments: [message.conversation, message.seq, commit.nowMs])
            }
            if !message.recalled {
                for user in message.mentioned {
                    try db.cachedStatement(
                        sql: "INSERT INTO mentions (conversation_id, user_id, seq) VALUES (?, ?, ?)"
                    ).execute(arguments: [message.conversation, user, message.seq])
                }
            }
        }
        for row in commit.withheld {
            try db.cachedStatement(
                sql: "INSERT OR IGNORE INTO hidden (user_id, conversation_id, seq) VALUES (?, ?, ?)"
            ).execute(arguments: [row.user.rawValue, row.conversation, row.seq])
        }
        for edit in commit.edits {
            try db.cachedStatement(
                sql: """
                    INSERT INTO message_versions (conversation_id, seq, version, body, replaced_ms)
                    VALUES (?, ?, ?, ?, ?)
                    """
            ).execute(arguments: [
                edit.position.conversation, edit.position.seq, edit.version, Data(edit.replaced), edit.editedMs,
            ])
            try db.cachedStatement(
                sql: """
                    UPDATE messages SET body = ?, edited_ms = ?, edit_count = ?
                    WHERE conversation_id = ? AND seq = ?
                    """
            ).execute(arguments: [
                Data(edit.body), edit.editedMs, edit.version + 1, edit.position.conversation, edit.position.seq,
            ])
        }
        for reaction in commit.reactionWrites {
            let arguments: StatementArguments = [
                reaction.position.conversation, reaction.position.seq, reaction.key, reaction.user.rawValue,
            ]
            if reaction.on {
                try db.cachedStatement(
                    sql: """
                        INSERT INTO reactions (conversation_id, seq, key, user_id, time_ms) VALUES (?, ?, ?, ?, ?)
                        ON CONFLICT DO NOTHING
                        """
                ).execute(arguments: arguments + [reaction.timeMs])
            } else {
                try db.cachedStatement(
                    sql: "DELETE FROM reactions WHERE conversation_id = ? AND seq = ? AND key = ? AND user_id = ?"
                ).execute(arguments: arguments)
            }
        }
        for message in commit.recalledMessages {
            let arguments: StatementArguments = [message.conversation, message.seq]
            try db.cachedStatement(
                sql: "UPDATE messages SET recalled = 1, body = x'' WHERE conversation_id = ? AND seq = ?"
            ).execute(arguments: arguments)
            // A recalled message's media is no longer anyone's to fetch; its earlier versions, its reactions, its
            // mentions and its pin go.
            for table in ["message_media", "message_versions", "reactions", "mentions", "pins"] {
                try db.cachedStatement(sql: "DELETE FROM \(table) WHERE conversation_id = ? AND seq = ?")
                    .execute(arguments: arguments)
            }
        }
        let conversationUpdate = try db.cachedStatement(
            sql: "UPDATE conversations SET last_seq = ?, last_ms = ? WHERE id = ?"
        )
        let memberUpdate = try db.cachedStatement(
            sql:
                "UPDATE members SET read_seq = ?, delivered_seq = ?, sent = ? WHERE conversation_id = ? AND user_id = ?"
        )
        for id in commit.touched.sorted() {
            guard let conversation = commit.conversations[id] else { continue }
            if conversation.dirty {
                try conversationUpdate.execute(arguments: [conversation.lastSeq, conversation.lastMs, conversation.id])
            }
            for (user, member) in conversation.members where member.dirty {
                try memberUpdate.execute(arguments: [
                    member.readSeq, member.deliveredSeq, member.sent, conversation.id, user.rawValue,
                ])
            }
        }
        let deviceUpdate = try db.cachedStatement(sql: "UPDATE devices SET acked_cursor = ? WHERE id = ?")
        for (device, cursor) in commit.ackedCursors {
            try deviceUpdate.execute(arguments: [cursor, device.rawValue])
        }
        try SQLiteStore.writeLog(&commit.log, db)
        // Last: FTS5 holds the batch's terms in memory until the commit, or the next write (see writeSearch).
        if self.configuration.indexesForSearch {
            try SQLiteStore.writeSearch(commit, deferred: self.searchIndexer.isDeferred, db)
        }
    }
}
