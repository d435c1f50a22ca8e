package import CourierStore
internal import Foundation
internal import GRDB

extension SQLiteTransaction {
    // MARK: Webhooks

    static func webhook(_ row: Row) -> WebhookRow {
        WebhookRow(
            user: UserID(rawValue: row["user_id"]),
            url: row["url"],
            secret: Array(row["secret"] as Data),
            createdMs: row["created_ms"],
            cursor: UInt64(row["cursor"] as Int64),
            attempts: row["attempts"],
            dueMs: row["due_ms"],
            failingSinceMs: row["failing_since_ms"],
            disabledMs: row["disabled_ms"],
            lastError: row["last_error"]
        )
    }

    package func putWebhook(_ row: WebhookRow) async throws {
        try await self.update { db in
            try db.execute(
                sql: """
                    INSERT INTO webhooks (
                        user_id, url, secret, created_ms, cursor, attempts, due_ms, failing_since_ms, disabled_ms,
                        last_error, claimed_by, lease_until_ms
                    ) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, 0)
                    ON CONFLICT (user_id) DO UPDATE SET url = excluded.url, secret = excluded.secret,
                        created_ms = excluded.created_ms, cursor = excluded.cursor, attempts = excluded.attempts,
                        due_ms = excluded.due_ms, failing_since_ms = excluded.failing_since_ms,
                        disabled_ms = excluded.disabled_ms, last_error = excluded.last_error
                    """,
                arguments: [
                    row.user.rawValue, row.url, Data(row.secret), row.createdMs, Int64(row.cursor), row.attempts,
                    row.dueMs, row.failingSinceMs, row.disabledMs, row.lastError,
                ]
            )
        }
    }

    package func deleteWebhook(of user: UserID) async throws -> Bool {
        try await self.update { db in
            try db.execute(sql: "DELETE FROM webhooks WHERE user_id = ?", arguments: [user.rawValue])
            return db.changesCount == 1
        }
    }

    package func webhook(of user: UserID) async throws -> WebhookRow? {
        try await self.access { db in
            try Row.fetchOne(db, sql: "SELECT * FROM webhooks WHERE user_id = ?", arguments: [user.rawValue])
                .map(Self.webhook)
        }
    }

    package func claimWebhooks(node: String, nowMs: Int64, leaseMs: Int64, limit: Int) async throws -> [WebhookRow] {
        try await self.update { db in
            try Row.fetchAll(
                db,
                sql: """
                    UPDATE webhooks SET claimed_by = ?, lease_until_ms = ?
                    WHERE user_id IN (
                        SELECT user_id FROM webhooks
                        WHERE disabled_ms IS NULL AND (claimed_by = ? OR claimed_by IS NULL OR lease_until_ms <= ?)
                            AND EXISTS (SELECT 1 FROM users u WHERE u.id = webhooks.user_id AND u.removed_ms IS NULL)
                        ORDER BY user_id LIMIT ?
                    )
                    RETURNING *
                    """,
                arguments: [node, nowMs + leaseMs, node, nowMs, limit]
            ).map(Self.webhook).sorted { $0.user < $1.user }
        }
    }

    package func releaseWebhooks(node: String) async throws {
        try await self.update { db in
            try db.execute(
                sql: "UPDATE webhooks SET claimed_by = NULL, lease_until_ms = 0 WHERE claimed_by = ?",
                arguments: [node]
            )
        }
    }

    package func updateWebhook(_ row: WebhookRow, node: String) async throws -> Bool {
        try await self.update { db in
            try db.execute(
                sql: """
                    UPDATE webhooks SET cursor = ?, attempts = ?, due_ms = ?, failing_since_ms = ?, disabled_ms = ?,
                        last_error = ?
                    WHERE user_id = ? AND claimed_by = ? AND created_ms = ?
                    """,
                arguments: [
                    Int64(row.cursor), row.attempts, row.dueMs, row.failingSinceMs, row.disabledMs, row.lastError,
                    row.user.rawValue, node, row.createdMs,
                ]
            )
            return db.changesCount == 1
        }
    }

    // MARK: Incoming hooks

    package func insertIncomingHook(tokenHash: [UInt8], bot: UserID, group: String, nowMs: Int64) async throws -> Int64
    {
        try await self.update { db in
            try db.execute(
                sql: "INSERT INTO incoming_hooks (token_hash, bot_id, group_name, created_ms) VALUES (?, ?, ?, ?)",
                arguments: [Data(tokenHash), bot.rawValue, group, nowMs]
            )
            return db.lastInsertedRowID
        }
    }

    package func incomingHook(tokenHash: [UInt8]) async throws -> (id: Int64, bot: UserID, group: String)? {
        try await self.access { db in
            try Row.fetchOne(
                db,
                sql: "SELECT * FROM incoming_hooks WHERE token_hash = ? AND revoked_ms IS NULL",
                arguments: [Data(tokenHash)]
            ).map { (id: $0["id"], bot: UserID(rawValue: $0["bot_id"]), group: $0["group_name"]) }
        }
    }

    package func incomingHooks() async throws
        -> [(id: Int64, bot: UserID, group: String, createdMs: Int64, revokedMs: Int64?)]
    {
        try await self.access { db in
            try Row.fetchAll(db, sql: "SELECT * FROM incoming_hooks ORDER BY id").map {
                (
                    id: $0["id"], bot: UserID(rawValue: $0["bot_id"]), group: $0["group_name"],
                    createdMs: $0["created_ms"], revokedMs: $0["revoked_ms"]
                )
            }
        }
    }

    package func revokeIncomingHook(_ id: Int64, nowMs: Int64) async throws -> Bool {
        try await self.update { db in
            try db.execute(
                sql: "UPDATE incoming_hooks SET revoked_ms = ? WHERE id = ? AND revoked_ms IS NULL",
                arguments: [nowMs, id]
            )
            return db.changesCount == 1
        }
    }
}
