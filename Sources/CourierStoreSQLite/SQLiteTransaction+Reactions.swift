package import CourierStore
internal import GRDB

extension SQLiteTransaction {
    package func reactors(in conversation: Int64, seq: Int64, perKey: Int) async throws -> [ReactorRows] {
        try await self.access { db in
            var rows: [ReactorRows] = []
            // The primary key's (conversation, seq, …) range: the message's reactions, numbered under each key.
            for row in try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT key, user_id, total FROM (
                            SELECT key, user_id, time_ms,
                                ROW_NUMBER() OVER (PARTITION BY key ORDER BY time_ms, user_id) AS n,
                                COUNT(*) OVER (PARTITION BY key) AS total,
                                MIN(time_ms) OVER (PARTITION BY key) AS first
                            FROM reactions WHERE conversation_id = ? AND seq = ?
                        ) WHERE n <= ? ORDER BY first, key, n
                        """
                ),
                arguments: [conversation, seq, perKey]
            ) {
                let key: String = row["key"]
                if rows.last?.key != key { rows.append(ReactorRows(key: key, count: row["total"], users: [])) }
                rows[rows.count - 1].users.append(UserID(rawValue: row["user_id"]))
            }
            return rows
        }
    }
}
