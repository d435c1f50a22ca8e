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
    /// The newest cursor of each user whose log grew.
    package private(set) var appended: [UserID: UInt64] = [:]
    /// Each known user's newest cursor: the stored one, then that of the last entry numbered.
    package private(set) var cursors: [UserID: Int64] = [:]
    /// The events appended, as a read of the log would return them, for each user whose every new event is here
    /// (contiguous from the user's first new cursor), at most ``maxFreshPerUser`` each.
    package private(set) var fresh: [UserID: [StoredEvent]] = [:]
    /// Users with more new events than their limit, or one appended without its event: read back instead.
    private var unfresh: Set<UserID> = []
    /// The most fresh events kept per user (0: none).
    package var maxFreshPerUser = 0
    /// How many fresh events each user's connections can take (nil: ``maxFreshPerUser`` for all); asked once per
    /// user and batch, before its first event is made.
    package var freshRoom: (@Sendable (UserID) -> Int)?
    private var freshLimits: [UserID: Int] = [:]

    package init() {}

    /// Whether the user's stored cursor is known (``start(_:at:)``).
    package func knows(_ user: UserID) -> Bool {
        self.cursors[user] != nil
    }

    /// The user's cursor as stored when the transaction read it; its entries are numbered on from it.
    package mutating func start(_ user: UserID, at cursor: Int64) {
        if self.cursors[user] == nil { self.cursors[user] = cursor }
    }

    private mutating func freshLimit(of user: UserID) -> Int {
        if let known = self.freshLimits[user] { return known }
        let limit = min(self.maxFreshPerUser, self.freshRoom?(user) ?? self.maxFreshPerUser)
        self.freshLimits[user] = limit
        return limit
    }

    /// Numbers the next entry of a user's log (whose cursor must be known), keeping its event while the user's new
    /// events are all kept.
    ///
    /// - Returns: The entry's cursor.
    package mutating func next(for user: UserID, event: @autoclosure () -> StoredEvent.Kind?) -> Int64 {
        precondition(self.knows(user), "the stored cursor of \(user) was not read")
        let cursor = self.cursors[user]! + 1
        self.cursors[user] = cursor
        self.appended[user] = UInt64(cursor)
        if !self.unfresh.contains(user) {
            if self.fresh[user, default: []].count < self.freshLimit(of: user), let event = event() {
                self.fresh[user, default: []].append(StoredEvent(cursor: UInt64(cursor), kind: event))
            } else {
                self.fresh[user] = nil
                self.unfresh.insert(user)
            }
        }
        return cursor
    }

    /// A message this batch appended was recalled in it too: its fresh events say so, without its body, as a read
    /// after the commit would.
    package mutating func markRecalled(id: String, from sender: String) {
        for (user, events) in self.fresh {
            self.fresh[user] = events.map { event in
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
        for (user, events) in self.fresh {
            self.fresh[user] = events.map { event in
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
        self.appended.keys.sorted().map { ($0, self.cursors[$0]!) }
    }
}
