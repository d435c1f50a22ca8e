package import CourierStore
internal import Logging
internal import PostgresNIO

extension PostgresTransaction {
    // MARK: The push outbox

    /// Rows another node has taken (and holds, in its transaction) are skipped, not waited for.
    package func claimPushOutbox(
        node: String,
        nowMs: Int64,
        leaseMs: Int64,
        limit: Int
    ) async throws
        -> [PushOutboxRow]
    {
        try await self.connection.rows(
            """
            UPDATE push_outbox o SET due_ms = \(nowMs + leaseMs), claimed_by = \(node), claims = o.claims + 1
            FROM (SELECT id FROM push_outbox WHERE due_ms <= \(nowMs) ORDER BY due_ms, id LIMIT \(limit)
                FOR UPDATE SKIP LOCKED) c
            WHERE o.id = c.id
            RETURNING o.id, o.conversation_id, o.seq, o.user_id, o.endpoint, o.attempts, o.claims
            """,
            logger: self.logger
        ).map(Self.pushOutboxRow).sorted { $0.id < $1.id }
    }

    static func pushOutboxRow(_ row: PostgresRandomAccessRow) throws -> PushOutboxRow {
        PushOutboxRow(
            id: try row.get("id"),
            conversation: try row.get("conversation_id"),
            seq: try row.get("seq"),
            user: try row.get("user_id", as: Int64?.self).map(UserID.init(rawValue:)),
            endpoint: try row.get("endpoint", as: String?.self),
            attempts: Int(try row.get("attempts", as: Int32.self)),
            claims: Int(try row.get("claims", as: Int32.self))
        )
    }

    package func nextPushDueMs() async throws -> Int64? {
        try await self.connection.value("SELECT min(due_ms) FROM push_outbox", as: Int64.self, logger: self.logger)
    }

    package func finishPushOutbox(_ ids: [Int64], node: String) async throws -> [Int64] {
        guard !ids.isEmpty else { return [] }
        return try await self.connection.values(
            "DELETE FROM push_outbox WHERE id = ANY(\(ids)) AND claimed_by = \(node) RETURNING id",
            as: Int64.self,
            logger: self.logger
        )
    }

    package func renewPushOutbox(_ ids: [Int64], node: String, untilMs: Int64) async throws {
        guard !ids.isEmpty else { return }
        try await self.connection.run(
            "UPDATE push_outbox SET due_ms = \(untilMs) WHERE id = ANY(\(ids)) AND claimed_by = \(node)",
            logger: self.logger
        )
    }

    package func insertPushRetries(_ retries: [PushResults.Retry]) async throws {
        guard !retries.isEmpty else { return }
        try await self.connection.run(
            """
            INSERT INTO push_outbox (conversation_id, seq, user_id, endpoint, attempts, due_ms)
            SELECT * FROM unnest(\(retries.map(\.conversationID))::bigint[], \(retries.map { Int64($0.seq) })::bigint[],
                \(retries.map(\.user.rawValue))::bigint[], \(retries.map(\.endpoint))::text[],
                \(retries.map { Int32($0.attempts) })::integer[], \(retries.map(\.dueMs))::bigint[])
            """,
            logger: self.logger
        )
    }

    package func pushOutboxRows() async throws -> [PushOutboxRow] {
        try await self.connection.rows("SELECT * FROM push_outbox ORDER BY id", logger: self.logger)
            .map(Self.pushOutboxRow)
    }

    package func pushRecipients(
        of conversation: Int64,
        seq: Int64,
        only user: UserID?
    ) async throws
        -> [PushRecipientRow]
    {
        let only = user?.rawValue ?? 0
        return try await self.connection.rows(
            """
            SELECT m.user_id, m.notify, u.push_previews,
                EXISTS (SELECT 1 FROM mentions x WHERE x.conversation_id = m.conversation_id AND x.seq = \(seq)
                    AND x.user_id IN (m.user_id, 0)) AS mentioned
            FROM members m JOIN users u ON u.id = m.user_id
            WHERE m.conversation_id = \(conversation) AND m.joined_seq < \(seq) AND u.push_targets > 0
                AND u.removed_ms IS NULL AND (\(only) = 0 OR m.user_id = \(only))
                AND NOT EXISTS (
                    SELECT 1 FROM hidden h WHERE h.user_id = m.user_id AND h.conversation_id = m.conversation_id
                        AND h.seq = \(seq))
            ORDER BY m.user_id
            """,
            logger: self.logger
        ).map { row in
            PushRecipientRow(
                user: UserID(rawValue: try row.get("user_id")),
                notify: NotifyLevel(rawValue: Int64(try row.get("notify", as: Int16.self))) ?? .all,
                previews: try row.get("push_previews"),
                mentioned: try row.get("mentioned")
            )
        }
    }

    /// A device counts as live only while the node holding its connection renews its place in the cluster: a node
    /// that died with it (its place run out, or pruned) does not keep its pushes away.
    package func pushTargets(of users: [UserID], nowMs: Int64) async throws -> [PushTargetRow] {
        guard !users.isEmpty else { return [] }
        return try await self.connection.rows(
            """
            SELECT s.*, d.connected_since_ms IS NOT NULL AND (d.connected_node IS NULL OR EXISTS (
                SELECT 1 FROM cluster_nodes n WHERE n.name = d.connected_node AND n.alive_until_ms > \(nowMs))) AS live
            FROM push_subscriptions s JOIN devices d ON d.id = s.device_id
            WHERE s.user_id = ANY(\(users.map(\.rawValue))) AND d.revoked_ms IS NULL AND d.expires_ms > \(nowMs)
            ORDER BY s.user_id, s.created_ms, s.endpoint
            """,
            logger: self.logger
        ).map { row in
            PushTargetRow(subscription: try Self.pushSubscription(row), live: try row.get("live"))
        }
    }

    package func recountPushTargets(of users: [UserID]) async throws {
        guard !users.isEmpty else { return }
        try await self.connection.run(
            """
            UPDATE users SET push_targets = (SELECT count(*) FROM push_subscriptions s WHERE s.user_id = users.id)
            WHERE id = ANY(\(users.map(\.rawValue)))
            """,
            logger: self.logger
        )
    }

    package func pushPreviews(of user: UserID) async throws -> Bool {
        try await self.connection.value(
            "SELECT push_previews FROM users WHERE id = \(user.rawValue)",
            as: Bool.self,
            logger: self.logger
        ) ?? true
    }

    package func setPushPreviews(_ on: Bool, of user: UserID) async throws {
        try await self.connection.run(
            "UPDATE users SET push_previews = \(on) WHERE id = \(user.rawValue)",
            logger: self.logger
        )
    }
}
