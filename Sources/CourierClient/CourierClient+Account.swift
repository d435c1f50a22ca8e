import CourierProtocol
public import Foundation

/// A device (a login) of the user, as ``CourierClient/devices()`` lists it.
public struct DeviceInfo: Hashable, Sendable {
    /// What ``CourierClient/revokeDevice(_:)`` takes.
    public var id: Int64
    public var name: String
    public var created: Date
    public var expires: Date
    /// When its last connection ended (nil: never, or it is connected now).
    public var lastSeen: Date?
    /// While a server holds a connection of it: since when.
    public var connectedSince: Date?
    /// The device of this client.
    public var current: Bool

    public init(
        id: Int64,
        name: String,
        created: Date,
        expires: Date,
        lastSeen: Date?,
        connectedSince: Date?,
        current: Bool
    ) {
        self.id = id
        self.name = name
        self.created = created
        self.expires = expires
        self.lastSeen = lastSeen
        self.connectedSince = connectedSince
        self.current = current
    }
}

/// What a user shows of itself beside its name.
public struct ProfileInfo: Hashable, Sendable {
    /// The user name, as spelled.
    public var user: String
    /// Its display name, in any script; nil when none is set.
    public var displayName: String?
    /// Its avatar and the avatar's small thumbnail (``CourierClient/download(_:)`` fetches either), or neither.
    public var avatar: MediaInfo?
    public var thumbnail: MediaInfo?
    /// When it last changed; nil when never set.
    public var updated: Date?
    /// In the user's own profile only: whether its push notifications show who wrote and what.
    public var pushPreviews: Bool?
    /// The user is a bot, a program's account: show it as one.
    public var bot = false

    public init(
        user: String,
        displayName: String? = nil,
        avatar: MediaInfo? = nil,
        thumbnail: MediaInfo? = nil,
        updated: Date? = nil
    ) {
        self.user = user
        self.displayName = displayName
        self.avatar = avatar
        self.thumbnail = thumbnail
        self.updated = updated
    }

    init(_ profile: Courier_V1_Profile) {
        self.init(
            user: profile.user,
            displayName: profile.displayName.isEmpty ? nil : profile.displayName,
            avatar: profile.hasAvatar ? MediaInfo(profile.avatar) : nil,
            thumbnail: profile.hasThumbnail ? MediaInfo(profile.thumbnail) : nil,
            updated: profile.updatedMs == 0 ? nil : Date(timeIntervalSince1970: Double(profile.updatedMs) / 1000)
        )
        self.pushPreviews = profile.hasPushPreviews ? profile.pushPreviews : nil
        self.bot = profile.bot
    }
}

/// The user's own account: its password, its devices, its deletion; and finding another user.
extension CourierClient {
    /// Changes the user's password, given the present one (`wrong-password` otherwise; too many wrong ones in a
    /// while are refused with `rate-limited`). Every other device is logged out unless `keepDevices`; this one
    /// stays.
    public func changePassword(from old: String, to new: String, keepDevices: Bool = false) async throws {
        var envelope = ClientEnvelope()
        envelope.changePassword.oldPassword = old
        envelope.changePassword.newPassword = new
        envelope.changePassword.keepDevices = keepDevices
        try Self.expectDone(try await self.request(envelope))
    }

    /// The user's devices that are not logged out (expired ones included): this one first, then the newest first,
    /// as many as fit the server's answer (a user with hundreds of expired devices gets the newest).
    public func devices() async throws -> [DeviceInfo] {
        var envelope = ClientEnvelope()
        envelope.devices = Courier_V1_DevicesRequest()
        let answer = try await self.request(envelope)
        guard case .devices(let list)? = answer.body else { throw Self.unexpected(answer) }
        func date(_ ms: Int64) -> Date { Date(timeIntervalSince1970: Double(ms) / 1000) }
        return list.devices.map {
            DeviceInfo(
                id: Int64(clamping: $0.id),
                name: $0.name,
                created: date($0.createdMs),
                expires: date($0.expiresMs),
                lastSeen: $0.lastSeenMs == 0 ? nil : date($0.lastSeenMs),
                connectedSince: $0.connectedSinceMs == 0 ? nil : date($0.connectedSinceMs),
                current: $0.current
            )
        }
    }

    /// Logs out one of the user's devices: its connections close, and its token stops working. This client's own
    /// device too (its connection then closes, and ``run()`` ends as signed out).
    public func revokeDevice(_ id: Int64) async throws {
        var envelope = ClientEnvelope()
        envelope.revokeDevice.id = UInt64(clamping: id)
        try Self.expectDone(try await self.request(envelope))
    }

    /// Deletes the user's account, given its password: every device is logged out, the user leaves its groups, and
    /// its name is never given to anyone again. Its messages stay with those it wrote to.
    public func deleteAccount(password: String) async throws {
        var envelope = ClientEnvelope()
        envelope.deleteAccount.password = password
        try Self.expectDone(try await self.request(envelope))
    }

    /// A user by its exact name (without regard to case): its profile (with the name as its user spells it), or nil
    /// when there is no such user. Lookups are rate-limited (`rate-limited`).
    public func findUser(_ name: String) async throws -> ProfileInfo? {
        var envelope = ClientEnvelope()
        envelope.findUser.name = name
        let answer = try await self.request(envelope)
        switch answer.body {
        case .user(let card)?:
            var profile = ProfileInfo(card.profile)
            profile.user = card.name
            return profile
        case .error(let error)? where error.code == ErrorCodes.unknownUser: return nil
        default: throw Self.unexpected(answer)
        }
    }

    /// The profiles of users by name (at most 100): one for each that exists, in the order asked.
    public func profiles(of users: [String]) async throws -> [ProfileInfo] {
        var envelope = ClientEnvelope()
        envelope.profiles.users = users
        let answer = try await self.request(envelope)
        guard case .profiles(let profiles)? = answer.body else { throw Self.unexpected(answer) }
        return profiles.profiles.map(ProfileInfo.init)
    }

    /// Sets the user's display name, in any script (at most 64 characters); an empty one removes it. The user's
    /// devices and every user who sees it get ``ClientEvent/profile(_:)``.
    public func setDisplayName(_ name: String) async throws {
        var envelope = ClientEnvelope()
        envelope.setProfile.displayName = name
        try Self.expectDone(try await self.request(envelope))
    }

    /// Sets whether the user's push notifications show who wrote and what (on by default) or only "New message": a
    /// setting of the user's own, which nobody else sees.
    public func setPushPreviews(_ on: Bool) async throws {
        var envelope = ClientEnvelope()
        envelope.setProfile.pushPreviews = on
        try Self.expectDone(try await self.request(envelope))
    }

    /// Uploads an avatar and its thumbnail (JPEG, PNG, WebP or GIF; the thumbnail at most 64 KiB: the app makes it)
    /// and shows them on the user's profile.
    ///
    /// - Parameters:
    ///   - width: The avatar's pixel size, where known (0: unknown); the same for the thumbnail's.
    public func setAvatar(
        file: URL,
        thumbnail: URL,
        size: (width: Int, height: Int) = (0, 0),
        thumbnailSize: (width: Int, height: Int) = (0, 0)
    ) async throws {
        var pictures: [MediaInfo] = []
        for (url, pixels, limit) in [
            (file, size, Self.maxAvatarBytes), (thumbnail, thumbnailSize, Self.maxThumbnailBytes),
        ] {
            // What the server would refuse is refused here, before the upload takes quota.
            let type = MediaTypes.guess(for: url).mime
            guard Self.pictureTypes.contains(type) else {
                throw CourierClientError(
                    code: ErrorCodes.invalidProfile,
                    message: "\(url.lastPathComponent) is not a JPEG, PNG, WebP or GIF"
                )
            }
            let (sha256, bytes) = try await Self.digest(of: url)
            guard bytes <= limit else {
                throw CourierClientError(
                    code: ErrorCodes.invalidProfile,
                    message: "\(url.lastPathComponent) has \(bytes) bytes; at most \(limit)"
                )
            }
            let media = MediaInfo(
                kind: .image,
                sha256: sha256,
                size: bytes,
                mime: type,
                name: "",
                width: pixels.width,
                height: pixels.height
            )
            try await self.upload(url, media: media) { _ in }
            pictures.append(media)
        }
        var envelope = ClientEnvelope()
        envelope.setProfile.avatar = Courier_V1_Media(pictures[0])
        envelope.setProfile.thumbnail = Courier_V1_Media(pictures[1])
        try Self.expectDone(try await self.request(envelope))
    }

    /// The types a profile picture may be, and the server's default sizes.
    static let pictureTypes = ["image/jpeg", "image/png", "image/webp", "image/gif"]
    static let maxAvatarBytes: Int64 = 5 * 1024 * 1024
    static let maxThumbnailBytes: Int64 = 64 * 1024

    /// Takes the avatar off the user's profile.
    public func removeAvatar() async throws {
        var envelope = ClientEnvelope()
        envelope.setProfile.removeAvatar = true
        try Self.expectDone(try await self.request(envelope))
    }
}

/// A member of a group, as ``CourierClient/groupMembers(of:)`` lists it.
public struct GroupMemberInfo: Hashable, Sendable {
    public var user: String
    public var role: GroupRoleInfo
    /// The group's seq when it joined: it sees the messages after it.
    public var joinedSeq: UInt64

    public init(user: String, role: GroupRoleInfo, joinedSeq: UInt64) {
        self.user = user
        self.role = role
        self.joinedSeq = joinedSeq
    }
}

extension GroupRoleInfo {
    init(_ role: Courier_V1_GroupRole) {
        switch role {
        case .owner: self = .owner
        case .admin: self = .admin
        default: self = .member
        }
    }
}

/// Groups in their members' hands.
extension CourierClient {
    /// Makes a group with this user as its owner and these members (its contacts: users who wrote to it and it to
    /// them).
    public func createGroup(_ name: String, members: [String]) async throws {
        try await self.manageGroup(name) { $0.create.users = members }
    }

    /// Adds members (the owner's and admins' contacts) to a group.
    public func addMembers(_ users: [String], to group: String) async throws {
        try await self.manageGroup(group) { $0.add.users = users }
    }

    /// Removes members of a lower role than this user's from a group.
    public func removeMembers(_ users: [String], from group: String) async throws {
        try await self.manageGroup(group) { $0.remove.users = users }
    }

    /// Leaves a group; an owner hands it to the longest-standing admin, else member.
    public func leaveGroup(_ group: String) async throws {
        try await self.manageGroup(group) { $0.leave = Courier_V1_ManageGroup.Leave() }
    }

    /// Leaves, in one request, every group this user is in because `user` put it there (made the group with it, or
    /// added it).
    ///
    /// - Returns: The groups left, by name (none: empty).
    /// - Throws: `unknown-user` when there is no such user.
    public func leaveGroups(addedBy user: String) async throws -> [String] {
        var envelope = ClientEnvelope()
        envelope.leaveGroups.addedBy = user
        let answer = try await self.request(envelope)
        guard case .groupsLeft(let left)? = answer.body else { throw Self.unexpected(answer) }
        return left.groups
    }

    /// Makes members admins (`admin` true) or members again; the owner's to do.
    public func setAdmins(_ users: [String], in group: String, admin: Bool = true) async throws {
        try await self.manageGroup(group) {
            if admin { $0.promote.users = users } else { $0.demote.users = users }
        }
    }

    /// Hands a group to another of its members; this user, its owner, becomes an admin.
    public func transferGroup(_ group: String, to user: String) async throws {
        try await self.manageGroup(group) { $0.transfer.user = user }
    }

    /// A group's members with their roles: the owner, the admins, the members.
    public func groupMembers(of group: String) async throws -> [GroupMemberInfo] {
        try await self.groupRoster(of: group).members
    }

    /// A group's title (empty: none) and its members with their roles.
    public func groupRoster(of group: String) async throws -> (title: String, members: [GroupMemberInfo]) {
        var envelope = ClientEnvelope()
        envelope.groupMembers.group = group
        let answer = try await self.request(envelope)
        guard case .groupMembers(let members)? = answer.body else { throw Self.unexpected(answer) }
        return (
            members.title,
            members.members.map {
                GroupMemberInfo(user: $0.user, role: GroupRoleInfo($0.role), joinedSeq: $0.joinedSeq)
            }
        )
    }

    /// Gives a group a title in any script (at most 64 characters, the rules of a display name), or takes it away
    /// (empty): an admin's or the owner's to do. Every member gets ``ClientEvent/groupTitle(group:title:by:)``.
    public func setGroupTitle(_ title: String, of group: String) async throws {
        try await self.manageGroup(group) { $0.title.title = title }
    }

    /// Chooses how a conversation alerts this user, on all of its devices (each gets
    /// ``ClientEvent/notify(conversation:level:)``). Unread messages are counted whatever the level.
    public func setNotify(_ level: NotifyLevel, for conversation: Conversation) async throws {
        var envelope = ClientEnvelope()
        envelope.setNotify.conversation = Courier_V1_Conversation(conversation)
        envelope.setNotify.level = Courier_V1_NotifyLevel(level)
        try Self.expectDone(try await self.request(envelope))
    }

    /// Blocks a user, or unblocks it (`blocked` false): while blocked, its direct messages never reach this user
    /// (its sender sees them sent, never delivered), and it sees none of this user's presence, typing, read marks or
    /// profile, nor can it add this user to a group. Blocking a user already blocked changes nothing.
    public func setBlocked(_ user: String, _ blocked: Bool) async throws {
        var envelope = ClientEnvelope()
        envelope.block.user = user
        envelope.block.blocked = blocked
        try Self.expectDone(try await self.request(envelope))
    }

    /// The users this user blocks, the earliest blocked first.
    public func blockedUsers() async throws -> [(user: String, since: Date)] {
        var envelope = ClientEnvelope()
        envelope.blocks = Courier_V1_BlocksRequest()
        let answer = try await self.request(envelope)
        guard case .blocks(let list)? = answer.body else { throw Self.unexpected(answer) }
        return list.users.map { ($0.user, Date(timeIntervalSince1970: Double($0.sinceMs) / 1000)) }
    }

    /// Whether a message should alert this user, given how its conversation alerts it: every message at `.all`,
    /// those that mention the user (``Mentions``) at `.mentions`, none at `.none`; never the user's own.
    public static func alerts(_ message: ChatMessage, user: String, level: NotifyLevel) -> Bool {
        guard message.from.lowercased() != user.lowercased() else { return false }
        switch level {
        case .all: return true
        case .none: return false
        case .mentions:
            guard case .group = message.conversation else { return false }
            return message.mentions.mention(user)
        }
    }

    private func manageGroup(_ group: String, _ build: (inout Courier_V1_ManageGroup) -> Void) async throws {
        var envelope = ClientEnvelope()
        envelope.manageGroup.group = group
        build(&envelope.manageGroup)
        try Self.expectDone(try await self.request(envelope))
    }
}
