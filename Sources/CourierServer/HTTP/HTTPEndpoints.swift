import CourierStore
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOCore
import Synchronization

/// The HTTP port: `GET /health`, `GET /metrics`, and media (``MediaEndpoint``).
enum HTTPEndpoints {
    /// What `/health` says of the database: its kind (`sqlite`, `postgres`), and for a node sharing it, whether
    /// its listener for the other nodes' news is connected. Never where the database is: the port is public.
    struct DatabaseHealth: Sendable {
        let store: any CourierDatabase
        let feed: (any StoreFeed)?

        var json: String {
            let kind = "\"database\":\"\(self.store.storeDescription.kind)\""
            guard let feed = self.feed else { return kind }
            return kind + ",\"listening\":\(feed.isListening)"
        }
    }

    static func application(
        configuration: ServerConfiguration,
        metrics: ServerMetrics,
        media: MediaService,
        logins: LoginThrottle,
        version: String,
        database: DatabaseHealth,
        logger: Logger,
        onRunning: @escaping @Sendable (Int) async -> Void
    ) throws -> some ApplicationProtocol {
        let router = Router(context: CourierRequestContext.self)
        router.get("/health") { _, _ -> Response in
            let body =
                "{\"status\":\"ok\",\"version\":\"\(version)\",\"connections\":\(metrics.openConnections),"
                + "\(database.json)}\n"
            return Response(
                status: .ok,
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
        MediaEndpoint(store: media.store, media: media, logins: logins).register(on: router)
        let share = AddressShare(limit: configuration.http.maxConnectionsPerAddress)
        let http1 = HTTP1Channel.Configuration(
            additionalChannelHandlers: [AddressShareHandler(share: share)],
            idleTimeout: TimeAmount(configuration.http.idleTimeout)
        )
        return Application(
            router: router,
            server: try configuration.tls.map { try .tls(.http1(configuration: http1), tlsConfiguration: $0) }
                ?? .http1(configuration: http1),
            configuration: .init(
                address: .hostname(configuration.host, port: configuration.httpPort),
                serverName: "courier",
                availableConnectionsDelegate: MaximumAvailableConnections(configuration.http.maxConnections)
            ),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) },
            logger: logger
        )
    }
}

/// The HTTP port's request context: Hummingbird's basics and the client's address, for the per-address login limit.
struct CourierRequestContext: RequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?

    init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteAddress = source.channel.remoteAddress
    }
}

/// The HTTP port's connections per client address (``AddressKey``).
final class AddressShare: Sendable {
    let limit: Int
    private let counts = Mutex<[String: Int]>([:])

    init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// Counts a connection in; false when its address has `limit` already.
    func take(_ key: String) -> Bool {
        self.counts.withLock { counts in
            guard counts[key, default: 0] < self.limit else { return false }
            counts[key, default: 0] += 1
            return true
        }
    }

    func give(_ key: String) {
        self.counts.withLock { counts in
            let left = counts[key, default: 0] - 1
            counts[key] = left > 0 ? left : nil
        }
    }
}

/// Closes an HTTP connection whose address has its share of connections already; counts it out when it closes.
final class AddressShareHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    let share: AddressShare
    private var key: String?

    init(share: AddressShare) {
        self.share = share
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let key = AddressKey.of(ip: context.channel.remoteAddress?.ipAddress ?? "")
        if self.share.take(key) {
            self.key = key
        } else {
            context.close(promise: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        if let key = self.key {
            self.key = nil
            self.share.give(key)
        }
    }
}
