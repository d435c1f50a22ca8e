package import CourierStore
internal import PostgresNIO

extension PostgresTransaction {
    package func reactors(in conversation: Int64, seq: Int64, perKey: Int) async throws -> [ReactorRows] {
        var rows: [ReactorRows] = []
        // The primary key's (conversation, seq, …) range: the message's reactions, numbered under each key.
        for row in try await self.connection.rows(
            """
            SELECT key, user_id, total FROM (
                SELECT key, user_id, time_ms,
                    ROW_NUMBER() OVER (PARTITION BY key ORDER BY time_ms, user_id) AS n,
                    COUNT(*) OVER (PARTITION BY key) AS total,
                    MIN(time_ms) OVER (PARTITION BY key) AS first
                FROM reactions WHERE conversation_id = \(conversation) AND seq = \(seq)
            ) r WHERE n <= \(Int64(perKey)) ORDER BY first, key, n
            """,
            logger: self.logger
        ) {
            let key: String = try row.get("key")
            if rows.last?.key != key {
                rows.append(ReactorRows(key: key, count: Int(try row.get("total", as: Int64.self)), users: []))
            }
            rows[rows.count - 1].users.append(UserID(rawValue: try row.get("user_id", as: Int64.self)))
        }
        return rows
    }
}
