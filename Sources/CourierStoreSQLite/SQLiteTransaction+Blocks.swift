package import CourierStore
internal import GRDB

extension SQLiteTransaction {
    // MARK: Blocks and hidden messages

    package func blockPairs(involving user: UserID, with others: [UserID]?) async throws -> [BlockRow] {
        try await self.access { db in
            // A few others: each pair looked up by its key (both ways), whoever else blocks the user.
            if let others, others.count <= 256 {
                let statement = try db.cachedStatement(
                    sql: "SELECT created_ms FROM blocks WHERE blocker_id = ? AND blocked_id = ?"
                )
                var rows: [BlockRow] = []
                for other in Set(others) where other != user {
                    for (blocker, blocked) in [(user, other), (other, user)] {
                        if let created = try Int64.fetchOne(
                            statement,
                            arguments: [blocker.rawValue, blocked.rawValue]
                        ) {
                            rows.append(BlockRow(blocker: blocker, blocked: blocked, createdMs: created))
                        }
                    }
                }
                return rows
            }
            return try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT blocker_id, blocked_id, created_ms FROM blocks WHERE blocker_id = ?
                        UNION ALL
                        SELECT blocker_id, blocked_id, created_ms FROM blocks WHERE blocked_id = ?
                        """
                ),
                arguments: [user.rawValue, user.rawValue]
            ).map {
                BlockRow(
                    blocker: UserID(rawValue: $0["blocker_id"]),
                    blocked: UserID(rawValue: $0["blocked_id"]),
                    createdMs: $0["created_ms"]
                )
            }
        }
    }

    package func setBlock(_ blocker: UserID, _ blocked: UserID, on: Bool, nowMs: Int64) async throws -> Bool {
        try await self.update { db in
            if on {
                try db.execute(
                    sql: "INSERT OR IGNORE INTO blocks (blocker_id, blocked_id, created_ms) VALUES (?, ?, ?)",
                    arguments: [blocker.rawValue, blocked.rawValue, nowMs]
                )
            } else {
                try db.execute(
                    sql: "DELETE FROM blocks WHERE blocker_id = ? AND blocked_id = ?",
                    arguments: [blocker.rawValue, blocked.rawValue]
                )
            }
            guard db.changesCount > 0 else { return false }
            let pair = UserPair(blocker, blocked)
            // The direct conversation's row of the blocker, where they have one: blocking, its marks kept as they are.
            try db.execute(
                sql: """
                    UPDATE members SET blocked_at_seq = CASE WHEN ? THEN read_seq END,
                        blocked_delivered_seq = CASE WHEN ? THEN delivered_seq END
                    WHERE user_id = ? AND conversation_id = (
                        SELECT id FROM conversations WHERE user_a = ? AND user_b = ?)
                    """,
                arguments: [on, on, blocker.rawValue, pair.a.rawValue, pair.b.rawValue]
            )
            return true
        }
    }

    /// Nothing to lock: SQLite has one writer.
    package func lockDirect(_ pair: UserPair) async throws {}

    package func insertHidden(_ rows: [HiddenRow]) async throws {
        guard !rows.isEmpty else { return }
        try await self.update { db in
            let statement = try db.cachedStatement(
                sql: "INSERT OR IGNORE INTO hidden (user_id, conversation_id, seq) VALUES (?, ?, ?)"
            )
            for row in rows {
                try statement.execute(arguments: [row.user.rawValue, row.conversation, row.seq])
            }
        }
    }
}

extension SQLiteTransaction {
    package func hidden(from user: UserID, among positions: [MessagePosition]) async throws -> Set<MessagePosition> {
        guard !positions.isEmpty else { return [] }
        return try await self.access { db in
            let statement = try db.cachedStatement(
                sql: "SELECT 1 FROM hidden WHERE user_id = ? AND conversation_id = ? AND seq = ?"
            )
            return try Set(
                positions.filter {
                    try Int64.fetchOne(statement, arguments: [user.rawValue, $0.conversation, $0.seq]) != nil
                }
            )
        }
    }
}
