package import CourierStore
internal import Foundation
internal import GRDB

extension SQLiteTransaction {
    // MARK: Groups and members

    package func insertGroup(name: String, owner: UserID, madeBy maker: UserID?, nowMs: Int64) async throws -> Int64? {
        try await self.update { db in
            // The name is unique without regard to case (the column's NOCASE).
            try db.execute(
                sql: """
                    INSERT INTO conversations (kind, name, owner_id, creator_id, created_ms) VALUES (2, ?, ?, ?, ?)
                    ON CONFLICT DO NOTHING
                    """,
                arguments: [name, owner.rawValue, maker?.rawValue, nowMs]
            )
            return db.changesCount == 1 ? db.lastInsertedRowID : nil
        }
    }

    package func group(named name: String, locking: Bool) async throws -> GroupRow? {
        try await self.access { db in
            try Row.fetchOne(
                db,
                sql: "SELECT id, owner_id, last_seq, title FROM conversations WHERE kind = 2 AND name = ?",
                arguments: [name]
            ).map(Self.group)
        }
    }

    package func groups(of user: UserID, locking: Bool) async throws -> [GroupRow] {
        try await self.access { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT c.id, c.owner_id, c.last_seq, c.title FROM conversations c
                    JOIN members m ON m.conversation_id = c.id WHERE m.user_id = ? AND c.kind = 2 ORDER BY c.id
                    """,
                arguments: [user.rawValue]
            ).map(Self.group)
        }
    }

    static func group(_ row: Row) -> GroupRow {
        GroupRow(
            id: row["id"],
            owner: (row["owner_id"] as Int64?).map(UserID.init(rawValue:)),
            lastSeq: row["last_seq"],
            title: row["title"]
        )
    }

    package func members(of conversations: [Int64]) async throws -> [Int64: [UserID]] {
        try await self.access { db in
            var members: [Int64: [UserID]] = [:]
            let statement = try db.cachedStatement(
                sql: "SELECT user_id FROM members WHERE conversation_id = ? ORDER BY user_id"
            )
            for conversation in conversations {
                members[conversation] = try Int64.fetchAll(statement, arguments: [conversation])
                    .map(UserID.init(rawValue:))
            }
            return members
        }
    }

    package func insertMembers(
        _ users: [UserID],
        into conversation: Int64,
        atSeq seq: Int64,
        addedBy: UserID?
    ) async throws {
        try await self.update { db in
            let insert = try db.cachedStatement(
                sql: """
                    INSERT INTO members (conversation_id, user_id, joined_seq, read_seq, delivered_seq, added_by)
                    VALUES (?, ?, ?, ?, ?, ?)
                    """
            )
            let span = try db.cachedStatement(sql: SQLiteStore.openSpanSQL)
            for user in users {
                try insert.execute(arguments: [conversation, user.rawValue, seq, seq, seq, addedBy?.rawValue])
                try span.execute(arguments: [user.rawValue, conversation, seq])
            }
        }
    }

    package func groups(
        of member: UserID,
        addedBy: UserID,
        locking: Bool
    ) async throws -> [(row: GroupRow, name: String)] {
        try await self.access { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT c.id, c.owner_id, c.last_seq, c.title, c.name FROM conversations c
                    JOIN members m ON m.conversation_id = c.id
                    WHERE m.user_id = ? AND m.added_by = ? AND c.kind = 2 ORDER BY c.id
                    """,
                arguments: [member.rawValue, addedBy.rawValue]
            ).map { (Self.group($0), $0["name"]) }
        }
    }

    package func groupsMade(by user: UserID) async throws -> Int {
        try await self.access { db in
            try Int.fetchOne(
                db,
                sql: """
                    SELECT count(*) FROM conversations c WHERE c.kind = 2 AND c.creator_id = ?
                    AND EXISTS (SELECT 1 FROM members m WHERE m.conversation_id = c.id)
                    """,
                arguments: [user.rawValue]
            ) ?? 0
        }
    }

    package func deleteMember(_ user: UserID, from conversation: Int64) async throws {
        try await self.update { db in
            try db.execute(
                sql: "DELETE FROM members WHERE conversation_id = ? AND user_id = ?",
                arguments: [conversation, user.rawValue]
            )
            try db.execute(sql: SQLiteStore.closeSpanSQL, arguments: [conversation, user.rawValue])
        }
    }

    package func companions(of user: UserID, directOnly: Bool, with peer: UserID?) async throws -> [Companion] {
        try await self.access { db in
            // Apart for one peer, so that SQLite finds it by the members' key rather than reading every member.
            let rows =
                if let peer {
                    try Row.fetchAll(
                        db.cachedStatement(
                            sql: """
                                SELECT other.user_id, c.kind, mine.sent AS mine_sent, other.sent AS theirs_sent,
                                    mine.read_seq > 0 AS mine_read, other.read_seq > 0 AS theirs_read
                                FROM members mine JOIN conversations c ON c.id = mine.conversation_id
                                JOIN members other ON other.conversation_id = mine.conversation_id AND other.user_id = ?
                                WHERE mine.user_id = ? AND other.user_id != mine.user_id AND (c.kind = 1 OR NOT ?)
                                """
                        ),
                        arguments: [peer.rawValue, user.rawValue, directOnly]
                    )
                } else {
                    try Row.fetchAll(
                        db.cachedStatement(
                            sql: """
                                SELECT other.user_id, c.kind, mine.sent AS mine_sent, other.sent AS theirs_sent,
                                    mine.read_seq > 0 AS mine_read, other.read_seq > 0 AS theirs_read
                                FROM members mine JOIN conversations c ON c.id = mine.conversation_id
                                JOIN members other
                                    ON other.conversation_id = mine.conversation_id AND other.user_id != mine.user_id
                                WHERE mine.user_id = ? AND (c.kind = 1 OR NOT ?)
                                """
                        ),
                        arguments: [user.rawValue, directOnly]
                    )
                }
            return rows.map { row in
                Companion(
                    user: UserID(rawValue: row["user_id"]),
                    inGroup: (row["kind"] as Int64) == 2,
                    mineSent: row["mine_sent"],
                    theirsSent: row["theirs_sent"],
                    mineRead: row["mine_read"],
                    theirsRead: row["theirs_read"]
                )
            }
        }
    }

    package func groupWithMembers(named name: String) async throws -> Group? {
        try await self.access { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT c.id, c.name, c.last_seq, u.name AS owner FROM conversations c
                        LEFT JOIN users u ON u.id = c.owner_id WHERE c.kind = 2 AND c.name = ?
                        """,
                    arguments: [name]
                )
            else { return nil }
            let members = try String.fetchAll(
                db,
                sql: """
                    SELECT u.name FROM members m JOIN users u ON u.id = m.user_id WHERE m.conversation_id = ?
                    ORDER BY u.name
                    """,
                arguments: [row["id"] as Int64]
            )
            return Group(
                name: row["name"],
                owner: row["owner"],
                members: members,
                lastSeq: UInt64(row["last_seq"] as Int64)
            )
        }
    }

    package func groupNames() async throws -> [String] {
        try await self.access { db in
            try String.fetchAll(db, sql: "SELECT name FROM conversations WHERE kind = 2 ORDER BY name")
        }
    }
}

extension SQLiteStore {
    /// Inserts the search index's rows of new messages (`deferred`: unindexed, for the ``SearchIndexer`` to index
    /// after the commit), sets the tokens of edited ones and drops recalled ones.
    ///
    /// One statement for the new messages' rows: once a statement has written FTS5's table, every later statement
    /// of the transaction that opens a statement journal (any write that fires a trigger or touches an index) makes
    /// FTS5 flush the terms it holds in memory to a segment of its own (its `xSavepoint`). Written row by row, the
    /// index took a segment per message, and merging them was half of the writer's time. Here the edits of older
    /// messages go in one statement, the recalls in another, and the new messages' rows (as the batch last edited
    /// them) in a third, as the transaction's last write: at most three segments a batch, one when it only sends.
    static func writeSearch(_ commit: GroupCommit, deferred: Bool, _ db: Database) throws {
        // The last edit of each message is its text; a message the batch sent goes in as last edited.
        var edited: [MessagePosition: EditWrite] = [:]
        for edit in commit.edits { edited[edit.position] = edit }
        var rows: [[(any DatabaseValueConvertible)?]] = []
        for message in commit.newMessages where !message.recalled {
            let position = MessagePosition(conversation: message.conversation, seq: message.seq)
            let edit = edited.removeValue(forKey: position)
            guard !deferred || edit != nil else {
                rows.append([message.conversation, message.seq, nil])
                continue
            }
            let tokens = SearchIndex.tokens(
                ofBody: edit?.body ?? message.body,
                prepared: edit.map(\.searchTokens) ?? message.searchTokens,
                conversation: message.conversation
            )
            rows.append([message.conversation, message.seq, tokens.joined(separator: " ")])
        }
        // Edits of older messages, then recalls, one statement each (each is a segment of its own).
        try Self.executeRows(
            edited.sorted { ($0.key.conversation, $0.key.seq) < ($1.key.conversation, $1.key.seq) }.map {
                position,
                edit in
                let tokens = SearchIndex.tokens(
                    ofBody: edit.body,
                    prepared: edit.searchTokens,
                    conversation: position.conversation
                )
                return [position.conversation, position.seq, tokens.joined(separator: " ")]
            },
            sql: "UPDATE message_search SET tokens = v.column3 FROM (VALUES ",
            suffix: """
                ) AS v WHERE message_search.conversation_id = v.column1 AND message_search.seq = v.column2
                """,
            db
        )
        try Self.executeRows(
            commit.recalledMessages.map { [$0.conversation, $0.seq] },
            sql: "DELETE FROM message_search WHERE (conversation_id, seq) IN (VALUES ",
            suffix: ")",
            db
        )
        try Self.executeRows(
            rows,
            sql: "INSERT INTO message_search (conversation_id, seq, tokens) VALUES ",
            db
        )
    }

    /// Runs `sql` followed by a `VALUES` list of `rows` (each of the same width), in as few statements as SQLite
    /// binds values in one (32,766): a single row by a cached statement, more by one prepared for the count.
    ///
    /// - Returns: How many rows the statements changed (not counting what their triggers changed).
    @discardableResult
    static func executeRows(
        _ rows: [[(any DatabaseValueConvertible)?]],
        sql: String,
        suffix: String = "",
        _ db: Database
    ) throws -> Int {
        guard let width = rows.first?.count else { return 0 }
        let tuple = "(" + repeatElement("?", count: width).joined(separator: ", ") + ")"
        let perStatement = max(1, db.maximumStatementArgumentCount / width)
        var (start, changed) = (rows.startIndex, 0)
        while start < rows.endIndex {
            let end = min(start + perStatement, rows.endIndex)
            let values = repeatElement(tuple, count: end - start).joined(separator: ", ")
            let statement =
                end - start == 1
                ? try db.cachedStatement(sql: sql + values + suffix)
                : try db.makeStatement(sql: sql + values + suffix)
            try statement.execute(arguments: StatementArguments(rows[start..<end].flatMap { $0 }))
            changed += db.changesCount
            start = end
        }
        return changed
    }
}

extension SQLiteTransaction {
    // MARK: Search

    package func pendingSearch(
        limit: Int,
        upTo: Int64
    ) async throws -> [(doc: Int64, conversation: Int64, body: [UInt8])] {
        try await self.access { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT s.doc, s.conversation_id, m.body FROM message_search s
                        JOIN messages m ON m.conversation_id = s.conversation_id AND m.seq = s.seq
                        WHERE s.tokens IS NULL AND s.doc <= ? ORDER BY s.doc DESC LIMIT ?
                        """
                ),
                arguments: [upTo, limit]
            ).map { ($0["doc"], $0["conversation_id"], [UInt8]($0["body"] as Data)) }
        }
    }

    package func highestPendingSearch() async throws -> Int64? {
        try await self.access { db in
            try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT max(doc) FROM message_search WHERE tokens IS NULL")
            )
        }
    }

    package func setSearchTokens(at documents: [(conversation: Int64, seq: Int64, tokens: [String])]) async throws {
        _ = try await self.update { db in
            // One statement for the lot, as SQLite binds them (see SQLiteStore.writeSearch: FTS5 writes a segment
            // per statement).
            try SQLiteStore.executeRows(
                documents.map { [$0.conversation, $0.seq, $0.tokens.joined(separator: " ")] },
                sql: "UPDATE message_search SET tokens = v.column3 FROM (VALUES ",
                suffix: """
                    ) AS v WHERE message_search.conversation_id = v.column1 AND message_search.seq = v.column2
                    AND message_search.tokens IS NULL
                    """,
                db
            )
        }
    }

    package func setSearchTokens(_ tokens: [(doc: Int64, tokens: [String])]) async throws -> Int {
        try await self.update { db in
            try SQLiteStore.executeRows(
                tokens.map { [$0.doc, $0.tokens.joined(separator: " ")] },
                sql: "UPDATE message_search SET tokens = v.column2 FROM (VALUES ",
                suffix: ") AS v WHERE message_search.doc = v.column1 AND message_search.tokens IS NULL",
                db
            )
        }
    }
}

extension SQLiteTransaction {
    // MARK: Roles

    package func memberRoles(of group: Int64) async throws -> [MemberRole] {
        try await self.access { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT user_id, role, joined_seq FROM members WHERE conversation_id = ?
                    ORDER BY joined_seq, user_id
                    """,
                arguments: [group]
            ).map {
                MemberRole(
                    user: UserID(rawValue: $0["user_id"]),
                    role: GroupRole(rawValue: $0["role"]) ?? .member,
                    joinedSeq: $0["joined_seq"]
                )
            }
        }
    }

    package func setRole(_ role: GroupRole, of user: UserID, in group: Int64) async throws {
        try await self.update { db in
            try db.execute(
                sql: "UPDATE members SET role = ? WHERE conversation_id = ? AND user_id = ?",
                arguments: [role.rawValue, group, user.rawValue]
            )
        }
    }

    package func setOwner(_ owner: UserID, of group: Int64) async throws {
        try await self.update { db in
            try db.execute(
                sql: "UPDATE conversations SET owner_id = ? WHERE id = ?",
                arguments: [owner.rawValue, group]
            )
        }
    }

    package func setTitle(_ title: String?, of group: Int64) async throws {
        try await self.update { db in
            try db.execute(sql: "UPDATE conversations SET title = ? WHERE id = ?", arguments: [title, group])
        }
    }

    package func setNotify(_ level: NotifyLevel, of user: UserID, in conversation: Int64) async throws -> NotifyLevel? {
        try await self.update { db in
            guard
                let before = try Int64.fetchOne(
                    db,
                    sql: "SELECT notify FROM members WHERE conversation_id = ? AND user_id = ?",
                    arguments: [conversation, user.rawValue]
                )
            else { return nil }
            try db.execute(
                sql: "UPDATE members SET notify = ? WHERE conversation_id = ? AND user_id = ?",
                arguments: [level.rawValue, conversation, user.rawValue]
            )
            return NotifyLevel(rawValue: before) ?? .all
        }
    }

    package func claimSkeleton(_ skeleton: String, for user: UserID) async throws -> Bool {
        try await self.update { db in
            try db.execute(
                sql: "INSERT INTO name_skeletons (skeleton, user_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                arguments: [skeleton, user.rawValue]
            )
            return db.changesCount == 1
        }
    }

    package func skeletonTaken(_ skeleton: String) async throws -> Bool {
        try await self.access { db in
            try Bool.fetchOne(
                db,
                sql: "SELECT EXISTS (SELECT 1 FROM name_skeletons WHERE skeleton = ?)",
                arguments: [skeleton]
            ) ?? false
        }
    }
}

extension SQLiteStore {
    /// A member's span in a group opens at the seq it joined at and at the log's counter as it stands (a rejoin
    /// at the seq it left at reopens that span). No transaction sends to a group and changes its members: the
    /// group's messages after the seq take their positions after this.
    static let openSpanSQL = """
        INSERT INTO group_spans (user_id, conversation_id, from_seq, to_seq, from_cursor, to_cursor)
        VALUES (?, ?, ?, 9223372036854775807, (SELECT last FROM log_positions), 9223372036854775807)
        ON CONFLICT (user_id, conversation_id, from_seq) DO UPDATE SET to_seq = excluded.to_seq,
            to_cursor = excluded.to_cursor
        """

    /// A member's open span closes at the group's last seq as it leaves, and at the log's counter as it stands:
    /// the group's messages up to that seq all took their positions (one writer).
    static let closeSpanSQL = """
        UPDATE group_spans SET to_seq = (SELECT last_seq FROM conversations WHERE id = ?1),
            to_cursor = (SELECT last FROM log_positions)
        WHERE conversation_id = ?1 AND user_id = ?2 AND to_seq = 9223372036854775807
        """
}
