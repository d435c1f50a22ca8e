import CourierWire
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOWebSocket

/// The HTTP port's connections: HTTP/1.1 for `/health`, `/metrics`, `/media` and the web chat, through Hummingbird's
/// router; a first request of `GET /ws` with WebSocket's upgrade headers becomes the WebSocket gateway.
///
/// An upgraded connection's session lives in its pipeline (``WebSocketMessageCodec`` and a ``SessionHandler`` over
/// ``WebSocketTransport``), as a native connection's does: ``handle(value:logger:)`` returns at once for it, and no
/// task waits on it while it is idle. Its place on the HTTP port is given back (``HTTPConnections``); from then on
/// the session limits count it, with the native and compat ports' connections.
struct GatewayChannel: ServerChildChannel, HTTPChannelHandler {
    enum Upgrade: Sendable {
        /// Plain HTTP: the router answers.
        case http(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
        /// An upgrade to the gateway was asked for and refused: answered with this status, then closed.
        case refused(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, HTTPResponse.Status, String)
        /// The gateway's session runs in the pipeline.
        case webSocket
    }

    struct Value: ServerChildChannelValue {
        let upgrade: EventLoopFuture<Upgrade>
        let channel: any Channel
    }

    let responder: HTTPChannelHandler.Responder
    let http1: HTTP1Channel.Configuration
    let connections: HTTPConnections
    let gateway: WebSocketGateway?

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            let pipeline = channel.pipeline.syncOperations
            try pipeline.addHandler(
                HTTPAdmissionHandler(connections: self.connections, firstRequestTimeout: self.http1.idleTimeout)
            )
            // What `shouldUpgrade` decided when it refused, for the answer.
            let refusal = NIOLoopBoundBox<(HTTPResponse.Status, String)?>(nil, eventLoop: channel.eventLoop)
            var upgraders: [any NIOTypedHTTPServerProtocolUpgrader<Upgrade>] = []
            if let gateway = self.gateway {
                upgraders.append(
                    NIOTypedWebSocketServerUpgrader<Upgrade>(
                        maxFrameSize: gateway.maxFrameBytes,
                        enableAutomaticErrorHandling: false,
                        shouldUpgrade: { channel, head in
                            switch gateway.decide(head) {
                            case .upgrade(let headers):
                                return channel.eventLoop.makeSucceededFuture(headers)
                            case .refuse(let status, let reason):
                                refusal.value = (status, reason)
                                return channel.eventLoop.makeSucceededFuture(nil)
                            case .notGateway:
                                return channel.eventLoop.makeSucceededFuture(nil)
                            }
                        },
                        upgradePipelineHandler: { channel, head in
                            channel.eventLoop.makeCompletedFuture {
                                let pipeline = channel.pipeline.syncOperations
                                // The HTTP port's handlers are done with: the session's pipeline is all that stays.
                                let admission = try pipeline.handler(type: HTTPAdmissionHandler.self)
                                admission.leftHTTP(channel)
                                pipeline.removeHandler(admission, promise: nil)
                                try pipeline.removeHandler(pipeline.handler(type: CloseOnParseError.self), promise: nil)
                                try pipeline.removeHandler(pipeline.handler(type: FirstRequestHead.self), promise: nil)
                                try gateway.startSession(on: channel, request: head)
                                return .webSocket
                            }
                        }
                    )
                )
            }
            let http1 = self.http1
            let upgrade = NIOTypedHTTPServerUpgradeConfiguration<Upgrade>(
                upgraders: upgraders,
                notUpgradingCompletionHandler: { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let pipeline = channel.pipeline.syncOperations
                        try pipeline.handler(type: HTTPAdmissionHandler.self).firstRequestCame()
                        let firstHead = try pipeline.handler(type: FirstRequestHead.self)
                        let upgradeHandler = try pipeline.context(
                            handlerType: NIOTypedHTTPServerUpgradeHandler<Upgrade>.self
                        )
                        try pipeline.addHandler(HTTP1ToHTTPServerCodec(secure: false))
                        try pipeline.addHandlers(http1.additionalChannelHandlers())
                        try pipeline.addHandler(
                            HTTPConnectionStateHandler(idleTimeout: http1.idleTimeout.map { .init($0) }, logger: logger)
                        )
                        let asyncChannel = try NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>(
                            wrappingChannelSynchronously: channel,
                            configuration: .init(isOutboundHalfClosureEnabled: true)
                        )
                        pipeline.removeHandler(firstHead, promise: nil)
                        if let (status, reason) = refusal.value { return .refused(asyncChannel, status, reason) }
                        // NIO's upgrade handler keeps the head of a request whose upgrade it declined (`Upgrade: h2c`,
                        // a WebSocket to another path, a handshake without a valid key): given back here, before the
                        // parts it held after it, the request is answered as plain HTTP.
                        if let head = firstHead.declinedUpgrade {
                            upgradeHandler.fireChannelRead(NIOAny(HTTPServerRequestPart.head(head)))
                        }
                        return .http(asyncChannel)
                    }
                }
            )
            var configuration = NIOUpgradableHTTPServerPipelineConfiguration(upgradeConfiguration: upgrade)
            // As Hummingbird's own HTTP/1 channel has them (it pipelines and checks headers itself), but for errors: a
            // request that does not parse is answered 400 by NIO's handler, also while the upgrade handler still holds
            // the first request (where Hummingbird's own answer cannot come from).
            configuration.enablePipelining = false
            configuration.enableErrorHandling = true
            configuration.enableResponseHeaderValidation = false
            configuration.decoderConfiguration.maxHeaderFieldSize = self.http1.httpDecoder.maxHeaderFieldSize
            configuration.decoderConfiguration.maxHeaderListSize = self.http1.httpDecoder.maxHeaderListSize
            configuration.decoderConfiguration.maxHeaderFieldCount = self.http1.httpDecoder.maxHeaderFieldCount
            let upgraded = try pipeline.configureUpgradableHTTPServerPipeline(configuration: configuration)
            // NIO's error handler answers 400 to a request that does not parse; this closes the connection then
            // (while the upgrade handler holds the first request, Hummingbird is not there to).
            try pipeline.addHandler(CloseOnParseError())
            try pipeline.addHandler(
                FirstRequestHead(),
                position: .before(try pipeline.handler(type: NIOTypedHTTPServerUpgradeHandler<Upgrade>.self))
            )
            return Value(upgrade: upgraded, channel: channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.upgrade.get() {
            case .http(let channel):
                await self.handleHTTP(asyncChannel: channel, logger: logger)
            case .refused(let channel, let status, let reason):
                logger.notice("refused a WebSocket", metadata: ["reason": "\(reason)"])
                try await channel.executeThenClose { _, outbound in
                    var body = ByteBuffer(string: reason + "\n")
                    try await outbound.write(
                        .head(
                            HTTPResponse(
                                status: status,
                                headerFields: [
                                    .connection: "close", .contentType: "text/plain; charset=utf-8",
                                    .contentLength: "\(body.readableBytes)",
                                ]
                            )
                        )
                    )
                    try await outbound.write(.body(body.readSlice(length: body.readableBytes)!))
                    try await outbound.write(.end(nil))
                }
            case .webSocket:
                // The session runs in the pipeline; nothing waits here.
                break
            }
        } catch {
            logger.debug("an HTTP connection ended before its first request", metadata: ["error": "\(error)"])
        }
    }
}

/// Keeps the first request's head while NIO's upgrade handler decides, for a head that asked for an upgrade the
/// handler then declined (it does not pass such a head on).
final class FirstRequestHead: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    private var head: HTTPRequestHead?

    /// The first head, if it asked for an upgrade.
    var declinedUpgrade: HTTPRequestHead? {
        self.head.flatMap { $0.headers.contains(name: "upgrade") ? $0 : nil }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if self.head == nil, case .head(let head) = Self.unwrapInboundIn(data) { self.head = head }
        context.fireChannelRead(data)
    }
}

/// Closes an HTTP connection whose request does not parse (after NIO's error handler answered it 400).
final class CloseOnParseError: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is HTTPParserError { context.close(promise: nil) }
        context.fireErrorCaught(error)
    }
}

/// Which requests to `/ws` become WebSocket sessions, and how each session is set up.
struct WebSocketGateway: Sendable {
    let configuration: ServerConfiguration.WebSocket
    /// Whether the HTTP port speaks TLS (the scheme of the server's own origin).
    let secure: Bool
    let context: SessionContext
    /// The largest media chunk in a binary message: the native port's frame limit.
    let maxFramePayloadBytes: Int

    enum Decision {
        case upgrade(HTTPHeaders)
        case refuse(HTTPResponse.Status, String)
        /// Not a request for the gateway (another path): the router answers it.
        case notGateway
    }

    /// The largest WebSocket frame NIO's decoder takes, header included (a message may be several).
    var maxFrameBytes: Int { self.configuration.maxMessageBytes + 14 }

    func decide(_ head: HTTPRequestHead) -> Decision {
        let path = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        guard path == "/ws" else { return .notGateway }
        guard head.method == .GET else { return .refuse(.methodNotAllowed, "the gateway is opened with GET") }
        switch WebSocketOrigins.check(
            origin: head.headers.first(name: "origin"),
            host: head.headers.first(name: "host"),
            secure: self.secure,
            allowed: self.configuration.allowedOrigins
        ) {
        case .allowed:
            break
        case .refused(let reason):
            return .refuse(.forbidden, reason)
        }
        var headers = HTTPHeaders()
        if self.configuration.compression,
            let extensions = PerMessageDeflate.negotiate(head.headers["sec-websocket-extensions"])
        {
            headers.add(name: "Sec-WebSocket-Extensions", value: extensions)
        }
        return .upgrade(headers)
    }

    /// Adds the session's handlers to an upgraded connection's pipeline (NIO's frame decoder and encoder are there).
    func startSession(on channel: any Channel, request head: HTTPRequestHead) throws {
        let deflate =
            self.configuration.compression
            && PerMessageDeflate.negotiate(head.headers["sec-websocket-extensions"]) != nil
        let pipeline = channel.pipeline.syncOperations
        // As the native port's connections are set (CourierServer.bind): a peer's FIN ends the session (Hummingbird
        // lets HTTP connections half-close), the write buffer's marks are the session limit's, and reads start small.
        let limits = self.context.configuration.limits
        let options = channel.syncOptions
        try options?.setOption(.allowRemoteHalfClosure, value: false)
        try options?.setOption(
            .writeBufferWaterMark,
            value: .init(low: limits.outboundBufferBytes / 2, high: limits.outboundBufferBytes)
        )
        try options?.setOption(
            .recvAllocator,
            value: AdaptiveRecvByteBufferAllocator(
                minimum: 64,
                initial: min(max(limits.initialReadBytes, 64), 65_536),
                maximum: 65_536
            )
        )
        var codec = WebSocketMessageCodec.Configuration(
            maxMessageBytes: self.configuration.maxMessageBytes,
            deflate: deflate
        )
        codec.inflatesLazily = true
        try pipeline.addHandler(WebSocketMessageCodec(role: .server, configuration: codec))
        let transport = WebSocketTransport(
            maxFramePayloadBytes: self.maxFramePayloadBytes,
            maxMessageBytes: self.configuration.maxMessageBytes
        )
        // Through a trusted proxy, the session is its client's (X-Forwarded-For).
        let proxies = self.context.configuration.trustedProxies
        let client =
            proxies.contains(channel.remoteAddress)
            ? proxies.client(forwardedFor: head.headers["x-forwarded-for"]).map { (ip: $0, port: 0) } : nil
        try pipeline.addHandler(
            SessionHandler(requests: CourierServer.requests(self.context, transport, channel, client: client))
        )
    }
}

/// Whose pages may open `/ws`: a browser says which page opened a WebSocket in `Origin`, and another site's page must
/// not drive a user's session with the cookies or storage of this one.
enum WebSocketOrigins {
    enum Verdict: Equatable {
        case allowed
        case refused(String)
    }

    /// - Parameters:
    ///   - origin: The request's `Origin`; none from a client that is not a browser (a program speaks for itself).
    ///   - host: The request's `Host`. The server's own origin is a page's whose scheme is the port's (`https` with
    ///     TLS) and whose host and port are this `Host`, when it is an IP address or `localhost`: a page under a
    ///     name could be anyone's whose name was pointed at this address (DNS rebinding), so names are allowed
    ///     only in `allowed`.
    ///   - secure: Whether the port speaks TLS.
    ///   - allowed: Origins allowed besides the server's own, as `scheme://host[:port]`.
    static func check(origin: String?, host: String?, secure: Bool, allowed: [String]) -> Verdict {
        guard let origin else { return .allowed }
        let normalized = Self.normalize(origin)
        if allowed.contains(where: { Self.normalize($0) == normalized }) { return .allowed }
        let scheme = secure ? "https" : "http"
        guard let host = host?.lowercased(), Self.isAddress(host),
            normalized == Self.normalize("\(scheme)://\(host)")
        else {
            return .refused("pages from \(origin) may not open this server's WebSocket")
        }
        return .allowed
    }

    /// `scheme://host[:port]` lowercased, with the scheme's default port left off and no trailing slash.
    static func normalize(_ origin: String) -> String {
        let lowered = origin.lowercased().trimmingSuffix("/")
        guard let authority = Self.authority(ofOrigin: lowered), let scheme = lowered.split(separator: ":").first else {
            return lowered
        }
        return "\(scheme)://\(authority)"
    }

    /// An origin's host and port, the port left off when it is its scheme's default; nil for `null` or a malformed
    /// origin.
    static func authority(ofOrigin origin: String) -> String? {
        for (scheme, port) in [("http://", ":80"), ("https://", ":443")] where origin.hasPrefix(scheme) {
            let authority = String(origin.dropFirst(scheme.count))
            guard !authority.isEmpty, !authority.contains("/") else { return nil }
            return authority.hasSuffix(port) ? String(authority.dropLast(port.count)) : authority
        }
        return nil
    }

    /// Whether a `Host` names the server by address: an IPv4 address, a bracketed IPv6 one, or `localhost`, with
    /// or without a port.
    static func isAddress(_ host: String) -> Bool {
        if host.hasPrefix("[") { return host.contains("]") }
        let name = host.split(separator: ":", maxSplits: 1).first.map(String.init) ?? host
        if name == "localhost" { return true }
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { part in UInt8(part).map { "\($0)" == part } ?? false }
    }
}

extension String {
    fileprivate func trimmingSuffix(_ suffix: String) -> String {
        self.hasSuffix(suffix) ? String(self.dropLast(suffix.count)) : self
    }
}
