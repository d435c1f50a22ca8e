public import CourierStore
internal import Foundation
public import Logging
internal import PostgresNIO
public import ServiceLifecycle
internal import Synchronization

/// The news between the nodes on one PostgreSQL database (``StoreFeed``), through `LISTEN`/`NOTIFY` on one channel.
///
/// A node publishes, after each commit, which users' logs grew and to which cursors; what gathers while a
/// notification is being sent goes in the next, so a busy node sends one `NOTIFY` per tick of its own pace, never
/// one per message, and never inside a write transaction. Every node listens on a connection of its own, outside
/// the pool. Notifications are hints: PostgreSQL drops them for a listener that is disconnected, so after every
/// (re)connection the feed says ``FeedNews/resync``, and the server reads its online users' cursors, as it also does
/// on an interval. In ``Mode/poll`` the feed neither listens nor publishes: the interval alone delivers (to compare).
public final class PostgresFeed: StoreFeed, Service, CustomReflectable {
    public enum Mode: String, Sendable, CaseIterable {
        /// `LISTEN`/`NOTIFY` carry the hints; polling catches what they miss.
        case notify
        /// Only polling: no notifications at all.
        case poll
    }

    public struct Configuration: Sendable {
        public var mode: Mode = .notify
        /// The channel the nodes of one database share.
        public var channel: String = "courier_news"
        /// How long the listener waits before connecting again after losing its connection (doubled on each
        /// failure in a row, up to ``maxReconnectDelay``).
        public var reconnectDelay: Duration = .milliseconds(100)
        public var maxReconnectDelay: Duration = .seconds(2)
        /// The most news waiting for the consumer; past it the oldest is dropped, and a resync follows.
        public var maxQueuedNews: Int = 4096
        /// How often the listener asks its connection a question (`SELECT 1`) to learn that it still answers, and
        /// how long it waits: a connection whose packets are silently dropped never closes by itself, and a listener
        /// on it would hear nothing for good. One not answered in time is closed, and the listener connects again.
        public var livenessInterval: Duration = .seconds(10)
        public var livenessTimeout: Duration = .seconds(10)

        public init() {}
    }

    /// PostgreSQL's limit on a notification's payload is 8,000 bytes; a batch is cut into payloads below it.
    static let maxPayloadBytes = 7_900

    let store: PostgresStore
    public let configuration: Configuration
    let logger: Logger
    /// This process's mark on what it publishes: its own notifications come back to it and are skipped.
    let origin: String
    /// What waits to be sent, and since when the oldest of it has.
    private let pending = Mutex<Pending>(Pending())
    private let hops = Mutex<(@Sendable (FeedHop, Duration) -> Void)?>(nil)
    private let wake: (stream: AsyncStream<Void>, continuation: AsyncStream<Void>.Continuation)
    public let news: AsyncStream<FeedNews>
    private let newsContinuation: AsyncStream<FeedNews>.Continuation
    private let listening = Atomic<Bool>(false)

    public init(store: PostgresStore, configuration: Configuration = .init(), logger: Logger) {
        self.store = store
        self.configuration = configuration
        self.logger = logger
        self.origin = String(UInt64.random(in: 0...UInt64.max), radix: 36)
        self.wake = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        (self.news, self.newsContinuation) = AsyncStream.makeStream(
            of: FeedNews.self,
            bufferingPolicy: .bufferingNewest(max(1, configuration.maxQueuedNews))
        )
    }

    public var isListening: Bool { self.listening.load(ordering: .relaxed) }

    struct Pending {
        var logs: [UserID: UInt64] = [:]
        var notices: [[UInt8]] = []
        var since: ContinuousClock.Instant?
    }

    public func observe(_ hops: @escaping @Sendable (FeedHop, Duration) -> Void) {
        self.hops.withLock { $0 = hops }
    }

    public func publish(logs cursors: [UserID: UInt64]) {
        guard self.configuration.mode == .notify, !cursors.isEmpty else { return }
        self.pending.withLock { pending in
            pending.logs.merge(cursors, uniquingKeysWith: max)
            if pending.since == nil { pending.since = .now }
        }
        self.wake.continuation.yield()
    }

    public func publish(notice: [UInt8]) {
        // In base64, a third larger, beside the origin and kind.
        guard self.configuration.mode == .notify, (notice.count + 2) / 3 * 4 < Self.maxPayloadBytes - 64 else { return }
        self.pending.withLock { $0.notices.append(notice) }
        self.wake.continuation.yield()
    }

    /// Listens and publishes until the task is cancelled or the service group shuts down; the news stream ends.
    public func run() async throws {
        defer { self.newsContinuation.finish() }
        guard self.configuration.mode == .notify else {
            self.newsContinuation.yield(.resync)
            try? await gracefulShutdown()
            return
        }
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await self.listen() }
                group.addTask { await self.sendPending() }
                await group.next()
                group.cancelAll()
            }
        }
    }

    // MARK: Publishing

    private func sendPending() async {
        await self.store.whenRunning()
        for await _ in self.wake.stream {
            let taken = self.pending.withLock { pending in
                defer { pending = Pending() }
                return pending
            }
            guard !taken.logs.isEmpty || !taken.notices.isEmpty else { continue }
            var sent = false
            do {
                let (channel, logger, origin) = (self.configuration.channel, self.logger, self.origin)
                let timeout = self.store.configuration.transactionTimeout
                sent = try await self.store.client.withConnection { connection in
                    // Stamped once the connection is had: the notify hop starts at the send, not in the pool's queue.
                    let stamp = Self.stamp(origin, wallMicroseconds: Self.wallMicroseconds())
                    var sent = false
                    let payloads = Self.payloads(origin: stamp, logs: taken.logs, notices: taken.notices)
                    // The logs' payloads come first; the publish hop is theirs (a notice is not a delivery).
                    let logPayloads = payloads.count - taken.notices.count
                    for (index, payload) in payloads.enumerated() {
                        do {
                            try await PostgresStore.untilClosed(connection, within: timeout) {
                                try await connection.run("SELECT pg_notify(\(channel), \(payload))", logger: logger)
                            }
                            if index < logPayloads { sent = true }
                        } catch {
                            // A hint lost: the other nodes' polling finds the events.
                            logger.debug("notify failed", metadata: ["error": "\(error)"])
                        }
                    }
                    return sent
                }
            } catch {
                // No connection: the hints are lost; the other nodes' polling finds the events.
                self.logger.debug("notify failed", metadata: ["error": "\(error)"])
            }
            if sent, let since = taken.since, let hops = self.hops.withLock({ $0 }) {
                hops(.publish, .now - since)
            }
            if Task.isCancelled { return }
        }
    }

    /// A payload's first word: the sender's origin, and the moment of sending by its wall clock (microseconds since
    /// 1970) after an `@`. A node from before the stamp reads the word whole, as an origin not its own.
    static func stamp(_ origin: String, wallMicroseconds: Int64) -> String {
        "\(origin)@\(wallMicroseconds)"
    }

    /// The notify hop of a notification stamped `sentMicroseconds`, received at `nowMicroseconds`: nil for a stamp
    /// more than an hour away from this node's clock (anybody who may connect to the database may notify on the
    /// channel, with any number), none below zero (another node's clock a little ahead).
    static func notifyHop(sentMicroseconds sent: Int64, nowMicroseconds now: Int64) -> Duration? {
        let (elapsed, overflow) = now.subtractingReportingOverflow(sent)
        guard !overflow, (-3_600_000_000...3_600_000_000).contains(elapsed) else { return nil }
        return .microseconds(max(0, elapsed))
    }

    static func wallMicroseconds() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1_000_000).rounded())
    }

    /// The payloads for a batch: `ORIGIN L user:cursor,user:cursor…` for logs, `ORIGIN N base64` for each notice,
    /// each under PostgreSQL's limit.
    static func payloads(origin: String, logs: [UserID: UInt64], notices: [[UInt8]]) -> [String] {
        var payloads: [String] = []
        var current = ""
        for (user, cursor) in logs.sorted(by: { $0.key < $1.key }) {
            let item = "\(user.rawValue):\(cursor)"
            if current.isEmpty {
                current = "\(origin) L \(item)"
            } else if current.utf8.count + 1 + item.utf8.count > Self.maxPayloadBytes {
                payloads.append(current)
                current = "\(origin) L \(item)"
            } else {
                current += "," + item
            }
        }
        if !current.isEmpty { payloads.append(current) }
        for notice in notices {
            payloads.append("\(origin) N \(Data(notice).base64EncodedString())")
        }
        return payloads
    }

    /// A payload as news, nil for one of this process's own or one that is not Courier's.
    static func news(from payload: String, skipping origin: String) -> FeedNews? {
        let parts = payload.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, Self.sender(of: parts[0]).origin != origin else { return nil }
        switch parts[1] {
        case "L":
            var logs: [UserID: UInt64] = [:]
            for item in parts[2].split(separator: ",") {
                let pair = item.split(separator: ":")
                guard pair.count == 2, let user = Int64(pair[0]), let cursor = UInt64(pair[1]) else { return nil }
                logs[UserID(rawValue: user), default: 0] = max(logs[UserID(rawValue: user), default: 0], cursor)
            }
            return logs.isEmpty ? nil : .logs(logs)
        case "N":
            guard let data = Data(base64Encoded: String(parts[2])) else { return nil }
            return .notice([UInt8](data))
        default:
            return nil
        }
    }

    /// A payload's first word as its origin and, when stamped, the moment it was sent (``stamp(_:wallMicroseconds:)``).
    static func sender(of word: Substring) -> (origin: Substring, sentMicroseconds: Int64?) {
        guard let at = word.firstIndex(of: "@") else { return (word, nil) }
        return (word[..<at], Int64(word[word.index(after: at)...]))
    }

    // MARK: Listening

    private func listen() async {
        var delay = self.configuration.reconnectDelay
        var id = 1_000
        while !Task.isCancelled {
            id += 1
            do {
                let connection = try await PostgresConnection.connect(
                    configuration: self.store.connection,
                    id: id,
                    logger: self.logger
                )
                defer { Task { try? await connection.close() } }
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { await self.watch(connection) }
                    defer { group.cancelAll() }
                    try await self.listen(on: connection) { delay = self.configuration.reconnectDelay }
                }
            } catch {
                if Task.isCancelled { break }
                self.logger.warning(
                    "the listener for other nodes' news lost its connection",
                    metadata: ["error": "\(error)"]
                )
            }
            self.listening.store(false, ordering: .relaxed)
            guard (try? await Task.sleep(for: delay)) != nil else { break }
            delay = min(delay * 2, self.configuration.maxReconnectDelay)
        }
        self.listening.store(false, ordering: .relaxed)
    }

    /// Asks the listener's connection a question every ``Configuration-swift.struct/livenessInterval``, and closes
    /// it when the answer does not come within ``Configuration-swift.struct/livenessTimeout`` (the listening then
    /// fails, and connects again). Ends when cancelled.
    private func watch(_ connection: PostgresConnection) async {
        let logger = self.logger
        while (try? await Task.sleep(for: self.configuration.livenessInterval)) != nil {
            do {
                try await PostgresStore.untilClosed(connection, within: self.configuration.livenessTimeout) {
                    try await connection.run("SELECT 1", logger: logger)
                }
            } catch {
                if Task.isCancelled { return }
                self.logger.warning(
                    "the listener's connection did not answer: connecting again",
                    metadata: ["error": "\(error)"]
                )
                try? await connection.close()
                return
            }
        }
    }

    /// Listens on a connection until it fails, saying ``FeedNews/resync`` once it listens, then passing on
    /// every notification; `listening` is called once it listens.
    private func listen(on connection: PostgresConnection, listening: () -> Void) async throws {
        try await connection.listen(on: self.configuration.channel) { notifications in
            // Listening from here on: whatever was published before is in the store.
            self.listening.store(true, ordering: .relaxed)
            listening()
            self.logger.debug("listening for other nodes' news")
            self.newsContinuation.yield(.resync)
            for try await notification in notifications {
                let news = Self.news(from: notification.payload, skipping: self.origin)
                // Only news of logs (a notice of typing or presence is not a delivery).
                if case .logs? = news, let hops = self.hops.withLock({ $0 }),
                    let first = notification.payload.split(separator: " ", maxSplits: 1).first,
                    let sent = Self.sender(of: first).sentMicroseconds,
                    let hop = Self.notifyHop(sentMicroseconds: sent, nowMicroseconds: Self.wallMicroseconds())
                {
                    hops(.notify, hop)
                }
                if let news,
                    case .dropped = self.newsContinuation.yield(news)
                {
                    // The oldest news went: the newest says so.
                    self.newsContinuation.yield(.resync)
                }
            }
        }
    }

    public var customMirror: Mirror {
        Mirror(self, children: ["mode": self.configuration.mode, "channel": self.configuration.channel])
    }
}
