internal import CourierStore
internal import Logging
internal import PostgresNIO

extension PostgresGroupCommit {
    /// Writes what the batch changed, one statement for each table.
    mutating func write(_ connection: PostgresConnection) async throws {
        let changed = self.commit.conversations.values.filter(\.dirty).sorted { $0.id < $1.id }
        // A conversation read without its lock never gets a new seq: another node could take the same meanwhile.
        // (``requireLocked(by:_:)`` sends every request that names one after the plan to a new plan first; this
        // checks the sends, the only requests that change a conversation's row.)
        if changed.contains(where: { self.unlocked.contains($0.id) }) { throw StaleBatchRead() }
        try await self.writeMessages(connection)
        let withheld = self.commit.withheld
        if !withheld.isEmpty {
            try await connection.run(
                """
                INSERT INTO hidden (user_id, conversation_id, seq)
                SELECT * FROM unnest(\(withheld.map(\.user.rawValue))::bigint[],
                    \(withheld.map(\.conversation))::bigint[], \(withheld.map(\.seq))::bigint[])
                ON CONFLICT DO NOTHING
                """,
                logger: self.logger
            )
        }
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
        let dirty = self.commit.conversations.values.flatMap { conversation in
            conversation.members.filter(\.value.dirty).map { (conversation.id, $0.key, $0.value) }
        }
        for (conversation, user, member) in dirty.sorted(by: { ($0.0, $0.1.rawValue) < ($1.0, $1.1.rawValue) }) {
            conversationIDs.append(conversation)
            users.append(user.rawValue)
            reads.append(member.readSeq)
            delivered.append(member.deliveredSeq)
            sent.append(member.sent)
        }
        if !users.isEmpty {
            // Every mark only moves forward. A batch may write a member's row without holding its user's lock or
            // its conversation's (another node's batch may write the same row: a send forwarded to the
            // conversation's owner, the user's acknowledgement on its own node), and a leave and a rejoin meanwhile
            // make a new row: the merge never takes one back. The rows are locked first in one order, so two
            // batches writing the same rows wait for each other, never in a circle.
            try await connection.run(
                """
                SELECT 1 FROM members
                WHERE (conversation_id, user_id) IN (
                    SELECT * FROM unnest(\(conversationIDs)::bigint[], \(users)::bigint[]))
                ORDER BY conversation_id, user_id FOR NO KEY UPDATE
                """,
                logger: self.logger
            )
            try await connection.run(
                """
                UPDATE members SET read_seq = GREATEST(members.read_seq, m.read_seq),
                    delivered_seq = GREATEST(members.delivered_seq, m.delivered_seq), sent = members.sent OR m.sent
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
        try await PostgresTransaction.writeLog(&self.commit.log, connection, logger: self.logger)
    }

    /// Inserts the batch's messages in one statement (and their media in another), and recalls the messages stored
    /// before it that it recalled.
    private func writeMessages(_ connection: PostgresConnection) async throws {
        let messages = self.commit.newMessages
        if !messages.isEmpty {
            try await connection.run(
                """
                INSERT INTO messages (conversation_id, seq, sender_id, sender_device_id, client_id, time_ms, body,
                    recalled, reply_seq)
                SELECT c, s, u, NULLIF(d, 0), i, t, b, r, NULLIF(p, 0) FROM unnest(
                    \(messages.map(\.conversation))::bigint[],
                    \(messages.map(\.seq))::bigint[], \(messages.map(\.sender.rawValue))::bigint[],
                    \(messages.map { $0.device?.rawValue ?? 0 })::bigint[], \(messages.map(\.id))::text[],
                    \(messages.map(\.timeMs))::bigint[], \(messages.map { ByteBuffer(bytes: $0.body) })::bytea[],
                    \(messages.map(\.recalled))::boolean[], \(messages.map { $0.replySeq ?? 0 })::bigint[])
                    AS m(c, s, u, d, i, t, b, r, p)
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
        let pushed = messages.filter { $0.pushes && !$0.recalled }
        if !pushed.isEmpty {
            try await connection.run(
                """
                INSERT INTO push_outbox (conversation_id, seq, due_ms)
                SELECT c, s, \(self.commit.nowMs) FROM unnest(\(pushed.map(\.conversation))::bigint[],
                    \(pushed.map(\.seq))::bigint[]) AS p(c, s)
                """,
                logger: self.logger
            )
        }
        let mentions = messages.filter { !$0.recalled }.flatMap { message in
            message.mentioned.map { (message.conversation, message.seq, $0) }
        }
        if !mentions.isEmpty {
            try await connection.run(
                """
                INSERT INTO mentions (conversation_id, seq, user_id)
                SELECT * FROM unnest(\(mentions.map(\.0))::bigint[], \(mentions.map(\.1))::bigint[],
                    \(mentions.map(\.2))::bigint[])
                """,
                logger: self.logger
            )
        }
        try await self.writeEdits(connection)
        if self.store.configuration.indexesForSearch {
            try await self.writeSearch(connection, deferred: self.store.searchIndexer.isDeferred)
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
            // A recalled message's media is no longer anyone's to fetch; its earlier versions, its reactions, its
            // mentions and its pin go.
            try await connection.run(
                """
                WITH r(c, s) AS (SELECT * FROM unnest(\(recalled.map(\.conversation))::bigint[],
                        \(recalled.map(\.seq))::bigint[])),
                    media AS (DELETE FROM message_media USING r
                        WHERE message_media.conversation_id = r.c AND message_media.seq = r.s),
                    mentioned AS (DELETE FROM mentions USING r
                        WHERE mentions.conversation_id = r.c AND mentions.seq = r.s),
                    versions AS (DELETE FROM message_versions USING r
                        WHERE message_versions.conversation_id = r.c AND message_versions.seq = r.s),
                    pinned AS (DELETE FROM pins USING r WHERE pins.conversation_id = r.c AND pins.seq = r.s)
                DELETE FROM reactions USING r WHERE reactions.conversation_id = r.c AND reactions.seq = r.s
                """,
                logger: self.logger
            )
        }
    }

    /// Writes the search index's rows of new messages (the position follows the order of the batch; `deferred`:
    /// unindexed, for the ``SearchIndexer`` to index after the commit), sets the tokens of edited ones and drops
    /// recalled ones.
    private func writeSearch(_ connection: PostgresConnection, deferred: Bool) async throws {
        let messages = self.commit.newMessages.filter { !$0.recalled }
        if !messages.isEmpty, deferred {
            try await connection.run(
                """
                INSERT INTO message_search (conversation_id, seq)
                SELECT c, s FROM unnest(\(messages.map(\.conversation))::bigint[], \(messages.map(\.seq))::bigint[])
                    WITH ORDINALITY AS m(c, s, n)
                ORDER BY n
                """,
                logger: self.logger
            )
        } else if !messages.isEmpty {
            try await connection.run(
                """
                INSERT INTO message_search (conversation_id, seq, tokens)
                SELECT c, s, string_to_array(t, ' ') FROM unnest(\(messages.map(\.conversation))::bigint[],
                    \(messages.map(\.seq))::bigint[],
                    \(messages.map { Self.searchDocument($0.body, $0.searchTokens, $0.conversation) })::text[])
                    WITH ORDINALITY AS m(c, s, t, n)
                ORDER BY n
                """,
                logger: self.logger
            )
        }
        var edited: [MessagePosition: EditWrite] = [:]
        for edit in self.commit.edits { edited[edit.position] = edit }
        if !edited.isEmpty {
            let positions = Array(edited.keys)
            try await connection.run(
                """
                UPDATE message_search SET tokens = string_to_array(e.t, ' ')
                FROM unnest(\(positions.map(\.conversation))::bigint[], \(positions.map(\.seq))::bigint[],
                    \(positions.map { Self.searchDocument(edited[$0]!.body, edited[$0]!.searchTokens, $0.conversation) })::text[])
                    AS e(c, s, t)
                WHERE message_search.conversation_id = e.c AND message_search.seq = e.s
                """,
                logger: self.logger
            )
        }
        let recalled = self.commit.recalledMessages
        if !recalled.isEmpty {
            try await connection.run(
                """
                DELETE FROM message_search USING unnest(\(recalled.map(\.conversation))::bigint[],
                    \(recalled.map(\.seq))::bigint[]) AS r(c, s)
                WHERE message_search.conversation_id = r.c AND message_search.seq = r.s
                """,
                logger: self.logger
            )
        }
    }

    /// A message's tokens as one string, split again by the statement (a token never holds a space).
    private static func searchDocument(_ body: [UInt8], _ prepared: [String]?, _ conversation: Int64) -> String {
        SearchIndex.tokens(ofBody: body, prepared: prepared, conversation: conversation).joined(separator: " ")
    }

    /// Writes the batch's edits (each message's new body, and the one it replaced as a version) and reactions, in
    /// the order the batch made them.
    private func writeEdits(_ connection: PostgresConnection) async throws {
        let edits = self.commit.edits
        if !edits.isEmpty {
            try await connection.run(
                """
                INSERT INTO message_versions (conversation_id, seq, version, body, replaced_ms)
                SELECT * FROM unnest(\(edits.map(\.position.conversation))::bigint[],
                    \(edits.map(\.position.seq))::bigint[], \(edits.map { Int32(clamping: $0.version) })::integer[],
                    \(edits.map { ByteBuffer(bytes: $0.replaced) })::bytea[], \(edits.map(\.editedMs))::bigint[])
                """,
                logger: self.logger
            )
            // Several edits of one message in a batch: the last one's body stays.
            var last: [MessagePosition: EditWrite] = [:]
            for edit in edits { last[edit.position] = edit }
            let final = Array(last.values)
            try await connection.run(
                """
                UPDATE messages SET body = e.b, edited_ms = e.t, edit_count = e.v + 1
                FROM unnest(\(final.map(\.position.conversation))::bigint[], \(final.map(\.position.seq))::bigint[],
                    \(final.map { ByteBuffer(bytes: $0.body) })::bytea[], \(final.map(\.editedMs))::bigint[],
                    \(final.map { Int32(clamping: $0.version) })::integer[]) AS e(c, s, b, t, v)
                WHERE messages.conversation_id = e.c AND messages.seq = e.s
                """,
                logger: self.logger
            )
        }
        // Reactions one at a time, in order: a key put on and taken off in one batch ends off.
        for reaction in self.commit.reactionWrites {
            let (position, key, user) = (reaction.position, reaction.key, reaction.user.rawValue)
            if reaction.on {
                try await connection.run(
                    """
                    INSERT INTO reactions (conversation_id, seq, key, user_id, time_ms)
                    VALUES (\(position.conversation), \(position.seq), \(key), \(user), \(reaction.timeMs))
                    ON CONFLICT DO NOTHING
                    """,
                    logger: self.logger
                )
            } else {
                try await connection.run(
                    """
                    DELETE FROM reactions WHERE conversation_id = \(position.conversation) AND seq = \(position.seq)
                    AND key = \(key) AND user_id = \(user)
                    """,
                    logger: self.logger
                )
            }
        }
    }
}
