// The rules of naming one message: what an edit, a reply or a reaction names, and the versions an edit kept.

extension StoreBackend {
    /// A message a user can see, by place or by id.
    ///
    /// By place, the user must be a member of the conversation and have joined before the message. By id, the
    /// message is looked for among those the user can see, in every conversation (or the one named), from any sender
    /// (or the one named): ids are unique per sender only, so two found is `ambiguous-message`.
    ///
    /// - Throws: `unknown-message`, `ambiguous-message`, `unknown-user`, `unknown-group`, `not-member`,
    ///   `invalid-request`, `storage-failed`.
    public func message(_ name: MessageName, for user: UserID) async throws -> StoredMessage {
        let maxIDBytes = self.limits.maxMessageIDBytes
        return try await self.reading(doing: "find a message") { transaction in
            let found = try await Self.find(name, for: user, maxIDBytes: maxIDBytes, transaction)
            let names = try await transaction.names(
                of: Set(Self.namedUsers(of: found.header, for: user) + [found.message.sender])
            )
            var message = found.message
            message.replySeq = nil
            return try Self.message(
                message,
                in: try Self.address(of: found.header, for: user, names: names),
                names: names,
                readerJoined: .max
            )
        }
    }

    /// Who gave the reactions of a message the user can see: each key once, the first given first, and under it
    /// the users who gave it, the earliest first (at most ``StoreLimits/maxReactorsListed``; ``Reactors/count`` says
    /// how many).
    ///
    /// - Throws: `unknown-message`, `ambiguous-message`, `invalid-request`, `storage-failed`.
    public func reactors(of name: MessageName, for user: UserID) async throws -> [Reactors] {
        let (perKey, maxIDBytes) = (max(1, self.limits.maxReactorsListed), self.limits.maxMessageIDBytes)
        return try await self.reading(doing: "read who reacted") { transaction in
            let found = try await Self.find(name, for: user, maxIDBytes: maxIDBytes, transaction)
            if found.message.recalled { return [] }
            let rows = try await transaction.reactors(in: found.conversation, seq: found.message.seq, perKey: perKey)
            let names = try await transaction.names(of: Set(rows.flatMap(\.users)))
            return rows.map { row in
                Reactors(key: row.key, count: row.count, users: row.users.compactMap { names[$0] })
            }
        }
    }

    /// The bodies an edited message had before, oldest first (at most ``StoreLimits/maxVersionsPerRead``): none for
    /// one never edited, and none once recalled (a recall takes them).
    public func versions(of name: MessageName, for user: UserID) async throws -> [MessageVersion] {
        let (limit, maxIDBytes) = (max(1, self.limits.maxVersionsPerRead), self.limits.maxMessageIDBytes)
        return try await self.reading(doing: "read a message's versions") { transaction in
            let found = try await Self.find(name, for: user, maxIDBytes: maxIDBytes, transaction)
            return try await transaction.versions(in: found.conversation, seq: found.message.seq, limit: limit)
        }
    }

    static func find(
        _ name: MessageName,
        for user: UserID,
        maxIDBytes: Int,
        _ transaction: Transaction
    ) async throws -> FoundMessage {
        let unknown = CourierStoreError(.unknownMessage, "no such message that you can see")
        var conversation: Int64?
        if let address = name.conversation {
            guard let (key, _) = try await Self.membership(of: user, in: address, transaction) else { throw unknown }
            conversation = key
        }
        if name.seq > 0 {
            guard let conversation, name.seq <= UInt64(Int64.max) else {
                throw CourierStoreError(.invalidRequest, "a message named by seq needs its conversation")
            }
            guard let found = try await transaction.message(in: conversation, seq: Int64(name.seq), visibleTo: user)
            else { throw unknown }
            return found
        }
        guard !name.id.isEmpty else {
            throw CourierStoreError(.invalidRequest, "name a message by its conversation and seq, or by its id")
        }
        guard StoreText.isClean(name.id), name.id.utf8.count <= maxIDBytes else { throw unknown }
        var sender: UserID?
        if let from = name.from {
            try Names.validate(from, what: "user name")
            guard let found = try await transaction.user(named: from) else {
                throw CourierStoreError(.unknownUser, "no user named \(from)")
            }
            sender = found.id
        }
        let found = try await transaction.messages(
            withID: name.id,
            from: sender,
            in: conversation,
            visibleTo: user,
            limit: 2
        )
        guard let first = found.first else { throw unknown }
        guard found.count == 1 else {
            throw CourierStoreError(
                .ambiguousMessage,
                "several messages you can see have the id \(name.id.debugDescription): name the sender or the conversation"
            )
        }
        return first
    }
}
