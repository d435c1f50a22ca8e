internal import GRDB

extension SQLiteStore {
    /// Creates a group. Every member, the owner included, gets a `joined` event.
    ///
    /// - Parameters:
    ///   - name: The group's name (see ``Names``); unique.
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
        return try await self.write { db in
            if try Int64.fetchOne(
                db,
                sql: "SELECT id FROM conversations WHERE kind = 2 AND name = ?",
                arguments: [name]
            ) != nil {
                throw CourierStoreError(.nameTaken, "a group named \(name) exists")
            }
            let ownerUser = try Self.activeUser(named: owner, db)
            var users = [ownerUser.id]
            for member in members {
                let user = try Self.activeUser(named: member, db)
                if !users.contains(user.id) { users.append(user.id) }
            }
            if byOwner { try Self.checkConsent(of: Array(users.dropFirst()), to: ownerUser.id, db) }
            try db.execute(
                sql: "INSERT INTO conversations (kind, name, owner_id, created_ms) VALUES (2, ?, ?, ?)",
                arguments: [name, ownerUser.id.rawValue, nowMs]
            )
            let conversation = db.lastInsertedRowID
            var log = EventLogWriter()
            try Self.addMembers(users, to: conversation, atSeq: 0, log: &log, db)
            try log.finish(db)
            for user in log.appended.keys { try Self.recordChange(.logAppended(user), nowMs: nowMs, db) }
            return log.appended
        }
    }

    /// Adds and removes members of a group.
    ///
    /// - Parameters:
    ///   - group: The group's name.
    ///   - actor: The user asking; nil for the administrator (the `courier group` commands). A user other than the
    ///     owner may only remove itself (leave).
    ///   - add: User names to add; present members are skipped. New members see messages from now on.
    ///   - remove: User names to remove; non-members are skipped.
    /// - Returns: The users whose event logs grew, with their newest cursors.
    /// - Throws: `unknown-group`, `not-member`, `not-owner`, `unknown-user`, `storage-failed`.
    @discardableResult
    public func changeMembers(
        of group: String,
        actor: UserID?,
        add: [String] = [],
        remove: [String] = [],
        nowMs: Int64
    ) async throws -> [UserID: UInt64] {
        guard Names.isValid(group) else { throw CourierStoreError(.unknownGroup, "no group named \(group)") }
        return try await self.write { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: "SELECT id, owner_id, last_seq FROM conversations WHERE kind = 2 AND name = ?",
                    arguments: [group]
                )
            else { throw CourierStoreError(.unknownGroup, "no group named \(group)") }
            let conversation: Int64 = row["id"]
            let owner: Int64? = row["owner_id"]
            let current = Set(try Self.memberIDs(of: conversation, db))
            let adding = try add.map { try Self.activeUser(named: $0, db).id }.filter { !current.contains($0) }
            let removing = try remove.compactMap { name -> UserID? in
                guard let user = try Self.user(named: name, db) else {
                    throw CourierStoreError(.unknownUser, "no user named \(name)")
                }
                return current.contains(user.id) ? user.id : nil
            }
            if let actor {
                guard current.contains(actor) else {
                    throw CourierStoreError(.notMember, "you are not a member of \(group)")
                }
                let leavingOnly = adding.isEmpty && removing.allSatisfy { $0 == actor }
                guard owner == actor.rawValue || leavingOnly else {
                    throw CourierStoreError(.notOwner, "only the owner of \(group) adds and removes members")
                }
                try Self.checkConsent(of: adding, to: actor, db)
            }
            var log = EventLogWriter()
            try Self.addMembers(adding, to: conversation, atSeq: row["last_seq"], log: &log, db)
            for user in removing {
                try Self.removeMember(user, from: conversation, log: &log, db)
            }
            try log.finish(db)
            for user in log.appended.keys { try Self.recordChange(.logAppended(user), nowMs: nowMs, db) }
            return log.appended
        }
    }

    /// Refuses to add users to a group by someone they have not agreed to: each must be a contact of the actor.
    static func checkConsent(of users: [UserID], to actor: UserID, _ db: Database) throws {
        guard !users.isEmpty else { return }
        let contacts = try Self.contacts(of: actor, db)
        for user in users where !contacts.contains(user) {
            throw CourierStoreError(
                .notContact,
                "\(try Self.userName(user, db)) has not written to you: only contacts can be added to a group"
            )
        }
    }

    private static func userName(_ user: UserID, _ db: Database) throws -> String {
        try String.fetchOne(db, sql: "SELECT name FROM users WHERE id = ?", arguments: [user.rawValue]) ?? "?"
    }

    /// A group by name, with its members' names.
    ///
    /// - Throws: `unknown-group`, `storage-failed`.
    public func group(named name: String) async throws -> Group {
        guard Names.isValid(name) else { throw CourierStoreError(.unknownGroup, "no group named \(name)") }
        return try await self.read { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT c.id, c.name, c.last_seq, u.name AS owner FROM conversations c
                        LEFT JOIN users u ON u.id = c.owner_id WHERE c.kind = 2 AND c.name = ?
                        """,
                    arguments: [name]
                )
            else { throw CourierStoreError(.unknownGroup, "no group named \(name)") }
            let members = try String.fetchAll(
                db,
                sql:
                    "SELECT u.name FROM members m JOIN users u ON u.id = m.user_id WHERE m.conversation_id = ? ORDER BY u.name",
                arguments: [row["id"] as Int64]
            )
            return Group(
                name: row["name"],
                owner: row["owner"],
                members: members,
                lastSeq: UInt64(row["last_seq"] as Int64)
            )
        }
    }

    /// The names of every group, sorted.
    public func groupNames() async throws -> [String] {
        try await self.read { db in
            try String.fetchAll(db, sql: "SELECT name FROM conversations WHERE kind = 2 ORDER BY name")
        }
    }

    static func memberIDs(of conversation: Int64, _ db: Database) throws -> [UserID] {
        try Int64.fetchAll(
            db.cachedStatement(sql: "SELECT user_id FROM members WHERE conversation_id = ?"),
            arguments: [conversation]
        ).map(UserID.init(rawValue:))
    }

    /// Adds members; everyone in the group afterwards gets a `joined` event for each new member.
    static func addMembers(
        _ users: [UserID],
        to conversation: Int64,
        atSeq seq: Int64,
        log: inout EventLogWriter,
        _ db: Database
    ) throws {
        guard !users.isEmpty else { return }
        for user in users {
            try db.execute(
                sql:
                    "INSERT INTO members (conversation_id, user_id, joined_seq, read_seq, delivered_seq) VALUES (?, ?, ?, ?, ?)",
                arguments: [conversation, user.rawValue, seq, seq, seq]
            )
        }
        let everyone = try memberIDs(of: conversation, db)
        for user in users {
            for recipient in everyone {
                try log.append(
                    to: recipient,
                    .membership,
                    conversation: conversation,
                    seq: seq,
                    actor: user,
                    detail: MembershipChange.joined.rawValue,
                    db
                )
            }
        }
    }

    /// Removes a member; everyone in the group before, the member included, gets a `left` event.
    static func removeMember(_ user: UserID, from conversation: Int64, log: inout EventLogWriter, _ db: Database) throws
    {
        let seq =
            try Int64.fetchOne(db, sql: "SELECT last_seq FROM conversations WHERE id = ?", arguments: [conversation])
            ?? 0
        for recipient in try memberIDs(of: conversation, db) {
            try log.append(
                to: recipient,
                .membership,
                conversation: conversation,
                seq: seq,
                actor: user,
                detail: MembershipChange.left.rawValue,
                db
            )
        }
        try db.execute(
            sql: "DELETE FROM members WHERE conversation_id = ? AND user_id = ?",
            arguments: [conversation, user.rawValue]
        )
    }
}
