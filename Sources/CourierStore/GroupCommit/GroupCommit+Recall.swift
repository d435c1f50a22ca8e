extension GroupCommit {
    /// Who may recall a message, and until when: its sender alone, in the conversation it was sent to (of which the
    /// sender is still a member), within ``StoreLimits/recallWindow`` of the time it was stored. Recalling it again
    /// changes nothing. A recalled message loses its body and its media (the bytes stay, for other messages and the
    /// uploader's quota), and every member's log gets a recall entry.
    mutating func recall(user: UserID, _ address: Conversation, id: String) throws -> WriteOutcome {
        let key = try self.resolve(address, for: user, createDirect: false)
        let message = MessageKey(sender: user, id: id)
        guard StoreText.isClean(id), let row = try self.message(message), row.conversation == key else {
            throw CourierStoreError(.unknownMessage, "you sent no message \(id.debugDescription) to \(address)")
        }
        if row.recalled { return .done }
        let windowMs = self.limits.recallWindow.wholeMilliseconds
        guard self.nowMs - row.timeMs <= windowMs else {
            throw CourierStoreError(
                .recallWindowPassed,
                "messages can be recalled for \(windowMs / 1000) s after sending"
            )
        }
        let conversation = try self.conversation(key)
        try self.require(rows: conversation.members.keys, names: [user] + self.namedUsers(of: conversation.header))
        let by = try self.name(of: user)
        let naming = try self.naming(of: conversation)

        // Nothing below is refused.
        self.messages[message]??.recalled = true
        self.forgetEditsAndReactions(of: MessagePosition(conversation: key, seq: row.seq))
        if let index = self.newMessageIndex[message] {
            self.newMessages[index].recalled = true
            self.newMessages[index].body = []
            self.newMessages[index].media = nil
        } else {
            self.recalledMessages.append(MessagePosition(conversation: key, seq: row.seq))
        }
        // Sent in this batch: its fresh events show it recalled, as a read after the commit would.
        self.log.book.markRecalled(id: id, from: by)
        // Only the members who can see the message (joined before it), not one that blocks the sender.
        let blocker = conversation.blocker(of: user)
        for (member, membership) in conversation.members.sorted(by: { $0.key < $1.key })
        where membership.joinedSeq < row.seq && member != blocker {
            self.log.append(
                to: member,
                .recall,
                conversation: key,
                seq: row.seq,
                actor: user,
                event: .recall(conversation: naming(member), seq: UInt64(row.seq), id: id, by: by)
            )
        }
        return .done
    }
}
