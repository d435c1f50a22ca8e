internal import GRDB

/// Appends entries to users' event logs inside one write transaction, numbering each user's entries from the
/// cursor stored in `users.log_cursor`, and stores the new cursors when the transaction's work is done.
struct EventLogWriter {
    enum Kind: Int64 {
        case message = 1
        case recall = 2
        case receipt = 3
        case membership = 4
    }

    /// The newest cursor of each user whose log grew.
    private(set) var appended: [UserID: UInt64] = [:]
    private var cursors: [UserID: Int64] = [:]
    /// The events appended, as ``SQLiteStore/events(for:after:limit:)`` would read them back, for each user whose
    /// every new event is here (contiguous from the user's first new cursor), at most ``maxFreshPerUser`` each.
    private(set) var fresh: [UserID: [StoredEvent]] = [:]
    /// Users with more new events than ``maxFreshPerUser``, or one appended without its event: read back instead.
    private var unfresh: Set<UserID> = []
    /// The most fresh events kept per user (0: none).
    var maxFreshPerUser = 0
    /// How many fresh events each user's connections can take (nil: ``maxFreshPerUser`` for all); asked once per
    /// user and batch, before its first event is made.
    var freshRoom: ((UserID) -> Int)?
    private var freshLimits: [UserID: Int] = [:]

    private mutating func freshLimit(of user: UserID) -> Int {
        if let known = self.freshLimits[user] { return known }
        let limit = min(self.maxFreshPerUser, self.freshRoom?(user) ?? self.maxFreshPerUser)
        self.freshLimits[user] = limit
        return limit
    }

    mutating func append(
        to user: UserID,
        _ kind: Kind,
        conversation: Int64,
        seq: Int64,
        actor: UserID? = nil,
        detail: Int64? = nil,
        event: @autoclosure () -> StoredEvent.Kind? = nil,
        _ db: Database
    ) throws {
        let current: Int64
        if let cached = self.cursors[user] {
            current = cached
        } else {
            current =
                try Int64.fetchOne(
                    db.cachedStatement(sql: "SELECT log_cursor FROM users WHERE id = ?"),
                    arguments: [user.rawValue]
                ) ?? 0
        }
        let cursor = current + 1
        self.cursors[user] = cursor
        self.appended[user] = UInt64(cursor)
        // The event is made only for a user whose new events are all still kept.
        if !self.unfresh.contains(user) {
            if self.fresh[user, default: []].count < self.freshLimit(of: user), let event = event() {
                self.fresh[user, default: []].append(StoredEvent(cursor: UInt64(cursor), kind: event))
            } else {
                self.fresh[user] = nil
                self.unfresh.insert(user)
            }
        }
        try db.cachedStatement(
            sql:
                "INSERT INTO events (user_id, cursor, kind, conversation_id, seq, actor_id, detail) VALUES (?, ?, ?, ?, ?, ?, ?)"
        ).execute(arguments: [user.rawValue, cursor, kind.rawValue, conversation, seq, actor?.rawValue, detail])
    }

    /// A message this batch appended was recalled in it too: its fresh events say so, without its body, as a read
    /// after the commit would.
    mutating func markRecalled(id: String, from sender: String) {
        for (user, events) in self.fresh {
            self.fresh[user] = events.map { $0.recalled { $0.id == id && $0.from == sender } }
        }
    }

    /// Stores every grown log's newest cursor.
    func finish(_ db: Database) throws {
        let update = try db.cachedStatement(sql: "UPDATE users SET log_cursor = ? WHERE id = ?")
        for (user, cursor) in self.cursors {
            try update.execute(arguments: [cursor, user.rawValue])
        }
    }
}
