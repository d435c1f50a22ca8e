// The rules of blocking, for every database.

/// A user someone blocks, as that user lists them.
public struct BlockedUser: Hashable, Sendable {
    public var name: String
    public var sinceMs: Int64

    public init(name: String, sinceMs: Int64) {
        self.name = name
        self.sinceMs = sinceMs
    }
}

/// The blocks a user is in: whom it blocks, and who blocks it.
public struct BlockRelations: Hashable, Sendable {
    public var blocking: Set<UserID>
    public var blockedBy: Set<UserID>

    public init(blocking: Set<UserID> = [], blockedBy: Set<UserID> = []) {
        self.blocking = blocking
        self.blockedBy = blockedBy
    }

    /// The users who see nothing of this one's presence and typing, nor it of theirs: both sides of every block.
    public var apart: Set<UserID> { self.blocking.union(self.blockedBy) }
}

extension StoreBackend {
    /// Blocks a user, or unblocks it (`on` false). While it holds:
    /// - the blocked user's direct messages to the blocker are stored for their sender alone: never in the
    ///   blocker's log, its history, its unread counts or its pushes (the sender sees them sent, never delivered);
    /// - the blocker's read and delivered marks in their direct conversation stay where they were at the block;
    /// - the blocked user cannot add the blocker to a group; and the two see nothing of each other's presence and
    ///   typing, and the blocked user none of the blocker's profile but the name.
    /// In a group they share, both still see every message. Unblocking lets new messages through; the ones sent
    /// meanwhile stay withheld.
    ///
    /// - Returns: Whether it changed anything (false: the user was blocked already, or not blocked, or there is no
    ///   such user to unblock: an unblock tells nothing of who exists).
    /// - Throws: `unknown-user` (blocking no one), `invalid-request` (oneself), `quota-exceeded` (past
    ///   ``StoreLimits/maxBlocksPerUser``), `storage-failed`.
    @discardableResult
    public func block(_ name: String, by user: UserID, on: Bool, nowMs: Int64) async throws -> Bool {
        guard Names.isValid(name) else { throw CourierStoreError(.unknownUser, "no user named \(name)") }
        return try await self.transaction(doing: on ? "block \(name)" : "unblock \(name)") { transaction in
            guard let target = try await Self.user(named: name, transaction), !on || target.removedMs == nil else {
                guard on else { return false }
                throw CourierStoreError(.unknownUser, "no user named \(name)")
            }
            guard target.id != user else { throw CourierStoreError(.invalidRequest, "you cannot block yourself") }
            // Their direct conversation's row, then both users' rows in the order of their ids, as a send's batch
            // locks them: a message between the two is committed before the block, or withheld by it.
            try await transaction.lockDirect(UserPair(user, target.id))
            _ = try await transaction.lockUsers([user, target.id].sorted())
            if on {
                let blocking = try await transaction.blockPairs(involving: user, with: nil)
                    .filter { $0.blocker == user }
                guard !blocking.contains(where: { $0.blocked == target.id }) else { return false }
                guard blocking.count < self.limits.maxBlocksPerUser else {
                    throw CourierStoreError(
                        .quotaExceeded,
                        "you block \(blocking.count) users, the most one may (max-blocks-per-user)"
                    )
                }
            }
            return try await transaction.setBlock(user, target.id, on: on, nowMs: nowMs)
        }
    }

    /// The users a user blocks, by name, the earliest blocked first.
    public func blocks(of user: UserID) async throws -> [BlockedUser] {
        try await self.reading(doing: "read blocks") { transaction in
            let rows = try await transaction.blockPairs(involving: user, with: nil).filter { $0.blocker == user }
            let names = try await transaction.names(of: Set(rows.map(\.blocked)))
            return rows.sorted { ($0.createdMs, $0.blocked.rawValue) < ($1.createdMs, $1.blocked.rawValue) }
                .compactMap { row in names[row.blocked].map { BlockedUser(name: $0, sinceMs: row.createdMs) } }
        }
    }

    /// The blocks a user is in, either side.
    public func blockRelations(of user: UserID) async throws -> BlockRelations {
        try await self.reading(doing: "read blocks") { transaction in
            try await Self.blockRelations(of: user, transaction)
        }
    }

    /// The blocks a user is in (only those with one of `others`, when given: a block of someone else costs nothing).
    static func blockRelations(
        of user: UserID,
        with others: [UserID]? = nil,
        _ transaction: Transaction
    ) async throws -> BlockRelations {
        var relations = BlockRelations()
        if let others, others.isEmpty { return relations }
        for row in try await transaction.blockPairs(involving: user, with: others) {
            if row.blocker == user {
                relations.blocking.insert(row.blocked)
            } else {
                relations.blockedBy.insert(row.blocker)
            }
        }
        return relations
    }
}
