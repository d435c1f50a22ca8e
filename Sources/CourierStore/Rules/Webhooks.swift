// The rules of webhooks, for every database: a bot's outgoing webhook (its updates POSTed to a URL of its own, signed
// as Standard Webhooks says, by one node at a time, in order, at least once), and incoming hooks (a URL with a secret
// that posts into a group as a bot).

internal import Foundation

/// A bot's outgoing webhook and where its deliveries stand.
public struct WebhookRow: Hashable, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    public var user: UserID
    public var url: String
    /// The signing key (the bytes `whsec_…` spells in base64).
    public var secret: [UInt8]
    /// When it was set: a delivery's outcome is recorded only for the webhook it was sent for.
    public var createdMs: Int64
    /// The updates up to this cursor of the user's log are delivered.
    public var cursor: UInt64
    /// Failed attempts in a row, and when the next is due.
    public var attempts: Int
    public var dueMs: Int64
    /// When it began failing (nil: the last attempt succeeded).
    public var failingSinceMs: Int64?
    /// When it was turned off (failing for too long, or answered 410).
    public var disabledMs: Int64?
    public var lastError: String?

    public init(
        user: UserID,
        url: String,
        secret: [UInt8],
        createdMs: Int64,
        cursor: UInt64,
        attempts: Int = 0,
        dueMs: Int64 = 0,
        failingSinceMs: Int64? = nil,
        disabledMs: Int64? = nil,
        lastError: String? = nil
    ) {
        self.user = user
        self.url = url
        self.secret = secret
        self.createdMs = createdMs
        self.cursor = cursor
        self.attempts = attempts
        self.dueMs = dueMs
        self.failingSinceMs = failingSinceMs
        self.disabledMs = disabledMs
        self.lastError = lastError
    }

    /// Never the secret.
    public var description: String {
        "WebhookRow(user: \(self.user.rawValue), url: \(self.url), cursor: \(self.cursor), attempts: \(self.attempts))"
    }
    public var debugDescription: String { self.description }

    /// The secret as Standard Webhooks spells it: `whsec_` and its base64.
    public var spelledSecret: String { "whsec_" + Data(self.secret).base64EncodedString() }
}

/// An incoming hook, as `courier hook list` shows it (never its secret).
public struct IncomingHook: Hashable, Sendable {
    public var id: Int64
    public var bot: String
    public var group: String
    public var createdMs: Int64
    public var revokedMs: Int64?

    public init(id: Int64, bot: String, group: String, createdMs: Int64, revokedMs: Int64?) {
        self.id = id
        self.bot = bot
        self.group = group
        self.createdMs = createdMs
        self.revokedMs = revokedMs
    }
}

extension StoreBackend {
    /// The prefix of an incoming hook's secret.
    static var hookTokenPrefix: String { "hk_" }

    /// Sets a bot's webhook (replacing one set before, which is turned on again): its updates after what its token's
    /// device acknowledged go to `url` from now on, instead of its long poll.
    ///
    /// - Returns: The new webhook, its secret made now (24 random bytes).
    /// - Throws: `invalid-request` (not a bot; an URL past ``StoreLimits/maxPushEndpointBytes``), `token-revoked`.
    public func setWebhook(url: String, for session: DeviceSession, nowMs: Int64) async throws -> WebhookRow {
        guard url.utf8.count <= self.limits.maxPushEndpointBytes else {
            throw CourierStoreError(
                .invalidRequest,
                "a webhook URL is at most \(self.limits.maxPushEndpointBytes) bytes"
            )
        }
        var generator = SystemRandomNumberGenerator()
        let secret = (0..<24).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return try await self.transaction(doing: "set a webhook") { transaction in
            let rows = try await transaction.lockUsers([session.user.id])
            guard rows[session.user.id]?.removed == false else {
                throw CourierStoreError(.tokenRevoked, CourierStoreError.accountRemovedMessage)
            }
            guard try await transaction.profiles(of: [session.user.id])[session.user.id]?.bot == true else {
                throw CourierStoreError(.invalidRequest, "only a bot has a webhook")
            }
            let before = try await transaction.webhook(of: session.user.id)
            let acknowledged = UInt64(try await transaction.ackedCursor(of: session.device.id) ?? 0)
            let row = WebhookRow(
                user: session.user.id,
                url: url,
                secret: secret,
                // Never the same as the one replaced: a delivery in flight for that one records nothing.
                createdMs: max(nowMs, (before?.createdMs ?? 0) + 1),
                cursor: max(acknowledged, before?.cursor ?? 0)
            )
            try await transaction.putWebhook(row)
            return row
        }
    }

    /// Removes a bot's webhook: its long poll answers again, from what the webhook delivered.
    ///
    /// What is left is a tombstone (no URL, turned off, what was delivered kept): the node that held the webhook
    /// keeps its lease until it ends, so that a webhook set again at once is sent by that node, in order, not by two
    /// at the same time.
    ///
    /// - Returns: The webhook removed, or nil.
    public func removeWebhook(of user: UserID, nowMs: Int64) async throws -> WebhookRow? {
        try await self.transaction(doing: "remove a webhook") { transaction in
            try await Self.bury(webhookOf: user, nowMs: nowMs, transaction)
        }
    }

    /// Leaves a tombstone of a user's webhook, if it has one.
    ///
    /// - Returns: The webhook as it was.
    static func bury(webhookOf user: UserID, nowMs: Int64, _ transaction: Transaction) async throws -> WebhookRow? {
        guard let row = try await transaction.webhook(of: user), !row.url.isEmpty else { return nil }
        try await transaction.putWebhook(
            WebhookRow(
                user: user,
                url: "",
                secret: [],
                createdMs: max(nowMs, row.createdMs + 1),
                cursor: row.cursor,
                disabledMs: nowMs
            )
        )
        return row
    }

    /// A user's webhook (nil for none, or one removed).
    public func webhook(of user: UserID) async throws -> WebhookRow? {
        try await self.reading(doing: "read a webhook") { transaction in
            try await transaction.webhook(of: user).flatMap { $0.url.isEmpty ? nil : $0 }
        }
    }

    /// Takes (or keeps) webhooks for a node until `nowMs + leaseMs`: no other node sends their updates meanwhile.
    public func claimWebhooks(node: String, nowMs: Int64, leaseMs: Int64, limit: Int) async throws -> [WebhookRow] {
        try await self.transaction(doing: "take webhooks") { transaction in
            try await transaction.claimWebhooks(node: node, nowMs: nowMs, leaseMs: leaseMs, limit: max(1, limit))
        }
    }

    public func releaseWebhooks(node: String) async throws {
        try await self.transaction(doing: "let go of webhooks") { transaction in
            try await transaction.releaseWebhooks(node: node)
        }
    }

    /// Records a webhook's state after deliveries (the row as the node now has it), if the node still holds it and
    /// it was not replaced or removed meanwhile.
    ///
    /// - Returns: Whether it was recorded.
    @discardableResult
    public func recordWebhook(_ row: WebhookRow, node: String) async throws -> Bool {
        try await self.transaction(doing: "record a webhook's deliveries") { transaction in
            try await transaction.updateWebhook(row, node: node)
        }
    }

    /// Makes an incoming hook: a POST to `/hooks/<secret>` posts into `group` as `bot`.
    ///
    /// - Returns: The hook's secret (shown once; kept only as its digest) and its id.
    /// - Throws: `unknown-user` (no such bot), `unknown-group`.
    public func createIncomingHook(group: String, bot: String, nowMs: Int64) async throws -> (token: String, id: Int64)
    {
        let token = SessionToken.make(prefix: Self.hookTokenPrefix)
        let id = try await self.transaction(doing: "make an incoming hook") { transaction in
            let user = try await Self.activeUser(named: bot, transaction)
            guard try await transaction.profiles(of: [user.id])[user.id]?.bot == true else {
                throw CourierStoreError(.unknownUser, "\(bot) is not a bot")
            }
            let found = Names.isValid(group) ? try await transaction.group(named: group, locking: false) : nil
            guard found != nil else { throw CourierStoreError(.unknownGroup, "no group named \(group)") }
            return try await transaction.insertIncomingHook(
                tokenHash: SessionToken.digest(token),
                bot: user.id,
                group: group,
                nowMs: nowMs
            )
        }
        return (token, id)
    }

    /// The bot and group of an incoming hook's secret; nil for one unknown or revoked (or whose bot was removed).
    public func incomingHook(token: String) async throws -> (id: Int64, bot: User, group: String)? {
        guard token.hasPrefix(Self.hookTokenPrefix), token.utf8.count <= 128 else { return nil }
        return try await self.reading(doing: "read an incoming hook") { transaction in
            guard let hook = try await transaction.incomingHook(tokenHash: SessionToken.digest(token)),
                let name = try await transaction.names(of: [hook.bot])[hook.bot],
                let user = try await Self.user(named: name, transaction), user.removedMs == nil
            else { return nil }
            return (hook.id, user, hook.group)
        }
    }

    /// Every incoming hook, revoked ones included.
    public func incomingHooks() async throws -> [IncomingHook] {
        try await self.reading(doing: "list incoming hooks") { transaction in
            let hooks = try await transaction.incomingHooks()
            let names = try await transaction.names(of: Set(hooks.map(\.bot)))
            return hooks.map {
                IncomingHook(
                    id: $0.id,
                    bot: names[$0.bot] ?? "",
                    group: $0.group,
                    createdMs: $0.createdMs,
                    revokedMs: $0.revokedMs
                )
            }
        }
    }

    /// - Throws: `invalid-request` for no such hook, or one revoked already.
    public func revokeIncomingHook(_ id: Int64, nowMs: Int64) async throws {
        try await self.transaction(doing: "revoke an incoming hook") { transaction in
            guard try await transaction.revokeIncomingHook(id, nowMs: nowMs) else {
                throw CourierStoreError(.invalidRequest, "no incoming hook \(id) that works")
            }
        }
    }

    /// The owner of a bot, by name (nil for no bot).
    public func botOwner(of bot: UserID) async throws -> String? {
        try await self.reading(doing: "read a bot's owner") { transaction in
            guard let owner = try await transaction.botOwners().first(where: { $0.bot == bot })?.owner else {
                return nil
            }
            return try await transaction.names(of: [owner])[owner]
        }
    }
}
