public import Foundation
public import NIOCore

/// How a ``CacheProxy`` listens, where it keeps its cache, and every limit it enforces.
public struct MediaCacheConfiguration: Sendable {
    /// The address the proxy listens on. Players on the same device reach it on the loopback address; listening
    /// elsewhere would let other machines use (and fill) the cache.
    public var host: String = "127.0.0.1"
    /// The port (0: any free port, reported by ``CacheProxy/listeningPort``).
    public var port: Int = 6990
    /// The folder of the cache (created when missing).
    public var cacheDirectory: URL
    /// The most bytes the cache holds; the least recently used blocks are evicted beyond it. A resource larger than
    /// this streams through uncached.
    public var maxBytes: Int64 = 2 << 30
    /// The size of a block: the unit of eviction and of an origin fetch's rounding.
    public var blockBytes: Int64 = 1 << 20
    /// How far a running fetch may still be from a reader's position (behind it) for the reader to wait for that fetch
    /// to get there instead of starting a fetch of its own.
    public var coalesceBytes: Int64 = 2 << 20
    /// How often, at most, a resource whose freshness has run out is revalidated with the origin.
    public var revalidationInterval: TimeInterval = 60
    /// How many redirects an origin request follows.
    public var maxRedirects: Int = 5
    /// How long connecting to an origin may take.
    public var originConnectTimeout: TimeAmount = .seconds(10)
    /// How long an origin may go silent in the middle of a response before the fetch is abandoned (and the players
    /// reading it are cut off).
    public var originReadTimeout: TimeAmount = .seconds(30)
    /// How many connections to one origin host the proxy keeps open at most (fetches of different resources and
    /// pass-through streams share them).
    public var maxOriginConnectionsPerHost: Int = 16
    /// When set, only origins on these hosts are fetched from; any other is refused with 403.
    public var allowedHosts: Set<String>?
    /// The largest playlist the proxy rewrites (a larger one is refused with 502).
    public var maxPlaylistBytes: Int = 4 << 20
    /// The largest key the proxy serves, and how many keys it holds in memory.
    public var maxKeyBytes: Int = 1024
    public var maxKeysInMemory: Int = 256
    /// How many segments a playlist's preload fetches by default.
    public var preloadSegments: Int = 3
    /// How long a player's connection may stay idle between requests.
    public var idleConnectionTimeout: TimeAmount = .seconds(60)
    /// The most player connections served at once; more get a 503 and are closed.
    public var maxConnections: Int = 512
    /// Turns an origin URL into its cache key: the default keeps the whole URL; an app can drop, say, the signature
    /// parameters of signed CDN URLs so that each new signature does not start a new resource.
    public var cacheKey: @Sendable (URL) -> String = { $0.absoluteString }
    /// Supplies the key of a key URI itself (for a custom scheme, say): the bytes, or nil to fetch it from the origin
    /// (http and https only). Keys are held in memory only, never written to disk.
    public var keyProvider: (@Sendable (URL) async throws -> [UInt8]?)?

    public init(cacheDirectory: URL) {
        self.cacheDirectory = cacheDirectory
    }
}
