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
    /// How far an origin fetch may run ahead of the furthest player reading it (at most a quarter of `maxBytes`,
    /// at least four blocks and one more): beyond it the fetch waits for the player, and its origin for it. The
    /// bytes between a player and its fetch are not evicted.
    public var readAheadBytes: Int64 = 32 << 20
    /// How long a fetch held at the read-ahead (its player paused) keeps its origin connection when the origin
    /// honours ranges; then it stops, and the player starts another fetch where it ended. (A fetch from an origin
    /// that ignores ranges waits as long as its player: another would start from the first byte.)
    public var heldFetchTimeout: TimeAmount = .seconds(5)
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
    /// How long a player's connection may stay idle (nothing read or written): between requests, or in a response
    /// it stopped reading. A request waiting for its response to begin (the origin being slow) is not idle.
    public var idleConnectionTimeout: TimeAmount = .seconds(60)
    /// The most player connections served at once; more get a 503 and are closed.
    public var maxConnections: Int = 512
    /// Turns an origin URL into its cache key: the default keeps the whole URL; an app can drop, say, the signature
    /// parameters of signed CDN URLs so that each new signature does not start a new resource. The hook is given the
    /// URL with its ``credentialParameters`` already removed: credentials never become part of a key, a listing or
    /// the cache's files. (A request that carries credentials is cached under the key plus a digest of them: see
    /// docs/MEDIACACHE.md, "Credentials".)
    public var cacheKey: @Sendable (URL) -> String = { $0.absoluteString }
    /// Query parameters that carry credentials (compared without regard to case): removed from cache keys, listings
    /// and the cache's files; a request with one (or with `Authorization` or `Cookie`) is cached apart for each
    /// credential and revalidated with the origin at every request.
    public var credentialParameters: Set<String> = [
        "token", "access_token", "auth", "auth_token", "api_key", "apikey", "key_token", "password", "secret",
        "session", "sessionid", "signature", "ticket", "x-amz-signature", "x-amz-credential", "x-amz-security-token",
    ]
    /// The secret the control endpoints (`/_stats`, `/_cache`, `/_preload`) need, in an `Authorization: Bearer`
    /// header: by default a fresh random one per configuration, which ``CacheProxy`` writes (mode 0600) to
    /// `control-secret` in the cache folder for the `courier proxy` commands of the same user. Nil opens the control
    /// endpoints to any local client that passes the `Host` and `Origin` checks (`courier proxy --open-control`).
    public var controlSecret: String? = MediaCacheConfiguration.makeSecret()
    /// Names a request's `Host` may carry besides the proxy's own (`host`, `127.0.0.1`, `localhost`, `[::1]`, with or
    /// without the port). Any other is refused with 403: a web page that rebinds its own name to 127.0.0.1 cannot use
    /// the proxy.
    public var hostNames: Set<String> = []
    /// How long a player's request head may take to arrive whole, from the connection's start or the previous
    /// response's end; a client that sends it a byte at a time is closed then.
    public var requestHeadTimeout: TimeAmount = .seconds(10)
    /// Supplies the key of a key URI itself (for a custom scheme, say): the bytes, or nil to fetch it from the origin
    /// (http and https only). Keys are held in memory only, never written to disk.
    public var keyProvider: (@Sendable (URL) async throws -> [UInt8]?)?

    public init(cacheDirectory: URL) {
        self.cacheDirectory = cacheDirectory
    }

    /// 32 random bytes, base64url.
    public static func makeSecret() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// The name of the file in the cache folder that holds ``controlSecret`` while the proxy runs.
    public static let controlSecretFileName = "control-secret"
}
