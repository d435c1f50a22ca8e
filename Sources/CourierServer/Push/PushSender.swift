import CourierPush
import CourierStore
import Foundation
import Logging
import Synchronization

/// Sends what the push outbox holds, on every node: it takes the rows that are due under a lease
/// (``CourierDatabase/claimPushes(node:nowMs:leaseMs:limit:maxClaims:)``), so that each is sent by one node, sends each
/// delivery (RFC 8030, 8291, 8292) a few at a time, and records what became of them: done, retried later with
/// backoff (429 and 5xx, honouring `Retry-After`; a failed connection), dropped with the subscription (404, 410),
/// or dropped for good (any other refusal, or past the attempts or the push's time to live).
///
/// It works only while there is work: a commit that wrote pushes wakes it (`wake`); otherwise it sleeps until
/// the next retry is due, and on a shared database it also looks, now and then, for rows a node that died left.
final class PushSender: Sendable {
    private let store: any CourierDatabase
    private let key: VAPIDKey
    private let configuration: ServerConfiguration.Push
    /// Whether other nodes share the store: rows a dead one took come back due, with no hint.
    private let shared: Bool
    /// The push services' HTTP clients' settings: the clients live only while ``run()`` does.
    private let limits: OutboundHTTP.Limits
    private let metrics: ServerMetrics
    let logger: Logger
    private let wake: Wake
    /// The VAPID `Authorization` kept for each push service's origin, with its expiry (seconds since 1970): signing
    /// one costs more than sealing a push.
    private let tokens = Mutex<[String: (value: String, expires: Int64)]>([:])
    /// Who takes the rows, in the outbox (for an operator reading it).
    private let name = "\(ProcessInfo.processInfo.hostName)/\(getpid())/\(UInt32.random(in: 0...UInt32.max))"

    init(
        store: any CourierDatabase,
        key: VAPIDKey,
        configuration: ServerConfiguration.Push,
        shared: Bool,
        wake: Wake,
        metrics: ServerMetrics,
        logger: Logger
    ) {
        self.wake = wake
        self.store = store
        self.key = key
        self.configuration = configuration
        self.shared = shared
        self.metrics = metrics
        self.logger = logger
        var limits = OutboundHTTP.Limits()
        limits.connectTimeout = configuration.connectTimeout
        limits.requestTimeout = configuration.requestTimeout
        limits.maxResponseBytes = configuration.maxResponseBytes
        limits.allowPrivateTargets = configuration.allowPrivateTargets
        self.limits = limits
    }

    /// Sends until the task is cancelled, then closes its connections.
    func run() async {
        let http = OutboundHTTP(limits: self.limits, logger: self.logger)
        while !Task.isCancelled {
            let nowMs = SessionClock.systemWallMs()
            let claimed: (jobs: [PushJob], nextDueMs: Int64?)
            do {
                claimed = try await self.store.claimPushes(
                    node: self.name,
                    nowMs: nowMs,
                    leaseMs: self.configuration.lease.wholeMilliseconds,
                    limit: self.configuration.batch,
                    maxClaims: self.configuration.maxClaims
                )
            } catch {
                self.logger.warning("taking pushes from the outbox failed", metadata: ["error": "\(error)"])
                guard (try? await Task.sleep(for: .seconds(1))) != nil else { break }
                continue
            }
            for job in claimed.jobs where job.givenUp {
                self.logger.warning(
                    "a message's pushes were given up: taken too many times without being done",
                    metadata: ["conversation": "\(job.conversationID)", "seq": "\(job.seq)"]
                )
            }
            if !claimed.jobs.isEmpty {
                for job in claimed.jobs where job.attempts == 0 {
                    self.metrics.pushWait.record(.milliseconds(max(0, nowMs - job.timeMs)))
                }
                self.metrics.pushJobsSending.set(to: Double(claimed.jobs.count))
                let results = await self.keepingTaken(claimed.jobs.map(\.row)) {
                    await self.send(claimed.jobs, nowMs: nowMs, http)
                }
                self.metrics.pushJobsSending.set(to: 0)
                do {
                    try await self.store.finishPushes(results, node: self.name)
                } catch {
                    // The rows come back due when their lease ends, and are sent again.
                    self.logger.warning("recording sent pushes failed", metadata: ["error": "\(error)"])
                }
                continue
            }
            // Nothing taken: a row due now is another node's, in its transaction this moment; a moment later it is
            // taken (or free again).
            var wait: Duration? = claimed.nextDueMs.map {
                .milliseconds(max(Self.idleFloorMs, $0 - SessionClock.systemWallMs()))
            }
            if self.shared { wait = min(wait ?? self.configuration.pollInterval, self.configuration.pollInterval) }
            await self.wake.wait(upTo: wait)
        }
        await http.shutdown()
    }

    /// The shortest wait after a look that took nothing.
    static let idleFloorMs: Int64 = 100

    /// Runs `body` while renewing the lease on `rows` every third of it, so that a long job (a large group's
    /// message, slow push services) is never taken by another node meanwhile and sent twice.
    private func keepingTaken<T: Sendable>(_ rows: [Int64], _ body: @Sendable () async -> T) async -> T {
        let lease = self.configuration.lease
        let renewing = Task {
            while (try? await Task.sleep(for: lease / 3)) != nil {
                let until = SessionClock.systemWallMs() + lease.wholeMilliseconds
                do {
                    try await self.store.renewPushes(rows, node: self.name, untilMs: until)
                } catch {
                    self.logger.warning("keeping pushes taken failed", metadata: ["error": "\(error)"])
                }
            }
        }
        defer { renewing.cancel() }
        return await body()
    }

    /// Sends every delivery of the jobs, at most ``ServerConfiguration/Push/maxConcurrentPushes`` at once.
    private func send(_ jobs: [PushJob], nowMs: Int64, _ http: OutboundHTTP) async -> PushResults {
        var results = PushResults()
        let work = jobs.flatMap { job in job.deliveries.map { (job, $0) } }
        await withTaskGroup(of: (PushJob, PushDelivery, Outcome).self) { group in
            var next = 0
            func start() {
                guard next < work.count else { return }
                let (job, delivery) = work[next]
                next += 1
                group.addTask { (job, delivery, await self.push(delivery, of: job, nowMs: nowMs, http)) }
            }
            for _ in 0..<max(1, self.configuration.maxConcurrentPushes) { start() }
            while let (job, delivery, outcome) = await group.next() {
                self.record(outcome, of: delivery, in: job, nowMs: nowMs, into: &results)
                start()
            }
        }
        results.done = jobs.map(\.row)
        return results
    }

    enum Outcome: Equatable {
        case sent
        case gone
        case retry(afterMs: Int64?)
        case dropped
    }

    private func record(
        _ outcome: Outcome,
        of delivery: PushDelivery,
        in job: PushJob,
        nowMs: Int64,
        into results: inout PushResults
    ) {
        self.metrics.pushed(outcome)
        switch outcome {
        case .sent, .dropped:
            break
        case .gone:
            results.gone.append((delivery.subscription.endpoint, delivery.user))
        case .retry(let afterMs):
            let attempts = job.attempts + 1
            let delayMs = Self.retryDelayMs(attempts: attempts, retryAfterMs: afterMs, self.configuration)
            // Past its attempts, or due after the push would have expired: no use.
            let expiresMs = job.timeMs + Int64(self.configuration.ttlSeconds) * 1000
            guard attempts < self.configuration.maxAttempts, nowMs + delayMs < expiresMs else {
                let url = delivery.subscription.gateway?.url ?? delivery.subscription.endpoint
                self.logger.info("a push was given up", metadata: ["endpoint": "\(OutboundHTTP.origin(of: url))"])
                return
            }
            results.retries.append(
                PushResults.Retry(
                    row: job.row,
                    conversationID: job.conversationID,
                    seq: job.seq,
                    user: delivery.user,
                    endpoint: delivery.subscription.endpoint,
                    attempts: attempts,
                    dueMs: nowMs + delayMs
                )
            )
        }
    }

    /// The wait before attempt `attempts + 1`: the base doubled with each attempt, up to the cap, with up to a
    /// fifth more at random (retries of many pushes do not come back all at once); never before `Retry-After`.
    static func retryDelayMs(attempts: Int, retryAfterMs: Int64?, _ configuration: ServerConfiguration.Push) -> Int64 {
        let base = max(1, configuration.retryBase.wholeMilliseconds)
        let cap = max(base, configuration.retryCap.wholeMilliseconds)
        let (doubled, overflow) = base.multipliedReportingOverflow(by: 1 << Int64(min(max(0, attempts - 1), 30)))
        let backoff = overflow ? cap : min(cap, doubled)
        let jittered = backoff.addingReportingOverflow(Int64.random(in: 0...(backoff / 5)))
        // Never before the service asked (its Retry-After is read up to a day): past the push's time to live, the
        // push is given up instead.
        return max(jittered.overflow ? backoff : jittered.partialValue, retryAfterMs ?? 0)
    }

    /// One delivery: its payload sealed for the subscription, and what the push service answered.
    private func push(_ delivery: PushDelivery, of job: PushJob, nowMs: Int64, _ http: OutboundHTTP) async -> Outcome {
        let subscription = delivery.subscription
        if let gateway = subscription.gateway {
            return await self.notify(gateway, delivery, of: job, nowMs: nowMs, http)
        }
        let request: WebPushRequest
        guard let payload = Self.payload(of: job, for: delivery) else {
            self.logger.warning("a push's payload is too long even without its text: not sent")
            return .dropped
        }
        do {
            let keys = try PushSubscriptionKeys(p256dh: subscription.p256dh, auth: subscription.auth)
            request = try WebPushRequest(
                payload: payload,
                endpoint: subscription.endpoint,
                keys: keys,
                authorization: try self.authorization(for: subscription.endpoint, nowSeconds: nowMs / 1000),
                urgency: delivery.urgent ? .high : .normal,
                topic: self.key.topic(for: String(job.conversationID)),
                ttlSeconds: self.configuration.ttlSeconds,
                // The push service sees the sealed length: padded to a multiple of 512 bytes, it tells little of
                // the text's.
                paddedTo: min(WebPushEncryption.maxPayload, (payload.count / 512 + 1) * 512)
            )
        } catch {
            self.logger.warning("a push could not be made", metadata: ["error": "\(error)"])
            return .dropped
        }
        let response: OutboundHTTP.Response
        do {
            response = try await http.post(subscription.endpoint, headers: request.headers, body: request.body)
        } catch let refusal as OutboundHTTP.Refusal {
            self.logger.info("a push endpoint was refused", metadata: ["reason": "\(refusal)"])
            return .dropped
        } catch {
            return .retry(afterMs: nil)
        }
        return Self.outcome(of: response, nowMs: nowMs)
    }

    /// How long a VAPID token is made for, and how much of that is left when a new one is made instead.
    static let tokenLifetimeSeconds: Int64 = 12 * 3600
    static let tokenRenewalSeconds: Int64 = 3600

    /// The `Authorization` for a push to `endpoint`: the one kept for its origin while it has an hour left, else a
    /// new one for twelve hours.
    func authorization(for endpoint: String, nowSeconds: Int64) throws -> String {
        guard let audience = VAPIDKey.audience(of: endpoint) else {
            throw OutboundHTTP.Refusal(description: "a push endpoint is an absolute http(s) URL")
        }
        if let kept = self.tokens.withLock({ $0[audience] }), kept.expires - nowSeconds > Self.tokenRenewalSeconds {
            return kept.value
        }
        let value = try self.key.authorization(
            for: endpoint,
            subject: self.configuration.subject,
            nowSeconds: nowSeconds,
            lifetimeSeconds: Self.tokenLifetimeSeconds
        )
        self.tokens.withLock { tokens in
            // Bounded by the push services in use: a few; a flood of origins (webhook-like endpoints) starts over.
            if tokens.count >= 1024 { tokens.removeAll() }
            tokens[audience] = (value, nowSeconds + Self.tokenLifetimeSeconds)
        }
        return value
    }

    /// What a push service's answer means (RFC 8030 §5, §7.3; RFC 8292 §4).
    static func outcome(of response: OutboundHTTP.Response, nowMs: Int64) -> Outcome {
        switch response.status {
        case 200..<300:
            return .sent
        case 404, 410:
            return .gone
        case 429, 500..<600:
            return .retry(afterMs: response.headers.first(name: "Retry-After").flatMap { Self.retryAfterMs($0, nowMs) })
        default:
            return .dropped
        }
    }

    /// A `Retry-After` value (seconds, or an HTTP date) as milliseconds from now.
    static func retryAfterMs(_ value: String, _ nowMs: Int64) -> Int64? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Int64(trimmed), seconds >= 0 { return min(seconds, 86_400) * 1000 }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: trimmed) else { return nil }
        return max(0, Int64(date.timeIntervalSince1970 * 1000) - nowMs)
    }

    /// The JSON the service worker reads: the conversation (as the recipient names it), the message's id and seq,
    /// the sender, and, unless the recipient hides previews, the sender's display name and one line of the text.
    ///
    /// - Returns: At most ``WebPushEncryption/maxPayload`` bytes: past it (names and ids long in bytes) without the
    ///   display name and the text; nil if even that is too long (never a trap: the text is anyone's).
    static func payload(of job: PushJob, for delivery: PushDelivery) -> [UInt8]? {
        struct Payload: Encodable {
            struct Address: Encodable {
                var user: String?
                var group: String?
            }
            var conversation: Address
            var message_id: String
            var seq: UInt64
            var time_ms: Int64
            var from: String
            var from_name: String?
            var text: String?
            var previews: Bool
        }
        var address = Payload.Address()
        switch delivery.conversation {
        case .user(let name): address.user = name
        case .group(let name): address.group = name
        }
        var payload = Payload(
            conversation: address,
            message_id: job.messageID,
            seq: job.seq,
            time_ms: job.timeMs,
            from: job.from,
            from_name: delivery.previews ? job.fromDisplayName : nil,
            text: delivery.previews ? Self.line(job.text) : nil,
            previews: delivery.previews
        )
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        for attempt in 0..<2 {
            if attempt == 1 {
                payload.from_name = nil
                payload.text = nil
            }
            if let bytes = try? encoder.encode(payload), bytes.count <= WebPushEncryption.maxPayload {
                return Array(bytes)
            }
        }
        return nil
    }

    /// The most characters of text a notification shows, and the most bytes of UTF-8 they take.
    static let maxLineCharacters = 160
    static let maxLineBytes = 1024

    /// A text's first line that is not blank, its control characters made spaces (JSON would spell each in six
    /// bytes), cut to ``maxLineCharacters`` characters (whole ones: a flag or a family emoji is never cut in two) and
    /// to ``maxLineBytes`` bytes (at a scalar, where one character alone is longer), with an ellipsis.
    static func line(_ text: String) -> String {
        let line = text.split(whereSeparator: \.isNewline).first { !$0.allSatisfy(\.isWhitespace) } ?? ""
        let shown = String.UnicodeScalarView(
            line.unicodeScalars.map { $0.properties.generalCategory == .control ? " " : $0 }
        )
        var trimmed = String(shown).trimmingCharacters(in: .whitespaces)
        var cut = false
        if trimmed.count > Self.maxLineCharacters {
            trimmed = String(trimmed.prefix(Self.maxLineCharacters - 1))
            cut = true
        }
        if trimmed.utf8.count > Self.maxLineBytes - 3 {
            var kept = String.UnicodeScalarView()
            var bytes = 0
            for scalar in trimmed.unicodeScalars {
                bytes += scalar.utf8.count
                if bytes > Self.maxLineBytes - 3 { break }
                kept.append(scalar)
            }
            trimmed = String(kept)
            cut = true
        }
        return cut ? trimmed + "…" : trimmed
    }
}

/// A wake-up call that is kept until taken: ``raise()`` before ``wait(upTo:)`` makes the wait return at once.
final class Wake: Sendable {
    private struct State {
        var raised = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())

    func raise() {
        // A waiter takes the call; with none waiting, it is kept for the next.
        let waiter = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.raised = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns once raised (taking the call), after `limit` (nil: no limit), or when the task is cancelled. The
    /// caller looks for work after every return: a call taken by a wait that also timed out is not lost.
    func wait(upTo limit: Duration?) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.raised() }
            if let limit { group.addTask { try? await Task.sleep(for: limit) } }
            await group.next()
            group.cancelAll()
        }
    }

    private func raised() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = self.state.withLock { state -> Bool in
                    if state.raised {
                        state.raised = false
                        return true
                    }
                    if Task.isCancelled { return true }
                    state.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            let waiter = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume()
        }
    }
}
