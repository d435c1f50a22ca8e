// The rules of what a user reads: its log, history, unread counts, and who sees its presence and typing.

extension StoreBackend {
    /// The events of a user's log after a cursor, oldest first.
    ///
    /// The cost is that of the rows returned: the log is keyed by (user, cursor), so neither the user's history nor
    /// the number of its conversations matters.
    ///
    /// - Parameters:
    ///   - limit: At most this many (at least 1, at most ``StoreLimits/maxEventsPerRead``).
    public func events(for user: UserID, after cursor: UInt64, limit: Int) async throws -> [StoredEvent] {
        let limit = max(1, min(limit, self.limits.maxEventsPerRead))
        return try await self.reading(doing: "read the log of \(user)") { transaction in
            let rows = try await transaction.events(of: user, after: Int64(clamping: cursor), limit: limit)
            return try await Self.events(of: [user: rows], transaction)[user] ?? []
        }
    }

    public func events(for logs: [UserID: LogSpan], limit: Int) async throws -> [UserID: [StoredEvent]] {
        let logs = logs.filter { $0.value.upTo > $0.value.after }
        guard !logs.isEmpty else { return [:] }
        let limit = max(1, min(limit, self.limits.maxEventsPerRead))
        return try await self.reading(doing: "read the logs of \(logs.count) users") { transaction in
            let rows = try await transaction.events(
                of: logs.mapValues { (Int64(clamping: $0.after), Int64(clamping: $0.upTo)) },
                limit: limit
            )
            return try await Self.events(of: rows.filter { !$0.value.isEmpty }, transaction)
        }
    }

    /// Log entries as their users read them, with the names and profiles they show read once for all.
    private static func events(
        of logs: [UserID: [LogRead]],
        _ transaction: Transaction
    ) async throws -> [UserID: [StoredEvent]] {
        var named: Set<UserID> = []
        for (user, rows) in logs {
            for row in rows {
                named.formUnion(Self.namedUsers(of: row.conversation, for: user))
                if let actor = row.actor { named.insert(actor) }
                if let sender = row.message?.sender { named.insert(sender) }
                if let sender = row.message?.reply?.sender { named.insert(sender) }
            }
        }
        let names = named.isEmpty ? [:] : try await transaction.names(of: named)
        // A profile event says the profile as it is now.
        let profiled = Set(logs.values.joined().filter { $0.kind == LogEventKind.profile.rawValue }.compactMap(\.actor))
        let profiles = profiled.isEmpty ? [:] : try await transaction.profiles(of: Array(profiled))
        var events: [UserID: [StoredEvent]] = [:]
        for (user, rows) in logs {
            // A user who blocks the log's owner now shows it its name alone, as ``profiles(of:for:)`` does.
            let actors = rows.filter { $0.kind == LogEventKind.profile.rawValue }.compactMap(\.actor)
            let blockers = try await Self.blockRelations(of: user, with: actors, transaction).blockedBy
            events[user] = try rows.map { row in
                if row.kind == LogEventKind.profile.rawValue, let actor = row.actor {
                    var profile = profiles[actor]
                    if blockers.contains(actor) {
                        profile?.displayName = nil
                        profile?.avatar = nil
                        profile?.thumbnail = nil
                    }
                    return StoredEvent(
                        cursor: UInt64(row.cursor),
                        kind: .profile(UserProfile(user: try Self.name(actor, names), profile))
                    )
                }
                return try Self.event(row, for: user, names: names)
            }
        }
        return events
    }

    /// A log entry as its user reads it.
    static func event(_ row: LogRead, for user: UserID, names: [UserID: String]) throws -> StoredEvent {
        let cursor = UInt64(row.cursor)
        let conversation = try Self.address(of: row.conversation, for: user, names: names)
        let seq = UInt64(row.seq)
        switch LogEventKind(rawValue: row.kind) {
        case .message:
            guard let message = row.message else {
                throw CourierStoreError(.storageFailed, "a message event without its message at cursor \(cursor)")
            }
            return StoredEvent(
                cursor: cursor,
                kind: .message(
                    try Self.message(message, in: conversation, names: names, readerJoined: row.joinedSeq ?? .max)
                )
            )
        case .edit:
            guard var message = row.message else {
                throw CourierStoreError(.storageFailed, "an edit event without its message at cursor \(cursor)")
            }
            // The message as it now is; an edit event leaves out what it answers (never changed by an edit) and the
            // device it was sent from.
            message.reply = nil
            message.replySeq = nil
            message.senderDevice = nil
            return StoredEvent(
                cursor: cursor,
                kind: .edit(try Self.message(message, in: conversation, names: names, readerJoined: .max))
            )
        case .reaction:
            guard let message = row.message, let key = row.key else {
                throw CourierStoreError(.storageFailed, "a reaction event without its message at cursor \(cursor)")
            }
            return StoredEvent(
                cursor: cursor,
                kind: .reaction(
                    StoredReaction(
                        conversation: conversation,
                        seq: seq,
                        id: message.clientID,
                        from: try Self.name(message.sender, names),
                        user: try Self.name(row.actor, names),
                        key: key,
                        on: row.detail != 2
                    )
                )
            )
        case .recall:
            return StoredEvent(
                cursor: cursor,
                kind: .recall(
                    conversation: conversation,
                    seq: seq,
                    id: row.message?.clientID ?? "",
                    by: try Self.name(row.actor, names)
                )
            )
        case .receipt:
            return StoredEvent(
                cursor: cursor,
                kind: .receipt(
                    conversation: conversation,
                    user: try Self.name(row.actor, names),
                    kind: row.detail.flatMap(ReceiptKind.init(rawValue:)) ?? .delivered,
                    upToSeq: seq
                )
            )
        case .membership:
            guard case .group(let group) = conversation else {
                throw CourierStoreError(.storageFailed, "a membership event outside a group at cursor \(cursor)")
            }
            return StoredEvent(
                cursor: cursor,
                kind: .membership(
                    group: group,
                    user: try Self.name(row.actor, names),
                    change: row.detail.flatMap(MembershipChange.init(rawValue:)) ?? .joined,
                    seq: seq
                )
            )
        case .role:
            guard case .group(let group) = conversation else {
                throw CourierStoreError(.storageFailed, "a role event outside a group at cursor \(cursor)")
            }
            return StoredEvent(
                cursor: cursor,
                kind: .role(
                    group: group,
                    user: try Self.name(row.actor, names),
                    role: row.detail.flatMap(GroupRole.init(rawValue:)) ?? .member,
                    seq: seq
                )
            )
        case .title:
            guard case .group(let group) = conversation else {
                throw CourierStoreError(.storageFailed, "a title event outside a group at cursor \(cursor)")
            }
            return StoredEvent(
                cursor: cursor,
                kind: .title(group: group, title: row.key ?? "", by: row.actor.flatMap { names[$0] } ?? "", seq: seq)
            )
        case .notify:
            return StoredEvent(
                cursor: cursor,
                kind: .notify(
                    conversation: conversation,
                    level: row.detail.flatMap(NotifyLevel.init(rawValue:)) ?? .all
                )
            )
        case .pin:
            guard let message = row.message else {
                throw CourierStoreError(.storageFailed, "a pin event without its message at cursor \(cursor)")
            }
            return StoredEvent(
                cursor: cursor,
                kind: .pin(
                    conversation: conversation,
                    seq: seq,
                    id: message.clientID,
                    from: try Self.name(message.sender, names),
                    by: try Self.name(row.actor, names),
                    pinned: row.detail != 2
                )
            )
        case .hide:
            return StoredEvent(cursor: cursor, kind: .hidden(conversation: conversation, seq: seq))
        case .profile:
            // Read with the profiles of a page (``events(for:after:limit:)``); one without its user is damage.
            throw CourierStoreError(.storageFailed, "a profile event without its user at cursor \(cursor)")
        case nil:
            throw CourierStoreError(.storageFailed, "an event of unknown kind at cursor \(cursor)")
        }
    }

    /// A message as a reader sees it: what it answers only when the reader joined before that (`readerJoined`).
    static func message(
        _ row: MessageRead,
        in conversation: Conversation,
        names: [UserID: String],
        readerJoined: Int64
    ) throws -> StoredMessage {
        var reply: StoredReply?
        if let seq = row.replySeq {
            let visible = seq > readerJoined
            reply = StoredReply(
                seq: UInt64(max(0, seq)),
                visible: visible && row.reply != nil,
                id: row.reply?.clientID ?? "",
                from: visible ? (row.reply.flatMap { names[$0.sender] } ?? "") : "",
                body: row.reply?.body ?? [],
                recalled: row.reply?.recalled ?? true
            )
        }
        return StoredMessage(
            id: row.clientID,
            from: try Self.name(row.sender, names),
            fromDevice: row.senderDevice,
            conversation: conversation,
            seq: UInt64(row.seq),
            timeMs: row.timeMs,
            body: row.body,
            recalled: row.recalled,
            editedMs: row.recalled ? nil : row.editedMs,
            replyTo: reply
        )
    }

    /// The users whose names say how a user names a conversation (the other side of a direct one).
    static func namedUsers(of conversation: ConversationHeader, for user: UserID) -> [UserID] {
        guard conversation.groupName == nil, let a = conversation.userA, let b = conversation.userB else { return [] }
        return [a == user ? b : a]
    }

    /// How a user names a conversation.
    static func address(
        of conversation: ConversationHeader,
        for user: UserID,
        names: [UserID: String]
    ) throws -> Conversation {
        if let name = conversation.groupName { return .group(name) }
        guard let a = conversation.userA, let b = conversation.userB else {
            throw CourierStoreError(.storageFailed, "a direct conversation without users")
        }
        return .user(try Self.name(a == user ? b : a, names))
    }

    static func name(_ user: UserID?, _ names: [UserID: String]) throws -> String {
        guard let user, let name = names[user] else {
            throw CourierStoreError(.unknownUser, "no user with id \(user?.rawValue ?? 0)")
        }
        return name
    }

    /// The newest cursor of a user's log.
    public func logCursor(of user: UserID) async throws -> UInt64 {
        try await self.reading(doing: "read the cursor of \(user)") { transaction in
            UInt64(try await transaction.logCursor(of: user))
        }
    }

    /// The newest cursors of several users' logs (users that do not exist are left out).
    public func logCursors(of users: [UserID]) async throws -> [UserID: UInt64] {
        guard !users.isEmpty else { return [:] }
        return try await self.reading(doing: "read cursors") { transaction in
            try await transaction.logCursors(of: users).mapValues { UInt64($0) }
        }
    }

    /// The cursor a device last acknowledged (0 for no such device).
    public func ackedCursor(of device: DeviceID) async throws -> UInt64 {
        try await self.reading(doing: "read the cursor of \(device)") { transaction in
            UInt64(try await transaction.ackedCursor(of: device) ?? 0)
        }
    }

    /// A page of a conversation's history, newest first, limited to what the reader may see: a group member sees
    /// the messages after it joined; either user of a direct conversation sees all of it.
    ///
    /// - Parameters:
    ///   - user: The reader; must be a member.
    ///   - conversation: The conversation, as the reader names it.
    ///   - beforeSeq: Messages with a sequence number below this; 0 for the newest.
    ///   - limit: At most this many (at least 1).
    /// - Throws: `unknown-group`, `unknown-user`, `not-member`, `storage-failed`.
    public func history(
        for user: UserID,
        in conversation: Conversation,
        beforeSeq: UInt64,
        limit: Int
    ) async throws -> HistoryPage {
        let limit = max(1, limit)
        return try await self.reading(doing: "read history") { transaction in
            guard let (key, joinedSeq) = try await Self.membership(of: user, in: conversation, transaction) else {
                return HistoryPage(messages: [], more: false)
            }
            let rows = try await transaction.messages(
                in: key,
                after: joinedSeq,
                before: beforeSeq == 0 ? Int64.max : Int64(clamping: beforeSeq),
                limit: limit + 1,
                hiddenFrom: user
            )
            let page = rows.prefix(limit)
            // The marks that say something of this page: the members who received or read its oldest message.
            let marks =
                if let oldest = page.last?.seq {
                    try await transaction.receiptMarks(
                        in: key,
                        excluding: user,
                        from: oldest,
                        limit: max(0, self.limits.maxReceiptMarks)
                    )
                } else {
                    [MarkRow]()
                }
            let names = try await transaction.names(
                of: Set(page.map(\.sender) + page.compactMap(\.reply?.sender) + marks.map(\.user))
            )
            let reactions =
                if let oldest = page.last?.seq, let newest = page.first?.seq {
                    try await transaction.reactionCounts(in: key, from: oldest, to: newest, reader: user)
                } else {
                    [Int64: [ReactionCount]]()
                }
            // At most ``StoreLimits/maxPinsPerConversation``: read whole, by the conversation's key.
            let pinned = page.isEmpty ? [] : Set(try await transaction.pins(in: key).map(\.seq))
            let messages = try page.map {
                var message = try Self.message($0, in: conversation, names: names, readerJoined: joinedSeq)
                message.reactions = reactions[$0.seq] ?? []
                message.pinned = pinned.contains($0.seq)
                return message
            }
            let receipts = marks.compactMap { mark in
                // A name not found (never: users are not deleted) leaves the mark out.
                names[mark.user].map {
                    ReceiptMark(
                        user: $0,
                        deliveredSeq: UInt64(max(0, max(mark.deliveredSeq, mark.readSeq))),
                        readSeq: UInt64(max(0, mark.readSeq)),
                        joinedSeq: UInt64(max(0, mark.joinedSeq))
                    )
                }
            }
            return HistoryPage(messages: messages, more: rows.count > limit, receipts: receipts)
        }
    }

    /// The conversation an address names for a user and the seq the user sees messages after (when it joined a
    /// group; 0 in a direct conversation); nil for a direct conversation that has no message yet.
    ///
    /// - Throws: `unknown-group`, `unknown-user`, `not-member`.
    static func membership(
        of user: UserID,
        in address: Conversation,
        _ transaction: Transaction
    ) async throws -> (Int64, Int64)? {
        try address.checkNames()
        switch address {
        case .group(let name):
            guard let group = try await transaction.group(named: name, locking: false) else {
                throw CourierStoreError(.unknownGroup, "no group named \(name)")
            }
            guard let joined = try await transaction.joinedSeq(of: user, in: group.id) else {
                throw CourierStoreError(.notMember, "you are not a member of \(name)")
            }
            return (group.id, joined)
        case .user(let name):
            guard let peer = try await transaction.user(named: name) else {
                throw CourierStoreError(.unknownUser, "no user named \(name)")
            }
            return try await transaction.directID(of: UserPair(user, peer.id)).map { ($0, 0) }
        }
    }

    /// Unread counts of every conversation the user is in: the messages after the newer of its read mark and its
    /// joining, but the ones hidden from it. Sending counts as reading everything before the message sent.
    public func unreadCounts(for user: UserID) async throws -> [UnreadCount] {
        try await self.reading(doing: "count unread") { transaction in
            let memberships = try await transaction.memberships(of: user)
            let names = try await transaction.names(
                of: Set(memberships.flatMap { Self.namedUsers(of: $0.conversation, for: user) })
            )
            return try memberships.map { membership in
                let readSeq = max(membership.readSeq, membership.joinedSeq)
                return UnreadCount(
                    conversation: try Self.address(of: membership.conversation, for: user, names: names),
                    unread: UInt64(max(0, membership.lastSeq - readSeq - membership.hiddenUnread)),
                    // The newest it sees: a conversation whose messages are all withheld from it is not one it has.
                    lastSeq: UInt64(max(0, membership.lastVisibleSeq ?? membership.lastSeq)),
                    readSeq: UInt64(readSeq),
                    peerDeliveredSeq: UInt64(max(0, membership.peerDeliveredSeq)),
                    peerReadSeq: UInt64(max(0, membership.peerReadSeq)),
                    mentions: UInt64(max(0, membership.mentions)),
                    notify: membership.notify,
                    title: membership.title ?? ""
                )
            }
        }
    }

    /// Who sees a user's presence (and last seen) and its typing: the members of its groups, and the users of its
    /// direct conversations in which each of the two has written or read. A message nobody answered or opened makes
    /// no one a peer. Never a user on either side of a block with it (``block(_:by:on:nowMs:)``).
    public func peers(of user: UserID) async throws -> Set<UserID> {
        try await self.reading(doing: "read peers") { transaction in
            let peers = Self.peers(in: try await transaction.companions(of: user, directOnly: false, with: nil))
            return peers.subtracting(try await Self.blockRelations(of: user, with: Array(peers), transaction).apart)
        }
    }

    /// A user's contacts: the users with whom it has a direct conversation in which both have written. Only a
    /// contact may add a user to a group.
    public func contacts(of user: UserID) async throws -> Set<UserID> {
        try await self.reading(doing: "read contacts") { transaction in
            Self.contacts(in: try await transaction.companions(of: user, directOnly: true, with: nil))
        }
    }

    /// Who a user's typing in a conversation reaches: the members of a group it is in; in a direct conversation, the
    /// other user (who sees it where it has that conversation open, a brand-new one too: typing tells only what the
    /// typist chose to show, and nothing of the other comes back; presence stays between peers) and the user's own
    /// devices. Never a user on either side of a block with it.
    ///
    /// - Throws: `unknown-group`, `unknown-user`, `not-member`, `storage-failed`.
    public func members(of address: Conversation, for user: UserID) async throws -> [UserID] {
        try await self.reading(doing: "read members") { transaction in
            let members: [UserID]
            switch address {
            case .group:
                guard let (key, _) = try await Self.membership(of: user, in: address, transaction) else {
                    return [user]
                }
                members = try await transaction.members(of: [key])[key] ?? []
            case .user(let name):
                try address.checkNames()
                guard let peer = try await transaction.user(named: name) else {
                    throw CourierStoreError(.unknownUser, "no user named \(name)")
                }
                members = peer.removedMs == nil && peer.id != user ? [user, peer.id] : [user]
            }
            guard members.count > 1 else { return members }
            let apart = try await Self.blockRelations(of: user, with: members, transaction).apart
            return apart.isEmpty ? members : members.filter { !apart.contains($0) }
        }
    }

    /// A user's name by id.
    ///
    /// - Throws: `unknown-user`, `storage-failed`.
    public func userName(of id: UserID) async throws -> String {
        try await self.reading(doing: "read the name of \(id)") { transaction in
            try Self.name(id, try await transaction.names(of: [id]))
        }
    }

    /// Users' names, and when each was last seen: the latest disconnect of any of its devices (nil if never).
    public func namesAndLastSeen(
        of users: some Collection<UserID>
    ) async throws -> [UserID: (name: String, lastSeenMs: Int64?)] {
        let users = Array(users)
        guard !users.isEmpty else { return [:] }
        return try await self.reading(doing: "read names and last seen") { transaction in
            try await transaction.namesAndLastSeen(of: users)
        }
    }
}
