// The rules of groups and their members, for every database.

extension StoreBackend {
    /// Creates a group. Every member, the owner included, gets a `joined` event.
    ///
    /// - Parameters:
    ///   - name: The group's name (see ``Names``); unique without regard to case.
    ///   - owner: The owner's user name; a member.
    ///   - members: The other members' user names.
    ///   - byOwner: True when the owner asks (over a session): then every other member must be a contact of the
    ///     owner (``contacts(of:)``), who has agreed by writing to the owner. False for the administrator.
    /// - Returns: The users whose event logs grew, with their newest cursors.
    /// - Throws: `invalid-name`, `name-taken`, `unknown-user`, `not-contact`, `storage-failed`.
    @discardableResult
    public func createGroup(
        name: String,
        owner: String,
        members: [String],
        byOwner: Bool,
        nowMs: Int64
    ) async throws -> [UserID: UInt64] {
        try Names.validate(name, what: "group name")
        return try await self.transaction(doing: "create group \(name)") { transaction in
            // A taken name first, whatever else is wrong (a name taken meanwhile is refused by the insert below).
            if try await transaction.group(named: name, locking: false) != nil {
                throw CourierStoreError(.nameTaken, "a group named \(name) exists")
            }
            let ownerUser = try await Self.activeUser(named: owner, transaction)
            var users = [ownerUser.id]
            for member in members {
                let user = try await Self.activeUser(named: member, transaction)
                if !users.contains(user.id) { users.append(user.id) }
            }
            if byOwner {
                try await Self.checkConsent(of: Array(users.dropFirst()), to: ownerUser.id, transaction)
                // Checked under no lock: two creations racing may both pass at the cap (the rate limit above the
                // store bounds how many can race).
                let made = try await transaction.groupsMade(by: ownerUser.id)
                guard made < self.limits.maxGroupsPerMaker else {
                    throw CourierStoreError(
                        .quotaExceeded,
                        "you made \(made) groups that still have members, the most one user may have made; a group "
                            + "you made counts until its last member leaves"
                    )
                }
            }
            // Two writers making the name at once: its uniqueness lets one in.
            // The maker, whose groups count against its cap: the owner who asked; none for the administrator's.
            let maker = byOwner ? ownerUser.id : nil
            guard
                let group = try await transaction.insertGroup(
                    name: name,
                    owner: ownerUser.id,
                    madeBy: maker,
                    nowMs: nowMs
                )
            else {
                throw CourierStoreError(.nameTaken, "a group named \(name) exists")
            }
            var log = LogWrites()
            try await Self.lockLogs(of: users, refusingRemoved: users, into: &log, transaction)
            try await Self.addMembers(
                users,
                to: group,
                atSeq: 0,
                addedBy: byOwner ? ownerUser.id : nil,
                log: &log,
                transaction
            )
            return try await Self.finish(log, nowMs: nowMs, transaction)
        }
    }

    /// Adds and removes members of a group. New members see messages from now on.
    ///
    /// - Parameters:
    ///   - group: The group's name.
    ///   - actor: The user asking; nil for the administrator (the `courier group` commands). Only a member asks;
    ///     a member other than the owner may only remove itself (leave); the owner adds only its contacts.
    ///   - add: User names to add; present members are skipped.
    ///   - remove: User names to remove; non-members are skipped.
    /// - Returns: The users whose event logs grew, with their newest cursors.
    /// - Throws: `unknown-group`, `not-member`, `not-owner`, `not-contact`, `unknown-user`, `storage-failed`.
    @discardableResult
    public func changeMembers(
        of group: String,
        actor: UserID?,
        add: [String],
        remove: [String],
        nowMs: Int64
    ) async throws -> [UserID: UInt64] {
        guard Names.isValid(group) else { throw CourierStoreError(.unknownGroup, "no group named \(group)") }
        return try await self.transaction(doing: "change the members of \(group)") { transaction in
            // The group's row first: its members change only under it.
            guard let row = try await transaction.group(named: group, locking: true) else {
                throw CourierStoreError(.unknownGroup, "no group named \(group)")
            }
            let current = try await transaction.members(of: [row.id])[row.id] ?? []
            var adding: [UserID] = []
            for name in add {
                let user = try await Self.activeUser(named: name, transaction).id
                if !current.contains(user), !adding.contains(user) { adding.append(user) }
            }
            var removing: [UserID] = []
            for name in remove {
                guard let user = try await Self.user(named: name, transaction) else {
                    throw CourierStoreError(.unknownUser, "no user named \(name)")
                }
                if current.contains(user.id), !removing.contains(user.id) { removing.append(user.id) }
            }
            let roles = try await transaction.memberRoles(of: row.id)
            if let actor {
                guard current.contains(actor) else {
                    throw CourierStoreError(.notMember, "you are not a member of \(group)")
                }
                let leavingOnly = adding.isEmpty && removing.allSatisfy { $0 == actor }
                if !leavingOnly {
                    // Checked here, under the group's lock: a role taken away meanwhile counts.
                    let role = Self.role(of: actor, row, roles)
                    guard role >= .admin else {
                        throw CourierStoreError(
                            .notAdmin,
                            "only the owner and the admins of \(group) add and remove members"
                        )
                    }
                    for user in removing where user != actor && Self.role(of: user, row, roles) >= role {
                        let name = try await transaction.name(of: user) ?? "?"
                        throw CourierStoreError(
                            .notOwner,
                            "only the owner of \(group) removes \(name), an \(Self.role(of: user, row, roles))"
                        )
                    }
                }
                try await Self.checkConsent(of: adding, to: actor, transaction)
            }
            var log = LogWrites()
            try await Self.lockLogs(of: current + adding, refusingRemoved: adding, into: &log, transaction)
            try await Self.addMembers(adding, to: row.id, atSeq: row.lastSeq, addedBy: actor, log: &log, transaction)
            for user in removing {
                try await Self.removeMember(user, from: row, log: &log, transaction)
            }
            // The owner gone: the group passes on, in the same commit, so that its owner is always a member.
            if let owner = row.owner, removing.contains(owner) {
                try await Self.passOn(row, log: &log, transaction)
            }
            return try await Self.finish(log, nowMs: nowMs, transaction)
        }
    }

    /// Leaves every group a user is in because another put it there (made the group with it, or added it), in one
    /// transaction: what one answers someone who fills one's list with groups with. Each group passes on as a leave
    /// passes it on.
    ///
    /// - Parameters:
    ///   - user: The user leaving.
    ///   - name: The user who put it in the groups (removed or not).
    /// - Returns: The groups left, by name, and the users whose event logs grew, with their newest cursors.
    /// - Throws: `unknown-user` (no one of that name), `storage-failed`.
    public func leaveGroups(
        of user: UserID,
        addedBy name: String,
        nowMs: Int64
    ) async throws -> (groups: [String], appended: [UserID: UInt64]) {
        try await self.transaction(doing: "leave the groups \(name) put a user in") { transaction in
            guard let adder = try await Self.user(named: name, transaction) else {
                throw CourierStoreError(.unknownUser, "no user named \(name)")
            }
            // The groups' rows first (by id), then the members' logs, as every change of members takes them.
            let locked = try await transaction.groups(of: user, addedBy: adder.id, locking: true)
            // Read again under the groups' locks: a leave that committed meanwhile is not left twice.
            let members = try await transaction.members(of: locked.map(\.row.id))
            let groups = locked.filter { members[$0.row.id]?.contains(user) == true }
            guard !groups.isEmpty else { return ([], [:]) }
            var log = LogWrites()
            try await Self.lockLogs(of: members.values.flatMap { $0 }, into: &log, transaction)
            for group in groups {
                try await Self.removeMember(user, from: group.row, log: &log, transaction)
                if group.row.owner == user { try await Self.passOn(group.row, log: &log, transaction) }
            }
            return (groups.map(\.name), try await Self.finish(log, nowMs: nowMs, transaction))
        }
    }

    /// Removes a user: its devices are revoked, it leaves every group, and it can no longer log in. Its messages
    /// stay in history under its name, which is never given out again.
    ///
    /// - Throws: `unknown-user`, `storage-failed`.
    public func removeUser(named name: String, nowMs: Int64) async throws {
        try await self.removeUser(named: name, nowMs: nowMs) { _ in }
    }

    /// Removes a user, once `check` (run with the user's row locked, before anything is removed) lets it.
    func removeUser(
        named name: String,
        nowMs: Int64,
        check: @escaping @Sendable (Transaction) async throws -> Void
    ) async throws {
        try await self.transaction(doing: "remove user \(name)") { transaction in
            let user = try await Self.activeUser(named: name, transaction)
            var log = LogWrites()
            var handled: Set<Int64> = []
            // Those who saw its profile are told it is gone (a last, empty profile event): their logs are locked
            // with the first ones.
            let hadProfile = try await transaction.profiles(of: [user.id])[user.id] != nil
            let peers =
                hadProfile
                ? Array(Self.peers(in: try await transaction.companions(of: user.id, directOnly: false, with: nil)))
                : []
            var lockingPeers = peers
            // Its groups first, then their members and the user, then its devices: the order every write locks in.
            // Then again, for a group that took the user in a transaction that committed after the list was read:
            // with the user's row locked now, no other can (adding a member locks its row and finds it removed).
            while true {
                let groups = try await transaction.groups(of: user.id, locking: true).filter {
                    !handled.contains($0.id)
                }
                if groups.isEmpty {
                    // The user's own row, locked once: its devices and its removal are written under it, and a
                    // group that adds it meanwhile waits, then finds it removed.
                    if log.book.knows(user.id) { break }
                    try await Self.lockLogs(of: [user.id] + lockingPeers, into: &log, transaction)
                    lockingPeers = []
                    continue
                }
                let members = try await transaction.members(of: groups.map(\.id))
                try await Self.lockLogs(
                    of: members.values.flatMap { $0 } + [user.id] + lockingPeers,
                    into: &log,
                    transaction
                )
                lockingPeers = []
                for group in groups {
                    try await Self.removeMember(user.id, from: group, log: &log, transaction)
                    if group.owner == user.id { try await Self.passOn(group, log: &log, transaction) }
                }
                handled.formUnion(groups.map(\.id))
            }
            try await check(transaction)
            // What it showed of itself goes with it.
            try await transaction.setProfile(nil, of: user.id)
            for peer in peers.sorted() where log.book.knows(peer) {
                log.append(to: peer, .profile, conversation: 0, seq: 0, actor: user.id)
            }
            let revoked = try await transaction.revokeDevices(nil, of: user.id, nowMs: nowMs)
            try await transaction.markRemoved(user.id, nowMs: nowMs)
            try await transaction.recordChanges(
                revoked.map(StoreChange.deviceRevoked) + [.userRemoved(user.id)]
                    + log.book.grownUsers.map(StoreChange.logAppended),
                nowMs: nowMs
            )
            // Last: the log's positions hold the counter until the commit (``StoreTransaction/writeLog(_:)``).
            try await transaction.writeLog(&log)
        }
    }

    /// A group by name, with its members' names.
    ///
    /// - Throws: `unknown-group`, `storage-failed`.
    public func group(named name: String) async throws -> Group {
        guard Names.isValid(name) else { throw CourierStoreError(.unknownGroup, "no group named \(name)") }
        return try await self.reading(doing: "read group \(name)") { transaction in
            guard let group = try await transaction.groupWithMembers(named: name) else {
                throw CourierStoreError(.unknownGroup, "no group named \(name)")
            }
            return group
        }
    }

    /// The names of every group, sorted.
    public func groupNames() async throws -> [String] {
        try await self.reading(doing: "list groups") { transaction in try await transaction.groupNames() }
    }

    /// Makes a member of a group an admin, or a member again. Only the owner does (nil actor: the administrator);
    /// every member gets a `role` event.
    ///
    /// - Returns: The users whose event logs grew, with their newest cursors (none when nothing changed).
    /// - Throws: `unknown-group`, `not-member` (the actor, or the one named, is not a member), `not-owner`,
    ///   `invalid-request` (the owner named: its role changes by a transfer), `storage-failed`.
    @discardableResult
    public func setRole(
        in group: String,
        of member: String,
        to role: GroupRole,
        by actor: UserID?,
        nowMs: Int64
    ) async throws -> [UserID: UInt64] {
        guard role != .owner else {
            return try await self.transferOwnership(of: group, to: member, by: actor, nowMs: nowMs)
        }
        return try await self.changingRoles(of: group, by: actor, nowMs: nowMs) { row, roles, transaction in
            let user = try await Self.member(member, of: group, roles, transaction)
            guard user != row.owner else {
                throw CourierStoreError(.invalidRequest, "\(member) owns \(group): a transfer gives it to another")
            }
            guard Self.role(of: user, row, roles) != role else { return [] }
            try await transaction.setRole(role, of: user, in: row.id)
            return [(user, role)]
        }
    }

    /// Gives a group to another of its members; the owner before becomes an admin. Only the owner does (nil actor:
    /// the administrator). Every member gets a `role` event for each of the two.
    ///
    /// - Throws: `unknown-group`, `not-member`, `not-owner`, `storage-failed`.
    @discardableResult
    public func transferOwnership(
        of group: String,
        to member: String,
        by actor: UserID?,
        nowMs: Int64
    ) async throws -> [UserID: UInt64] {
        try await self.changingRoles(of: group, by: actor, nowMs: nowMs) { row, roles, transaction in
            let user = try await Self.member(member, of: group, roles, transaction)
            guard user != row.owner else { return [] }
            try await transaction.setOwner(user, of: row.id)
            try await transaction.setRole(.member, of: user, in: row.id)
            var changes = [(user, GroupRole.owner)]
            if let owner = row.owner, roles.contains(where: { $0.user == owner }) {
                try await transaction.setRole(.admin, of: owner, in: row.id)
                changes.append((owner, .admin))
            }
            return changes
        }
    }

    /// A group's members with their roles: the owner first, then the admins, then the members, each the
    /// longest-standing first. Only a member asks (nil: the administrator).
    ///
    /// - Throws: `unknown-group`, `not-member`, `storage-failed`.
    public func groupMembers(of group: String, for viewer: UserID?) async throws -> [GroupMember] {
        try await self.groupRoster(of: group, for: viewer).members
    }

    /// A group's title and its members with their roles, as ``groupMembers(of:for:)`` lists them.
    ///
    /// - Throws: `unknown-group`, `not-member`, `storage-failed`.
    public func groupRoster(of group: String, for viewer: UserID?) async throws -> GroupRoster {
        guard Names.isValid(group) else { throw CourierStoreError(.unknownGroup, "no group named \(group)") }
        return try await self.reading(doing: "read the members of \(group)") { transaction in
            guard let row = try await transaction.group(named: group, locking: false) else {
                throw CourierStoreError(.unknownGroup, "no group named \(group)")
            }
            let roles = try await transaction.memberRoles(of: row.id)
            if let viewer, !roles.contains(where: { $0.user == viewer }) {
                throw CourierStoreError(.notMember, "you are not a member of \(group)")
            }
            let names = try await transaction.names(of: Set(roles.map(\.user)))
            let members = roles.map {
                GroupMember(
                    user: names[$0.user] ?? "?",
                    role: Self.role(of: $0.user, row, roles),
                    joinedSeq: UInt64(max(0, $0.joinedSeq))
                )
            }
            // Stable: within a role, the order the members joined in.
            return GroupRoster(
                title: row.title ?? "",
                members: members.enumerated().sorted {
                    ($0.element.role, -$0.offset) > ($1.element.role, -$1.offset)
                }.map(\.element)
            )
        }
    }

    // MARK: The rules' parts

    /// Runs a change of roles under the group's lock, by its owner (or the administrator, nil): `change` says
    /// whose role became what; every member gets a `role` event for each.
    private func changingRoles(
        of group: String,
        by actor: UserID?,
        nowMs: Int64,
        _ change: @escaping @Sendable (GroupRow, [MemberRole], Transaction) async throws -> [(UserID, GroupRole)]
    ) async throws -> [UserID: UInt64] {
        guard Names.isValid(group) else { throw CourierStoreError(.unknownGroup, "no group named \(group)") }
        return try await self.transaction(doing: "change roles in \(group)") { transaction in
            let (row, roles) = try await Self.lockGroup(
                group,
                for: actor,
                needing: .owner,
                else: "only the owner of \(group) changes roles",
                transaction
            )
            // The members' rows before their member rows change: the order every writer takes them in (a member
            // setting how the group alerts it holds its own row, then its member row).
            var log = LogWrites()
            let everyone = roles.map(\.user)
            try await Self.lockLogs(of: everyone, into: &log, transaction)
            let changes = try await change(row, roles, transaction)
            guard !changes.isEmpty else { return [:] }
            for (user, role) in changes {
                for recipient in everyone.sorted() {
                    log.append(
                        to: recipient,
                        .role,
                        conversation: row.id,
                        seq: row.lastSeq,
                        actor: user,
                        detail: role.rawValue
                    )
                }
            }
            return try await Self.finish(log, nowMs: nowMs, transaction)
        }
    }
}
