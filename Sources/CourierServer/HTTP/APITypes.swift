import CourierProtocol
import CourierStore
import Foundation
import Synchronization

/// One update of `GET /api/v1/updates`: a new message, or a message edited.
struct APIUpdate: Encodable {
    var update_id: UInt64
    var message: APIMessage?
    var edited_message: APIMessage?
}

/// A message as the HTTP API shows it to one reader.
struct APIMessage: Encodable {
    struct Media: Encodable {
        var sha256: String
        var size: UInt64
        var mime: String
        var name: String
        var kind: String
        var caption: String?
    }
    struct Reply: Encodable {
        var seq: UInt64
        var id: String?
        var from: String?
    }
    var id: String
    var seq: UInt64
    var from: String
    /// For a direct message: the user it went to.
    var to: String?
    /// For a group's message: the group.
    var group: String?
    var time_ms: Int64
    var text: String?
    var media: Media?
    var reply_to: Reply?
    var edited_ms: Int64?
    var recalled: Bool?
    /// A forwarded copy's first sender.
    var forwarded_from: String?

    init(_ message: StoredMessage, reader: String) {
        self.id = message.id
        self.seq = message.seq
        self.from = message.from
        self.time_ms = message.timeMs
        switch message.conversation {
        case .user(let peer):
            self.to = message.from == reader ? peer : reader
        case .group(let name):
            self.group = name
        }
        self.edited_ms = message.editedMs
        if message.recalled {
            self.recalled = true
        } else if let body = try? Courier_V1_Body(serializedBytes: message.body) {
            if !body.forwardedFrom.isEmpty { self.forwarded_from = body.forwardedFrom }
            switch body.content {
            case .text(let text)?:
                self.text = text
            case .media(let media)?:
                let kind =
                    switch media.kind {
                    case .image: "image"
                    case .voice: "voice"
                    case .video: "video"
                    default: "file"
                    }
                self.media = Media(
                    sha256: media.sha256,
                    size: media.size,
                    mime: media.mime,
                    name: media.name,
                    kind: kind,
                    caption: media.caption.isEmpty ? nil : media.caption
                )
            case nil:
                break
            }
        }
        if let reply = message.replyTo {
            self.reply_to = Reply(
                seq: reply.seq,
                id: reply.visible ? reply.id : nil,
                from: reply.visible ? reply.from : nil
            )
        }
    }
}

/// The HTTP API's request rates, per user and per address, and its long polls per user.
final class APIRateLimiter: Sendable {
    private struct State {
        var users: [UserID: TokenBucket] = [:]
        var addresses: [String: TokenBucket] = [:]
        var hooks: [Int64: TokenBucket] = [:]
        var polls: [UserID: Int] = [:]
    }

    private let configuration: ServerConfiguration.API
    private let state = Mutex(State())
    /// The most buckets kept of each kind: past it, the full ones are dropped.
    static let maxBuckets = 100_000

    init(_ configuration: ServerConfiguration.API) {
        self.configuration = configuration
    }

    func take(user: UserID) throws {
        try self.take(
            \.users,
            user,
            self.configuration.requestsPerSecond,
            self.configuration.requestBurst,
            "of this user"
        )
    }

    func take(hook: Int64) throws {
        try self.take(
            \.hooks,
            hook,
            self.configuration.hookPostsPerSecond,
            self.configuration.hookPostBurst,
            "to this hook"
        )
    }

    func take(address: String) throws {
        let (rate, burst) = (self.configuration.requestsPerSecondPerAddress, self.configuration.requestBurstPerAddress)
        try self.take(\.addresses, address, rate, burst, "from this address")
    }

    /// Takes a request from a key's bucket, or refuses it (429 `rate-limited`, saying when to ask again).
    private func take<Key: Hashable>(
        _ table: WritableKeyPath<State, [Key: TokenBucket]>,
        _ key: Key,
        _ rate: Double,
        _ burst: Double,
        _ whose: String
    ) throws {
        let now = ContinuousClock.now
        let wait = self.state.withLock { state in
            Self.take(&state[keyPath: table], key, rate: rate, burst: burst, now: now)
        }
        if let wait { throw APIRefusal.throttled(wait, "too many requests \(whose)") }
    }

    private static func take<Key: Hashable>(
        _ buckets: inout [Key: TokenBucket],
        _ key: Key,
        rate: Double,
        burst: Double,
        now: ContinuousClock.Instant
    ) -> Duration? {
        if buckets.count >= Self.maxBuckets {
            buckets = buckets.filter {
                var bucket = $0.value
                return !bucket.isFull(now: now)
            }
            // Still full (a flood from many addresses): started afresh, so that the table stays bounded and its
            // sweeps rare.
            if buckets.count >= Self.maxBuckets / 2 { buckets.removeAll() }
        }
        var bucket = buckets[key] ?? TokenBucket(rate: max(0.001, rate), burst: burst, now: now)
        let wait = bucket.take(now: now)
        buckets[key] = bucket
        return wait
    }

    func startPoll(of user: UserID) -> Bool {
        self.state.withLock { state in
            guard state.polls[user, default: 0] < max(1, self.configuration.maxPollsPerUser) else { return false }
            state.polls[user, default: 0] += 1
            return true
        }
    }

    func endPoll(of user: UserID) {
        self.state.withLock { state in
            state.polls[user, default: 1] -= 1
            if state.polls[user] == 0 { state.polls[user] = nil }
        }
    }
}

/// One long poll's wait: resumed once, by the first of a wake, the deadline and a cancellation, whichever comes first
/// (one that comes before the wait began is kept for it).
final class PollWaiter: Sendable {
    private let state = Mutex<(continuation: CheckedContinuation<Bool, Never>?, result: Bool?)>((nil, nil))

    func set(_ continuation: CheckedContinuation<Bool, Never>) {
        let ready = self.state.withLock { state -> Bool? in
            if let result = state.result { return result }
            state.continuation = continuation
            return nil
        }
        if let ready { continuation.resume(returning: ready) }
    }

    func resume(_ value: Bool) {
        let continuation = self.state.withLock { state -> CheckedContinuation<Bool, Never>? in
            guard state.result == nil else { return nil }
            state.result = value
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume(returning: value)
    }
}
