package import CourierStore
internal import Foundation
internal import NIOCore
internal import PostgresNIO

extension PostgresTransaction {
    // MARK: Webhooks

    static func webhook(_ row: PostgresRandomAccessRow) throws -> WebhookRow {
        WebhookRow(
            user: UserID(rawValue: try row.get("user_id")),
            url: try row.get("url"),
            secret: try row.bytes("secret"),
            createdMs: try row.get("created_ms"),
            cursor: UInt64(try row.get("cursor", as: Int64.self)),
            attempts: Int(try row.get("attempts", as: Int32.self)),
            dueMs: try row.get("due_ms"),
            failingSinceMs: try row.get("failing_since_ms", as: Int64?.self),
            disabledMs: try row.get("disabled_ms", as: Int64?.self),
            lastError: try row.get("last_error", as: String?.self)
        )
    }

    package func putWebhook(_ row: WebhookRow) async throws {
        try await self.connection.run(
            """
            INSERT INTO webhooks (
                user_id, url, secret, created_ms, cursor, attempts, due_ms, failing_since_ms, disabled_ms, last_error,
                claimed_by, lease_until_ms
            ) VALUES (
                \(row.user.rawValue), \(row.url), \(ByteBuffer(bytes: row.secret)), \(row.createdMs),
                \(Int64(row.cursor)), \(Int32(row.attempts)), \(row.dueMs), \(row.failingSinceMs), \(row.disabledMs),
                \(row.lastError), NULL, 0
            )
            ON CONFLICT (user_id) DO UPDATE SET url = EXCLUDED.url, secret = EXCLUDED.secret,
                created_ms = EXCLUDED.created_ms, cursor = EXCLUDED.cursor, attempts = EXCLUDED.attempts,
                due_ms = EXCLUDED.due_ms, failing_since_ms = EXCLUDED.failing_since_ms,
                disabled_ms = EXCLUDED.disabled_ms, last_error = EXCLUDED.last_error
            """,
            logger: self.logger
        )
    }

    package func deleteWebhook(of user: UserID) async throws -> Bool {
        try await self.connection.rows(
            "DELETE FROM webhooks WHERE user_id = \(user.rawValue) RETURNING user_id",
            logger: self.logger
        ).count == 1
    }

    package func webhook(of user: UserID) async throws -> WebhookRow? {
        try await self.connection.row(
            "SELECT * FROM webhooks WHERE user_id = \(user.rawValue)",
            logger: self.logger
        ).map(Self.webhook)
    }

    /// The node's own webhooks are renewed, waiting for a record of its own in flight rather than skipping it (a
    /// webhook skipped would drop out of the node's hands for a turn); free or expired ones are taken, skipping those
    /// another node's transaction holds.
    package func claimWebhooks(node: String, nowMs: Int64, leaseMs: Int64, limit: Int) async throws -> [WebhookRow] {
        let own = try await self.connection.rows(
            """
            UPDATE webhooks SET lease_until_ms = \(nowMs + leaseMs)
            WHERE claimed_by = \(node) AND disabled_ms IS NULL
                AND EXISTS (SELECT 1 FROM users u WHERE u.id = webhooks.user_id AND u.removed_ms IS NULL)
            RETURNING *
            """,
            logger: self.logger
        ).map(Self.webhook)
        let room = limit - own.count
        guard room > 0 else { return own.sorted { $0.user < $1.user } }
        let taken = try await self.connection.rows(
            """
            UPDATE webhooks SET claimed_by = \(node), lease_until_ms = \(nowMs + leaseMs)
            WHERE user_id IN (
                SELECT user_id FROM webhooks
                WHERE disabled_ms IS NULL AND (claimed_by IS NULL OR lease_until_ms <= \(nowMs))
                    AND claimed_by IS DISTINCT FROM \(node)
                    AND EXISTS (SELECT 1 FROM users u WHERE u.id = webhooks.user_id AND u.removed_ms IS NULL)
                ORDER BY user_id LIMIT \(Int64(room))
                FOR UPDATE SKIP LOCKED
            )
            RETURNING *
            """,
            logger: self.logger
        ).map(Self.webhook)
        return (own + taken).sorted { $0.user < $1.user }
    }

    package func releaseWebhooks(node: String) async throws {
        try await self.connection.run(
            "UPDATE webhooks SET claimed_by = NULL, lease_until_ms = 0 WHERE claimed_by = \(node)",
            logger: self.logger
        )
    }

    package func updateWebhook(_ row: WebhookRow, node: String) async throws -> Bool {
        try await self.connection.rows(
            """
            UPDATE webhooks SET cursor = \(Int64(row.cursor)), attempts = \(Int32(row.attempts)),
                due_ms = \(row.dueMs), failing_since_ms = \(row.failingSinceMs), disabled_ms = \(row.disabledMs),
                last_error = \(row.lastError)
            WHERE user_id = \(row.user.rawValue) AND claimed_by = \(node) AND created_ms = \(row.createdMs)
            RETURNING user_id
            """,
            logger: self.logger
        ).count == 1
    }

    // MARK: Incoming hooks

    package func insertIncomingHook(tokenHash: [UInt8], bot: UserID, group: String, nowMs: Int64) async throws -> Int64
    {
        try await self.connection.value(
            """
            INSERT INTO incoming_hooks (token_hash, bot_id, group_name, created_ms)
            VALUES (\(ByteBuffer(bytes: tokenHash)), \(bot.rawValue), \(group), \(nowMs)) RETURNING id
            """,
            as: Int64.self,
            logger: self.logger
        ) ?? 0
    }

    package func incomingHook(tokenHash: [UInt8]) async throws -> (id: Int64, bot: UserID, group: String)? {
        try await self.connection.row(
            """
            SELECT id, bot_id, group_name FROM incoming_hooks
            WHERE token_hash = \(ByteBuffer(bytes: tokenHash)) AND revoked_ms IS NULL
            """,
            logger: self.logger
        ).map {
            (id: try $0.get("id"), bot: UserID(rawValue: try $0.get("bot_id")), group: try $0.get("group_name"))
        }
    }

    package func incomingHooks() async throws
        -> [(id: Int64, bot: UserID, group: String, createdMs: Int64, revokedMs: Int64?)]
    {
        try await self.connection.rows("SELECT * FROM incoming_hooks ORDER BY id", logger: self.logger).map {
            (
                id: try $0.get("id"), bot: UserID(rawValue: try $0.get("bot_id")), group: try $0.get("group_name"),
                createdMs: try $0.get("created_ms"), revokedMs: try $0.get("revoked_ms", as: Int64?.self)
            )
        }
    }

    package func revokeIncomingHook(_ id: Int64, nowMs: Int64) async throws -> Bool {
        try await self.connection.rows(
            """
            UPDATE incoming_hooks SET revoked_ms = \(nowMs) WHERE id = \(id) AND revoked_ms IS NULL RETURNING id
            """,
            logger: self.logger
        ).count == 1
    }
}
