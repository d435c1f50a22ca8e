extension GroupCommit {
    /// The conversation a user means by an address, loaded, which the user must be a member of.
    ///
    /// - Parameter createDirect: Whether a direct conversation the two users do not have yet is made (a send);
    ///   otherwise (a read mark, a recall) there must be one. A conversation is made only with a user who was not
    ///   removed.
    /// - Throws: `unknown-user`, `unknown-group` or `not-member`; a miss for a row not loaded.
    func resolve(_ address: Conversation, for user: UserID, createDirect: Bool) throws -> Int64 {
        try address.checkNames()
        switch address {
        case .group(let name):
            guard let id = try self.groupID(named: name) else {
                throw CourierStoreError(.unknownGroup, "no group named \(name)")
            }
            guard try self.conversation(id).members[user] != nil else {
                throw CourierStoreError(.notMember, "you are not a member of \(name)")
            }
            return id
        case .user(let name):
            guard let peer = try self.userID(named: name) else {
                throw CourierStoreError(.unknownUser, "no user named \(name)")
            }
            // Read under the peer's lock, where there is one: nobody removes it while the conversation is made.
            if createDirect, try self.user(peer).removed {
                throw CourierStoreError(.unknownUser, "no user named \(name)")
            }
            let pair = UserPair(user, peer)
            if let id = try self.directID(pair) {
                _ = try self.conversation(id)
                return id
            }
            guard createDirect else {
                throw CourierStoreError(.notMember, "you have no conversation with \(name)")
            }
            // Both users' rows first: where they are locked, no other writer makes this pair's conversation
            // meanwhile.
            try self.require(rows: [pair.a, pair.b], names: [])
            throw Miss(needs: [.newDirect(pair)])
        }
    }
}
