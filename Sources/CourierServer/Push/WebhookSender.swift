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
    private let metrics: ServerMetrics
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
        metrics: ServerMetrics,
        logger: Logger,
        tell: @escaping @Sendable (UserID, String, String) async -> Void
    ) {
        self.store = store
        self.configuration = configuration.api
        self.hub = hub
        self.metrics = metrics
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
    /// Rounds that ended, for the loop to take.
    private let ended = Mutex<[(user: UserID, end: RoundEnd)]>([])
    /// Set when a webhook was set or removed through this node: the loop claims at once, not at its next look.
    private let claimSoon = Mutex(false)
    /// Set when the server stops: the loop lets go of its webhooks for the other nodes, and ends.
    private let stopping = Mutex(false)

    /// How a round ended.
    enum RoundEnd: Sendable {
        /// Recorded: the webhook as it now stands, and whether it has more to send at once.
        case recorded(WebhookRow, more: Bool)
        /// Nothing recorded (the store failed, or the webhook is no longer this node's as it was): tried again after
        /// a pause, once claimed again.
        case lost
    }

    /// A webhook was set or removed through this node: claim at once.
    func webhookChanged() {
        self.claimSoon.withLock { $0 = true }
        self.wake.raise()
    }

    /// The server is stopping: let go of the webhooks now (another node takes them), send nothing more.
    func stop() {
        self.stopping.withLock { $0 = true }
        self.wake.raise()
    }

    /// How long a lease lasts: as configured, but always long enough for a request and a renewal within it (a
    /// round checks before each request that the lease outlasts it).
    var lease: Duration {
        max(self.configuration.webhookLease, (self.limits.connectTimeout + self.limits.requestTimeout) * 2)
    }

    /// Sends until the task is cancelled or ``stop()``; then lets go of its webhooks for the other nodes.
    ///
    /// Each webhook's round runs on its own (a slow receiver holds up only its own bot's updates); this loop alone
    /// changes what it holds and which rounds run: it claims (renewing the leases every third of one), starts rounds
    /// for the webhooks that have work, first come first served up to `max-concurrent-webhooks`, and sleeps.
    func run() async {
        let http = OutboundHTTP(limits: self.limits, logger: self.logger)
        var handles: [UserID: ConnectionHandle] = [:]
        var users: [UserID: User] = [:]
        var rows: [UserID: WebhookRow] = [:]
        // Rounds running, and the webhooks waiting for one (in order), whether or not their logs grew since.
        var busy: Set<UserID> = []
        var ready: [UserID] = []
        // Webhooks whose last round recorded nothing: not before this, doubling.
        var paused: [UserID: (until: ContinuousClock.Instant, pause: Duration)] = [:]
        let claimEvery = min(self.lease / 3, self.configuration.webhookPollInterval)
        var lastClaim = ContinuousClock.now - .seconds(3600)
        func makeReady(_ user: UserID) {
            if !ready.contains(user) { ready.append(user) }
        }
        await withDiscardingTaskGroup { group in
            while !Task.isCancelled, !self.stopping.withLock({ $0 }) {
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
                    let before = rows
                    rows = Dictionary(claimed.map { ($0.user, $0) }, uniquingKeysWith: { _, last in last })
                    for (user, row) in rows where !busy.contains(user) {
                        // Taken now, or set anew: a round (it may have updates waiting).
                        if before[user]?.createdMs != row.createdMs { makeReady(user) }
                    }
                    ready.removeAll { rows[$0] == nil }
                    paused = paused.filter { rows[$0.key] != nil }
                    // A listener in the map of connections for each webhook held: a commit (on any node) that grows
                    // its bot's log wakes this loop.
                    for (user, handle) in handles where rows[user] == nil {
                        _ = self.hub.unregister(handle)
                        handles[user] = nil
                    }
                    for user in rows.keys where handles[user] == nil {
                        let registration = self.hub.register(
                            user: user,
                            device: DeviceID(rawValue: 0),
                            ephemeral: false,
                            hidden: true
                        )
                        guard case .registered(let handle, _, _) = registration else { continue }
                        handles[user] = handle
                        handle.setWaker { [wake] in wake.raise() }
                        // What came while it had none is read now.
                        makeReady(user)
                    }
                    for user in rows.keys where users[user] == nil {
                        if let name = try? await self.store.userName(of: user) {
                            users[user] = User(id: user, name: name, createdMs: 0, removedMs: nil)
                        }
                    }
                    users = users.filter { rows[$0.key] != nil }
                }
                for (user, end) in self.takeEnded() {
                    busy.remove(user)
                    switch end {
                    case .recorded(let row, let more):
                        paused[user] = nil
                        // A result for the webhook this node holds now, not for one replaced or removed since.
                        guard rows[user]?.createdMs == row.createdMs else { continue }
                        // Turned off: not this node's any more (no node takes it until it is set again).
                        rows[user] = row.disabledMs == nil ? row : nil
                        if more, row.disabledMs == nil { makeReady(user) }
                    case .lost:
                        let pause = min((paused[user]?.pause ?? .milliseconds(500)) * 2, .seconds(60))
                        paused[user] = (.now + pause, pause)
                        makeReady(user)
                        lastClaim = .now - claimEvery
                    }
                }
                let nowMs = SessionClock.systemWallMs()
                var nextRetryMs: Int64?
                var nextPause: ContinuousClock.Instant?
                // Whose log grew (a failing webhook waits for its retry, whatever its log does).
                for (user, row) in rows where !busy.contains(user) {
                    if row.failingSinceMs != nil {
                        if row.dueMs <= nowMs {
                            makeReady(user)
                        } else {
                            nextRetryMs = min(nextRetryMs ?? .max, row.dueMs)
                        }
                        continue
                    }
                    guard let handle = handles[user] else { continue }
                    switch handle.take() {
                    case .events?, .notices?:
                        makeReady(user)
                    case .terminate?:
                        // The bot was removed, or the server is stopping: nothing more for it here.
                        _ = self.hub.unregister(handle)
                        handles[user] = nil
                    case nil:
                        break
                    }
                }
                // First come, first served.
                var waiting: [UserID] = []
                for user in ready {
                    guard let row = rows[user], let name = users[user], !busy.contains(user) else { continue }
                    if let pause = paused[user], pause.until > .now {
                        nextPause = min(nextPause ?? pause.until, pause.until)
                        waiting.append(user)
                        continue
                    }
                    guard busy.count < max(1, self.configuration.maxConcurrentWebhooks) else {
                        waiting.append(user)
                        continue
                    }
                    busy.insert(user)
                    let handle = handles[user]
                    group.addTask {
                        let end = await self.round(row, of: name, http)
                        if case .recorded(let after, _) = end { handle?.delivered(upTo: after.cursor) }
                        self.ended.withLock { $0.append((user, end)) }
                        self.wake.raise()
                    }
                }
                ready = waiting
                let failing = rows.values.count { $0.failingSinceMs != nil }
                self.show(held: rows.count, waiting: ready.count, sending: busy.count, failing: failing)
                // Nothing more to start: until a commit wakes a webhook, a round ends, a retry or a pause is over,
                // or it is time to claim again.
                let retry = nextRetryMs.map { Duration.milliseconds(max(1, $0 - SessionClock.systemWallMs())) }
                let claim = max(.zero, claimEvery - (ContinuousClock.now - lastClaim))
                let resume = nextPause.map { max(.zero, $0 - .now) }
                await self.wake.wait(upTo: [retry, claim, resume].compactMap { $0 }.min())
            }
            // Rounds in flight stop before their next request (the lease is let go below).
            self.held.withLock { $0.removeAll() }
            group.cancelAll()
        }
        for handle in handles.values { _ = self.hub.unregister(handle) }
        self.show(held: 0, waiting: 0, sending: 0, failing: 0)
        // Let go at once for the other nodes (not when the lease ends), from a task the shutdown did not cancel.
        let (store, name) = (self.store, self.name)
        await Task { try? await store.releaseWebhooks(node: name) }.value
        await http.shutdown()
    }

    /// Sets ``ServerMetrics/webhooks``.
    private func show(held: Int, waiting: Int, sending: Int, failing: Int) {
        let gauges = self.metrics.webhooks
        gauges[.all]?.set(to: Double(held))
        gauges[.waiting]?.set(to: Double(waiting))
        gauges[.sending]?.set(to: Double(sending))
        gauges[.failing]?.set(to: Double(failing))
    }

    /// Takes (or keeps) this node's webhooks, and notes until when, for the rounds; nil when the store failed.
    private func claim() async -> [WebhookRow]? {
        let nowMs = SessionClock.systemWallMs()
        let leaseMs = self.lease.wholeMilliseconds
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

    private func takeEnded() -> [(user: UserID, end: RoundEnd)] {
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
    private func round(_ webhook: WebhookRow, of user: User, _ http: OutboundHTTP) async -> RoundEnd {
        var row = webhook
        let limit = max(1, self.configuration.webhookBatch)
        let found: [APIUpdate]
        let readTo: UInt64
        do {
            (found, readTo, _) = try await BotAPI.updates(of: user, after: row.cursor, limit: limit, store: self.store)
        } catch {
            self.logger.warning("reading a bot's updates failed", metadata: ["error": "\(error)"])
            return .lost
        }
        guard !found.isEmpty else {
            // Nothing but entries that are no updates: passed over for good.
            guard readTo > row.cursor else { return .recorded(row, more: false) }
            row.cursor = readTo
            // Read on at once: a backlog may follow.
            return await self.record(row, more: true)
        }
        var stopped = false
        for update in found {
            // Replaced, removed or no longer held by this node (the lease about to end), or the server stopping:
            // stop; whoever holds it next sends from the cursor recorded.
            guard self.stillHeld(row), !Task.isCancelled else {
                // Not recorded as this node's: it waits for the next claim.
                guard row.cursor > webhook.cursor else { return .lost }
                _ = await self.record(row, more: false)
                return .lost
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
            case .notAttempted:
                // Cut short by the server's stopping: no failure of the receiver's.
                _ = await self.record(row, more: false)
                return .lost
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
            stopped = true
            break
        }
        let end = await self.record(row, more: !stopped && found.count >= limit)
        if case .recorded = end, row.disabledMs != nil { await self.disabled(row, of: user) }
        return end
    }

    /// Records a round's outcome, if this node still holds the webhook it was for.
    private func record(_ row: WebhookRow, more: Bool) async -> RoundEnd {
        guard (try? await self.store.recordWebhook(row, node: self.name)) == true else { return .lost }
        return .recorded(row, more: more)
    }

    enum Outcome {
        case delivered
        /// The request was cut short by the server's stopping.
        case notAttempted
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
            if error is CancellationError || Task.isCancelled { return .notAttempted }
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
