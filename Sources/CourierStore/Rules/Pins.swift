// The rules of pinned messages and of deleting a message for oneself, for every database.

extension StoreBackend {
    /// Pins a message of a conversation for every member to see at the top, or unpins it (`off`). In a group only
    /// the owner and admins do; in a direct conversation, either member. Every member who can see the message (in a
    /// direct conversation, not one it is withheld from) gets a `pin` event. A recall unpins (the group commit).
    ///
    /// - Returns: The users whose event logs grew (none when nothing changed).
    /// - Throws: `unknown-message`, `ambiguous-message`, `not-member`, `not-admin`, `message-recalled`,
    ///   `quota-exceeded` (past ``StoreLimits/maxPinsPerConversation``), `storage-failed`.
    @discardableResult
    public func pin(_ name: MessageName, by user: UserID, off: Bool, nowMs: Int64) async throws -> [UserID: UInt64] {
        let (maxIDBytes, maxPins) = (self.limits.maxMessageIDBytes, self.limits.maxPinsPerConversation)
        return try await self.transaction(doing: off ? "unpin a message" : "pin a message") { transaction in
            let found = try await Self.find(name, for: user, maxIDBytes: maxIDBytes, transaction)
            let seq = found.message.seq
            // The conversation's row first, as a send's batch locks it: a recall is before the pin, or after it.
            var readers: [UserID]
            if let group = found.header.groupName {
                let (_, roles) = try await Self.lockGroup(
                    group,
                    for: user,
                    needing: .admin,
                    else: "only the owner and admins of \(group) pin messages",
                    transaction
                )
                readers = roles.filter { $0.joinedSeq < seq }.map(\.user)
            } else {
                try await transaction.lockConversation(found.conversation)
                readers = Array(Set([found.header.userA, found.header.userB].compactMap { $0 }))
                // A user the other side blocks, or a message it does not see (withheld, deleted for it), pins
                // nothing there: answered as done, so that nothing tells of the block.
                for reader in readers where reader != user {
                    let position = MessagePosition(conversation: found.conversation, seq: seq)
                    let blocked = try await Self.blockRelations(of: user, with: [reader], transaction).blockedBy
                    let hidden = try await transaction.hidden(from: reader, among: [position])
                    if blocked.contains(reader) || !hidden.isEmpty { return [:] }
                }
            }
            // Read again under the lock: recalled meanwhile, it has no pin to take.
            guard let current = try await transaction.message(in: found.conversation, seq: seq, visibleTo: user),
                !current.message.recalled
            else {
                if off { return [:] }
                throw CourierStoreError(.messageRecalled, "the message was recalled")
            }
            let pins = try await transaction.pins(in: found.conversation)
            guard pins.contains(where: { $0.seq == seq }) == off else { return [:] }
            if !off, pins.count >= maxPins {
                throw CourierStoreError(
                    .quotaExceeded,
                    "a conversation has at most \(maxPins) pinned messages: unpin one first"
                )
            }
            try await transaction.setPin(in: found.conversation, seq: seq, by: user, on: !off, nowMs: nowMs)
            var log = LogWrites()
            try await Self.lockLogs(of: readers, into: &log, transaction)
            for reader in readers.sorted() {
                log.append(
                    to: reader,
                    .pin,
                    conversation: found.conversation,
                    seq: seq,
                    actor: user,
                    detail: off ? 2 : 1
                )
            }
            return try await Self.finish(log, nowMs: nowMs, transaction)
        }
    }

    /// A conversation's pinned messages that a user can see, the most recently pinned first.
    ///
    /// - Throws: `unknown-group`, `unknown-user`, `not-member`, `storage-failed`.
    public func pins(in conversation: Conversation, for user: UserID) async throws -> [StoredMessage] {
        try await self.reading(doing: "read pins") { transaction in
            guard let (key, joinedSeq) = try await Self.membership(of: user, in: conversation, transaction) else {
                throw CourierStoreError(.notMember, "you have no conversation \(conversation)")
            }
            var found: [FoundMessage] = []
            for pin in try await transaction.pins(in: key) where pin.seq > joinedSeq {
                if let message = try await transaction.message(in: key, seq: pin.seq, visibleTo: user) {
                    found.append(message)
                }
            }
            guard let header = found.first?.header else { return [] }
            let names = try await transaction.names(
                of: Set(Self.namedUsers(of: header, for: user) + found.map(\.message.sender))
            )
            let address = try Self.address(of: header, for: user, names: names)
            return try found.map { found in
                var message = found.message
                message.replySeq = nil
                var stored = try Self.message(message, in: address, names: names, readerJoined: .max)
                stored.pinned = true
                return stored
            }
        }
    }

    /// Deletes a message for a user alone, on all its devices: it leaves the user's history, search and unread
    /// counts (the others keep it), and the user's log gets a `hidden` event for its other devices. Any message it
    /// can see, of any age, recalled or not (once hidden, it is not one it sees: `unknown-message`).
    ///
    /// - Returns: The users whose event logs grew (the user alone).
    /// - Throws: `unknown-message`, `ambiguous-message`, `not-member`, `storage-failed`.
    @discardableResult
    public func hide(_ name: MessageName, for user: UserID, nowMs: Int64) async throws -> [UserID: UInt64] {
        let maxIDBytes = self.limits.maxMessageIDBytes
        return try await self.transaction(doing: "delete a message for oneself") { transaction in
            // Found among what the user sees: one hidden already is not found (and nothing changes).
            let found = try await Self.find(name, for: user, maxIDBytes: maxIDBytes, transaction)
            try await transaction.insertHidden([
                HiddenRow(user: user, conversation: found.conversation, seq: found.message.seq)
            ])
            var log = LogWrites()
            try await Self.lockLogs(of: [user], into: &log, transaction)
            log.append(to: user, .hide, conversation: found.conversation, seq: found.message.seq)
            return try await Self.finish(log, nowMs: nowMs, transaction)
        }
    }
}
