package import CourierStore
internal import PostgresNIO

extension PostgresTransaction {
    // MARK: Blocks and hidden messages

    package func blockPairs(involving user: UserID, with others: [UserID]?) async throws -> [BlockRow] {
        let all = others == nil
        let others = others?.map(\.rawValue) ?? []
        return try await self.connection.rows(
            """
            SELECT blocker_id, blocked_id, created_ms FROM blocks
            WHERE blocker_id = \(user.rawValue) AND (\(all) OR blocked_id = ANY(\(others)::bigint[]))
            UNION ALL
            SELECT blocker_id, blocked_id, created_ms FROM blocks
            WHERE blocked_id = \(user.rawValue) AND (\(all) OR blocker_id = ANY(\(others)::bigint[]))
            """,
            logger: self.logger
        ).map {
            BlockRow(
                blocker: UserID(rawValue: try $0.get("blocker_id")),
                blocked: UserID(rawValue: try $0.get("blocked_id")),
                createdMs: try $0.get("created_ms")
            )
        }
    }

    package func setBlock(_ blocker: UserID, _ blocked: UserID, on: Bool, nowMs: Int64) async throws -> Bool {
        let changed =
            on
            ? try await self.connection.rows(
                """
                INSERT INTO blocks (blocker_id, blocked_id, created_ms)
                VALUES (\(blocker.rawValue), \(blocked.rawValue), \(nowMs))
                ON CONFLICT DO NOTHING RETURNING blocker_id
                """,
                logger: self.logger
            )
            : try await self.connection.rows(
                """
                DELETE FROM blocks WHERE blocker_id = \(blocker.rawValue) AND blocked_id = \(blocked.rawValue)
                RETURNING blocker_id
                """,
                logger: self.logger
            )
        guard !changed.isEmpty else { return false }
        let pair = UserPair(blocker, blocked)
        // The direct conversation's row of the blocker, where they have one: blocking, its marks kept as they are
        // (the conversation's row is locked already: ``lockDirect(_:)``).
        try await self.connection.run(
            """
            UPDATE members m SET blocked_at_seq = CASE WHEN \(on) THEN m.read_seq END,
                blocked_delivered_seq = CASE WHEN \(on) THEN m.delivered_seq END
            FROM conversations c
            WHERE c.user_a = \(pair.a.rawValue) AND c.user_b = \(pair.b.rawValue) AND m.conversation_id = c.id
                AND m.user_id = \(blocker.rawValue)
            """,
            logger: self.logger
        )
        return true
    }

    package func lockDirect(_ pair: UserPair) async throws {
        try await self.connection.run(
            """
            SELECT 1 FROM conversations WHERE user_a = \(pair.a.rawValue) AND user_b = \(pair.b.rawValue)
            FOR NO KEY UPDATE
            """,
            logger: self.logger
        )
    }

    package func insertHidden(_ rows: [HiddenRow]) async throws {
        guard !rows.isEmpty else { return }
        try await self.connection.run(
            """
            INSERT INTO hidden (user_id, conversation_id, seq)
            SELECT * FROM unnest(\(rows.map(\.user.rawValue))::bigint[], \(rows.map(\.conversation))::bigint[],
                \(rows.map(\.seq))::bigint[])
            ON CONFLICT DO NOTHING
            """,
            logger: self.logger
        )
    }
}

extension PostgresTransaction {
    package func hidden(from user: UserID, among positions: [MessagePosition]) async throws -> Set<MessagePosition> {
        guard !positions.isEmpty else { return [] }
        return try await Set(
            self.connection.rows(
                """
                SELECT h.conversation_id, h.seq FROM hidden h
                JOIN unnest(\(positions.map(\.conversation))::bigint[], \(positions.map(\.seq))::bigint[])
                    AS p(conversation_id, seq) ON p.conversation_id = h.conversation_id AND p.seq = h.seq
                WHERE h.user_id = \(user.rawValue)
                """,
                logger: self.logger
            ).map { MessagePosition(conversation: try $0.get("conversation_id"), seq: try $0.get("seq")) }
        )
    }
}
