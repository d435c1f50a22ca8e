import CourierStore
import CourierWire
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOCore
import NIOHTTPTypes
import Synchronization

/// The HTTP port: `GET /health`, `GET /metrics`, media (``MediaEndpoint``), and the WebSocket gateway at `/ws`
/// (``GatewayChannel``).
enum HTTPEndpoints {
    /// What `/health` says of the database: its kind (`sqlite`, `postgres`), and for a node sharing it, whether
    /// its listener for the other nodes' news is connected. Never where the database is: the port is public.
    ///
    /// Whether the database answers is learnt by asking it (``CourierDatabase/probe()``), at most once per
    /// `probeInterval` however often `/health` is asked, one question at a time: many load balancers asking cost the
    /// database one question. An answer that takes longer than `probeTimeout` is taken to be no, and `/health`
    /// does not wait for it (a connection whose packets are dropped may not fail for many minutes).
    final class DatabaseHealth: Sendable {
        let store: any CourierDatabase
        let feed: (any StoreFeed)?
        let probeInterval: Duration
        let probeTimeout: Duration
        private let state = Mutex<(last: (at: ContinuousClock.Instant, reachable: Bool)?, probe: Task<Bool, Never>?)>(
            (nil, nil)
        )

        init(
            store: any CourierDatabase,
            feed: (any StoreFeed)?,
            probeInterval: Duration = .seconds(1),
            probeTimeout: Duration = .seconds(2)
        ) {
            self.store = store
            self.feed = feed
            self.probeInterval = probeInterval
            self.probeTimeout = probeTimeout
        }

        var json: String {
            let kind = "\"database\":\"\(self.store.storeDescription.kind)\""
            guard let feed = self.feed else { return kind }
            return kind + ",\"listening\":\(feed.isListening)"
        }

        /// Whether the database answered the latest question (asked now if the latest is older than
        /// `probeInterval` and none is being asked).
        func isReachable() async -> Bool {
            let now = ContinuousClock.now
            let store = self.store
            let asked = self.state.withLock { state -> Result<Bool, Never>? in
                if let last = state.last, now - last.at < self.probeInterval { return .success(last.reachable) }
                return nil
            }
            if case .success(let reachable)? = asked { return reachable }
            let probe = self.state.withLock { state -> Task<Bool, Never> in
                if let probe = state.probe { return probe }
                let probe = Task { [weak self] in
                    let reachable = (try? await store.probe()) != nil
                    self?.state.withLock { state in
                        state.last = (.now, reachable)
                        state.probe = nil
                    }
                    return reachable
                }
                state.probe = probe
                return probe
            }
            let answered = await Self.first(of: probe, orFalseAfter: self.probeTimeout)
            if !answered { self.state.withLock { $0.last = (.now, false) } }
            return answered
        }

        /// The task's value, or false once `timeout` has passed, whichever comes first: never waits for the task
        /// past it.
        private static func first(of task: Task<Bool, Never>, orFalseAfter timeout: Duration) async -> Bool {
            let once = Once()
            return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                Task {
                    let value = await task.value
                    if once.claim() { continuation.resume(returning: value) }
                }
                Task {
                    try? await Task.sleep(for: timeout)
                    if once.claim() { continuation.resume(returning: false) }
                }
            }
        }
    }

    static func application(
        configuration: ServerConfiguration,
        vapidPublicKey: String,
        metrics: ServerMetrics,
        media: MediaService,
        mediaTickets: MediaTickets,
        logins: LoginThrottle,
        sessions: SessionContext?,
        api: SessionContext? = nil,
        webhooks: WebhookSender? = nil,
        version: String,
        database: DatabaseHealth,
        logger: Logger,
        onRunning: @escaping @Sendable (Int) async -> Void
    ) throws -> some ApplicationProtocol {
        let router = Router(context: CourierRequestContext.self)
        if !configuration.trustedProxies.isEmpty {
            router.add(middleware: ForwardedFor(proxies: configuration.trustedProxies))
        }
        router.get("/health") { _, _ -> Response in
            // 503 while the database does not answer: a load balancer moves clients to a node whose does.
            let reachable = await database.isReachable()
            let status =
                reachable
                ? "\"status\":\"ok\"" : "\"status\":\"unavailable\",\"reason\":\"the database does not answer\""
            let body =
                "{\(status),\"version\":\"\(version)\",\"connections\":\(metrics.openConnections),"
                + "\(database.json)}\n"
            return Response(
                status: reachable ? .ok : .serviceUnavailable,
                headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(string: body))
            )
        }
        router.get("/metrics") { _, _ -> Response in
            Response(
                status: .ok,
                headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: metrics.exposition()))
            )
        }
        router.get("/api/v1/push/vapid-public-key") { _, _ -> Response in
            // The key a browser subscribes with (`applicationServerKey`): public, the same on every node.
            Response(
                status: .ok,
                headers: [.contentType: "application/json", .cacheControl: "no-cache"],
                body: .init(byteBuffer: ByteBuffer(string: "{\"key\":\"\(vapidPublicKey)\"}\n"))
            )
        }
        MediaEndpoint(store: media.store, media: media, logins: logins, tickets: mediaTickets).register(on: router)
        let limiter = APIRateLimiter(configuration.api)
        var push = PushEndpoint(
            store: media.store,
            logins: logins,
            allowPrivateTargets: configuration.push.allowPrivateTargets
        )
        push.limiter = limiter
        push.register(on: router)
        if let api { BotAPI(context: api, logins: logins, limiter: limiter, webhooks: webhooks).register(on: router) }
        if sessions != nil, configuration.webSocket.enabled, configuration.web.enabled {
            var page = try WebPage.load(root: configuration.web.root)
            page.allowedOrigins = configuration.webSocket.allowedOrigins
            page.registration = configuration.accounts.registration.rawValue
            page.secure = configuration.tls != nil
            page.register(on: router)
        }
        if sessions != nil {
            router.get("/ws") { _, _ -> Response in
                // The gateway is reached by an upgrade; a plain GET, or a handshake NIO's upgrader declined (no
                // valid key, another version), is told how (RFC 6455, 4.4).
                Response(
                    status: .upgradeRequired,
                    headers: [
                        .upgrade: "websocket", .secWebSocketVersion: "13", .contentType: "text/plain; charset=utf-8",
                    ],
                    body: .init(
                        byteBuffer: ByteBuffer(string: "/ws is Courier's WebSocket gateway: open it as a WebSocket\n")
                    )
                )
            }
        }
        let connections = HTTPConnections(
            perAddress: configuration.http.maxConnectionsPerAddress,
            maxConnections: configuration.http.maxConnections,
            proxies: configuration.trustedProxies
        )
        let http1 = HTTP1Channel.Configuration(
            additionalChannelHandlers: [HTTPConnectionHandler(connections: connections)],
            idleTimeout: TimeAmount(configuration.http.idleTimeout)
        )
        let gateway = sessions.map { sessions in
            WebSocketGateway(
                configuration: configuration.webSocket,
                secure: configuration.tls != nil,
                context: sessions,
                maxFramePayloadBytes: NativeFraming.Configuration().maxFramePayloadBytes
            )
        }
        let channels = HTTPServerBuilder { responder in
            GatewayChannel(responder: responder, http1: http1, connections: connections, gateway: gateway)
        }
        // HTTPConnections keeps plain HTTP within its limit; WebSocket sessions are within the session limit.
        let (accepted, overflow) = configuration.http.maxConnections.addingReportingOverflow(
            gateway == nil ? 0 : configuration.limits.maxConnections
        )
        return Application(
            router: router,
            server: try configuration.tls.map { try .tls(channels, tlsConfiguration: $0) } ?? channels,
            configuration: .init(
                address: .hostname(configuration.host, port: configuration.httpPort),
                serverName: "courier",
                availableConnectionsDelegate: MaximumAvailableConnections(overflow ? .max : accepted)
            ),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) },
            logger: logger
        )
    }
}

/// The HTTP port's request context: Hummingbird's basics and the client's address, for the per-address limits.
struct CourierRequestContext: RequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?
    /// The client's IP address: the peer's, or the one a trusted proxy named (``ForwardedFor``).
    var clientIP: String

    init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteAddress = source.channel.remoteAddress
        self.clientIP = source.channel.remoteAddress?.ipAddress ?? "?"
    }
}

/// A request through a trusted proxy is its client's, as `X-Forwarded-For` names it (``TrustedProxies``); one whose
/// header names none stays the proxy's.
struct ForwardedFor: RouterMiddleware {
    typealias Context = CourierRequestContext
    let proxies: TrustedProxies

    func handle(
        _ request: Request,
        context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        guard self.proxies.contains(context.remoteAddress),
            let client = self.proxies.client(forwardedFor: request.headers[values: .init("X-Forwarded-For")!])
        else { return try await next(request, context) }
        var context = context
        context.clientIP = client
        return try await next(request, context)
    }
}

/// The HTTP port's connections: each client address's share (``AddressKey``), and room for a new connection on a full
/// port. A connection with no request in progress (idle between requests, or still sending a request head) is
/// *waiting*; when the port has `maxConnections` open, a new one makes the oldest waiting one close, so that partial
/// heads held open from many addresses cannot keep `/health` and `/media` out (the room is made before the limit is
/// reached); when none waits, the newcomer is closed. A connection whose request is being answered is never closed for
/// room. A connection that became a WebSocket is counted out: the session limits count it.
final class HTTPConnections: Sendable {
    let perAddress: Int
    let maxConnections: Int
    /// Trusted proxies' connections carry many clients': they have no share of their own (the proxy limits each
    /// client's connections; the requests' limits count each client).
    let proxies: TrustedProxies
    private let state = Mutex(State())

    private struct State {
        var byAddress: [String: Int] = [:]
        var open = 0
        var waiting = OldestFirst<ObjectIdentifier>()
        var channels: [ObjectIdentifier: any Channel] = [:]
        /// Connections closed for room whose close has not been counted yet.
        var closing: Set<ObjectIdentifier> = []
    }

    init(perAddress: Int, maxConnections: Int, proxies: TrustedProxies = TrustedProxies()) {
        self.proxies = proxies
        self.perAddress = max(1, perAddress)
        self.maxConnections = max(1, maxConnections)
    }

    /// Counts a new connection in, as waiting.
    ///
    /// - Returns: false when its address has its share already, or the port is full and no connection waits (it
    ///   must close); otherwise the connection to close for room, if one must.
    func opened(_ channel: any Channel, address: String) -> (admitted: Bool, closing: (any Channel)?) {
        let id = ObjectIdentifier(channel)
        let proxied = self.proxies.contains(channel.remoteAddress)
        return self.state.withLock { state in
            guard proxied || state.byAddress[address, default: 0] < self.perAddress else { return (false, nil) }
            // Full, with no connection waiting to make room: the newcomer is the one that goes.
            if state.open - state.closing.count >= self.maxConnections, state.waiting.count == 0 {
                return (false, nil)
            }
            state.byAddress[address, default: 0] += 1
            state.open += 1
            var closing: (any Channel)?
            if state.open - state.closing.count >= self.maxConnections, let oldest = state.waiting.popOldest() {
                state.closing.insert(oldest)
                closing = state.channels[oldest]
            }
            state.channels[id] = channel
            state.waiting.insert(id)
            return (true, closing)
        }
    }

    /// A request head arrived: the connection is answering it.
    func busy(_ channel: any Channel) {
        _ = self.state.withLock { $0.waiting.remove(ObjectIdentifier(channel)) }
    }

    /// The answers went out: the connection waits for its next request, the newest of those waiting; or, when the
    /// port is full, it closes, so that a connection waiting to be accepted takes its place (the port stops
    /// accepting at `maxConnections`, and only a close lets it go on).
    ///
    /// - Returns: Whether the connection must close.
    func waiting(_ channel: any Channel) -> Bool {
        let id = ObjectIdentifier(channel)
        return self.state.withLock { state in
            guard state.channels[id] != nil, !state.closing.contains(id) else { return false }
            if state.open - state.closing.count >= self.maxConnections {
                state.closing.insert(id)
                return true
            }
            state.waiting.insert(id)
            return false
        }
    }

    func closed(_ channel: any Channel, address: String) {
        let id = ObjectIdentifier(channel)
        self.state.withLock { state in
            guard state.channels.removeValue(forKey: id) != nil else { return }
            state.waiting.remove(id)
            state.closing.remove(id)
            state.open -= 1
            let left = state.byAddress[address, default: 0] - 1
            state.byAddress[address] = left > 0 ? left : nil
        }
    }
}

/// Counts an HTTP connection in as it opens (closing it when its address has its share, or when the port is full and
/// no connection waits to make room) and out as it closes, or as it becomes a WebSocket (``leftHTTP(_:)``): the
/// first handler of the HTTP port's pipeline, before any request has been read. Until its first request has come
/// whole (``firstRequestCame()``), it closes a connection silent past `firstRequestTimeout`; after that Hummingbird's
/// idle timeout, or the WebSocket session's deadlines, take over.
final class HTTPAdmissionHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    let connections: HTTPConnections
    let firstRequestTimeout: TimeAmount?
    private var address: String?
    private var deadline: Scheduled<Void>?
    private var firstRequest = false

    init(connections: HTTPConnections, firstRequestTimeout: TimeAmount?) {
        self.connections = connections
        self.firstRequestTimeout = firstRequestTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let address = AddressKey.of(ip: context.channel.remoteAddress?.ipAddress ?? "")
        let (admitted, closing) = self.connections.opened(context.channel, address: address)
        closing?.close(promise: nil)
        guard admitted else {
            context.close(promise: nil)
            return
        }
        self.address = address
        if context.channel.isActive { self.armDeadline(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        self.armDeadline(context: context)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.deadline?.cancel()
        self.deadline = nil
        if let address = self.address {
            self.address = nil
            self.connections.closed(context.channel, address: address)
        }
    }

    private func armDeadline(context: ChannelHandlerContext) {
        guard self.deadline == nil, !self.firstRequest, let timeout = self.firstRequestTimeout else { return }
        let channel = context.channel
        self.deadline = context.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
    }

    /// The first request's head came whole, and it is plain HTTP.
    func firstRequestCame() {
        self.firstRequest = true
        self.deadline?.cancel()
        self.deadline = nil
    }

    /// The connection became a WebSocket: its place on the HTTP port is free (the session limits count it now).
    func leftHTTP(_ channel: any Channel) {
        self.firstRequestCame()
        if let address = self.address {
            self.address = nil
            self.connections.closed(channel, address: address)
        }
    }
}

/// Tells ``HTTPConnections`` when a plain HTTP connection is answering a request and when it waits for the next
/// (``HTTPAdmissionHandler`` counts it in and out).
final class HTTPConnectionHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart
    let connections: HTTPConnections
    /// Requests whose heads came and whose answers have not all gone out (several, with pipelining).
    private var answering = 0

    init(connections: HTTPConnections) {
        self.connections = connections
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head = self.unwrapInboundIn(data) {
            self.answering += 1
            if self.answering == 1 { self.connections.busy(context.channel) }
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .end = self.unwrapOutboundIn(data), self.answering > 0 else {
            context.write(data, promise: promise)
            return
        }
        self.answering -= 1
        guard self.answering == 0, self.connections.waiting(context.channel) else {
            context.write(data, promise: promise)
            return
        }
        // The port is full: this connection's answer is whole; it closes once that has gone out.
        let written = promise ?? context.eventLoop.makePromise()
        let channel = context.channel
        written.futureResult.whenComplete { _ in channel.close(promise: nil) }
        context.write(data, promise: written)
    }
}

/// Claimed once, by whoever comes first.
private final class Once: Sendable {
    private let claimed = Atomic<Bool>(false)

    func claim() -> Bool {
        !self.claimed.exchange(true, ordering: .acquiringAndReleasing)
    }
}
