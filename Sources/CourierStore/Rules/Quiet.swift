// The rules of a group's title and of how conversations alert their members, for every database.

internal import Foundation

extension StoreBackend {
    /// Gives a group a title, a name in any script shown beside its name (which never changes: it is how everyone
    /// addresses the group), or takes it away (empty). Only the owner and admins do (the administrator too: nil).
    /// Every member gets a `title` event.
    ///
    /// - Parameter title: Under the rules and limits of a display name (``checkDisplayName(_:)``; the white space
    ///   around it dropped); empty for none.
    /// - Returns: The users whose event logs grew, with their newest cursors (none when the title is unchanged).
    /// - Throws: `unknown-group`, `not-member`, `not-admin`, `invalid-request` (the title), `storage-failed`.
    @discardableResult
    public func setGroupTitle(
        _ title: String,
        of group: String,
        by actor: UserID?,
        nowMs: Int64
    ) async throws -> [UserID: UInt64] {
        let title = try self.checkTitle(title)
        guard Names.isValid(group) else { throw CourierStoreError(.unknownGroup, "no group named \(group)") }
        return try await self.transaction(doing: "set the title of \(group)") { transaction in
            let (row, roles) = try await Self.lockGroup(
                group,
                for: actor,
                needing: .admin,
                else: "only the owner and admins of \(group) give it a title",
                transaction
            )
            guard (row.title ?? "") != title else { return [:] }
            try await transaction.setTitle(title.isEmpty ? nil : title, of: row.id)
            var log = LogWrites()
            let everyone = roles.map(\.user)
            try await Self.lockLogs(of: everyone, into: &log, transaction)
            for recipient in everyone.sorted() {
                log.append(
                    to: recipient,
                    .title,
                    conversation: row.id,
                    seq: row.lastSeq,
                    // The administrator's (nil) is said as no one's.
                    actor: actor,
                    key: title
                )
            }
            return try await Self.finish(log, nowMs: nowMs, transaction)
        }
    }

    /// A group's title as it is kept: under the rules and limits of a display name (``checkDisplayName(_:)``).
    ///
    /// - Throws: `invalid-request`, saying what is wrong.
    func checkTitle(_ title: String) throws -> String {
        do {
            return try self.checkDisplayName(title)
        } catch let error as CourierStoreError {
            throw CourierStoreError(
                .invalidRequest,
                error.message.replacingOccurrences(of: "a display name", with: "a group's title")
            )
        }
    }

    /// Sets how a conversation alerts a user (on all of its devices): a `notify` event in the user's own log tells
    /// its other devices. Unread messages and mentions are counted whatever the level.
    ///
    /// - Parameter conversation: As the user names it: a group it is a member of, or a user it has written with.
    /// - Returns: The users whose event logs grew (the user alone; none when the level is unchanged).
    /// - Throws: `unknown-group`, `unknown-user`, `not-member` (no such conversation of the user's), `storage-failed`.
    @discardableResult
    public func setNotify(
        _ level: NotifyLevel,
        in conversation: Conversation,
        for user: UserID,
        nowMs: Int64
    ) async throws -> [UserID: UInt64] {
        try conversation.checkNames()
        return try await self.transaction(doing: "set how \(conversation) alerts") { transaction in
            let id: Int64
            switch conversation {
            case .group(let name):
                guard let row = try await transaction.group(named: name, locking: false) else {
                    throw CourierStoreError(.unknownGroup, "no group named \(name)")
                }
                id = row.id
            case .user(let name):
                guard let peer = try await Self.user(named: name, transaction) else {
                    throw CourierStoreError(.unknownUser, "no user named \(name)")
                }
                guard let direct = try await transaction.directID(of: UserPair(user, peer.id)) else {
                    throw CourierStoreError(.notMember, "you have no conversation with \(name)")
                }
                id = direct
            }
            var log = LogWrites()
            // The user's row first, as every writer of its log takes it.
            try await Self.lockLogs(of: [user], into: &log, transaction)
            guard let before = try await transaction.setNotify(level, of: user, in: id) else {
                throw CourierStoreError(.notMember, "you are not a member of \(conversation)")
            }
            guard before != level else { return [:] }
            log.append(to: user, .notify, conversation: id, seq: 0, detail: level.rawValue)
            return try await Self.finish(log, nowMs: nowMs, transaction)
        }
    }
}
