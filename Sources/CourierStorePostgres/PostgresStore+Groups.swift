public import CourierStore
internal import Logging
internal import PostgresNIO

extension PostgresStore {
    @discardableResult
    public func createGroup(
        name: String,
        owner: String,
        members: [String],
        byOwner: Bool,
        nowMs: Int64
    ) async throws -> [UserID: UInt64] {
        try Names.validate(name, what: "group name")
        let logger = self.logger
        return try await self.write(doing: "create group \(name)") { connection in
            let ownerUser = try await Self.activeUser(named: owner, connection, logger: logger)
            var users = [ownerUser.id]
            for member in members {
                let user = try await Self.activeUser(named: member, connection, logger: logger)
                if !users.contains(user.id) { users.append(user.id) }
            }
            if byOwner { try await self.checkConsent(of: Array(users.dropFirst()), to: ownerUser.id, connection) }
            // Two nodes making the name at once: the unique index on lower(name) lets one in.
            guard
                let conversation = try await connection.value(
                    """
                    INSERT INTO conversations (kind, name, owner_id, created_ms)
                    VALUES (2, \(name), \(ownerUser.id.rawValue), \(nowMs)) ON CONFLICT DO NOTHING RETURNING id
                    """,
                    as: Int64.self,
                    logger: logger
                )
            else { throw CourierStoreError(.nameTaken, "a group named \(name) exists") }
            var log = PostgresEventLog(logger: logger)
            try await log.lock(users, connection)
            try await Self.checkNotRemoved(users, connection, logger: logger)
            try await Self.addMembers(users, to: conversation, atSeq: 0, log: &log, connection)
            return try await Self.finishRecordingChanges(log, nowMs: nowMs, connection)
        }
    }

    @discardableResult
    public func changeMembers(
        of group: String,
        actor: UserID?,
        add: [String],
        remove: [String],
        nowMs: Int64
    ) async throws -> [UserID: UInt64] {
        guard Names.isValid(group) else { throw CourierStoreError(.unknownGroup, "no group named \(group)") }
        let logger = self.logger
        return try await self.write(doing: "change the members of \(group)") { connection in
            // The group's row first: its members change only under it.
            guard
                let row = try await connection.row(
                    """
                    SELECT id, owner_id, last_seq FROM conversations WHERE kind = 2 AND lower(name) = lower(\(group))
                    FOR UPDATE
                    """,
                    logger: logger
                )
            else { throw CourierStoreError(.unknownGroup, "no group named \(group)") }
            let conversation: Int64 = try row.get("id")
            let owner: Int64? = try row.get("owner_id")
            let current = Set(try await Self.memberIDs(of: conversation, connection, logger: logger))
            var adding: [UserID] = []
            for name in add {
                let user = try await Self.activeUser(named: name, connection, logger: logger).id
                if !current.contains(user), !adding.contains(user) { adding.append(user) }
            }
            var removing: [UserID] = []
            for name in remove {
                guard let user = try await Self.user(named: name, connection, logger: logger) else {
                    throw CourierStoreError(.unknownUser, "no user named \(name)")
                }
                if current.contains(user.id), !removing.contains(user.id) { removing.append(user.id) }
            }
            if let actor {
                guard current.contains(actor) else {
                    throw CourierStoreError(.notMember, "you are not a member of \(group)")
                }
                let leavingOnly = adding.isEmpty && removing.allSatisfy { $0 == actor }
                guard owner == actor.rawValue || leavingOnly else {
                    throw CourierStoreError(.notOwner, "only the owner of \(group) adds and removes members")
                }
                try await self.checkConsent(of: adding, to: actor, connection)
            }
            var log = PostgresEventLog(logger: logger)
            try await log.lock(Array(current) + adding, connection)
            try await Self.checkNotRemoved(adding, connection, logger: logger)
            try await Self.addMembers(adding, to: conversation, atSeq: try row.get("last_seq"), log: &log, connection)
            for user in removing {
                try await Self.removeMember(user, from: conversation, log: &log, connection)
            }
            return try await Self.finishRecordingChanges(log, nowMs: nowMs, connection)
        }
    }

    /// Writes a group change's log entries and records each grown log as a change, for the running servers (an
    /// admin command's change, or another node's).
    ///
    /// - Returns: The users whose logs grew, with their newest cursors.
    private static func finishRecordingChanges(
        _ log: PostgresEventLog,
        nowMs: Int64,
        _ connection: PostgresConnection
    ) async throws -> [UserID: UInt64] {
        try await log.finish(connection)
        try await Self.recordChanges(
            log.book.appended.keys.sorted().map(StoreChange.logAppended),
            nowMs: nowMs,
            connection,
            logger: log.logger
        )
        return log.book.appended
    }

    /// Refuses to add users to a group by someone they have not agreed to: each must be a contact of the actor.
    private func checkConsent(of users: [UserID], to actor: UserID, _ connection: PostgresConnection) async throws {
        guard !users.isEmpty else { return }
        let contacts = try await Self.contacts(of: actor, connection, logger: self.logger)
        for user in users where !contacts.contains(user) {
            throw CourierStoreError(
                .notContact,
                "\(try await self.name(of: user, connection)) has not written to you: only contacts can be added to a "
                    + "group"
            )
        }
    }

    public func group(named name: String) async throws -> Group {
        guard Names.isValid(name) else { throw CourierStoreError(.unknownGroup, "no group named \(name)") }
        let logger = self.logger
        return try await self.read(doing: "read group \(name)") { connection in
            guard
                let row = try await connection.row(
                    """
                    SELECT c.id, c.name, c.last_seq, u.name AS owner FROM conversations c
                    LEFT JOIN users u ON u.id = c.owner_id WHERE c.kind = 2 AND lower(c.name) = lower(\(name))
                    """,
                    logger: logger
                )
            else { throw CourierStoreError(.unknownGroup, "no group named \(name)") }
            let id: Int64 = try row.get("id")
            let members = try await connection.values(
                """
                SELECT u.name FROM members m JOIN users u ON u.id = m.user_id WHERE m.conversation_id = \(id)
                ORDER BY lower(u.name) COLLATE "C"
                """,
                as: String.self,
                logger: logger
            )
            return Group(
                name: try row.get("name"),
                owner: try row.get("owner"),
                members: members,
                lastSeq: UInt64(try row.get("last_seq", as: Int64.self))
            )
        }
    }

    public func groupNames() async throws -> [String] {
        let logger = self.logger
        return try await self.read(doing: "list groups") { connection in
            try await connection.values(
                "SELECT name FROM conversations WHERE kind = 2 ORDER BY lower(name) COLLATE \"C\"",
                as: String.self,
                logger: logger
            )
        }
    }

    static func memberIDs(
        of conversation: Int64,
        _ connection: PostgresConnection,
        logger: Logger
    ) async throws -> [UserID] {
        try await connection.values(
            "SELECT user_id FROM members WHERE conversation_id = \(conversation) ORDER BY user_id",
            as: Int64.self,
            logger: logger
        ).map(UserID.init(rawValue:))
    }

    /// Adds members (whose rows, and the present members', the caller locked); everyone in the group afterwards
    /// gets a `joined` event for each new member.
    static func addMembers(
        _ users: [UserID],
        to conversation: Int64,
        atSeq seq: Int64,
        log: inout PostgresEventLog,
        _ connection: PostgresConnection
    ) async throws {
        guard !users.isEmpty else { return }
        try await connection.run(
            """
            INSERT INTO members (conversation_id, user_id, joined_seq, read_seq, delivered_seq)
            SELECT \(conversation), user_id, \(seq), \(seq), \(seq) FROM unnest(\(users.map(\.rawValue))::bigint[])
                AS m(user_id)
            """,
            logger: log.logger
        )
        let everyone = try await memberIDs(of: conversation, connection, logger: log.logger)
        for user in users {
            for recipient in everyone {
                log.append(
                    to: recipient,
                    .membership,
                    conversation: conversation,
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
        from conversation: Int64,
        log: inout PostgresEventLog,
        _ connection: PostgresConnection
    ) async throws {
        let seq =
            try await connection.value(
                "SELECT last_seq FROM conversations WHERE id = \(conversation)",
                as: Int64.self,
                logger: log.logger
            ) ?? 0
        for recipient in try await memberIDs(of: conversation, connection, logger: log.logger) {
            log.append(
                to: recipient,
                .membership,
                conversation: conversation,
                seq: seq,
                actor: user,
                detail: MembershipChange.left.rawValue
            )
        }
        try await connection.run(
            "DELETE FROM members WHERE conversation_id = \(conversation) AND user_id = \(user.rawValue)",
            logger: log.logger
        )
    }
}
