import CourierStore
import Crypto
import Foundation
import Logging
import NIOHTTP1

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

    /// Sends until the task is cancelled; then lets go of its webhooks for the other nodes.
    func run() async {
        let http = OutboundHTTP(limits: self.limits, logger: self.logger)
        var handles: [UserID: ConnectionHandle] = [:]
        var users: [UserID: User] = [:]
        while !Task.isCancelled {
            let nowMs = SessionClock.systemWallMs()
            let held: [WebhookRow]
            do {
                held = try await self.store.claimWebhooks(
                    node: self.name,
                    nowMs: nowMs,
                    leaseMs: self.configuration.webhookLease.wholeMilliseconds,
                    limit: 10_000
                )
            } catch {
                self.logger.warning("taking webhooks failed", metadata: ["error": "\(error)"])
                guard (try? await Task.sleep(for: .seconds(1))) != nil else { break }
                continue
            }
            // A place in the map of connections for each webhook held: a commit that grows its bot's log wakes this.
            let ids = Set(held.map(\.user))
            for (user, handle) in handles where !ids.contains(user) {
                _ = self.hub.unregister(handle)
                handles[user] = nil
            }
            for row in held where handles[row.user] == nil {
                guard
                    case .registered(let handle, _, _) = self.hub.register(
                        user: row.user,
                        device: DeviceID(rawValue: 0),
                        ephemeral: false
                    )
                else { continue }
                handles[row.user] = handle
                handle.setWaker { [wake] in wake.raise() }
            }
            for row in held where users[row.user] == nil {
                if let name = try? await self.store.userName(of: row.user) {
                    users[row.user] = User(id: row.user, name: name, createdMs: 0, removedMs: nil)
                }
            }
            users = users.filter { ids.contains($0.key) }
            // Each due webhook a round: its updates, in order, until one fails or the batch is sent.
            let due = held.filter { $0.dueMs <= nowMs }
            let rounds = await self.deliver(due, users: users, http)
            var again = false
            for (row, more) in rounds {
                handles[row.user]?.delivered(upTo: row.cursor)
                // More to send now (the batch ran out, or the log grew meanwhile): another round at once.
                if more || (row.failingSinceMs == nil && handles[row.user]?.take() != nil) { again = true }
            }
            if again { continue }
            // Nothing to do: until a commit wakes a webhook, a retry is due, or the lease wants renewing.
            let retry = held.filter { $0.dueMs > nowMs }.map(\.dueMs).min().map {
                Duration.milliseconds(max(1, $0 - SessionClock.systemWallMs()))
            }
            let wait = [retry, self.configuration.webhookLease / 3, self.configuration.webhookPollInterval]
                .compactMap { $0 }.min()
            await self.wake.wait(upTo: wait)
            for handle in handles.values { _ = handle.take() }
        }
        for handle in handles.values { _ = self.hub.unregister(handle) }
        // Let go at once for the other nodes (not when the lease ends), from a task the shutdown did not cancel.
        let (store, name) = (self.store, self.name)
        await Task { try? await store.releaseWebhooks(node: name) }.value
        await http.shutdown()
    }

    /// A round of each webhook, several webhooks at once.
    ///
    /// - Returns: Each webhook as it now stands, and whether it has more to send now.
    private func deliver(
        _ rows: [WebhookRow],
        users: [UserID: User],
        _ http: OutboundHTTP
    ) async -> [(WebhookRow, Bool)] {
        await withTaskGroup(of: (WebhookRow, Bool)?.self) { group in
            var next = 0
            var done: [(WebhookRow, Bool)] = []
            func start() {
                guard next < rows.count else { return }
                let row = rows[next]
                next += 1
                guard let user = users[row.user] else { return }
                group.addTask { await self.round(row, of: user, http) }
            }
            for _ in 0..<max(1, self.configuration.maxConcurrentWebhooks) { start() }
            while let result = await group.next() {
                if let result { done.append(result) }
                start()
            }
            return done
        }
    }

    /// One webhook's round: up to a batch of its updates, in order, each sent until answered 2xx.
    private func round(_ webhook: WebhookRow, of user: User, _ http: OutboundHTTP) async -> (WebhookRow, Bool)? {
        var row = webhook
        let limit = max(1, self.configuration.webhookBatch)
        let found: [APIUpdate]
        let readTo: UInt64
        do {
            (found, readTo) = try await BotAPI.updates(of: user, after: row.cursor, limit: limit, store: self.store)
        } catch {
            self.logger.warning("reading a bot's updates failed", metadata: ["error": "\(error)"])
            return nil
        }
        guard !found.isEmpty else {
            // Nothing but entries that are no updates: passed over for good.
            guard readTo > row.cursor else { return (row, false) }
            row.cursor = readTo
            return (try? await self.store.recordWebhook(row, node: self.name)) == true ? (row, false) : nil
        }
        var failed = false
        for update in found {
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
        } catch let refusal as OutboundHTTP.Refusal {
            return .failed("refused: \(refusal)", retryAfterMs: nil)
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
