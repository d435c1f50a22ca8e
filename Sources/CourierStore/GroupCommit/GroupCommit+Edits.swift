// The rules of edits, reactions and replies: what a member may do to a message already sent.

extension GroupCommit {
    /// Replaces a message's body, keeping the one it replaced as an earlier version.
    ///
    /// The rules, in order: the user is a member of the conversation and can see the message (sent after it joined);
    /// it is the message's sender; the message is not recalled; it was sent within ``StoreLimits/editWindow`` (zero:
    /// no window); it was edited fewer than ``StoreLimits/maxEditsPerMessage`` times. Every member's log gets the
    /// message as it now is.
    mutating func edit(_ edit: WriteRequest.Edit) throws -> WriteOutcome {
        let key = try self.resolve(edit.conversation, for: edit.user, createDirect: false)
        let conversation = try self.conversation(key)
        let position = try self.visiblePosition(edit.seq, in: conversation, for: edit.user)
        guard let row = try self.message(at: position), !row.hiddenFrom.contains(edit.user) else {
            throw CourierStoreError(.unknownMessage, "no message \(edit.seq) in \(edit.conversation)")
        }
        guard row.sender == edit.user else {
            throw CourierStoreError(.notSender, "only its sender may edit a message")
        }
        guard !row.recalled else {
            throw CourierStoreError(.messageRecalled, "the message was recalled")
        }
        let windowMs = self.limits.editWindow.wholeMilliseconds
        guard windowMs <= 0 || self.nowMs - row.timeMs <= windowMs else {
            throw CourierStoreError(.editWindowPassed, "messages can be edited for \(windowMs / 1000) s after sending")
        }
        guard row.editCount < Int64(self.limits.maxEditsPerMessage) else {
            throw CourierStoreError(
                .tooManyEdits,
                "a message can be edited \(self.limits.maxEditsPerMessage) times"
            )
        }
        try self.require(rows: conversation.members.keys, names: [edit.user] + self.namedUsers(of: conversation.header))
        let sender = try self.name(of: edit.user)
        let naming = try self.naming(of: conversation)

        // Nothing below is refused.
        let editedMs = self.nowMs
        self.edits.append(
            EditWrite(
                position: position,
                body: edit.body,
                replaced: row.body,
                version: row.editCount,
                editedMs: editedMs,
                searchTokens: edit.searchTokens
            )
        )
        var edited = row
        edited.body = edit.body
        edited.editCount += 1
        edited.editedMs = editedMs
        self.positioned[position] = .some(edited)
        // Sent or edited earlier in this batch: its fresh events show this body, as a read after the commit would.
        self.log.book.markEdited(id: row.id, from: sender, body: edit.body, editedMs: editedMs)
        // Only the members who can see the message (joined before it): a later one learns nothing of it, nor one
        // that blocks the editor.
        let blocker = conversation.blocker(of: edit.user)
        for (member, membership) in conversation.members.sorted(by: { $0.key < $1.key })
        where membership.joinedSeq < position.seq && member != blocker && !row.hiddenFrom.contains(member) {
            self.log.append(
                to: member,
                .edit,
                conversation: key,
                seq: position.seq,
                actor: edit.user,
                event: .edit(
                    StoredMessage(
                        id: row.id,
                        from: sender,
                        fromDevice: nil,
                        conversation: naming(member),
                        seq: UInt64(position.seq),
                        timeMs: row.timeMs,
                        body: edit.body,
                        recalled: false,
                        editedMs: editedMs
                    )
                )
            )
        }
        return .done
    }

    /// Puts a reaction on a message or takes it off.
    ///
    /// The rules, in order: the key is one emoji or one short word (``ReactionKey``, compared in NFC); the user is a
    /// member and can see the message; the message is not recalled (taking a reaction off one is done: a recall took
    /// them all). Putting on a reaction the user gave already, or taking off one it did not give, changes nothing. A
    /// message carries at most ``StoreLimits/maxReactionKeysPerMessage`` keys, and at most
    /// ``StoreLimits/maxReactionsPerUser`` from one user. Every member's log gets the change.
    mutating func react(_ react: WriteRequest.React) throws -> WriteOutcome {
        let reaction = try ReactionKey.validate(react.key)
        let key = try self.resolve(react.conversation, for: react.user, createDirect: false)
        let conversation = try self.conversation(key)
        let position = try self.visiblePosition(react.seq, in: conversation, for: react.user)
        guard let row = try self.message(at: position), !row.hiddenFrom.contains(react.user) else {
            throw CourierStoreError(.unknownMessage, "no message \(react.seq) in \(react.conversation)")
        }
        if row.recalled {
            guard react.on else { return .done }
            throw CourierStoreError(.messageRecalled, "the message was recalled")
        }
        let owner = ReactionOwner(position: position, user: react.user)
        let (counts, mine) = try self.reactions(owner)
        if react.on {
            if mine.contains(reaction) { return .done }
            guard counts[reaction] != nil || counts.count < self.limits.maxReactionKeysPerMessage else {
                throw CourierStoreError(
                    .tooManyReactions,
                    "a message carries at most \(self.limits.maxReactionKeysPerMessage) different reactions"
                )
            }
            guard mine.count < self.limits.maxReactionsPerUser else {
                throw CourierStoreError(
                    .tooManyReactions,
                    "one user puts at most \(self.limits.maxReactionsPerUser) reactions on a message"
                )
            }
        } else if !mine.contains(reaction) {
            return .done
        }
        try self.require(
            rows: conversation.members.keys,
            names: [react.user, row.sender] + self.namedUsers(of: conversation.header)
        )
        let user = try self.name(of: react.user)
        let sender = try self.name(of: row.sender)
        let naming = try self.naming(of: conversation)

        // Nothing below is refused.
        if react.on {
            self.reactionCounts[position]![reaction, default: 0] += 1
            self.myReactions[owner]!.insert(reaction)
        } else {
            let left = self.reactionCounts[position]![reaction, default: 1] - 1
            self.reactionCounts[position]![reaction] = left > 0 ? left : nil
            self.myReactions[owner]!.remove(reaction)
        }
        self.reactionWrites.append(
            ReactionWrite(position: position, key: reaction, user: react.user, on: react.on, timeMs: self.nowMs)
        )
        // Not to a member that blocks the reacting user.
        let blocker = conversation.blocker(of: react.user)
        for (member, membership) in conversation.members.sorted(by: { $0.key < $1.key })
        where membership.joinedSeq < position.seq && member != blocker && !row.hiddenFrom.contains(member) {
            self.log.append(
                to: member,
                .reaction,
                conversation: key,
                seq: position.seq,
                actor: react.user,
                detail: react.on ? 1 : 2,
                key: reaction,
                event: .reaction(
                    StoredReaction(
                        conversation: naming(member),
                        seq: UInt64(position.seq),
                        id: row.id,
                        from: sender,
                        user: user,
                        key: reaction,
                        on: react.on
                    )
                )
            )
        }
        return .done
    }

    /// The place of the message a send answers, which the sender can see there and which is not recalled, with the
    /// message.
    ///
    /// - Throws: `unknown-message`, `ambiguous-message`, `message-recalled`; a miss for a row not loaded.
    func replyTarget(
        _ target: WriteRequest.ReplyTarget,
        in conversation: BatchConversation,
        for user: UserID
    ) throws -> (MessagePosition, TargetRow) {
        let seq: UInt64
        switch target {
        case .seq(let given):
            seq = given
        case .id(let id, let from):
            guard StoreText.isClean(id), id.utf8.count <= self.limits.maxMessageIDBytes else {
                throw CourierStoreError(.unknownMessage, "no message \(id.debugDescription) there")
            }
            var sender: UserID?
            if let from {
                try Names.validate(from, what: "user name")
                guard let found = try self.userID(named: from) else {
                    throw CourierStoreError(.unknownMessage, "no message \(id.debugDescription) from \(from) there")
                }
                sender = found
            }
            // Stored before the batch, or sent in it.
            let joined = conversation.members[user]?.joinedSeq ?? .max
            let stored = try self.seqs(
                IDLookup(conversation: conversation.id, id: Array(id.utf8), sender: sender, after: joined)
            )
            let sentNow = self.newMessages.lazy.filter {
                $0.conversation == conversation.id && Array($0.id.utf8) == Array(id.utf8)
                    && (sender == nil || $0.sender == sender)
            }.map(\.seq)
            let seqs = Set(stored + sentNow).sorted().filter { $0 > joined }
            guard let first = seqs.first else {
                throw CourierStoreError(.unknownMessage, "no message \(id.debugDescription) there")
            }
            guard seqs.count == 1 else {
                throw CourierStoreError(
                    .ambiguousMessage,
                    "several messages there have the id \(id.debugDescription): name its sender too"
                )
            }
            seq = UInt64(first)
        }
        let position = try self.visiblePosition(seq, in: conversation, for: user)
        guard let row = try self.message(at: position), !row.hiddenFrom.contains(user) else {
            throw CourierStoreError(.unknownMessage, "no message \(seq) there")
        }
        guard !row.recalled else {
            throw CourierStoreError(.messageRecalled, "the message was recalled")
        }
        return (position, row)
    }

    /// A seq of a conversation whose message a member can see: sent, and after the member joined.
    ///
    /// - Throws: `unknown-message`.
    private func visiblePosition(
        _ seq: UInt64,
        in conversation: BatchConversation,
        for user: UserID
    ) throws -> MessagePosition {
        guard let member = conversation.members[user], seq > UInt64(max(0, member.joinedSeq)),
            seq <= UInt64(max(0, conversation.lastSeq))
        else {
            throw CourierStoreError(.unknownMessage, "no message \(seq) there that you can see")
        }
        return MessagePosition(conversation: conversation.id, seq: Int64(seq))
    }

    /// A recall takes a message's edits and reactions with it: the ones this batch would write are dropped, and a
    /// reaction or edit after it in the batch is refused.
    mutating func forgetEditsAndReactions(of position: MessagePosition) {
        self.recalledPositions.insert(position)
        self.positioned[position]??.recalled = true
        self.positioned[position]??.body = []
        self.edits.removeAll { $0.position == position }
        self.reactionWrites.removeAll { $0.position == position }
        self.reactionCounts[position] = [:]
        for owner in self.myReactions.keys where owner.position == position {
            self.myReactions[owner] = []
        }
    }
}
