/// What a `courier bench` run does: how many connections, talking how, how much and how fast.
public struct BenchConfiguration: Sendable, Hashable {
    /// Who talks to whom.
    public enum Pattern: Sendable, Hashable, CustomStringConvertible {
        /// Connections in pairs; each sends to its partner.
        case pairs
        /// Connections in groups of this size; each sends to its group, which fans every message out to the others.
        case groups(size: Int)
        /// Connections that authenticate and then only keep their connection alive (pings), for memory per
        /// connection.
        case idle

        public var description: String {
            switch self {
            case .pairs: "pairs"
            case .groups(let size): "groups of \(size)"
            case .idle: "idle"
            }
        }
    }

    /// The connections (one user and device each).
    public var connections: Int = 100
    /// How they reach the server: the native port, or the WebSocket gateway.
    public var transport: BenchTransport = .native
    public var pattern: Pattern = .pairs
    /// Messages each connection sends.
    public var messagesPerConnection: Int = 1_000
    /// Each message's text size in bytes (at least enough for the send time it carries).
    public var messageBytes: Int = 100
    /// The total send rate in messages per second (open loop, each send stamped with its intended time so a
    /// stalled server shows in the latencies); nil sends as fast as acknowledgements allow (closed loop).
    public var rate: Double? = nil
    /// In closed loop, the sends each connection keeps waiting for acknowledgement (at most the server's
    /// `maxUnackedSends`).
    public var window: Int = 16
    /// How many connections are opened at once while connecting: under the server's default
    /// `maxUnauthenticatedPerAddress` (128), which closes the connections of one address past it that have not
    /// logged in yet (every bench connection comes from 127.0.0.1).
    public var connectConcurrency: Int = 100
    /// For `.idle`: how many processes the connections come from (each from its own loopback source address); more
    /// than one fills a server past one process's open-file limit.
    public var processes: Int = 1
    /// For `.idle`: how long the connections are held before the server's memory is read.
    public var settle: Duration = .seconds(5)
    /// With `.pairs` on several nodes (`nodes`): each pair's two partners connect to the same node, so no message
    /// crosses between nodes and no two nodes write one conversation (by default they are on different nodes).
    public var partnersOnOneNode = false
    /// The nodes the connections are spread over (user `i` on node `i % nodes`).
    public var nodes = 1
    /// Whether every user has a Web Push subscription too (at an address never reached: they are online), so that
    /// every message takes the push outbox's path.
    public var pushSubscribers = false
    /// The longest the load may take before the run gives up and reports what it has.
    public var timeout: Duration = .seconds(300)

    public init() {}

    /// How many members receive each message.
    public var recipientsPerMessage: Int {
        switch self.pattern {
        case .pairs: 1
        case .groups(let size): size - 1
        case .idle: 0
        }
    }

    /// The messages the run sends, and the deliveries they make.
    public var expectedSends: Int { self.pattern == .idle ? 0 : self.connections * self.messagesPerConnection }
    public var expectedDeliveries: Int { self.expectedSends * self.recipientsPerMessage }
}
