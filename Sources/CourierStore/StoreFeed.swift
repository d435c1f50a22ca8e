/// News between the servers that share one database (the nodes on PostgreSQL): hints, never the truth. The store
/// is the truth: a server that misses a hint (a notification dropped, a listener reconnecting) still finds every
/// event in the store by reading its online users' cursors, which it does on an interval and after every
/// ``FeedNews/resync``. A lost hint costs latency, never a message.
public protocol StoreFeed: Sendable {
    /// Tells the other servers that these users' logs grew to these cursors. Called after the commit, never inside
    /// it; the feed sends what gathers while it is sending, together.
    func publish(logs cursors: [UserID: UInt64])

    /// Tells the other servers an ephemeral notice (typing, presence), at most once: never stored, never resent.
    func publish(notice: [UInt8])

    /// What the other servers sent, for one consumer, until the feed stops. A ``FeedNews/resync`` comes whenever
    /// news may have been missed (the listener connected, or connected again): the server then reads its online
    /// users' cursors from the store.
    var news: AsyncStream<FeedNews> { get }

    /// Whether news is received now; false while the listener is disconnected, and for a feed that only polls.
    var isListening: Bool { get }

    /// Has the feed report how long its hops take (for the server's metrics), from now on.
    func observe(_ hops: @escaping @Sendable (FeedHop, Duration) -> Void)
}

extension StoreFeed {
    /// A feed that times nothing reports nothing.
    public func observe(_ hops: @escaping @Sendable (FeedHop, Duration) -> Void) {}
}

/// The hops of a piece of news a feed can time.
public enum FeedHop: String, Sendable, CaseIterable {
    /// On the node that committed: from the commit's news given to the feed until it is sent (waiting while the
    /// news before it is sent, then the send).
    case publish
    /// From the sending node's send until this node's listener received it, by the two nodes' wall clocks (on
    /// different machines their difference adds in).
    case notify
}

/// One piece of news from another server.
public enum FeedNews: Sendable, Hashable {
    /// These users' logs grew to these cursors.
    case logs([UserID: UInt64])
    /// An ephemeral notice, as another server published it.
    case notice([UInt8])
    /// News may have been missed: read the online users' cursors.
    case resync
}

/// What a store is, for `/health` and the logs: its kind and where it is (never with a password).
public struct StoreDescription: Sendable, Hashable {
    /// `sqlite` or `postgres`.
    public var kind: String
    /// The database file's path, or the PostgreSQL URL without its password.
    public var location: String

    public init(kind: String, location: String) {
        self.kind = kind
        self.location = location
    }
}
