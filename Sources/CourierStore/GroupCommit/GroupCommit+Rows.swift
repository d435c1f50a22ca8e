// How a driver loads rows into a group commit, and how the rules read them (asking for the ones not loaded).

extension GroupCommit {
    // MARK: Loading (the drivers)

    /// Whether a need is met already: a driver's plan loads only the rows that are not.
    package func has(_ need: BatchNeed) -> Bool {
        switch need {
        case .groupID(let name): self.groupIDs[name] != nil
        case .userID(let name): self.userIDs[name] != nil
        case .user(let user): self.userRow(user) != nil
        case .name(let user): self.names[user] != nil
        case .directID(let pair): self.directIDs[pair] != nil
        case .newDirect(let pair): (self.directIDs[pair] ?? nil) != nil
        case .conversation(let id): self.conversations[id] != nil
        case .header(let id): self.headers[id] != nil || self.conversations[id] != nil
        case .message(let key): self.messages[key] != nil
        case .upload(let key): self.uploads[key] != nil
        case .device(let device): self.devices[device] != nil
        case .deliveries(let range): self.deliveries[range] != nil
        case .messageAt(let position): self.positioned[position] != nil
        case .withID(let lookup): self.withIDs[lookup] != nil
        case .reactions(let owner):
            self.reactionCounts[owner.position] != nil && self.myReactions[owner] != nil
        }
    }

    package mutating func loadGroup(named name: String, id: Int64?) {
        self.groupIDs[name] = .some(id)
    }

    package mutating func loadUser(named name: String, id: UserID?) {
        self.userIDs[name] = .some(id)
    }

    /// A user's row as the batch read it, or carried it from the batch before (``CarriedRows``).
    func userRow(_ user: UserID) -> UserRow? {
        self.users[user] ?? self.log.book.carried[user]
    }

    /// A user's row; its log's new entries follow its cursor.
    package mutating func loadUser(_ user: UserID, _ row: UserRow) {
        guard self.userRow(user) == nil else { return }
        self.users[user] = row
        self.log.book.start(user, at: row.cursor)
    }

    package mutating func loadName(of user: UserID, _ name: String?) {
        self.names[user] = .some(name)
    }

    package mutating func loadDirect(_ pair: UserPair, id: Int64?) {
        self.directIDs[pair] = .some(id)
    }

    /// A conversation with its members. One loaded already is kept as the batch changed it.
    package mutating func load(_ conversation: BatchConversation) {
        guard self.conversations[conversation.id] == nil else { return }
        self.conversations[conversation.id] = conversation
        self.loadedMembers += conversation.members.count
    }

    package mutating func loadHeader(_ id: Int64, _ header: ConversationHeader) {
        self.headers[id] = header
    }

    package mutating func loadMessage(_ key: MessageKey, _ row: MessageRow?) {
        guard self.messages[key] == nil else { return }
        self.messages[key] = .some(row)
    }

    package mutating func loadUpload(_ key: UploadKey, size: Int64?) {
        self.uploads[key] = .some(size)
    }

    package mutating func loadDevice(_ device: DeviceID, _ row: DeviceRow?) {
        guard self.devices[device] == nil else { return }
        self.devices[device] = .some(row)
    }

    package mutating func loadDeliveries(_ range: AckRange, _ deliveries: [Delivery]) {
        self.deliveries[range] = deliveries
    }

    /// A message by its place. One loaded already is kept as the batch changed it.
    package mutating func loadMessage(at position: MessagePosition, _ row: TargetRow?) {
        guard self.positioned[position] == nil else { return }
        self.positioned[position] = .some(row)
    }

    package mutating func loadSeqs(_ lookup: IDLookup, _ seqs: [Int64]) {
        self.withIDs[lookup] = seqs
    }

    /// A message's reactions (how many users gave each key) and the keys one user gave. What the batch changed
    /// already is kept.
    package mutating func loadReactions(_ owner: ReactionOwner, counts: [String: Int], mine: Set<String>) {
        if self.reactionCounts[owner.position] == nil { self.reactionCounts[owner.position] = counts }
        if self.myReactions[owner] == nil { self.myReactions[owner] = mine }
    }

    /// A user's id as loaded (nil when not loaded, or there is no such user).
    package func loadedUserID(named name: String) -> UserID? { self.userIDs[name] ?? nil }

    /// A group's id as loaded (nil when not loaded, or there is no such group).
    package func loadedGroupID(named name: String) -> Int64? { self.groupIDs[name] ?? nil }

    /// A direct conversation's id as loaded (nil when not loaded, or there is none).
    package func loadedDirectID(_ pair: UserPair) -> Int64? { self.directIDs[pair] ?? nil }

    /// A device's row as loaded (nil when not loaded, or there is no such device).
    package func loadedDevice(_ device: DeviceID) -> DeviceRow? { self.devices[device] ?? nil }

    // MARK: Reading (the rules)

    /// A loaded value, or a miss asking for it.
    func loaded<Value>(_ value: Value??, _ need: BatchNeed) throws -> Value? {
        guard let value else { throw Miss(needs: [need]) }
        return value
    }

    func groupID(named name: String) throws -> Int64? {
        try self.loaded(self.groupIDs[name], .groupID(named: name))
    }

    func userID(named name: String) throws -> UserID? {
        try self.loaded(self.userIDs[name], .userID(named: name))
    }

    func user(_ user: UserID) throws -> UserRow {
        guard let row = self.userRow(user) else { throw Miss(needs: [.user(user)]) }
        return row
    }

    func directID(_ pair: UserPair) throws -> Int64? {
        try self.loaded(self.directIDs[pair], .directID(pair))
    }

    func conversation(_ id: Int64) throws -> BatchConversation {
        guard let conversation = self.conversations[id] else { throw Miss(needs: [.conversation(id)]) }
        return conversation
    }

    func message(_ key: MessageKey) throws -> MessageRow? {
        try self.loaded(self.messages[key], .message(key))
    }

    func upload(_ key: UploadKey) throws -> Int64? {
        try self.loaded(self.uploads[key], .upload(key))
    }

    func device(_ device: DeviceID) throws -> DeviceRow? {
        try self.loaded(self.devices[device], .device(device))
    }

    func deliveries(_ range: AckRange) throws -> [Delivery] {
        guard let deliveries = self.deliveries[range] else { throw Miss(needs: [.deliveries(range)]) }
        return deliveries
    }

    func message(at position: MessagePosition) throws -> TargetRow? {
        guard var row = try self.loaded(self.positioned[position], .messageAt(position)) else { return nil }
        // Recalled earlier in this batch, though stored before it as it was.
        if self.recalledPositions.contains(position) {
            row.recalled = true
            row.body = []
        }
        return row
    }

    func seqs(_ lookup: IDLookup) throws -> [Int64] {
        guard let seqs = self.withIDs[lookup] else { throw Miss(needs: [.withID(lookup)]) }
        return seqs
    }

    func reactions(_ owner: ReactionOwner) throws -> (counts: [String: Int], mine: Set<String>) {
        guard let counts = self.reactionCounts[owner.position], let mine = self.myReactions[owner] else {
            throw Miss(needs: [.reactions(owner)])
        }
        return (counts, mine)
    }

    /// Asks at once for every one of these conversations that is not loaded.
    func requireConversations(_ ids: some Sequence<Int64>) throws {
        let missing = ids.filter { self.conversations[$0] == nil }
        guard missing.isEmpty else { throw Miss(needs: missing.map { .conversation($0) }) }
    }

    /// Asks at once for every user's row and name that is not loaded: what events to these users, naming these
    /// users, need.
    ///
    /// - Parameters:
    ///   - rows: Users whose logs grow.
    ///   - names: Users whose names the events or answers carry.
    func require(rows: some Sequence<UserID>, names: some Sequence<UserID>) throws {
        var needs: [BatchNeed] = []
        // Looked up as given (a group's members on every send): duplicates are dropped only from what is missing.
        for user in rows where self.userRow(user) == nil { needs.append(.user(user)) }
        for user in names where self.names[user] == nil { needs.append(.name(user)) }
        guard needs.isEmpty else {
            var seen: Set<BatchNeed> = []
            throw Miss(needs: needs.filter { seen.insert($0).inserted })
        }
    }

    /// A loaded name.
    ///
    /// - Throws: `unknown-user` when there is no such user.
    func name(of user: UserID) throws -> String {
        guard let name = try self.loaded(self.names[user], .name(user)) else {
            throw CourierStoreError(.unknownUser, "no user with id \(user.rawValue)")
        }
        return name
    }

    /// The users whose names say how the members of a conversation name it.
    func namedUsers(of conversation: ConversationHeader) -> [UserID] {
        conversation.groupName != nil ? [] : [conversation.userA, conversation.userB].compactMap { $0 }
    }

    /// How each member names a conversation, from loaded names.
    func naming(of conversation: BatchConversation) throws -> @Sendable (UserID) -> Conversation {
        if conversation.groupName != nil { return conversation.naming(nameA: nil, nameB: nil) }
        return conversation.naming(
            nameA: try self.name(of: conversation.userA!),
            nameB: try self.name(of: conversation.userB!)
        )
    }

    /// How a user names a conversation, from loaded names.
    func address(of conversation: ConversationHeader, for user: UserID) throws -> Conversation {
        if let name = conversation.groupName { return .group(name) }
        guard let a = conversation.userA, let b = conversation.userB else {
            throw CourierStoreError(.storageFailed, "a direct conversation without its users")
        }
        return .user(try self.name(of: a == user ? b : a))
    }

    /// A conversation's name and users: from the conversation when the batch loaded it, from its header otherwise.
    func header(of id: Int64) throws -> ConversationHeader {
        if let conversation = self.conversations[id] { return conversation.header }
        guard let header = self.headers[id] else { throw Miss(needs: [.header(id)]) }
        return header
    }
}

extension BatchConversation {
    /// Its name and users.
    package var header: ConversationHeader {
        ConversationHeader(groupName: self.groupName, userA: self.userA, userB: self.userB)
    }
}
