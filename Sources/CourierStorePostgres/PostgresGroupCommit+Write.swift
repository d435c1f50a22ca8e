internal import CourierStore
internal import Logging
internal import PostgresNIO

extension PostgresGroupCommit {
    /// Writes what the batch changed, one statement for each table.
    func write(_ connection: PostgresConnection) async throws {
        try await self.writeMessages(connection)
        let changed = self.commit.conversations.values.filter(\.dirty).sorted { $0.id < $1.id }
        if !changed.isEmpty {
            try await connection.run(
                """
                UPDATE conversations SET last_seq = c.last_seq, last_ms = c.last_ms
                FROM unnest(\(changed.map(\.id))::bigint[], \(changed.map(\.lastSeq))::bigint[],
                    \(changed.map(\.lastMs))::bigint[]) AS c(id, last_seq, last_ms)
                WHERE conversations.id = c.id
                """,
                logger: self.logger
            )
        }
        var conversationIDs: [Int64] = []
        var users: [Int64] = []
        var reads: [Int64] = []
        var delivered: [Int64] = []
        var sent: [Bool] = []
        for conversation in self.commit.conversations.values {
            for (user, member) in conversation.members where member.dirty {
                conversationIDs.append(conversation.id)
                users.append(user.rawValue)
                reads.append(member.readSeq)
                delivered.append(member.deliveredSeq)
                sent.append(member.sent)
            }
        }
        if !users.isEmpty {
            try await connection.run(
                """
                UPDATE members SET read_seq = m.read_seq, delivered_seq = m.delivered_seq, sent = m.sent
                FROM unnest(\(conversationIDs)::bigint[], \(users)::bigint[], \(reads)::bigint[],
                    \(delivered)::bigint[], \(sent)::boolean[]) AS m(conversation_id, user_id, read_seq, delivered_seq, sent)
                WHERE members.conversation_id = m.conversation_id AND members.user_id = m.user_id
                """,
                logger: self.logger
            )
        }
        if !self.commit.ackedCursors.isEmpty {
            let devices = self.commit.ackedCursors.sorted { $0.key < $1.key }
            try await connection.run(
                """
                UPDATE devices SET acked_cursor = d.cursor
                FROM unnest(\(devices.map(\.key.rawValue))::bigint[], \(devices.map(\.value))::bigint[]) AS d(id, cursor)
                WHERE devices.id = d.id
                """,
                logger: self.logger
            )
        }
        try await PostgresTransaction.writeLog(self.commit.log, connection, logger: self.logger)
    }

    /// Inserts the batch's messages in one statement (and their media in another), and recalls the messages stored
    /// before it that it recalled.
    private func writeMessages(_ connection: PostgresConnection) async throws {
        let messages = self.commit.newMessages
        if !messages.isEmpty {
            try await connection.run(
                """
                INSERT INTO messages (conversation_id, seq, sender_id, sender_device_id, client_id, time_ms, body,
                    recalled)
                SELECT c, s, u, NULLIF(d, 0), i, t, b, r FROM unnest(\(messages.map(\.conversation))::bigint[],
                    \(messages.map(\.seq))::bigint[], \(messages.map(\.sender.rawValue))::bigint[],
                    \(messages.map { $0.device?.rawValue ?? 0 })::bigint[], \(messages.map(\.id))::text[],
                    \(messages.map(\.timeMs))::bigint[], \(messages.map { ByteBuffer(bytes: $0.body) })::bytea[],
                    \(messages.map(\.recalled))::boolean[]) AS m(c, s, u, d, i, t, b, r)
                """,
                logger: self.logger
            )
        }
        let media = messages.compactMap { message in message.media.map { (message, $0) } }
        if !media.isEmpty {
            try await connection.run(
                """
                INSERT INTO message_media (sha256, conversation_id, seq, mime, name)
                SELECT * FROM unnest(\(media.map(\.1.sha256))::text[], \(media.map(\.0.conversation))::bigint[],
                    \(media.map(\.0.seq))::bigint[], \(media.map(\.1.mime))::text[], \(media.map(\.1.name))::text[])
                """,
                logger: self.logger
            )
        }
        let recalled = self.commit.recalledMessages
        if !recalled.isEmpty {
            try await connection.run(
                """
                UPDATE messages SET recalled = true, body = ''
                FROM unnest(\(recalled.map(\.conversation))::bigint[], \(recalled.map(\.seq))::bigint[]) AS r(c, s)
                WHERE messages.conversation_id = r.c AND messages.seq = r.s
                """,
                logger: self.logger
            )
            // A recalled message's media is no longer anyone's to fetch.
            try await connection.run(
                """
                DELETE FROM message_media USING unnest(\(recalled.map(\.conversation))::bigint[],
                    \(recalled.map(\.seq))::bigint[]) AS r(c, s)
                WHERE message_media.conversation_id = r.c AND message_media.seq = r.s
                """,
                logger: self.logger
            )
        }
    }
}
