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

    /// A user by its exact name (without regard to case): the name as its user spells it, or nil when there is no
    /// such user. Lookups are rate-limited (`rate-limited`).
    public func findUser(_ name: String) async throws -> String? {
        var envelope = ClientEnvelope()
        envelope.findUser.name = name
        let answer = try await self.request(envelope)
        switch answer.body {
        case .user(let card)?: return card.name
        case .error(let error)? where error.code == ErrorCodes.unknownUser: return nil
        default: throw Self.unexpected(answer)
        }
    }
}
