/// Entries a transaction appends to users' event logs, numbered by an ``EventLogBook`` from each user's stored
/// cursor (read under the user's lock where the database has several writers), and written together at its end
/// (``StoreTransaction/writeLog(_:)``).
package struct LogWrites: Sendable {
    package var book = EventLogBook()
    /// The entries, in the order they were numbered.
    package private(set) var events: [EventRow] = []

    package init() {}

    /// The users whose logs grew, with their newest cursors.
    package var appended: [UserID: UInt64] { self.book.appended }

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
