public import Foundation
public import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
public import ServiceLifecycle
import Synchronization

/// The play-while-caching proxy: a local HTTP server a media player points at (``proxyURL(for:)``). It answers
/// from the fragment cache, fetches only the missing bytes from the origin, and caches them while they stream.
/// A `Service`: run it in a `ServiceGroup`.
///
/// Endpoints on the one port:
/// - `GET`/`HEAD /?url=<origin URL>` and `/r/<base64url origin>/<name>`: the resource (see docs/MEDIACACHE.md);
/// - `GET /_key?url=`: an HLS key (from the app's ``MediaCacheConfiguration/keyProvider`` or the origin; memory only);
/// - `GET /_stats`, `GET /_cache`, `DELETE /_cache?url=`, `POST /_preload?url=&bytes=&segments=`.
public final class CacheProxy: Service, Sendable {
    public let configuration: MediaCacheConfiguration
    let engine: CacheEngine
    let origin: OriginClient
    let keys: KeyStore
    let logger: Logger
    private let bound = Mutex<(port: Result<Int, any Error>?, waiters: [CheckedContinuation<Int, any Error>])>(
        (nil, [])
    )
    private let connections = Atomic<Int>(0)
    /// The port listened on, once bound (for the `Host` check).
    private let listening = Mutex<Int?>(nil)

    /// Opens the cache folder (its index is read now; nothing listens until ``run()``).
    public init(configuration: MediaCacheConfiguration, logger: Logger = Logger(label: "courier.proxy")) throws {
        self.configuration = configuration
        self.logger = logger
        self.origin = OriginClient(configuration: configuration)
        self.engine = try CacheEngine(configuration: configuration, origin: self.origin, logger: logger)
        self.keys = KeyStore(capacity: configuration.maxKeysInMemory)
    }

    /// The port the proxy listens on, once it does.
    public func listeningPort() async throws -> Int {
        try await withCheckedThrowingContinuation { continuation in
            let port = self.bound.withLock { state -> Result<Int, any Error>? in
                if let port = state.port { return port }
                state.waiters.append(continuation)
                return nil
            }
            if let port { continuation.resume(with: port) }
        }
    }

    /// The URL a player is given for an origin URL: the path form, which keeps the origin's file name.
    public func proxyURL(for origin: URL) async throws -> URL {
        ProxyURL(host: self.configuration.host, port: try await self.listeningPort()).path(for: origin)
    }

    /// What the cache has done and holds.
    public func statistics() async -> CacheStatistics {
        await self.engine.statisticsNow()
    }

    public func run() async throws {
        // The engine's background work (its commits) runs beside the listener and ends after it, when `stop()` has
        // let the commits asked for finish: a task of its own, so that cancelling the proxy does not cancel them.
        let engine = self.engine
        let engineRun = Task { await engine.run() }
        do {
            try await self.listen()
        } catch {
            await self.engine.stop()
            await engineRun.value
            await self.origin.shutdown()
            throw error
        }
        await self.engine.stop()
        await engineRun.value
        await self.origin.shutdown()
        if self.configuration.controlSecret != nil {
            try? FileManager.default.removeItem(at: self.controlSecretFile)
        }
        self.logger.info("stopped")
    }

    /// Binds the port and serves connections until shutdown.
    private func listen() async throws {
        let server: NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>, Never>
        do {
            server = try await self.bind()
        } catch {
            self.publish(.failure(error))
            throw error
        }
        let port = server.channel.localAddress?.port ?? self.configuration.port
        self.listening.withLock { $0 = port }
        self.writeControlSecret()
        self.publish(.success(port))
        self.logger.info("listening", metadata: ["host": "\(self.configuration.host)", "port": "\(port)"])
        try await withGracefulShutdownHandler {
            try await server.executeThenClose { inbound in
                try await withThrowingDiscardingTaskGroup { group in
                    for try await connection in inbound {
                        group.addTask { await self.serve(connection) }
                    }
                }
            }
        } onGracefulShutdown: {
            server.channel.close(promise: nil)
        }
    }

    /// Where the control secret is kept while the proxy runs.
    var controlSecretFile: URL {
        self.configuration.cacheDirectory.appendingPathComponent(MediaCacheConfiguration.controlSecretFileName)
    }

    /// Writes the control secret for the `courier proxy` commands of the same user: mode 0600, replaced atomically.
    private func writeControlSecret() {
        guard let secret = self.configuration.controlSecret else { return }
        let aside = self.controlSecretFile.appendingPathExtension("new")
        try? FileManager.default.removeItem(at: aside)
        guard
            FileManager.default.createFile(
                atPath: aside.path,
                contents: Data(secret.utf8),
                attributes: [.posixPermissions: 0o600]
            ), rename(aside.path, self.controlSecretFile.path) == 0
        else {
            self.logger.warning(
                "could not write the control secret",
                metadata: ["file": "\(self.controlSecretFile.path)"]
            )
            return
        }
    }

    /// Whether a request's `Host` names this proxy: its configured host, a loopback name, or one of
    /// ``MediaCacheConfiguration/hostNames``, with this port or none. A request without `Host` (HTTP/1.0) passes.
    func acceptsHost(_ header: String?) -> Bool {
        guard let header else { return true }
        let port = self.listening.withLock { $0 }
        var name = header.lowercased()
        if let colon = name.lastIndex(of: ":"), !name.hasSuffix("]") {
            guard Int(name[name.index(after: colon)...]) == port else { return false }
            name = String(name[..<colon])
        }
        let host = self.configuration.host.lowercased()
        let own: Set<String> = ["127.0.0.1", "localhost", "[::1]", host.contains(":") ? "[\(host)]" : host]
        return own.contains(name) || self.configuration.hostNames.contains(name)
    }

    /// Why a control request (`/_stats`, `/_cache`, `/_preload`) is refused, or nil: one from a web page (any
    /// `Origin` but the proxy's own), or one without the control secret when there is one.
    func controlRefusal(_ headers: HTTPHeaders) -> (HTTPResponseStatus, String)? {
        if let origin = headers.first(name: "Origin") {
            // The page's origin must be the proxy itself, port included (a port left out is the scheme's default:
            // a page on http://localhost is not the proxy on another port). `null` (a sandboxed page) never is.
            let host = URL(string: origin).flatMap { url -> String? in
                guard let host = url.host, let scheme = url.scheme?.lowercased() else { return nil }
                let port = url.port ?? (scheme == "https" ? 443 : 80)
                return (host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host) + ":\(port)"
            }
            guard let host, self.acceptsHost(host) else {
                return (.forbidden, "control requests from web pages are refused")
            }
        }
        guard let secret = self.configuration.controlSecret else { return nil }
        let presented = headers["Authorization"].compactMap { value -> String? in
            let parts = value.split(separator: " ", maxSplits: 1)
            return parts.count == 2 && parts[0].lowercased() == "bearer" ? String(parts[1]) : nil
        }
        guard presented.contains(where: { Self.constantTimeEqual($0, secret) }) else {
            return (
                .unauthorized,
                "control requests need Authorization: Bearer <the secret in the cache folder's \(MediaCacheConfiguration.controlSecretFileName)>"
            )
        }
        return nil
    }

    private static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let (x, y) = (Array(a.utf8), Array(b.utf8))
        guard x.count == y.count else { return false }
        return zip(x, y).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }

    private func publish(_ port: Result<Int, any Error>) {
        let waiters = self.bound.withLock { state in
            state.port = port
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(with: port) }
    }

    private func bind() async throws -> NIOAsyncChannel<
        NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>, Never
    > {
        let idle = self.configuration.idleConnectionTimeout
        let headTimeout = self.configuration.requestHeadTimeout
        return try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 256)
            .bind(host: self.configuration.host, port: self.configuration.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(IdleStateHandler(allTimeout: idle))
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(CloseWhenIdle())
                    try channel.pipeline.syncOperations.addHandler(RequestHeadTimeout(timeout: headTimeout))
                    return try NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>(
                        wrappingChannelSynchronously: channel
                    )
                }
            }
    }

    /// One player connection: its requests in turn. Whatever goes wrong ends this connection only.
    private func serve(_ connection: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>) async {
        let count = self.connections.wrappingAdd(1, ordering: .relaxed).newValue
        defer { self.connections.wrappingSubtract(1, ordering: .relaxed) }
        do {
            try await connection.executeThenClose { inbound, _ in
                var parts = inbound.makeAsyncIterator()
                while let part = try await parts.next() {
                    guard case .head(let head) = part else { continue }
                    // Request bodies are not used by any endpoint: skip them.
                    while let part = try await parts.next() {
                        if case .end = part { break }
                    }
                    let writer = ResponseWriter(
                        channel: connection.channel,
                        version: head.version,
                        keepAlive: head.isKeepAlive && count <= self.configuration.maxConnections
                    )
                    if count > self.configuration.maxConnections {
                        try await writer.error(.serviceUnavailable, "too many connections to the proxy")
                        return
                    }
                    let keepGoing = try await self.respond(to: head, writer: writer)
                    guard keepGoing, head.isKeepAlive else { return }
                }
            }
        } catch {
            self.logger.debug("connection ended", metadata: ["error": "\(error)"])
        }
    }

    /// Answers one request; false when the connection must close after it (an aborted response).
    private func respond(to head: HTTPRequestHead, writer: ResponseWriter) async throws -> Bool {
        let (path, query) = Self.split(head.uri)
        let headOnly = head.method == .HEAD
        // A page that rebinds its own name to this address reaches the proxy with that name in Host.
        guard self.acceptsHost(head.headers.first(name: "Host")) else {
            try await writer.error(.forbidden, "this proxy answers to its own names only", headOnly: headOnly)
            return false
        }
        if ["/_stats", "/_cache", "/_preload"].contains(path), let (status, message) = self.controlRefusal(head.headers)
        {
            try await writer.error(status, message, headOnly: headOnly)
            return true
        }
        switch (head.method, path) {
        case (.GET, "/_stats"), (.HEAD, "/_stats"):
            try await writer.json(await self.engine.statisticsNow(), headOnly: headOnly)
        case (.GET, "/_cache"), (.HEAD, "/_cache"):
            try await writer.json(await self.engine.resources(), headOnly: headOnly)
        case (.DELETE, "/_cache"):
            guard let url = Self.parameter("url", in: query).flatMap(URL.init(string:)) else {
                try await writer.error(.badRequest, "DELETE /_cache needs ?url=<origin URL>")
                return true
            }
            // The request's Authorization is the control secret, not the origin's credential: the URL alone says
            // which copy (a credential in it names that credential's copy).
            let removed = await self.engine.remove(key: self.cacheKey(for: url, headers: HTTPHeaders()))
            if removed {
                try await writer.respond(.noContent)
            } else {
                try await writer.error(.notFound, "nothing is cached for \(url.absoluteString)")
            }
        case (.POST, "/_preload"):
            // The control secret is for the proxy: never forwarded to an origin, never part of a key.
            var forward = head.headers
            forward.remove(name: "Authorization")
            try await self.preload(query: query, forward: forward, writer: writer)
        case (.GET, "/_key"), (.HEAD, "/_key"):
            try await self.serveKey(query: query, request: head, writer: writer)
        case (.GET, _), (.HEAD, _):
            guard let url = ProxyURL.origin(path: path, query: query) else {
                try await writer.error(
                    .notFound,
                    "no such endpoint; resources are at /?url=<origin URL> or /r/<base64url origin>/<name>",
                    headOnly: headOnly
                )
                return true
            }
            return try await self.serveResource(url, request: head, writer: writer)
        default:
            try await writer.error(.methodNotAllowed, "\(head.method) \(path) is not supported")
        }
        return true
    }

    /// The cache key of a request for `url`: the app's key of the URL without its credentials, plus a digest of
    /// the credentials the URL and the headers carry (``Credentials``).
    func cacheKey(for url: URL, headers: HTTPHeaders) -> String {
        let parameters = self.configuration.credentialParameters
        return Credentials(url: url, headers: headers, parameters: parameters)
            .key(self.configuration.cacheKey(Credentials.stripped(url, parameters: parameters)))
    }

    static func split(_ uri: String) -> (path: String, query: String?) {
        guard let mark = uri.firstIndex(of: "?") else { return (uri, nil) }
        return (String(uri[..<mark]), String(uri[uri.index(after: mark)...]))
    }

    /// A query parameter's value, percent-decoded.
    static func parameter(_ name: String, in query: String?) -> String? {
        guard let query else { return nil }
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.count == 2, parts[0] == name {
                return String(parts[1]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding
            }
        }
        return nil
    }
}

/// Closes a player's connection that has neither sent nor received for the configured time.
/// Closes a player's connection that was idle for `idleConnectionTimeout` (no byte read or written): between
/// requests, and in a response that stopped moving (a player that stopped reading). Not while a request waits for its
/// answer to begin: the proxy is at work then (a slow origin has its own timeouts), and the player is waiting.
final class CloseWhenIdle: ChannelDuplexHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// Requests whose response head has not been written yet.
    private var awaiting = 0

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head = self.unwrapInboundIn(data) { self.awaiting += 1 }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .head = self.unwrapOutboundIn(data) { self.awaiting = max(0, self.awaiting - 1) }
        context.write(data, promise: promise)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard event is IdleStateHandler.IdleStateEvent else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        if self.awaiting == 0 { context.close(promise: nil) }
    }
}

extension ResponseWriter {
    func json(_ value: some Encodable, headOnly: Bool = false) async throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let data = try encoder.encode(value)
        try await self.respond(
            .ok,
            headers: ["Content-Type": "application/json", "Cache-Control": "no-store"],
            body: ByteBuffer(bytes: data),
            headOnly: headOnly
        )
    }
}
