extension GroupCommit {
    /// The rows a request will read that are not loaded yet, as far as the rows loaded so far tell: a send's names,
    /// then its conversation, then the conversation's members. A driver asks this of every request of a batch and
    /// loads what they all declare in one round, then asks again, until they declare nothing new (``Run``); the rules
    /// then find nearly everything loaded, instead of stopping at each row they lack.
    ///
    /// A declaration is a forecast, not a promise: a row declared and not read costs a read; a row read and not
    /// declared is asked for by the rule (``step(_:)``). It declares only what can be looked up safely: names and ids
    /// that pass the rules' checks, no row a database would have to make (a new direct conversation).
    ///
    /// - Returns: Whether the request wants a row not loaded yet: once it wants none, it never will again (what is
    ///   loaded only grows).
    @discardableResult
    package func declareNeeds(of request: WriteRequest, into needs: inout NeedList) -> Bool {
        needs.missing = false
        self.declare(request, into: &needs)
        return needs.missing
    }

    private func declare(_ request: WriteRequest, into needs: inout NeedList) {
        switch request {
        case .send(let send):
            if !send.id.isEmpty {
                // An id the rule refuses reads nothing.
                guard send.id.utf8.count <= self.limits.maxMessageIDBytes, StoreText.isClean(send.id) else { return }
                let key = MessageKey(sender: send.sender, id: send.id)
                // Not read yet: declared, and the rest with it, as a resend is rare (one costs a few rows unread).
                switch self.messages[key] {
                case .some(.some(let original)):
                    // A resend: only how its original's conversation is named.
                    let header =
                        self.conversations[original.conversation]?.header ?? self.headers[original.conversation]
                    guard let header else {
                        needs.want(.header(original.conversation), self)
                        return
                    }
                    for user in self.namedUsers(of: header) { needs.want(.name(user), self) }
                    return
                case .some(.none):
                    break
                case .none:
                    needs.wantUnloaded(.message(key))
                }
            }
            if let media = send.media, SHA256Hex.isValid(media.sha256) {
                needs.want(.upload(UploadKey(user: send.sender, sha256: media.sha256)), self)
            }
            needs.want(.name(send.sender), self)
            self.declareConversation(send.to, for: send.sender, sending: true, into: &needs)
            if case .group = send.to, let mentions = send.mentions {
                for name in mentions.names + mentions.runs where !name.isEmpty && StoreText.isClean(name) {
                    needs.want(.userID(named: name), self)
                }
            }
        case .ack(let user, let device, let cursor):
            needs.want(.device(device), self)
            needs.want(.user(user), self)
            // Each acknowledgement of a device starts where the one before it in the batch left the device, as the
            // rule's do.
            guard let row = self.loadedDevice(device), row.user == user, let stored = self.userRow(user)?.cursor,
                let range = Self.ackRange(
                    of: user,
                    from: needs.ackedCursors[device] ?? self.ackedCursors[device] ?? row.ackedCursor,
                    to: cursor,
                    stored: stored
                )
            else { return }
            needs.ackedCursors[device] = range.to
            guard let deliveries = self.deliveries[range] else {
                needs.wantUnloaded(.deliveries(range))
                return
            }
            if !deliveries.isEmpty { needs.want(.name(user), self) }
            for delivery in deliveries {
                guard let conversation = self.conversations[delivery.conversation] else {
                    needs.want(.conversation(delivery.conversation), self)
                    continue
                }
                for sender in delivery.senders where sender != user && conversation.members[sender] != nil {
                    needs.want(.user(sender), self)
                }
                for named in self.namedUsers(of: conversation.header) { needs.want(.name(named), self) }
            }
        case .markRead(let user, let address, _), .recall(let user, let address, _):
            needs.want(.name(user), self)
            self.declareConversation(address, for: user, sending: false, into: &needs)
        case .edit(let edit):
            needs.want(.name(edit.user), self)
            self.declareConversation(edit.conversation, for: edit.user, sending: false, into: &needs)
        case .react(let react):
            needs.want(.name(react.user), self)
            self.declareConversation(react.conversation, for: react.user, sending: false, into: &needs)
        }
    }

    /// What resolving an address reads: the group's or the other user's id, the conversation with its members, the
    /// rows of the members (whose logs grow) and the names that say how each member names it. The other user's row
    /// of a direct conversation only for a send (which may make the conversation): where rows are locked, a read mark
    /// naming a user it has no conversation with locks nobody.
    private func declareConversation(
        _ address: Conversation,
        for user: UserID,
        sending: Bool,
        into needs: inout NeedList
    ) {
        needs.want(.user(user), self)
        guard (try? address.checkNames()) != nil else { return }
        let id: Int64?
        switch address {
        case .group(let name):
            guard let found = self.groupIDs[name] else {
                needs.wantUnloaded(.groupID(named: name))
                return
            }
            id = found
        case .user(let name):
            guard let found = self.userIDs[name] else {
                needs.wantUnloaded(.userID(named: name))
                return
            }
            guard let peer = found else { return }
            if sending { needs.want(.user(peer), self) }
            needs.want(.name(peer), self)
            let pair = UserPair(user, peer)
            guard let direct = self.directIDs[pair] else {
                needs.wantUnloaded(.directID(pair))
                return
            }
            id = direct
        }
        guard let id else { return }
        guard let conversation = self.conversations[id] else {
            needs.wantUnloaded(.conversation(id))
            return
        }
        guard conversation.members[user] != nil, needs.declaring(id) else { return }
        for member in conversation.members.keys { needs.want(.user(member), self) }
        for named in self.namedUsers(of: conversation.header) { needs.want(.name(named), self) }
    }
}

/// The rows a batch's requests declare (``GroupCommit/declareNeeds(of:into:)``), each once, in the order declared,
/// leaving out the ones loaded.
package struct NeedList: Sendable {
    package private(set) var needs: [BatchNeed] = []
    private var seen: Set<BatchNeed> = []
    /// The conversations whose members' rows were declared already.
    private var conversations: Set<Int64> = []

    package init() {}

    /// Whether a conversation's members are declared for the first time (a group's hundred sends declare its
    /// members once).
    mutating func declaring(_ conversation: Int64) -> Bool {
        self.conversations.insert(conversation).inserted
    }

    /// Whether the request being declared wants a row not loaded (declared by another request already, perhaps).
    var missing = false
    /// The devices' acknowledged cursors as this wave's acknowledgements so far leave them.
    var ackedCursors: [DeviceID: Int64] = [:]

    mutating func want(_ need: BatchNeed, _ commit: GroupCommit) {
        guard !commit.has(need) else { return }
        self.wantUnloaded(need)
    }

    /// ``want(_:_:)`` for a row the caller has just found not loaded (one lookup fewer).
    mutating func wantUnloaded(_ need: BatchNeed) {
        self.missing = true
        guard self.seen.insert(need).inserted else { return }
        self.needs.append(need)
    }
}
