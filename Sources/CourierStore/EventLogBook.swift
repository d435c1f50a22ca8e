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
    /// A member (`actor`) pinned the message at `seq` (`detail` 1) or unpinned it (2).
    case pin = 11
    /// The log's user deleted the message at `seq` for itself.
    case hide = 12
}

/// The bookkeeping of one write transaction's appends to users' event logs, whatever the database, and the events
/// appended, kept as a read would return them (``fresh``).
///
/// A cursor is a position in one stream shared by every user's log (docs/LOG-DESIGN.md, step 1): a user's cursors
/// grow, with gaps where other users' entries took positions. The rules number the transaction's entries 1, 2, …
/// in the order they append them (``next(for:event:)``); at its end the database takes as many positions from its
/// one counter (``StoreTransaction/writeLog(_:)``), whose row it holds until the commit, and ``rebase(by:)`` adds
/// the counter's base to every cursor the book made. So positions are taken in commit order: a reader that has seen
/// one committed never meets a smaller one later. Nothing but ``grown``, ``appended`` and ``fresh`` reads a cursor,
/// and only after the rebase.
package struct EventLogBook: Sendable {
    /// What the book knows of one user's log: one entry per user, so that numbering an entry looks the user up
    /// once (a group's message is an entry in every member's log).
    fileprivate struct UserLog: Sendable {
        /// The cursor stored before the transaction: the one the new entries follow. Where a batch appends to a log
        /// without its user's lock, the database reads it again under the counter (``EventLogBook/follow(_:)``).
        var stored: Int64
        /// The newest cursor: the stored one, then that of the last entry numbered (its number in the transaction
        /// until ``EventLogBook/rebase(by:)``, its position after).
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
    /// How many entries the transaction numbered: the positions it takes at its end.
    package private(set) var count: Int64 = 0
    /// Whether the entries' numbers were made positions (``rebase(by:)``).
    package private(set) var rebased = false
    /// Users' rows carried from the batch before (``GroupCommit/CarriedRows``): a user's stored cursor is taken from
    /// here at its first entry, so that a batch does not start every carried user's log.
    package var carried: [UserID: UserRow] = [:]
    /// The most fresh events kept per user (0: none).
    package var maxFreshPerUser = 0
    /// How many fresh events each user's connections can take (nil: ``maxFreshPerUser`` for all); asked once per
    /// user and batch, before its first event is made.
    package var freshRoom: (@Sendable (UserID) -> Int)?

    package init() {}

    /// The newest cursor of each user whose log grew (after ``rebase(by:)``).
    package var appended: [UserID: UInt64] {
        precondition(self.rebased || self.count == 0, "the log's entries were not given their positions")
        var appended: [UserID: UInt64] = [:]
        for (user, log) in self.logs where log.grew { appended[user] = UInt64(log.cursor) }
        return appended
    }

    /// The events appended, as a read of the log would return them, with the cursor they follow, for each user whose
    /// every new event is here, at most ``maxFreshPerUser`` each (after ``rebase(by:)``).
    package var fresh: [UserID: FreshRun] {
        precondition(self.rebased || self.count == 0, "the log's entries were not given their positions")
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

    /// The user's cursor as stored when the transaction read it: the one its new entries follow (``fresh``).
    package mutating func start(_ user: UserID, at cursor: Int64) {
        if self.logs[user] == nil { self.logs[user] = UserLog(stored: cursor, cursor: cursor) }
    }

    /// Numbers the next entry of a user's log (whose cursor must be known), keeping its event while the user's new
    /// events are all kept.
    ///
    /// - Returns: The entry's number in the transaction (1, 2, …), its position once ``rebase(by:)`` adds the base.
    package mutating func next(for user: UserID, event: @autoclosure () -> StoredEvent.Kind?) -> Int64 {
        self.next(forAll: CollectionOfOne(user)) { _ in event() }
    }

    /// Numbers one entry shared by several users' logs (whose cursors must be known): a group's message, stored
    /// once and read by each member through its membership (docs/LOG-DESIGN.md, step 3). Each user's log grows by
    /// the same position, and keeps its own event while its new events are all kept.
    ///
    /// - Returns: The entry's number in the transaction, its position once ``rebase(by:)`` adds the base.
    package mutating func next(
        forAll users: some Sequence<UserID>,
        event: (UserID) -> StoredEvent.Kind?
    ) -> Int64 {
        precondition(!self.rebased, "an entry numbered after the log's positions were taken")
        let (maxFresh, room) = (self.maxFreshPerUser, self.freshRoom)
        let number = self.count + 1
        for user in users {
            if self.logs[user] == nil, let row = self.carried[user] { self.start(user, at: row.cursor) }
            let numbered: Void? = self.logs[user]?.number(
                number,
                maxFresh: maxFresh,
                room: { room?(user) },
                event: { event(user) }
            )
            guard numbered != nil else { preconditionFailure("the stored cursor of \(user) was not read") }
        }
        self.count = number
        return number
    }

    /// Makes the entries' numbers positions: `base` is the position before the first, taken from the database's
    /// counter at the transaction's end. Every cursor the book made moves by it.
    package mutating func rebase(by base: Int64) {
        precondition(!self.rebased, "the log's positions were taken twice")
        self.rebased = true
        guard self.count > 0 else { return }
        precondition(base >= 0, "a negative base")
        // In place: each user's fresh events are held by the book alone here.
        for index in self.logs.values.indices where self.logs.values[index].grew {
            self.logs.values[index].cursor += base
            for event in self.logs.values[index].fresh.indices {
                self.logs.values[index].fresh[event].cursor += UInt64(base)
            }
        }
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

    /// The heads the grown logs had when the transaction took its positions, read under the counter: what each
    /// user's new entries follow (``FreshRun/after``), where a batch appends without the user's lock (a log without
    /// a head had none: 0).
    package mutating func follow(_ heads: [UserID: Int64]) {
        for index in self.logs.values.indices where self.logs.values[index].grew {
            self.logs.values[index].stored = heads[self.logs.keys[index]] ?? 0
        }
    }

    /// The users whose logs grew, before or after the rebase.
    package var grownUsers: [UserID] {
        self.logs.filter(\.value.grew).map(\.key).sorted()
    }

    /// The users whose logs grew, with their newest cursors, to store (after ``rebase(by:)``).
    package var grown: [(user: UserID, cursor: Int64)] {
        precondition(self.rebased || self.count == 0, "the log's entries were not given their positions")
        return self.logs.filter(\.value.grew).map { ($0.key, $0.value.cursor) }.sorted { $0.user < $1.user }
    }
}

extension EventLogBook.UserLog {
    /// Gives the user's next entry its number in the transaction, keeping its event while every new one is kept
    /// and under the limit: the smaller of `maxFresh` and what the user's connections can take (`room`, asked once;
    /// nil: `maxFresh`).
    fileprivate mutating func number(
        _ number: Int64,
        maxFresh: Int,
        room: () -> Int?,
        event: () -> StoredEvent.Kind?
    ) {
        self.cursor = number
        self.grew = true
        guard !self.unfresh else { return }
        let limit = self.freshLimit ?? min(maxFresh, room() ?? maxFresh)
        self.freshLimit = limit
        if self.fresh.count < limit, let event = event() {
            self.fresh.append(StoredEvent(cursor: UInt64(self.cursor), kind: event))
        } else {
            self.fresh = []
            self.unfresh = true
        }
    }
}
