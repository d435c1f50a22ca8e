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
            // Not the users it blocks, who see none of its profile.
            var peers = Self.peers(in: try await transaction.companions(of: user, directOnly: false, with: nil))
            peers.subtract(try await Self.blockRelations(of: user, with: Array(peers), transaction).blocking)
            var log = LogWrites()
            let recipients = Array(peers.union([user])).sorted()
            // The user's row among the others, in the order of ids that every write locks in.
            let rows = try await transaction.lockUsers(recipients)
            guard rows[user]?.removed == false else {
                throw CourierStoreError(.tokenRevoked, CourierStoreError.accountRemovedMessage)
            }
            if case .set(let avatar, let thumbnail)? = update.avatar {
                // Under the pictures' shared locks, taken after the users' rows as a group commit takes them: a
                // collection of them waits, or is seen to have deleted the records (MediaCollection.swift).
                try await transaction.lockMedia([avatar.sha256, thumbnail.sha256], exclusive: false)
                for picture in [avatar, thumbnail] {
                    guard try await transaction.uploadedSize(by: user, sha256: picture.sha256) == picture.size else {
                        throw CourierStoreError(
                            .unknownMedia,
                            "upload the picture \(picture.sha256) (\(picture.size) bytes) before showing it"
                        )
                    }
                }
            }
            for (id, row) in rows { log.book.start(id, at: row.cursor) }
            if let displayName, !displayName.isEmpty {
                try await Self.checkNotAnother(displayName, of: user, transaction)
            }
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
    ///
    /// - Parameter viewer: Only the viewer itself and the users it shares a conversation with (a group, a direct
    ///   conversation in which either wrote): the others are left out, as if they did not exist, so that the
    ///   answer lists no one the viewer does not know (finding anyone by name is ``find_user``'s, which is
    ///   counted). Nil: anyone.
    /// A user's profile by exact name, as `viewer` may see it (anyone's: finding a user by name), or nil when there
    /// is no such user: a user who blocks the viewer shows it its name alone.
    public func profile(of name: String, seenBy viewer: UserID) async throws -> UserProfile? {
        try await self.reading(doing: "read a profile") { transaction in
            guard let user = try await Self.user(named: name, transaction), user.removedMs == nil else { return nil }
            var row = try await transaction.profiles(of: [user.id])[user.id]
            if try await Self.blockRelations(of: viewer, with: [user.id], transaction).blockedBy.contains(user.id) {
                row?.displayName = nil
                row?.avatar = nil
                row?.thumbnail = nil
            }
            return UserProfile(user: user.name, row)
        }
    }

    public func profiles(of names: [String], for viewer: UserID?) async throws -> [UserProfile] {
        try await self.reading(doing: "read profiles") { transaction in
            var users: [User] = []
            for name in names {
                guard let user = try await Self.user(named: name, transaction), user.removedMs == nil,
                    !users.contains(where: { $0.id == user.id })
                else { continue }
                users.append(user)
            }
            if let viewer, users.contains(where: { $0.id != viewer }) {
                let known = Set(try await transaction.companions(of: viewer, directOnly: false, with: nil).map(\.user))
                users.removeAll { $0.id != viewer && !known.contains($0.id) }
            }
            var rows = try await transaction.profiles(of: users.map(\.id))
            // A user who blocks the viewer shows it its name alone (and whether it is a bot).
            if let viewer {
                let others = users.map(\.id).filter { $0 != viewer }
                for blocker in try await Self.blockRelations(of: viewer, with: others, transaction).blockedBy {
                    rows[blocker]?.displayName = nil
                    rows[blocker]?.avatar = nil
                    rows[blocker]?.thumbnail = nil
                }
            }
            return users.map { UserProfile(user: $0.name, rows[$0.id]) }
        }
    }

    // MARK: The rules' parts

    /// A display name as it is kept: without the white space around it. Any script; at most
    /// ``StoreLimits/maxDisplayNameCharacters`` characters (grapheme clusters: what a reader sees as one) and
    /// ``StoreLimits/maxDisplayNameBytes``; and the characters ``DisplayNameText`` allows. Empty: none.
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
        try DisplayNameText.check(trimmed)
        return trimmed
    }

    /// Refuses a display name that reads as another user's name or a reserved one
    /// (``NameSkeleton/ofDisplayName(_:)``: look-alike letters of other scripts and full-width ones included): the
    /// chats show a display name where the user name would be, so `oliver` (or `O1iver`, `оliver` with a Cyrillic
    /// `о`, `Admin`) as mallory's display name would pass mallory for oliver (or for the server). One's own name, in
    /// any spelling, is one's to show; a name with more in it (`Alice Chen`, `Alice 🌸`) is anyone's.
    ///
    /// - Throws: `invalid-profile`.
    static func checkNotAnother(_ displayName: String, of user: UserID, _ transaction: Transaction) async throws {
        let skeletons = NameSkeleton.ofDisplayName(displayName)
        guard let own = try await transaction.name(of: user), !skeletons.contains(NameSkeleton.of(own)) else { return }
        if let reserved = Names.reservedUserNames.first(where: { skeletons.contains(NameSkeleton.of($0)) }) {
            throw CourierStoreError(.invalidProfile, "a display name does not read as \(reserved), which no one is")
        }
        for skeleton in skeletons.sorted() where try await transaction.skeletonTaken(skeleton) {
            throw CourierStoreError(
                .invalidProfile,
                "\(displayName.debugDescription) reads as another user's name: a display name is not another's"
            )
        }
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

/// What a display name may hold, so that it reads as what it is wherever it shows: no control characters, line
/// breaks or bidirectional controls (marks, embeddings, overrides, isolates), which would make it or the text after it
/// read otherwise; no characters that show nothing (zero-width spaces and joiners' cousins, fillers, soft hyphens,
/// byte-order marks, tags that carry hidden text), but the joiners emoji sequences and some scripts need (ZWJ, ZWNJ),
/// the emoji variation selectors, and tags inside a flag's sequence; no private-use or unassigned code points, which
/// show as anything or nothing; at most ``maxMarks`` combining marks on one character (no "Zalgo" towers); and at
/// least one letter, digit, symbol or punctuation mark that shows (not the braille blank).
package enum DisplayNameText {
    /// The most combining marks one character may carry (Vietnamese takes two, Indic scripts a few).
    static let maxMarks = 4

    /// - Throws: `invalid-profile`, saying what is wrong.
    static func check(_ name: String) throws {
        var shows = false
        for character in name {
            var marks = 0
            var previous: Unicode.Scalar?
            for scalar in character.unicodeScalars {
                defer { previous = scalar }
                let properties = scalar.properties
                switch properties.generalCategory {
                case .control, .lineSeparator, .paragraphSeparator:
                    throw CourierStoreError(.invalidProfile, "a display name has no control characters or line breaks")
                case .privateUse, .unassigned, .surrogate:
                    throw CourierStoreError(
                        .invalidProfile,
                        "a display name has no private-use or unassigned characters (U+\(Self.hex(scalar)))"
                    )
                case .nonspacingMark, .spacingMark, .enclosingMark:
                    marks += 1
                    guard marks <= Self.maxMarks else {
                        throw CourierStoreError(
                            .invalidProfile,
                            "a display name has at most \(Self.maxMarks) marks on one character"
                        )
                    }
                    continue
                default:
                    break
                }
                if properties.isBidiControl {
                    throw CourierStoreError(.invalidProfile, "a display name has no bidirectional controls")
                }
                if properties.isDefaultIgnorableCodePoint, !Self.joins(scalar, after: previous) {
                    throw CourierStoreError(
                        .invalidProfile,
                        "a display name has no characters that show nothing (U+\(Self.hex(scalar)))"
                    )
                }
                switch properties.generalCategory {
                case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter,
                    .decimalNumber, .letterNumber, .otherNumber, .mathSymbol, .currencySymbol, .modifierSymbol,
                    .otherSymbol, .connectorPunctuation, .dashPunctuation, .openPunctuation, .closePunctuation,
                    .initialPunctuation, .finalPunctuation, .otherPunctuation:
                    // The braille blank is a symbol that shows nothing.
                    if scalar.value != 0x2800 { shows = true }
                default:
                    break
                }
            }
        }
        guard shows else { throw CourierStoreError(.invalidProfile, "a display name shows something") }
    }

    /// The characters that show nothing that a display name may hold where they do their work: the zero-width
    /// joiner and non-joiner, the emoji and text variation selectors, and tags after a black flag or another tag
    /// (a subdivision flag: 🏴 + tags + cancel tag).
    private static func joins(_ scalar: Unicode.Scalar, after previous: Unicode.Scalar?) -> Bool {
        switch scalar.value {
        case 0x200C, 0x200D, 0xFE0E, 0xFE0F: return true
        case 0xE0020...0xE007F:
            guard let previous else { return false }
            return previous.value == 0x1F3F4 || (0xE0020...0xE007E).contains(previous.value)
        default: return false
        }
    }

    private static func hex(_ scalar: Unicode.Scalar) -> String {
        let digits = String(scalar.value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }
}

extension ProfileImage {
    /// Whether a file's first bytes (at least 12 when it has them) are those of an image of this picture's type: a
    /// picture everyone may fetch must be the image it says it is.
    package func matches(head: [UInt8]) -> Bool {
        func starts(_ prefix: [UInt8], at offset: Int = 0) -> Bool {
            head.count >= offset + prefix.count && Array(head[offset..<(offset + prefix.count)]) == prefix
        }
        switch self.mime {
        case "image/jpeg": return starts([0xFF, 0xD8, 0xFF])
        case "image/png": return starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        case "image/gif": return starts(Array("GIF87a".utf8)) || starts(Array("GIF89a".utf8))
        case "image/webp": return starts(Array("RIFF".utf8)) && starts(Array("WEBP".utf8), at: 8)
        default: return false
        }
    }
}

extension ProfileRow {
    /// Whether it says nothing: no display name, no avatar.
    var isEmpty: Bool { self.displayName == nil && self.avatar == nil && self.thumbnail == nil && !self.bot }
}

extension UserProfile {
    /// A user's profile from the row its store keeps (none: nothing set).
    init(user: String, _ row: ProfileRow?) {
        self.init(
            user: user,
            displayName: row?.displayName,
            avatar: row?.avatar,
            thumbnail: row?.thumbnail,
            updatedMs: row?.updatedMs ?? 0,
            bot: row?.bot ?? false
        )
    }
}
