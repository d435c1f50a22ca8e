/// What a group commit reads once of a conversation and writes back once, whatever the database.
package struct BatchConversation: Sendable {
    /// A member as the batch sees it.
    package struct Member: Sendable {
        package var joinedSeq: Int64
        package var readSeq: Int64
        package var deliveredSeq: Int64
        /// Whether the member has sent a message here (see ``CourierDatabase/contacts(of:)``).
        package var sent: Bool
        /// Its kept role in a group (member or admin: the owner is the conversation's).
        package var role: GroupRole
        /// In a direct conversation, set while this member blocks the other one (nil: it does not), to its read mark
        /// as it was at the block: the other's messages are withheld from it, and its marks from the other.
        package var blockedAtSeq: Int64?
        package var dirty = false

        package init(
            joinedSeq: Int64,
            readSeq: Int64,
            deliveredSeq: Int64,
            sent: Bool,
            role: GroupRole = .member,
            blockedAtSeq: Int64? = nil
        ) {
            self.joinedSeq = joinedSeq
            self.readSeq = readSeq
            self.deliveredSeq = deliveredSeq
            self.sent = sent
            self.role = role
            self.blockedAtSeq = blockedAtSeq
        }
    }

    package var id: Int64
    package var groupName: String?
    package var userA: UserID?
    package var userB: UserID?
    package var lastSeq: Int64
    package var lastMs: Int64
    package var members: [UserID: Member]
    /// A group's owner.
    package var owner: UserID?
    package var dirty = false

    package init(
        id: Int64,
        groupName: String?,
        userA: UserID?,
        userB: UserID?,
        lastSeq: Int64,
        lastMs: Int64,
        members: [UserID: Member],
        owner: UserID? = nil
    ) {
        self.id = id
        self.groupName = groupName
        self.userA = userA
        self.userB = userB
        self.lastSeq = lastSeq
        self.lastMs = lastMs
        self.members = members
        self.owner = owner
    }

    /// The member of a direct conversation who blocks `actor`, the other one, if it does: what `actor` says there
    /// (messages, edits, reactions, recalls) is withheld from it, and nothing of its marks goes to `actor`.
    package func blocker(of actor: UserID) -> UserID? {
        guard self.groupName == nil, let peer = self.peer(of: actor), peer != actor,
            self.members[peer]?.blockedAtSeq != nil
        else { return nil }
        return peer
    }

    /// Whether `reader`'s marks are kept from `other`: in a direct conversation in which `reader` blocks `other`.
    package func keepsMarks(of reader: UserID, from other: UserID) -> Bool {
        self.groupName == nil && reader != other && self.members[reader]?.blockedAtSeq != nil
    }

    /// A member's role in a group: the owner's is the group's, the others' as kept.
    package func role(of user: UserID) -> GroupRole {
        if self.owner == user { return .owner }
        return self.members[user]?.role ?? .member
    }

    /// How each member names the conversation, given both sides' names of a direct one.
    package func naming(nameA: String?, nameB: String?) -> @Sendable (UserID) -> Conversation {
        if let name = self.groupName { return { _ in .group(name) } }
        let a = self.userA
        let (nameA, nameB) = (nameA ?? "", nameB ?? "")
        return { user in .user(user == a ? nameB : nameA) }
    }

    /// The other side of a direct conversation for one of its users (itself for notes to oneself); nil for a group.
    package func peer(of user: UserID) -> UserID? {
        guard self.groupName == nil, let a = self.userA, let b = self.userB else { return nil }
        return a == user ? b : a
    }

    /// A message sent now by a member: the conversation's next sequence number and time (never before the last),
    /// with the sender's read mark moved to it (sending implies having read everything before).
    package mutating func send(by sender: UserID, nowMs: Int64) -> (seq: Int64, time: Int64) {
        let seq = self.lastSeq + 1
        let time = max(nowMs, self.lastMs)
        self.lastSeq = seq
        self.lastMs = time
        self.dirty = true
        self.members[sender]?.readSeq = seq
        self.members[sender]?.sent = true
        self.members[sender]?.dirty = true
        return (seq, time)
    }
}
