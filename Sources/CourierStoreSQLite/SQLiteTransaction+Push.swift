package import CourierStore
internal import Foundation
internal import GRDB

extension SQLiteTransaction {
    // MARK: The push outbox

    package func claimPushOutbox(
        node: String,
        nowMs: Int64,
        leaseMs: Int64,
        limit: Int
    ) async throws
        -> [PushOutboxRow]
    {
        try await self.update { db in
            try Row.fetchAll(
                db,
                sql: """
                    UPDATE push_outbox SET due_ms = ?, claimed_by = ?, claims = claims + 1
                    WHERE id IN (SELECT id FROM push_outbox WHERE due_ms <= ? ORDER BY due_ms, id LIMIT ?)
                    RETURNING id, conversation_id, seq, user_id, endpoint, attempts, claims
                    """,
                arguments: [nowMs + leaseMs, node, nowMs, limit]
            ).map(Self.pushOutboxRow).sorted { $0.id < $1.id }
        }
    }

    static func pushOutboxRow(_ row: Row) -> PushOutboxRow {
        PushOutboxRow(
            id: row["id"],
            conversation: row["conversation_id"],
            seq: row["seq"],
            user: (row["user_id"] as Int64?).map(UserID.init(rawValue:)),
            endpoint: row["endpoint"],
            attempts: row["attempts"],
            claims: row["claims"]
        )
    }

    package func nextPushDueMs() async throws -> Int64? {
        try await self.access { db in
            try Int64.fetchOne(db, sql: "SELECT min(due_ms) FROM push_outbox")
        }
    }

    package func finishPushOutbox(_ ids: [Int64], node: String) async throws -> [Int64] {
        guard !ids.isEmpty else { return [] }
        return try await self.update { db in
            try Int64.fetchAll(
                db,
                sql: """
                    DELETE FROM push_outbox WHERE id IN (SELECT value FROM json_each(?)) AND claimed_by = ?
                    RETURNING id
                    """,
                arguments: [Self.jsonList(ids), node]
            )
        }
    }

    package func renewPushOutbox(_ ids: [Int64], node: String, untilMs: Int64) async throws {
        guard !ids.isEmpty else { return }
        try await self.update { db in
            try db.execute(
                sql: """
                    UPDATE push_outbox SET due_ms = ? WHERE id IN (SELECT value FROM json_each(?)) AND claimed_by = ?
                    """,
                arguments: [untilMs, Self.jsonList(ids), node]
            )
        }
    }

    package func insertPushRetries(_ retries: [PushResults.Retry]) async throws {
        guard !retries.isEmpty else { return }
        try await self.update { db in
            let insert = try db.cachedStatement(
                sql: """
                    INSERT INTO push_outbox (conversation_id, seq, user_id, endpoint, attempts, due_ms)
                    VALUES (?, ?, ?, ?, ?, ?)
                    """
            )
            for retry in retries {
                try insert.execute(arguments: [
                    retry.conversationID, Int64(retry.seq), retry.user.rawValue, retry.endpoint, retry.attempts,
                    retry.dueMs,
                ])
            }
        }
    }

    package func pushOutboxRows() async throws -> [PushOutboxRow] {
        try await self.access { db in
            try Row.fetchAll(db, sql: "SELECT * FROM push_outbox ORDER BY id").map(Self.pushOutboxRow)
        }
    }

    package func pushRecipients(
        of conversation: Int64,
        seq: Int64,
        only user: UserID?
    ) async throws
        -> [PushRecipientRow]
    {
        try await self.access { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT m.user_id, m.notify, u.push_previews,
                        EXISTS (SELECT 1 FROM mentions x WHERE x.conversation_id = m.conversation_id AND x.seq = ?
                            AND x.user_id IN (m.user_id, 0)) AS mentioned
                    FROM members m JOIN users u ON u.id = m.user_id
                    WHERE m.conversation_id = ? AND m.joined_seq < ? AND u.push_targets > 0
                        AND u.removed_ms IS NULL AND (? IS NULL OR m.user_id = ?)
                        AND NOT EXISTS (
                            SELECT 1 FROM hidden h WHERE h.user_id = m.user_id AND h.conversation_id = m.conversation_id
                                AND h.seq = ?)
                    ORDER BY m.user_id
                    """,
                arguments: [seq, conversation, seq, user?.rawValue, user?.rawValue, seq]
            ).map { row in
                PushRecipientRow(
                    user: UserID(rawValue: row["user_id"]),
                    notify: NotifyLevel(rawValue: row["notify"]) ?? .all,
                    previews: row["push_previews"],
                    mentioned: row["mentioned"]
                )
            }
        }
    }

    package func pushTargets(of users: [UserID], nowMs: Int64) async throws -> [PushTargetRow] {
        guard !users.isEmpty else { return [] }
        return try await self.access { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT s.*, d.connected_since_ms IS NOT NULL AS live
                    FROM push_subscriptions s JOIN devices d ON d.id = s.device_id
                    WHERE s.user_id IN (SELECT value FROM json_each(?)) AND d.revoked_ms IS NULL AND d.expires_ms > ?
                    ORDER BY s.user_id, s.created_ms, s.endpoint
                    """,
                arguments: [Self.jsonList(users.map(\.rawValue)), nowMs]
            ).map { row in
                PushTargetRow(subscription: Self.pushSubscription(row), live: row["live"])
            }
        }
    }

    package func recountPushTargets(of users: [UserID]) async throws {
        guard !users.isEmpty else { return }
        try await self.update { db in
            try db.execute(
                sql: """
                    UPDATE users SET push_targets = (SELECT count(*) FROM push_subscriptions s WHERE s.user_id = users.id)
                    WHERE id IN (SELECT value FROM json_each(?))
                    """,
                arguments: [Self.jsonList(users.map(\.rawValue))]
            )
        }
    }

    package func pushPreviews(of user: UserID) async throws -> Bool {
        try await self.access { db in
            try Bool.fetchOne(db, sql: "SELECT push_previews FROM users WHERE id = ?", arguments: [user.rawValue])
                ?? true
        }
    }

    package func setPushPreviews(_ on: Bool, of user: UserID) async throws {
        try await self.update { db in
            try db.execute(sql: "UPDATE users SET push_previews = ? WHERE id = ?", arguments: [on, user.rawValue])
        }
    }

    /// Ids as a JSON array, for `json_each`.
    static func jsonList(_ ids: [Int64]) -> String {
        "[" + ids.map(String.init).joined(separator: ",") + "]"
    }
}
