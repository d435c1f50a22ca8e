// The rules of profiles (display names, avatars), for every database.

internal import Foundation

extension StoreBackend {
    /// Changes a user's profile. When it changed, the user's own log and the log of every user who sees it (the
    /// members of its groups, and those of its direct conversations in which both have written or read: its peers,
    /// who see its presence) get a `profile` event: their devices, offline ones on their next sync, show the change.
    ///
    /// - Returns: The users whose event logs grew, with their newest cursors.
    /// - Throws: `invalid-profile` (a display name or picture that breaks the rules: ``checkDisplayName(_:)``,
    ///   ``checkPicture(_:maxBytes:)``), `unknown-media` (a picture this user has not uploaded), `token-revoked` (the
    ///   user was removed), `storage-failed`.
    @discardableResult
    public func setProfile(of user: UserID, _ update: ProfileUpdate, nowMs: Int64) async throws -> [UserID: UInt64] {
        let displayName = try update.displayName.map { try self.checkDisplayName($0) }
        if case .set(let avatar, let thumbnail)? = update.avatar {
            try self.checkPicture(avatar, maxBytes: self.limits.maxAvatarBytes)
            try self.checkPicture(thumbnail, maxBytes: self.limits.maxThumbnailBytes)
        }
        return try await self.transaction(doing: "change a profile") { transaction in
            if case .set(let avatar, let thumbnail)? = update.avatar {
                for picture in [avatar, thumbnail] {
                    guard try await transaction.uploadedSize(by: user, sha256: picture.sha256) == picture.size else {
                        throw CourierStoreError(
                            .unknownMedia,
                            "upload the picture \(picture.sha256) (\(picture.size) bytes) before showing it"
                        )
                    }
                }
            }
            let peers = Self.peers(in: try await transaction.companions(of: user, directOnly: false, with: nil))
            var log = LogWrites()
            let recipients = Array(peers.union([user])).sorted()
            // The user's row among the others, in the order of ids that every write locks in.
            let rows = try await transaction.lockUsers(recipients)
            guard rows[user]?.removed == false else {
                throw CourierStoreError(.tokenRevoked, CourierStoreError.accountRemovedMessage)
            }
            for (id, row) in rows { log.book.start(id, at: row.cursor) }
            let before =
                try await transaction.profiles(of: [user])[user]
                ?? ProfileRow(displayName: nil, avatar: nil, thumbnail: nil, updatedMs: 0)
            var after = before
            if let displayName { after.displayName = displayName.isEmpty ? nil : displayName }
            switch update.avatar {
            case .set(let avatar, let thumbnail)?:
                after.avatar = avatar
                after.thumbnail = thumbnail
            case .remove?:
                after.avatar = nil
                after.thumbnail = nil
            case nil:
                break
            }
            // Nothing changed: nothing to tell anyone.
            guard
                after.displayName != before.displayName || after.avatar != before.avatar
                    || after.thumbnail != before.thumbnail
            else { return [:] }
            after.updatedMs = nowMs
            try await transaction.setProfile(after.isEmpty ? nil : after, of: user)
            for recipient in recipients where rows[recipient]?.removed == false {
                log.append(to: recipient, .profile, conversation: 0, seq: 0, actor: user)
            }
            return try await Self.finish(log, nowMs: nowMs, transaction)
        }
    }

    /// The profiles of users by name (without regard to case): one for each that exists and was not removed (with
    /// no display name and no avatar when it set none), in the order asked, each once.
    public func profiles(of names: [String]) async throws -> [UserProfile] {
        try await self.reading(doing: "read profiles") { transaction in
            var users: [User] = []
            for name in names {
                guard let user = try await Self.user(named: name, transaction), user.removedMs == nil,
                    !users.contains(where: { $0.id == user.id })
                else { continue }
                users.append(user)
            }
            let rows = try await transaction.profiles(of: users.map(\.id))
            return users.map { UserProfile(user: $0.name, rows[$0.id]) }
        }
    }

    // MARK: The rules' parts

    /// A display name as it is kept: without the white space around it. Any script; at most
    /// ``StoreLimits/maxDisplayNameCharacters`` characters (grapheme clusters: what a reader sees as one) and
    /// ``StoreLimits/maxDisplayNameBytes``; no control or bidirectional control characters (``StoreText``), no line
    /// breaks, and not only characters that show nothing (a blank name would pass for no name). Empty: none.
    ///
    /// - Throws: `invalid-profile`.
    package func checkDisplayName(_ name: String) throws -> String {
        guard name.utf8.count <= self.limits.maxDisplayNameBytes * 4 else {
            throw CourierStoreError(
                .invalidProfile,
                "a display name has at most \(self.limits.maxDisplayNameBytes) bytes"
            )
        }
        let trimmed = name.trimmingCharacters(in: .whitespacesAndNewlines)
        // Empty, or white space alone: none. (Foundation trims a zero-width space too: a name of those is refused
        // below, as showing nothing, not taken as none.)
        if trimmed.isEmpty, name.unicodeScalars.allSatisfy(\.properties.isWhitespace) { return "" }
        guard trimmed.utf8.count <= self.limits.maxDisplayNameBytes else {
            throw CourierStoreError(
                .invalidProfile,
                "a display name has at most \(self.limits.maxDisplayNameBytes) bytes"
            )
        }
        guard trimmed.count <= self.limits.maxDisplayNameCharacters else {
            throw CourierStoreError(
                .invalidProfile,
                "a display name has at most \(self.limits.maxDisplayNameCharacters) characters, not \(trimmed.count)"
            )
        }
        guard StoreText.isClean(trimmed),
            !trimmed.unicodeScalars.contains(where: { "\u{2028}\u{2029}\u{85}".unicodeScalars.contains($0) })
        else {
            throw CourierStoreError(
                .invalidProfile,
                "a display name has no control characters, line breaks or bidirectional controls"
            )
        }
        let visible =
            !trimmed.isEmpty
            && trimmed.unicodeScalars.contains {
                !$0.properties.isDefaultIgnorableCodePoint && !$0.properties.isWhitespace
                    && $0.properties.generalCategory != .format
            }
        guard visible else { throw CourierStoreError(.invalidProfile, "a display name shows something") }
        return trimmed
    }

    /// Refuses a profile picture that is not an image of a kind every client shows, or too large.
    ///
    /// - Throws: `invalid-profile`.
    package func checkPicture(_ picture: ProfileImage, maxBytes: Int64) throws {
        guard SHA256Hex.isValid(picture.sha256) else {
            throw CourierStoreError(.invalidProfile, "a picture is named by its sha256: 64 lowercase hex digits")
        }
        guard Self.pictureTypes.contains(picture.mime) else {
            throw CourierStoreError(
                .invalidProfile,
                "a picture is \(Self.pictureTypes.joined(separator: ", ")), not \(picture.mime.debugDescription)"
            )
        }
        guard picture.size > 0, picture.size <= maxBytes else {
            throw CourierStoreError(.invalidProfile, "this picture has at most \(maxBytes) bytes")
        }
        guard (0...16_384).contains(picture.width), (0...16_384).contains(picture.height) else {
            throw CourierStoreError(.invalidProfile, "a picture's width and height are 0 to 16384 pixels")
        }
    }

    /// The types of image a profile picture may be.
    static var pictureTypes: [String] { ["image/jpeg", "image/png", "image/webp", "image/gif"] }
}

extension ProfileRow {
    /// Whether it says nothing: no display name, no avatar.
    var isEmpty: Bool { self.displayName == nil && self.avatar == nil && self.thumbnail == nil }
}

extension UserProfile {
    /// A user's profile from the row its store keeps (none: nothing set).
    init(user: String, _ row: ProfileRow?) {
        self.init(
            user: user,
            displayName: row?.displayName,
            avatar: row?.avatar,
            thumbnail: row?.thumbnail,
            updatedMs: row?.updatedMs ?? 0
        )
    }
}
