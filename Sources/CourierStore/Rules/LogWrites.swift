/// Entries a transaction appends to users' event logs, numbered by an ``EventLogBook`` in the order they are
/// appended, and written together at its end (``StoreTransaction/writeLog(_:)``), where they take their positions
/// (``positions(after:)``).
package struct LogWrites: Sendable {
    package var book = EventLogBook()
    /// The entries, in the order they were numbered.
    package private(set) var events: [EventRow] = []
    /// The groups' messages, each stored once for all its members (``appendShared(to:conversation:seq:sender:event:)``).
    package private(set) var groupEvents: [GroupEventRow] = []

    package init() {}

    /// The users whose logs grew, with their newest cursors.
    package var appended: [UserID: UInt64] { self.book.appended }

    /// How many positions the entries take.
    package var count: Int64 { self.book.count }

    /// Gives the entries their positions, `base + 1` on, in the order they were numbered: a database's
    /// ``StoreTransaction/writeLog(_:)`` calls it with the base its counter gave, before it writes them.
    package mutating func positions(after base: Int64) {
        self.book.rebase(by: base)
        guard base != 0 else { return }
        for index in self.events.indices { self.events[index].cursor += base }
        for index in self.groupEvents.indices { self.groupEvents[index].cursor += base }
    }

    /// Numbers a group's message once for all its members: one row in the group's stream, which each member reads
    /// through its span of membership (`group_spans`), and one position that every member's log grows by (its
    /// head moves there, and its connections are handed the event).
    package mutating func appendShared(
        to members: some Sequence<UserID>,
        conversation: Int64,
        seq: Int64,
        sender: UserID,
        event: (UserID) -> StoredEvent.Kind?
    ) {
        let cursor = self.book.next(forAll: members, event: event)
        self.groupEvents.append(GroupEventRow(conversation: conversation, cursor: cursor, seq: seq, sender: sender))
    }

    /// Numbers and keeps the next entry of a user's log, whose stored cursor must be known (``EventLogBook/start(_:at:)``).
    package mutating func append(
        to user: UserID,
        _ kind: LogEventKind,
        conversation: Int64,
        seq: Int64,
        actor: UserID? = nil,
        detail: Int64? = nil,
        key: String? = nil,
        event: @autoclosure () -> StoredEvent.Kind? = nil
    ) {
        let cursor = self.book.next(for: user, event: event())
        self.events.append(
            EventRow(
                user: user,
                cursor: cursor,
                kind: kind,
                conversation: conversation,
                seq: seq,
                actor: actor,
                detail: detail,
                key: key
            )
        )
    }
}

/// A group's message in the group's stream (`group_events`): what each member's log holds of it, stored once.
package struct GroupEventRow: Sendable, Equatable {
    package var conversation: Int64
    package var cursor: Int64
    package var seq: Int64
    package var sender: UserID
}

extension LogEventKind {
    /// A user's log as a table both databases read, with the columns of `events`: the user's own entries and its
    /// groups' messages in its spans of membership (each stored once, in `group_events`), after `after` and up to
    /// `upTo`. The arguments are SQL expressions; `messagesOnly` keeps only messages (kind 1). A group's message
    /// also carries `joined_seq`, where its span began: whether the reader may see what a reply quotes is decided
    /// by the membership the message came in, not by a later one (NULL for the user's own entries).
    ///
    /// A span's messages are read by position between the counter as it stood when the user joined and when it
    /// left (`from_cursor`, `to_cursor`), so nothing before the join or after the leave is walked. With `limit`,
    /// each span gives at most its first `limit` messages after `after`, so that a page after a long absence reads
    /// a bounded part of a busy group's backlog instead of sorting all of it. Each bound is one expression: SQLite
    /// takes one lower and one upper bound of an index's range, and would filter by the others row by row.
    package static func userLogSQL(
        user: String,
        after: String,
        upTo: String? = nil,
        limit: String? = nil,
        messagesOnly: Bool = false
    ) -> String {
        let lower = "CASE WHEN s.from_cursor > \(after) THEN s.from_cursor ELSE \(after) END"
        let end = upTo.map { "CASE WHEN s.to_cursor < \($0) THEN s.to_cursor ELSE \($0) END" } ?? "s.to_cursor"
        let inSpan = "AND g.seq > s.from_seq AND g.seq <= s.to_seq"
        let upper =
            limit.map { limit in
                """
                COALESCE((
                        SELECT g.cursor FROM group_events g
                        WHERE g.conversation_id = s.conversation_id AND g.cursor > \(lower) AND g.cursor <= \(end)
                            \(inSpan)
                        ORDER BY g.cursor LIMIT 1 OFFSET \(limit) - 1
                    ), \(end))
                """
            } ?? end
        return """
            SELECT e.user_id, e.cursor, e.kind, e.conversation_id, e.seq, e.actor_id, e.detail, e.key,
                NULL AS joined_seq
            FROM events e
            WHERE e.user_id = \(user) AND e.cursor > \(after)\(upTo.map { " AND e.cursor <= \($0)" } ?? "")\(
                messagesOnly ? " AND e.kind = 1" : "")
            UNION ALL
            SELECT s.user_id, g.cursor, 1, g.conversation_id, g.seq, g.sender_id, NULL, NULL, s.from_seq
            FROM group_spans s
            JOIN group_events g ON g.conversation_id = s.conversation_id AND g.cursor > \(lower)
                AND g.cursor <= \(upper) \(inSpan)
            WHERE s.user_id = \(user)
            """
    }

    /// The sender of a message entry (`kind` 1) of the events table named `events`, as SQL both databases run:
    /// entries since the acknowledgements' rework carry it (`actor_id`); older ones read it from their message.
    package static func messageSenderSQL(events: String) -> String {
        """
        COALESCE(\(events).actor_id, (SELECT s.sender_id FROM messages s
            WHERE s.conversation_id = \(events).conversation_id AND s.seq = \(events).seq))
        """
    }
}
