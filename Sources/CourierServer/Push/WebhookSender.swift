import CourierStore
import Crypto
import Foundation
import Logging
import NIOHTTP1
import Synchronization

/// Sends bots' updates to their webhooks (`PUT /api/v1/webhook`), on every node, as the Standard Webhooks spec says:
/// a POST of the update's JSON (the long poll's) with `webhook-id` (the same on every retry of an update),
/// `webhook-timestamp` and `webhook-signature` (`v1,` and the base64 HMAC-SHA256 of `id.timestamp.body` under the
/// secret). Each webhook is held by one node at a time (a lease it renews: ``CourierDatabase/claimWebhooks(node:nowMs:leaseMs:limit:)``),
/// which sends its updates in order, one at a time, the next only once the last was answered 2xx: at least once,
/// never out of order. A failure backs off (doubling from `webhook-retry-base` up to `webhook-retry-cap`); a webhook
/// failing for `webhook-disable-after` (or answered 410) is turned off and the bot's owner told by a message from the
/// bot.
///
/// It works only while there is work: a webhook it holds is woken, like a connection, by any commit (on any node) that
/// grows its bot's log; otherwise it sleeps until a retry is due, the lease wants renewing, or the poll interval
/// passes (a webhook set through another node, or one a dead node left).
final class WebhookSender: Sendable {
    private let store: any CourierDatabase
    private let configuration: ServerConfiguration.API
    private let limits: OutboundHTTP.Limits
    private let hub: Hub
    private let logger: Logger
    let wake = Wake()
    /// Tells a bot's owner that its webhook was turned off: the bot, the message's id (one per webhook set, so that
    /// a node that tells again tells once), and the text.
    private let tell: @Sendable (UserID, String, String) async -> Void
    private let name = "\(ProcessInfo.processInfo.hostName)/\(getpid())/webhooks/\(UInt32.random(in: 0...UInt32.max))"

    init(
        store: any CourierDatabase,
        configuration: ServerConfiguration,
        hub: Hub,
        logger: Logger,
        tell: @escaping @Sendable (UserID, String, String) async -> Void
    ) {
        self.store = store
        self.configuration = configuration.api
        self.hub = hub
        self.logger = logger
        self.tell = tell
        var limits = OutboundHTTP.Limits()
        limits.connectTimeout = configuration.push.connectTimeout
        limits.requestTimeout = configuration.push.requestTimeout
        limits.maxResponseBytes = configuration.push.maxResponseBytes
        limits.allowPrivateTargets = configuration.push.allowPrivateTargets
        self.limits = limits
    }

    /// What this node holds, for the rounds in flight to check before each send: the webhook as last claimed (a
    /// round of another one, replaced or removed meanwhile, stops) and until when the lease lasts.
    private let held = Mutex<[UserID: (createdMs: Int64, untilMs: Int64)]>([:])
    /// The webhooks with a round in flight.
    private let busy = Mutex<Set<UserID>>([])
    /// Rounds that ended, for the loop to take.
    private let ended = Mutex<[(user: UserID, result: (WebhookRow, Bool)?)]>([])
    /// Set when a webhook was set through this node: the loop claims at once, not at its next look.
    private let claimSoon = Mutex(false)

    /// A webhook was set through this node: claim it now.
    func webhookSet() {
        self.claimSoon.withLock { $0 = true }
        self.wake.raise()
    }

    /// Sends until the task is cancelled; then lets go of its webhooks for the other nodes.
    ///
    /// Each webhook's round runs on its own (a slow receiver holds up only its own bot's updates); this loop only
    /// claims (renewing the leases every third of one), starts rounds for the webhooks that have work, and sleeps.
    func run() async {
        let http = OutboundHTTP(limits: self.limits, logger: self.logger)
        var handles: [UserID: ConnectionHandle] = [:]
        var users: [UserID: User] = [:]
        var rows: [UserID: WebhookRow] = [:]
        // Webhooks to give a round whether or not their log grew: just taken, or a round said there is more.
        var wanted: Set<UserID> = []
        let claimEvery = min(self.configuration.webhookLease / 3, self.configuration.webhookPollInterval)
        var lastClaim = ContinuousClock.now - .seconds(3600)
        await withDiscardingTaskGroup { group in
            while !Task.isCancelled {
                let soon = self.claimSoon.withLock { soon in
                    defer { soon = false }
                    return soon
                }
                if soon || ContinuousClock.now - lastClaim >= claimEvery {
                    lastClaim = .now
                    guard let claimed = await self.claim() else {
                        guard (try? await Task.sleep(for: .seconds(1))) != nil else { break }
                        continue
                    }
                    // Taken now, or set anew: a round at once (it may have updates waiting).
                    for row in claimed where rows[row.user]?.createdMs != row.createdMs { wanted.insert(row.user) }
                    rows = Dictionary(claimed.map { ($0.user, $0) }, uniquingKeysWith: { _, last in last })
                    // A place in the map of connections for each webhook held: a commit that grows its bot's log
                    // wakes this loop.
                    for (user, handle) in handles where rows[user] == nil {
                        _ = self.hub.unregister(handle)
                        handles[user] = nil
                    }
                    for user in rows.keys where handles[user] == nil {
                        let registration = self.hub.register(
                            user: user,
                            device: DeviceID(rawValue: 0),
                            ephemeral: false
                        )
                        guard case .registered(let handle, _, _) = registration else { continue }
                        handles[user] = handle
                        handle.setWaker { [wake] in wake.raise() }
                    }
                    for user in rows.keys where users[user] == nil {
                        if let name = try? await self.store.userName(of: user) {
                            users[user] = User(id: user, name: name, createdMs: 0, removedMs: nil)
                        }
                    }
                    users = users.filter { rows[$0.key] != nil }
                }
                for (user, result) in self.takeEnded() {
                    if let (row, more) = result {
                        // Turned off: not this node's any more (no node takes it until it is set again).
                        rows[user] = row.disabledMs == nil ? row : nil
                        if more { wanted.insert(user) }
                    } else {
                        // Lost, replaced, or not recorded: claimed again at once, and given a round then.
                        rows[user] = nil
                        lastClaim = .now - .seconds(3600)
                    }
                }
                let nowMs = SessionClock.systemWallMs()
                var nextRetryMs: Int64?
                for (user, row) in rows {
                    guard !self.busy.withLock({ $0.contains(user) }), let name = users[user],
                        let handle = handles[user]
                    else { continue }
                    if row.failingSinceMs != nil {
                        // Failing: tried again when due, whatever its log does meanwhile.
                        guard row.dueMs <= nowMs else {
                            nextRetryMs = min(nextRetryMs ?? .max, row.dueMs)
                            continue
                        }
                    } else {
                        switch handle.take() {
                        case .events?, .notices?:
                            break
                        case .terminate?:
                            // The bot was removed, or the server is stopping: nothing more for it here.
                            _ = self.hub.unregister(handle)
                            handles[user] = nil
                            continue
                        case nil:
                            guard wanted.contains(user) else { continue }
                        }
                    }
                    guard self.busy.withLock({ $0.count }) < max(1, self.configuration.maxConcurrentWebhooks) else {
                        // Its turn comes when a round ends.
                        wanted.insert(user)
                        break
                    }
                    wanted.remove(user)
                    self.busy.withLock { _ = $0.insert(user) }
                    group.addTask {
                        let result = await self.round(row, of: name, http)
                        if let (after, _) = result { handle.delivered(upTo: after.cursor) }
                        self.ended.withLock { $0.append((user, result)) }
                        self.busy.withLock { _ = $0.remove(user) }
                        self.wake.raise()
                    }
                }
                // Nothing to start: until a commit wakes a webhook, a round ends, a retry is due, or it is time to
                // claim again.
                let retry = nextRetryMs.map { Duration.milliseconds(max(1, $0 - SessionClock.systemWallMs())) }
                let claim = max(.zero, claimEvery - (ContinuousClock.now - lastClaim))
                await self.wake.wait(upTo: [retry, claim].compactMap { $0 }.min())
            }
            group.cancelAll()
        }
        for handle in handles.values { _ = self.hub.unregister(handle) }
        // Let go at once for the other nodes (not when the lease ends), from a task the shutdown did not cancel.
        let (store, name) = (self.store, self.name)
        await Task { try? await store.releaseWebhooks(node: name) }.value
        await http.shutdown()
    }

    /// Takes (or keeps) this node's webhooks, and notes until when, for the rounds; nil when the store failed.
    private func claim() async -> [WebhookRow]? {
        let nowMs = SessionClock.systemWallMs()
        let leaseMs = self.configuration.webhookLease.wholeMilliseconds
        do {
            let claimed = try await self.store.claimWebhooks(
                node: self.name,
                nowMs: nowMs,
                leaseMs: leaseMs,
                limit: 10_000
            )
            self.held.withLock { held in
                held = Dictionary(
                    claimed.map { ($0.user, (createdMs: $0.createdMs, untilMs: nowMs + leaseMs)) },
                    uniquingKeysWith: { _, last in last }
                )
            }
            return claimed
        } catch {
            self.logger.warning("taking webhooks failed", metadata: ["error": "\(error)"])
            return nil
        }
    }

    private func takeEnded() -> [(user: UserID, result: (WebhookRow, Bool)?)] {
        self.ended.withLock { ended in
            defer { ended.removeAll() }
            return ended
        }
    }

    /// Whether this node still holds the webhook a round sends for, long enough for one more request.
    private func stillHeld(_ row: WebhookRow) -> Bool {
        let deadlineMs = (self.limits.connectTimeout + self.limits.requestTimeout).wholeMilliseconds
        guard let held = self.held.withLock({ $0[row.user] }) else { return false }
        return held.createdMs == row.createdMs && held.untilMs > SessionClock.systemWallMs() + deadlineMs
    }

    /// One webhook's round: up to a batch of its updates, in order, each sent until answered 2xx.
    private func round(_ webhook: WebhookRow, of user: User, _ http: OutboundHTTP) async -> (WebhookRow, Bool)? {
        var row = webhook
        let limit = max(1, self.configuration.webhookBatch)
        let found: [APIUpdate]
        let readTo: UInt64
        do {
            (found, readTo, _) = try await BotAPI.updates(of: user, after: row.cursor, limit: limit, store: self.store)
        } catch {
            self.logger.warning("reading a bot's updates failed", metadata: ["error": "\(error)"])
            return nil
        }
        guard !found.isEmpty else {
            // Nothing but entries that are no updates: passed over for good.
            guard readTo > row.cursor else { return (row, false) }
            row.cursor = readTo
            // Read on at once: a backlog may follow.
            return (try? await self.store.recordWebhook(row, node: self.name)) == true ? (row, true) : nil
        }
        var failed = false
        for update in found {
            // Replaced, removed or no longer held by this node (the lease about to end): stop; whoever holds it
            // next sends from the cursor recorded.
            guard self.stillHeld(row) else {
                failed = true
                break
            }
            let outcome = await self.send(update, of: row, http)
            let nowMs = SessionClock.systemWallMs()
            switch outcome {
            case .delivered:
                row.cursor = update.update_id
                row.attempts = 0
                row.dueMs = 0
                row.failingSinceMs = nil
                row.lastError = nil
                continue
            case .gone(let reason):
                row.lastError = reason
                row.disabledMs = nowMs
            case .failed(let reason, let retryAfterMs):
                row.attempts += 1
                row.lastError = reason
                let since = row.failingSinceMs ?? nowMs
                row.failingSinceMs = since
                row.dueMs = nowMs + self.retryDelayMs(attempts: row.attempts, retryAfterMs: retryAfterMs)
                if nowMs - since >= self.configuration.webhookDisableAfter.wholeMilliseconds {
                    row.disabledMs = nowMs
                }
            }
            failed = true
            break
        }
        guard (try? await self.store.recordWebhook(row, node: self.name)) == true else { return nil }
        if row.disabledMs != nil { await self.disabled(row, of: user) }
        return (row, !failed && found.count >= limit)
    }

    enum Outcome {
        case delivered
        /// 410: the receiver wants no more (Standard Webhooks): turned off now.
        case gone(String)
        case failed(String, retryAfterMs: Int64?)
    }

    /// One update, signed, POSTed.
    private func send(_ update: APIUpdate, of row: WebhookRow, _ http: OutboundHTTP) async -> Outcome {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let body = try? encoder.encode(update) else { return .failed("not encodable", retryAfterMs: nil) }
        let id = "msg_\(row.user.rawValue)_\(update.update_id)"
        let timestamp = String(SessionClock.systemWallMs() / 1000)
        let signature = Self.signature(id: id, timestamp: timestamp, body: Array(body), secret: row.secret)
        let response: OutboundHTTP.Response
        do {
            response = try await http.post(
                row.url,
                headers: [
                    ("Content-Type", "application/json"), ("webhook-id", id), ("webhook-timestamp", timestamp),
                    ("webhook-signature", signature),
                ],
                body: Array(body)
            )
        } catch is OutboundHTTP.Refusal {
            // Not why (a name that does not resolve, or resolves to a private address): the bot's owner reads this,
            // and it must not map the server's network.
            return .failed("refused: not a public address", retryAfterMs: nil)
        } catch {
            return .failed("no answer (\(type(of: error)))", retryAfterMs: nil)
        }
        switch response.status {
        case 200..<300:
            return .delivered
        case 410:
            return .gone("HTTP 410")
        default:
            let retryAfter = response.headers.first(name: "Retry-After").flatMap {
                PushSender.retryAfterMs($0, SessionClock.systemWallMs())
            }
            return .failed("HTTP \(response.status)", retryAfterMs: response.status == 429 ? retryAfter : nil)
        }
    }

    /// Standard Webhooks' signature: `v1,` and the base64 of HMAC-SHA256(secret, "id.timestamp.body").
    static func signature(id: String, timestamp: String, body: [UInt8], secret: [UInt8]) -> String {
        var signed = Array("\(id).\(timestamp).".utf8)
        signed += body
        let mac = HMAC<SHA256>.authenticationCode(for: signed, using: SymmetricKey(data: secret))
        return "v1," + Data(mac).base64EncodedString()
    }

    /// The wait after `attempts` failures in a row: the base doubled each time, up to the cap, a fifth more at random;
    /// never before the receiver's `Retry-After`.
    func retryDelayMs(attempts: Int, retryAfterMs: Int64?) -> Int64 {
        let base = max(1, self.configuration.webhookRetryBase.wholeMilliseconds)
        let cap = max(base, self.configuration.webhookRetryCap.wholeMilliseconds)
        let (doubled, overflow) = base.multipliedReportingOverflow(by: 1 << Int64(min(max(0, attempts - 1), 30)))
        let backoff = overflow ? cap : min(cap, doubled)
        return max(backoff + Int64.random(in: 0...(backoff / 5)), min(retryAfterMs ?? 0, 86_400_000))
    }

    /// A webhook turned off: its owner is told, by a message from the bot (once per webhook set).
    private func disabled(_ row: WebhookRow, of user: User) async {
        let origin = OutboundHTTP.origin(of: row.url)
        self.logger.warning(
            "a bot's webhook was turned off",
            metadata: ["bot": "\(user.name)", "origin": "\(origin)", "error": "\(row.lastError ?? "")"]
        )
        let text =
            "Courier turned off the webhook of bot \(user.name) (\(origin)): "
            + (row.lastError == "HTTP 410"
                ? "it answered 410 Gone."
                : "it failed for \(Self.spell(self.configuration.webhookDisableAfter)) (last: \(row.lastError ?? "?")).")
            + " Its updates wait for the long poll until PUT /api/v1/webhook sets it again."
        await self.tell(row.user, "webhook-off-\(row.createdMs)", text)
    }

    /// A duration as people say it: "24 hours", "90 seconds".
    static func spell(_ duration: Duration) -> String {
        let seconds = duration.components.seconds
        if seconds >= 3600, seconds % 3600 == 0 { return "\(seconds / 3600) hours" }
        if seconds >= 60, seconds % 60 == 0 { return "\(seconds / 60) minutes" }
        return "\(seconds) seconds"
    }
}
