import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOCore

/// The HTTP port: `GET /health`, `GET /metrics`, and media (``MediaEndpoint``).
enum HTTPEndpoints {
    static func application(
        configuration: ServerConfiguration,
        metrics: ServerMetrics,
        media: MediaService,
        logins: LoginGuard,
        version: String,
        logger: Logger,
        onRunning: @escaping @Sendable (Int) async -> Void
    ) throws -> some ApplicationProtocol {
        let router = Router(context: CourierRequestContext.self)
        router.get("/health") { _, _ -> Response in
            let body = "{\"status\":\"ok\",\"version\":\"\(version)\",\"connections\":\(metrics.openConnections)}\n"
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
        let http1 = HTTP1Channel.Configuration(idleTimeout: TimeAmount(configuration.http.idleTimeout))
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
