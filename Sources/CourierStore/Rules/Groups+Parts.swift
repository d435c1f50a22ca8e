// The parts the rules of groups share (Groups.swift): locks, checks, and members' changes with their log entries.

extension StoreBackend {
    /// A group's row, locked, with its members' roles; checked that the actor (nil: the administrator) is a member
    /// of at least a role.
    ///
    /// - Throws: `unknown-group`, `not-member`, `not-owner` (the owner's alone), `not-admin`, saying `refusal`.
    static func lockGroup(
        _ group: String,
        for actor: UserID?,
        needing role: GroupRole,
        else refusal: String,
        _ transaction: Transaction
    ) async throws -> (GroupRow, [MemberRole]) {
        guard let row = try await transaction.group(named: group, locking: true) else {
            throw CourierStoreError(.unknownGroup, "no group named \(group)")
        }
        let roles = try await transaction.memberRoles(of: row.id)
        if let actor {
            guard roles.contains(where: { $0.user == actor }) else {
                throw CourierStoreError(.notMember, "you are not a member of \(group)")
            }
            guard Self.role(of: actor, row, roles) >= role else {
                throw CourierStoreError(role == .owner ? .notOwner : .notAdmin, refusal)
            }
        }
        return (row, roles)
    }

    /// A member of a group by name.
    ///
    /// - Throws: `not-member` (no such member, no such user).
    static func member(
        _ name: String,
        of group: String,
        _ roles: [MemberRole],
        _ transaction: Transaction
    ) async throws -> UserID {
        guard let user = try await Self.user(named: name, transaction), roles.contains(where: { $0.user == user.id })
        else { throw CourierStoreError(.notMember, "\(name) is not a member of \(group)") }
        return user.id
    }

    /// A member's role: the owner's is the group's, the others' as kept.
    static func role(of user: UserID, _ row: GroupRow, _ roles: [MemberRole]) -> GroupRole {
        if row.owner == user { return .owner }
        return roles.first { $0.user == user }?.role ?? .member
    }

    /// The owner left (or was removed): the longest-standing admin becomes the owner, else the longest-standing
    /// member; every member gets a `role` event. An empty group keeps no owner that is a member, and needs none.
    static func passOn(_ row: GroupRow, log: inout LogWrites, _ transaction: Transaction) async throws {
        let roles = try await transaction.memberRoles(of: row.id)
        guard let heir = roles.first(where: { $0.role == .admin }) ?? roles.first else { return }
        try await transaction.setOwner(heir.user, of: row.id)
        try await transaction.setRole(.member, of: heir.user, in: row.id)
        let everyone = roles.map(\.user)
        // Their logs are locked already: they were members with the one who left.
        for recipient in everyone.sorted() where log.book.knows(recipient) {
            log.append(
                to: recipient,
                .role,
                conversation: row.id,
                seq: row.lastSeq,
                actor: heir.user,
                detail: GroupRole.owner.rawValue
            )
        }
    }

    /// Refuses to add users to a group by someone they have not agreed to: each must be a contact of the actor.
    ///
    /// - Throws: `not-contact`.
    static func checkConsent(of users: [UserID], to actor: UserID, _ transaction: Transaction) async throws {
        guard !users.isEmpty else { return }
        let contacts = Self.contacts(in: try await transaction.companions(of: actor, directOnly: true, with: nil))
        for user in users where !contacts.contains(user) {
            let name = try await transaction.name(of: user) ?? "?"
            throw CourierStoreError(
                .notContact,
                "\(name) has not written to you: only contacts can be added to a group"
            )
        }
        // Nor a user who blocks the actor, refused in the same words, which tell nothing of the block.
        let blockers = try await Self.blockRelations(of: actor, with: users, transaction).blockedBy
        if let blocker = users.first(where: blockers.contains) {
            let name = try await transaction.name(of: blocker) ?? "?"
            throw CourierStoreError(
                .notContact,
                "\(name) has not written to you: only contacts can be added to a group"
            )
        }
    }

    /// Locks users' rows and starts their logs' numbering from their cursors.
    ///
    /// - Parameter refusingRemoved: Users that must not have been removed (as their rows say under the lock).
    /// - Throws: `unknown-user` for a removed one of those.
    static func lockLogs(
        of users: [UserID],
        refusingRemoved: [UserID] = [],
        into log: inout LogWrites,
        _ transaction: Transaction
    ) async throws {
        let rows = try await transaction.lockUsers(Array(Set(users)).sorted())
        for (user, row) in rows { log.book.start(user, at: row.cursor) }
        for user in refusingRemoved where rows[user]?.removed == true {
            throw CourierStoreError(.unknownUser, "no user named \(try await transaction.name(of: user) ?? "?")")
        }
    }

    /// Adds members (whose logs, and the present members', are locked), put there by `addedBy` (nil: the
    /// administrator; a member is never put there by itself); everyone in the group afterwards gets a `joined` event
    /// for each new member.
    static func addMembers(
        _ users: [UserID],
        to group: Int64,
        atSeq seq: Int64,
        addedBy: UserID?,
        log: inout LogWrites,
        _ transaction: Transaction
    ) async throws {
        guard !users.isEmpty else { return }
        if let addedBy, users.contains(addedBy) {
            try await transaction.insertMembers([addedBy], into: group, atSeq: seq, addedBy: nil)
        }
        try await transaction.insertMembers(
            users.filter { $0 != addedBy },
            into: group,
            atSeq: seq,
            addedBy: addedBy
        )
        let everyone = (try await transaction.members(of: [group])[group] ?? []).sorted()
        for user in users {
            for recipient in everyone {
                log.append(
                    to: recipient,
                    .membership,
                    conversation: group,
                    seq: seq,
                    actor: user,
                    detail: MembershipChange.joined.rawValue
                )
            }
        }
    }

    /// Removes a member; everyone in the group before, the member included, gets a `left` event.
    static func removeMember(
        _ user: UserID,
        from group: GroupRow,
        log: inout LogWrites,
        _ transaction: Transaction
    ) async throws {
        for recipient in (try await transaction.members(of: [group.id])[group.id] ?? []).sorted() {
            log.append(
                to: recipient,
                .membership,
                conversation: group.id,
                seq: group.lastSeq,
                actor: user,
                detail: MembershipChange.left.rawValue
            )
        }
        try await transaction.deleteMember(user, from: group.id)
    }

    /// Records each grown log as a change, for the running servers, and writes the change's log entries: last, as
    /// the positions they take hold the counter until the commit (``StoreTransaction/writeLog(_:)``).
    ///
    /// - Returns: The users whose logs grew, with their newest cursors.
    static func finish(
        _ log: consuming LogWrites,
        nowMs: Int64,
        _ transaction: Transaction
    ) async throws -> [UserID: UInt64] {
        try await transaction.recordChanges(log.book.grownUsers.map(StoreChange.logAppended), nowMs: nowMs)
        try await transaction.writeLog(&log)
        return log.appended
    }

    /// A user's contacts among its companions: the users with whom it has a direct conversation in which both
    /// have written. Only a contact may add a user to a group.
    static func contacts(in companions: [Companion]) -> Set<UserID> {
        Set(companions.filter { !$0.inGroup && $0.mineSent && $0.theirsSent }.map(\.user))
    }

    /// A user's peers among its companions, who see its presence and its typing: the members of groups it is in,
    /// and the users of its direct conversations in which each of the two has written or read: a stranger's first
    /// message shows nothing of the recipient until the recipient answers or opens the conversation, and from then
    /// the two see each other.
    static func peers(in companions: [Companion]) -> Set<UserID> {
        Set(
            companions.filter {
                $0.inGroup || (($0.mineSent || $0.mineRead) && ($0.theirsSent || $0.theirsRead))
            }.map(\.user)
        )
    }
}
