/// The kinds of entries in a user's event log, as every store keeps them (the `events.kind` column).
package enum LogEventKind: Int64, Sendable {
    case message = 1
    case recall = 2
    case receipt = 3
    case membership = 4
    case edit = 5
    case reaction = 6
    /// A user's profile changed (`actor`); no conversation (0).
    case profile = 7
    /// A member's role in a group changed (`actor`: the member; `detail`: the role).
    case role = 8
    /// A group's title changed (`actor`: who changed it; `key`: the title, empty when taken away).
    case title = 9
    /// The log's user chose how a conversation alerts it (`detail`: the ``NotifyLevel``).
    case notify = 10
}

/// The bookkeeping of one write transaction's appends to users' event logs, whatever the database: each user's
/// entries are numbered on from the cursor stored for it (read in the same transaction, under its lock where the
/// database has several writers), and the events appended are kept as a read would return them (``fresh``).
package struct EventLogBook: Sendable {
    /// What the book knows of one user's log: one entry per user, so that numbering an entry looks the user up
    /// once (a group's message is an entry in every member's log).
    fileprivate struct UserLog: Sendable {
        /// The cursor stored before the transaction: the one the new entries follow.
        let stored: Int64
        /// The newest cursor: the stored one, then that of the last entry numbered.
        var cursor: Int64
        var grew = false
        /// The events appended, while every one of them is kept (``EventLogBook/fresh``).
        var fresh: [StoredEvent] = []
        /// More new events than the limit, or one appended without its event: read back instead.
        var unfresh = false
        /// How many fresh events the user's connections can take; asked at the user's first new entry.
        var freshLimit: Int?
    }

    private var logs: [UserID: UserLog] = [:]
    /// Users' rows carried from the batch before (``GroupCommit/CarriedRows``): a user's stored cursor is taken from
    /// here at its first entry, so that a batch does not start every carried user's log.
    package var carried: [UserID: UserRow] = [:]
    /// The most fresh events kept per user (0: none).
    package var maxFreshPerUser = 0
    /// How many fresh events each user's connections can take (nil: ``maxFreshPerUser`` for all); asked once per
    /// user and batch, before its first event is made.
    package var freshRoom: (@Sendable (UserID) -> Int)?

    package init() {}

    /// The newest cursor of each user whose log grew.
    package var appended: [UserID: UInt64] {
        var appended: [UserID: UInt64] = [:]
        for (user, log) in self.logs where log.grew { appended[user] = UInt64(log.cursor) }
        return appended
    }

    /// The events appended, as a read of the log would return them, with the cursor they follow, for each user whose
    /// every new event is here, at most ``maxFreshPerUser`` each.
    package var fresh: [UserID: FreshRun] {
        var fresh: [UserID: FreshRun] = [:]
        for (user, log) in self.logs where log.grew && !log.unfresh {
            fresh[user] = FreshRun(after: UInt64(clamping: log.stored), events: log.fresh)
        }
        return fresh
    }

    /// Whether the user's stored cursor is known (``start(_:at:)``, or carried).
    package func knows(_ user: UserID) -> Bool {
        self.logs[user] != nil || self.carried[user] != nil
    }

    /// The user's cursor as stored when the transaction read it; its entries are numbered on from it.
    package mutating func start(_ user: UserID, at cursor: Int64) {
        if self.logs[user] == nil { self.logs[user] = UserLog(stored: cursor, cursor: cursor) }
    }

    /// Numbers the next entry of a user's log (whose cursor must be known), keeping its event while the user's new
    /// events are all kept.
    ///
    /// - Returns: The entry's cursor.
    package mutating func next(for user: UserID, event: @autoclosure () -> StoredEvent.Kind?) -> Int64 {
        if self.logs[user] == nil, let row = self.carried[user] { self.start(user, at: row.cursor) }
        let (maxFresh, room) = (self.maxFreshPerUser, self.freshRoom)
        guard let cursor = self.logs[user]?.numberNext(maxFresh: maxFresh, room: { room?(user) }, event: event)
        else { preconditionFailure("the stored cursor of \(user) was not read") }
        return cursor
    }
    /// A message this batch appended was recalled in it too: its fresh events say so, without its body, as a read
    /// after the commit would.
    package mutating func markRecalled(id: String, from sender: String) {
        for (user, log) in self.logs where !log.fresh.isEmpty {
            self.logs[user]!.fresh = log.fresh.map { event in
                var event = event.recalled { $0.id == id && $0.from == sender }
                // A reply to it, sent in this batch, quotes it recalled.
                if case .message(var message) = event.kind, message.replyTo?.visible == true,
                    message.replyTo?.id == id, message.replyTo?.from == sender
                {
                    message.replyTo = StoredReply(
                        seq: message.replyTo!.seq,
                        visible: true,
                        id: id,
                        from: sender,
                        body: [],
                        recalled: true
                    )
                    event = StoredEvent(cursor: event.cursor, kind: .message(message))
                }
                return event
            }
        }
    }

    /// A message this batch appended or edited was edited (again) in it: its fresh events, and the quotes of the
    /// replies to it, show the body as it now is, as a read after the commit would.
    package mutating func markEdited(id: String, from sender: String, body: [UInt8], editedMs: Int64) {
        let matches = { (message: StoredMessage) in message.id == id && message.from == sender }
        for (user, log) in self.logs where !log.fresh.isEmpty {
            self.logs[user]!.fresh = log.fresh.map { event in
                switch event.kind {
                case .message(var message) where matches(message):
                    message.body = body
                    message.editedMs = editedMs
                    return StoredEvent(cursor: event.cursor, kind: .message(message))
                case .edit(var message) where matches(message):
                    message.body = body
                    message.editedMs = editedMs
                    return StoredEvent(cursor: event.cursor, kind: .edit(message))
                case .message(var message)
                where message.replyTo?.visible == true && message.replyTo?.id == id && message.replyTo?.from == sender:
                    message.replyTo?.body = body
                    return StoredEvent(cursor: event.cursor, kind: .message(message))
                default:
                    return event
                }
            }
        }
    }

    /// The users whose logs grew, with their newest cursors, to store.
    package var grown: [(user: UserID, cursor: Int64)] {
        self.logs.filter(\.value.grew).map { ($0.key, $0.value.cursor) }.sorted { $0.user < $1.user }
    }
}

extension EventLogBook.UserLog {
    /// Numbers the user's next entry, keeping its event while every new one is kept and under the limit: the
    /// smaller of `maxFresh` and what the user's connections can take (`room`, asked once; nil: `maxFresh`).
    fileprivate mutating func numberNext(
        maxFresh: Int,
        room: () -> Int?,
        event: () -> StoredEvent.Kind?
    ) -> Int64 {
        self.cursor += 1
        self.grew = true
        guard !self.unfresh else { return self.cursor }
        let limit = self.freshLimit ?? min(maxFresh, room() ?? maxFresh)
        self.freshLimit = limit
        if self.fresh.count < limit, let event = event() {
            self.fresh.append(StoredEvent(cursor: UInt64(self.cursor), kind: event))
        } else {
            self.fresh = []
            self.unfresh = true
        }
        return self.cursor
    }
}
