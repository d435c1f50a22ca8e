// The rules of bots, for every database: accounts a program speaks for, over the HTTP API with a token.
//
// A bot is a user like any other (it is put in groups, written to, limited), with an owner who answers for it and a
// profile that says it is a bot. It has no password anyone knows: its token, made by `courier bot create` and
// `courier bot token`, is its one way in, and it does not expire; `courier bot revoke` ends every token it has.

internal import Foundation

/// A bot, as `courier bot list` shows it.
public struct Bot: Hashable, Sendable {
    public var name: String
    /// The user who answers for it.
    public var owner: String
    public var createdMs: Int64
    /// When it was removed (with its account).
    public var removedMs: Int64?
    /// Its tokens that are good now.
    public var tokens: Int

    public init(name: String, owner: String, createdMs: Int64, removedMs: Int64?, tokens: Int) {
        self.name = name
        self.owner = owner
        self.createdMs = createdMs
        self.removedMs = removedMs
        self.tokens = tokens
    }
}

extension StoreBackend {
    /// The name of a bot's token's device, as `courier user devices` lists it.
    public static var botDeviceName: String { "bot API" }

    /// A bot token's expiry: never (the year 9999). The owner ends it with ``revokeBotTokens(of:nowMs:)``.
    static var botTokenExpiresMs: Int64 { 253_402_300_799_000 }

    /// Makes a bot, answered for by `owner` (a user, not a bot), and its first token.
    ///
    /// - Returns: The bot's token: shown once, kept nowhere but as its digest.
    /// - Throws: `invalid-name`, `name-taken` (by any user or bot, now or before), `unknown-user` (no such owner, or
    ///   the owner is a bot or removed), `storage-failed`.
    public func addBot(name: String, owner: String, nowMs: Int64) async throws -> String {
        try Names.validateNew(userName: name)
        // A password nobody knows: a bot logs in only with its token.
        let hash = try await self.passwords.hash(SessionToken.make())
        let token = SessionToken.make()
        try await self.transaction(doing: "add bot \(name)") { transaction in
            let ownerRow = try await Self.activeUser(named: owner, transaction)
            let owners = Set(try await transaction.botOwners().map(\.bot))
            guard !owners.contains(ownerRow.id) else {
                throw CourierStoreError(.unknownUser, "\(owner) is a bot: a bot's owner is a person")
            }
            let id = try await Self.insertUser(name: name, passwordHash: hash, nowMs: nowMs, transaction)
            try await transaction.setBotOwner(ownerRow.id, of: id)
            try await transaction.setProfile(
                ProfileRow(displayName: nil, avatar: nil, thumbnail: nil, updatedMs: nowMs, bot: true),
                of: id
            )
            _ = try await Self.addDevice(
                of: User(id: id, name: name, createdMs: nowMs, removedMs: nil),
                named: Self.botDeviceName,
                tokenHash: SessionToken.digest(token),
                expiresMs: Self.botTokenExpiresMs,
                nowMs: nowMs,
                transaction
            )
        }
        return token
    }

    /// Ends every token of a bot and its webhook (a stolen token may have set it), and gives it a new token, which
    /// goes on from what the old ones acknowledged; or, not `replacing`, revokes its incoming hooks too.
    ///
    /// - Returns: The new token, or nil.
    /// - Throws: `unknown-user` (no such bot, or removed).
    @discardableResult
    public func revokeBotTokens(of name: String, replacing: Bool = false, nowMs: Int64) async throws -> String? {
        let token = SessionToken.make()
        return try await self.transaction(doing: "renew bot \(name)'s token") { transaction in
            let bot = try await Self.activeUser(named: name, transaction)
            guard try await transaction.botOwners().contains(where: { $0.bot == bot.id }) else {
                throw CourierStoreError(.unknownUser, "\(name) is not a bot")
            }
            // What its tokens acknowledged (revoked ones too): a new token goes on from there, and no update is lost
            // with the old one.
            var acknowledged: Int64?
            for device in try await transaction.devices(of: bot.id) {
                let cursor = try await transaction.ackedCursor(of: device.id) ?? 0
                acknowledged = max(acknowledged ?? cursor, cursor)
            }
            let revoked = try await transaction.revokeDevices(nil, of: bot.id, nowMs: nowMs)
            // Running servers end the revoked tokens' connections and long polls within a second.
            try await transaction.recordChanges(revoked.map { .deviceRevoked($0) }, nowMs: nowMs)
            // A webhook a stolen token set goes with the tokens: the bot sets it again with its new one. What it
            // delivered counts as acknowledged.
            if let webhook = try await Self.bury(webhookOf: bot.id, nowMs: nowMs, transaction) {
                acknowledged = max(acknowledged ?? 0, Int64(webhook.cursor))
            }
            guard replacing else {
                // Revoked for good: its incoming hooks too.
                for hook in try await transaction.incomingHooks() where hook.bot == bot.id && hook.revokedMs == nil {
                    _ = try await transaction.revokeIncomingHook(hook.id, nowMs: nowMs)
                }
                return nil
            }
            let device = try await Self.addDevice(
                of: bot,
                named: Self.botDeviceName,
                tokenHash: SessionToken.digest(token),
                expiresMs: Self.botTokenExpiresMs,
                nowMs: nowMs,
                transaction
            )
            if let acknowledged { try await transaction.setAckedCursor(acknowledged, of: device.id) }
            return token
        }
    }

    /// Every bot, by name, removed ones included.
    public func bots(nowMs: Int64) async throws -> [Bot] {
        try await self.reading(doing: "list bots") { transaction in
            let owners = try await transaction.botOwners()
            guard !owners.isEmpty else { return [] }
            let users = Dictionary(
                try await transaction.users().map { ($0.id, $0) },
                uniquingKeysWith: { first, _ in first }
            )
            var bots: [Bot] = []
            for (bot, owner) in owners {
                guard let user = users[bot] else { continue }
                let live = try await transaction.devices(of: bot).filter {
                    $0.revokedMs == nil && $0.expiresMs > nowMs
                }
                bots.append(
                    Bot(
                        name: user.name,
                        owner: users[owner]?.name ?? "",
                        createdMs: user.createdMs,
                        removedMs: user.removedMs,
                        tokens: live.count
                    )
                )
            }
            return bots.sorted { $0.name.lowercased() < $1.name.lowercased() }
        }
    }

    /// Whether a user is a bot.
    public func isBot(_ user: UserID) async throws -> Bool {
        try await self.reading(doing: "read a user's kind") { transaction in
            try await transaction.profiles(of: [user])[user]?.bot ?? false
        }
    }
}
