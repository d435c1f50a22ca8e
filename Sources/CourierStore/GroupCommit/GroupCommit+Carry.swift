extension GroupCommit {
    /// The rows a written batch read, as the database holds them once it commits: what the next batch may start
    /// from instead of reading them again, where one writer alone changes them (SQLite; a database with several
    /// writers reads them under their locks each time).
    ///
    /// Only rows the group commit keeps as it changes them: conversations with their members (seqs, marks, times),
    /// users' rows (the cursors its entries took), devices (the cursors acknowledged), names, and ids by name or by
    /// pair, each also as "none". Not what a batch adds to without keeping (messages by id, uploads, what an
    /// acknowledgement delivers, reactions, messages by place). A driver that keeps them must drop them whenever
    /// anything else writes: another rule, another process, a batch that did not commit.
    package struct CarriedRows: Sendable {
        fileprivate var conversations: [Int64: BatchConversation] = [:]
        fileprivate var headers: [Int64: ConversationHeader] = [:]
        fileprivate var groupIDs: [String: Int64?] = [:]
        fileprivate var userIDs: [String: UserID?] = [:]
        fileprivate var directIDs: [UserPair: Int64?] = [:]
        fileprivate var users: [UserID: UserRow] = [:]
        fileprivate var names: [UserID: String?] = [:]
        fileprivate var devices: [DeviceID: DeviceRow?] = [:]
        /// The members of ``conversations``, counted as they were loaded (a batch changes no membership).
        fileprivate var members = 0

        /// How many rows they are (each member of a conversation one): what bounds the memory they hold.
        package var count: Int {
            self.conversations.count + self.members + self.headers.count + self.groupIDs.count + self.userIDs.count
                + self.directIDs.count + self.users.count + self.names.count + self.devices.count
        }
    }

    /// Takes the rows this batch read, as they stand once what it wrote is committed (``CarriedRows``), leaving it
    /// without them. Call it after the driver has written the batch, and keep them only if the transaction committed.
    /// Its cost is what the batch changed, not what it holds: the tables are moved, and only the conversations it
    /// touched, the users whose logs grew and the devices it acknowledged for are brought up to date.
    package mutating func takeCarriedRows() -> CarriedRows {
        var rows = CarriedRows()
        swap(&rows.conversations, &self.conversations)
        swap(&rows.headers, &self.headers)
        swap(&rows.groupIDs, &self.groupIDs)
        swap(&rows.userIDs, &self.userIDs)
        swap(&rows.directIDs, &self.directIDs)
        // The users carried in are the book's; those this batch read join them.
        swap(&rows.users, &self.log.book.carried)
        for (user, row) in self.users { rows.users[user] = row }
        self.users = [:]
        swap(&rows.names, &self.names)
        swap(&rows.devices, &self.devices)
        rows.members = self.loadedMembers
        for id in self.touched {
            guard var conversation = rows.conversations.removeValue(forKey: id) else { continue }
            conversation.dirty = false
            for (user, member) in conversation.members where member.dirty {
                conversation.members[user]?.dirty = false
            }
            rows.conversations[id] = conversation
        }
        for (user, cursor) in self.log.book.grown {
            rows.users[user]?.cursor = cursor
        }
        for (device, cursor) in self.ackedCursors {
            guard case .some(.some(var row)) = rows.devices[device] else { continue }
            row.ackedCursor = cursor
            rows.devices[device] = row
        }
        return rows
    }

    /// Starts the batch with the rows an earlier one carried (``takeCarriedRows()``), as if it had read them. Call
    /// it before anything is loaded.
    package mutating func start(carrying rows: consuming CarriedRows) {
        self.conversations = rows.conversations
        self.headers = rows.headers
        self.groupIDs = rows.groupIDs
        self.userIDs = rows.userIDs
        self.directIDs = rows.directIDs
        self.names = rows.names
        self.devices = rows.devices
        self.loadedMembers = rows.members
        // Kept by the book alone (``userRow(_:)`` looks there too): each user's log is started at its first entry,
        // from its carried row, and the users this batch reads are added beside them, not into them (a table the
        // book and the batch both held would be copied whole at the first user read).
        self.log.book.carried = rows.users
    }
}
