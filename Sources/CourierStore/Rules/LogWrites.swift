/// Entries a transaction appends to users' event logs, numbered by an ``EventLogBook`` in the order they are
/// appended, and written together at its end (``StoreTransaction/writeLog(_:)``), where they take their positions
/// (``positions(after:)``).
package struct LogWrites: Sendable {
    package var book = EventLogBook()
    /// The entries, in the order they were numbered.
    package private(set) var events: [EventRow] = []

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

extension LogEventKind {
    /// The sender of a message entry (`kind` 1) of the events table named `events`, as SQL both databases run:
    /// entries since the acknowledgements' rework carry it (`actor_id`); older ones read it from their message.
    package static func messageSenderSQL(events: String) -> String {
        """
        COALESCE(\(events).actor_id, (SELECT s.sender_id FROM messages s
            WHERE s.conversation_id = \(events).conversation_id AND s.seq = \(events).seq))
        """
    }
}
