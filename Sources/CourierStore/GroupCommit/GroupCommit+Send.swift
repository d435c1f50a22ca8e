extension GroupCommit {
    /// Stores a message and appends it to the log of every member of its conversation.
    ///
    /// The rules, in order:
    /// - The id the client chose is at most ``StoreLimits/maxMessageIDBytes`` with no control characters (an empty
    ///   one is assigned by the store).
    /// - A sender's ids are unique: a resend of a stored id stores nothing and answers with the original (its
    ///   conversation, seq and time), marked a duplicate, wherever the resend was addressed.
    /// - Media must be the sender's own upload of that size.
    /// - The address must name a group the sender is a member of, or a user; a direct conversation is made on the
    ///   first send (not with a removed user).
    /// - The message takes the conversation's next seq and a time never before the last one's; the sender has read
    ///   up to it.
    mutating func send(_ send: WriteRequest.Send) throws -> WriteOutcome {
        try StoreText.check(send.id, what: "message id", maxBytes: self.limits.maxMessageIDBytes)
        // An id the store assigns is new: nothing to look for.
        if !send.id.isEmpty, let original = try self.message(MessageKey(sender: send.sender, id: send.id)) {
            let header = try self.header(of: original.conversation)
            try self.require(rows: [], names: self.namedUsers(of: header))
            return .sent(
                SendReceipt(
                    id: send.id,
                    conversation: try self.address(of: header, for: send.sender),
                    seq: UInt64(original.seq),
                    timeMs: original.timeMs,
                    duplicate: true
                )
            )
        }
        if let media = send.media {
            guard try self.upload(UploadKey(user: send.sender, sha256: media.sha256)) == media.size else {
                throw CourierStoreError(
                    .unknownMedia,
                    "no upload of \(media.size) bytes with sha256 \(media.sha256) by this user: upload it first"
                )
            }
        }
        let key = try self.resolve(send.to, for: send.sender, createDirect: true)
        var conversation = try self.conversation(key)
        let reply = try send.replyTo.map { try self.replyTarget($0, in: conversation, for: send.sender) }
        try self.require(
            rows: conversation.members.keys,
            names: [send.sender] + self.namedUsers(of: conversation.header) + (reply.map { [$0.1.sender] } ?? [])
        )
        let sender = try self.name(of: send.sender)
        let replyFrom = try reply.map { try self.name(of: $0.1.sender) }
        let naming = try self.naming(of: conversation)
        let address = try self.address(of: conversation.header, for: send.sender)
        let introduction = try self.introduction(of: send.sender, in: conversation)
        let mentioned = try self.mentioned(by: send, in: conversation)
        // A member who blocks the sender gets nothing of it: no event, no push, nothing in its history or unread.
        let blocker = conversation.blocker(of: send.sender)

        // Nothing below is refused.
        let id = send.id.isEmpty ? WriteRequest.Send.assignedID() : send.id
        let (seq, time) = conversation.send(by: send.sender, nowMs: self.nowMs)
        self.touched.insert(key)
        if let introduction { self.introductions.append(introduction) }
        self.conversations[key] = conversation
        let message = MessageKey(sender: send.sender, id: id)
        self.messages[message] = MessageRow(conversation: key, seq: seq, timeMs: time, recalled: false)
        self.positioned[MessagePosition(conversation: key, seq: seq)] = .some(
            TargetRow(
                sender: send.sender,
                id: id,
                timeMs: time,
                recalled: false,
                body: send.body,
                editCount: 0,
                editedMs: nil,
                hiddenFrom: blocker.map { [$0] } ?? []
            )
        )
        self.newMessageIndex[message] = self.newMessages.count
        self.newMessages.append(
            NewMessage(
                conversation: key,
                seq: seq,
                sender: send.sender,
                device: send.device,
                id: id,
                timeMs: time,
                body: send.body,
                media: send.media,
                recalled: false,
                replySeq: reply?.0.seq,
                searchTokens: send.searchTokens,
                mentioned: mentioned,
                pushes: conversation.members.keys.contains { member in
                    member != send.sender && member != blocker && self.userRow(member)?.pushable == true
                }
            )
        )
        // One event for all the members who name the conversation alike and see the quote alike (in a group, all
        // of them): built once, its message shared by every member's fresh event instead of copied for each. (A
        // direct conversation's two members name it each by the other: nothing to share, nothing kept.)
        var made: [EventVariant: StoredEvent.Kind]? = conversation.groupName == nil ? nil : [:]
        let event = { (member: UserID) -> StoredEvent.Kind? in
            let variant = EventVariant(
                conversation: naming(member),
                quoteVisible: reply.map { position, row in
                    position.seq > (conversation.members[member]?.joinedSeq ?? .max) && !row.hiddenFrom.contains(member)
                } ?? false
            )
            return Self.made(variant, in: &made) {
                .message(
                    StoredMessage(
                        id: id,
                        from: sender,
                        fromDevice: send.device,
                        conversation: variant.conversation,
                        seq: UInt64(seq),
                        timeMs: time,
                        body: send.body,
                        recalled: false,
                        replyTo: reply.map { position, row in
                            StoredReply(
                                seq: UInt64(position.seq),
                                visible: variant.quoteVisible,
                                id: row.id,
                                from: replyFrom ?? "",
                                body: row.body,
                                recalled: false
                            )
                        }
                    )
                )
            }
        }
        if let blocker { self.withheld.append(HiddenRow(user: blocker, conversation: key, seq: seq)) }
        let members = conversation.members.keys.sorted().filter { $0 != blocker }
        if conversation.groupName != nil {
            // A group's message is stored once, in the group's stream; every member's log grows by its position.
            self.log.appendShared(to: members, conversation: key, seq: seq, sender: send.sender, event: event)
        } else {
            for member in members {
                self.log.append(
                    to: member,
                    .message,
                    conversation: key,
                    seq: seq,
                    // The sender, so that an acknowledgement finds whom to tell without reading the message.
                    actor: send.sender,
                    event: event(member)
                )
            }
        }
        return .sent(
            SendReceipt(
                id: id,
                conversation: address,
                seq: UInt64(seq),
                timeMs: time,
                duplicate: false,
                recipients: conversation.members.count
            )
        )
    }

    /// The members a group message mentions (``Mentions``), by id (0 for `@all`): for each mention, the run without
    /// the punctuation it ends with when that is a member's name (`@oliver.` is oliver, never an older look-alike
    /// account named `oliver.`), else the whole run when that is; the sender's own
    /// name and others' are text. Direct messages mention nobody.
    ///
    /// - Throws: `not-admin` for `@all` from a member that is neither the owner nor an admin.
    func mentioned(by send: WriteRequest.Send, in conversation: BatchConversation) throws -> [Int64] {
        guard let group = conversation.groupName else { return [] }
        let mentions = send.mentions ?? Mentions(in: SearchIndex.fullText(ofBody: send.body))
        guard !mentions.isEmpty else { return [] }
        var mentioned: [Int64] = []
        if mentions.everyone {
            guard conversation.role(of: send.sender) >= .admin else {
                throw CourierStoreError(.notAdmin, "only the owner and admins of \(group) mention @all")
            }
            mentioned.append(0)
        }
        let asked = Set(mentions.names + mentions.runs.filter { !$0.isEmpty })
        let missing = asked.filter { self.userIDs[$0] == nil }.sorted()
        guard missing.isEmpty else { throw Miss(needs: missing.map { .userID(named: $0) }) }
        func member(_ name: String) throws -> UserID? {
            guard !name.isEmpty, let user = try self.userID(named: name), conversation.members[user] != nil else {
                return nil
            }
            return user
        }
        for (name, run) in zip(mentions.names, mentions.runs) {
            guard let user = try member(name) ?? member(run), user != send.sender else { continue }
            if !mentioned.contains(user.rawValue) { mentioned.append(user.rawValue) }
        }
        return mentioned
    }
}

/// What makes one member's event of a new message differ from another's: how it names the conversation (a direct
/// conversation by the other member), and whether it may see the message a reply quotes (joined before it).
struct EventVariant: Hashable {
    var conversation: Conversation
    var quoteVisible: Bool
}

extension GroupCommit {
    /// The event made for a variant, made now if it is the first (every time when nothing is kept: nil).
    static func made(
        _ variant: EventVariant,
        in made: inout [EventVariant: StoredEvent.Kind]?,
        _ make: () -> StoredEvent.Kind
    ) -> StoredEvent.Kind {
        guard made != nil else { return make() }
        if let event = made![variant] { return event }
        let event = make()
        made![variant] = event
        return event
    }
}
