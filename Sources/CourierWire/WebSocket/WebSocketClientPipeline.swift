public import NIOCore
import NIOHTTP1
import NIOWebSocket

/// How a client opens a WebSocket to Courier's gateway.
public struct WebSocketClientOptions: Sendable {
    /// The `Host` header: the server's address as the client names it.
    public var host: String
    /// The path to upgrade (the gateway is `/ws`).
    public var path: String = "/ws"
    /// The `Origin` header, as a browser would send it; nil for none (a client that is not a browser).
    public var origin: String? = nil
    /// Whether to offer permessage-deflate.
    public var deflate: Bool = true
    /// The largest message taken from the server.
    public var maxMessageBytes: Int = (1 << 20) + 64
    /// More headers for the handshake's request (as a proxy in front would add, `X-Forwarded-For`).
    public var headers: [(name: String, value: String)] = []

    public init(host: String) {
        self.host = host
    }
}

/// The server did not switch protocols.
public struct WebSocketNotUpgraded: Error, CustomStringConvertible {
    public var description: String { "the server did not upgrade the connection to a WebSocket" }
}

extension ChannelPipeline.SynchronousOperations {
    /// Sets up a client's WebSocket handshake on a new connection (after its TLS handler, if any): an HTTP/1.1
    /// `GET` with the upgrade headers, sent once the connection is active. Once the server switches protocols, the
    /// pipeline ends in NIO's frame codec, a ``WebSocketMessageCodec`` in the client role, and the handlers `then`
    /// makes, which read ``WebSocketMessage``s (added before any message is read).
    ///
    /// - Returns: Whether the server accepted compression; fails with ``WebSocketNotUpgraded`` when it answered
    ///   with anything but 101.
    public func addWebSocketClientHandlers(
        _ options: WebSocketClientOptions,
        then handlers: @escaping @Sendable () -> [any ChannelHandler]
    ) throws -> EventLoopFuture<Bool> {
        var headers = HTTPHeaders([("Host", options.host), ("Content-Length", "0")])
        if let origin = options.origin { headers.add(name: "Origin", value: origin) }
        for header in options.headers { headers.add(name: header.name, value: header.value) }
        if options.deflate { headers.add(name: "Sec-WebSocket-Extensions", value: PerMessageDeflate.clientOffer) }
        let upgrader = NIOTypedWebSocketClientUpgrader<Bool>(
            maxFrameSize: options.maxMessageBytes + 14,
            enableAutomaticErrorHandling: false,
            upgradePipelineHandler: { channel, response in
                channel.eventLoop.makeCompletedFuture {
                    let deflate =
                        options.deflate && PerMessageDeflate.accepted(response.headers["sec-websocket-extensions"])
                    try channel.pipeline.syncOperations.addHandler(
                        WebSocketMessageCodec(
                            role: .client,
                            configuration: .init(maxMessageBytes: options.maxMessageBytes, deflate: deflate)
                        )
                    )
                    try channel.pipeline.syncOperations.addHandlers(handlers())
                    return deflate
                }
            }
        )
        let upgrade = NIOTypedHTTPClientUpgradeConfiguration<Bool>(
            upgradeRequestHead: HTTPRequestHead(version: .http1_1, method: .GET, uri: options.path, headers: headers),
            upgraders: [upgrader],
            notUpgradingCompletionHandler: { channel in
                channel.eventLoop.makeFailedFuture(WebSocketNotUpgraded())
            }
        )
        var configuration = NIOUpgradableHTTPClientPipelineConfiguration(upgradeConfiguration: upgrade)
        // The bytes after the 101 in the same read are the server's first frames: passed on once the WebSocket
        // handlers are in (NIO drops them by default).
        configuration.leftOverBytesStrategy = .forwardBytes
        return try self.configureUpgradableHTTPClientPipeline(configuration: configuration)
    }
}
