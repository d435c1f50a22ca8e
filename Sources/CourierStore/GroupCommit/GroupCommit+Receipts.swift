extension GroupCommit {
    /// A device has stored every event of its user's log up to a cursor: the device's acknowledged cursor moves
    /// there, and each conversation with a message from someone else among the events this newly covers gets a
    /// delivered receipt up to the newest such message, for the members who sent those messages (in a direct
    /// conversation, the other member; in a group, the senders whose messages reached the user, not every member:
    /// a receipt to each member for each member's acknowledgement grew with the square of the group).
    ///
    /// The rules: the device must be the user's; a cursor is taken no further than the events stored before this
    /// batch, and never back; acknowledgements of one device in a batch each start where the one before left it; a
    /// receipt never goes back either.
    mutating func ack(user: UserID, device: DeviceID, cursor: UInt64) throws -> WriteOutcome {
        guard let row = try self.device(device), row.user == user else {
            throw CourierStoreError(.invalidRequest, "no device \(device.rawValue) of user \(user.rawValue)")
        }
        let old = self.ackedCursors[device] ?? row.ackedCursor
        guard let range = Self.ackRange(of: user, from: old, to: cursor, stored: try self.user(user).cursor) else {
            return .done
        }
        let deliveries = try self.deliveries(range)
        try self.requireConversations(deliveries.map(\.conversation))
        // The receipts that move a mark: in a conversation the user is still in, past what it was delivered.
        let moving = try deliveries.filter { delivery in
            guard let member = try self.conversation(delivery.conversation).members[user] else { return false }
            return delivery.seq > member.deliveredSeq
        }
        let conversations = try moving.map { try self.conversation($0.conversation) }
        // Each receipt's recipients: the members (still) who sent what it covers; only their logs grow.
        // (Not a sender the user blocks: its marks stay where the block left them.)
        let recipients = zip(moving, conversations).map { delivery, conversation in
            delivery.senders.filter {
                $0 != user && conversation.members[$0] != nil && !conversation.keepsMarks(of: user, from: $0)
            }.sorted()
        }
        try self.require(
            rows: recipients.flatMap { $0 },
            names: (moving.isEmpty ? [] : [user]) + conversations.flatMap { self.namedUsers(of: $0.header) }
        )
        let reader = moving.isEmpty ? "" : try self.name(of: user)
        let namings = try conversations.map { try self.naming(of: $0) }

        // Nothing below is refused.
        self.ackedCursors[device] = range.to
        for (index, delivery) in moving.enumerated() {
            var conversation = self.conversations[delivery.conversation]!
            guard var member = conversation.members[user], delivery.seq > member.deliveredSeq else { continue }
            member.deliveredSeq = delivery.seq
            member.dirty = true
            conversation.members[user] = member
            self.conversations[delivery.conversation] = conversation
            self.touched.insert(delivery.conversation)
            for other in recipients[index] {
                self.log.append(
                    to: other,
                    .receipt,
                    conversation: delivery.conversation,
                    seq: delivery.seq,
                    actor: user,
                    detail: ReceiptKind.delivered.rawValue,
                    event: .receipt(
                        conversation: namings[index](other),
                        user: reader,
                        kind: .delivered,
                        upToSeq: UInt64(delivery.seq)
                    )
                )
            }
        }
        return .done
    }

    /// The events an acknowledgement newly covers: after the device's acknowledged cursor, up to the one asked, no
    /// further than the user's log stored before the batch (`stored`); nil when that is nothing. A database's plan
    /// reads the deliveries of the same ranges.
    package static func ackRange(of user: UserID, from old: Int64, to asked: UInt64, stored: Int64) -> AckRange? {
        let new = min(Int64(clamping: asked), stored)
        return new > old ? AckRange(user: user, from: old, to: new) : nil
    }

    /// A user has read a conversation up to a seq (no further than its last message, never back): every member,
    /// the reader included (its other devices count unread from it), gets a read receipt.
    mutating func markRead(user: UserID, _ address: Conversation, upTo: UInt64) throws -> WriteOutcome {
        let key = try self.resolve(address, for: user, createDirect: false)
        var conversation = try self.conversation(key)
        let seq = min(Int64(clamping: upTo), conversation.lastSeq)
        guard var member = conversation.members[user], seq > member.readSeq else { return .done }
        try self.require(rows: conversation.members.keys, names: [user] + self.namedUsers(of: conversation.header))
        let reader = try self.name(of: user)
        let naming = try self.naming(of: conversation)
        let introduction = try self.introduction(of: user, in: conversation)

        // Nothing below is refused.
        if let introduction { self.introductions.append(introduction) }
        member.readSeq = seq
        member.dirty = true
        conversation.members[user] = member
        self.conversations[key] = conversation
        self.touched.insert(key)
        for recipient in conversation.members.keys.sorted() where !conversation.keepsMarks(of: user, from: recipient) {
            self.log.append(
                to: recipient,
                .receipt,
                conversation: key,
                seq: seq,
                actor: user,
                detail: ReceiptKind.read.rawValue,
                event: .receipt(conversation: naming(recipient), user: reader, kind: .read, upToSeq: UInt64(seq))
            )
        }
        return .done
    }

    /// The two users a member's first word or first read in a direct conversation makes peers: when the member had
    /// neither written nor read there and the other side has (the rule of ``CourierDatabase/peers(of:)``); else nil. Call it
    /// before the change, once the names are loaded.
    func introduction(of user: UserID, in conversation: BatchConversation) throws -> Introduction? {
        guard let peer = conversation.peer(of: user), peer != user,
            let mine = conversation.members[user], let theirs = conversation.members[peer],
            !mine.sent, mine.readSeq == 0, theirs.sent || theirs.readSeq > 0,
            // Never between a blocker and the one it blocks: they see nothing of each other's presence.
            mine.blockedAtSeq == nil, theirs.blockedAtSeq == nil
        else { return nil }
        return Introduction(user, named: try self.name(of: user), peer, named: try self.name(of: peer))
    }
}
