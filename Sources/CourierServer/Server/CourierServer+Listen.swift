import CourierProtocol
import CourierStore
import CourierWire
import Foundation
import NIOCore
import NIOPosix
import NIOSSL

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Listening: the native and compat ports' pipelines, each connection's session handler, and why a bind failed.
extension CourierServer {
    func bindNative(context: SessionContext) async throws -> any Channel {
        try await self.bind(port: self.configuration.nativePort) { channel, tls, client in
            let pipeline = channel.pipeline.syncOperations
            try pipeline.addNativeHandlers(tls: tls)
            try pipeline.addHandler(
                SessionHandler(requests: Self.requests(context, NativeTransport(), channel, client: client))
            )
        }
    }

    func bindCompat(context: SessionContext) async throws -> any Channel {
        var framing = CompatFraming.Configuration(endMarker: self.configuration.compat.endMarker)
        framing.maxHeaderBytes = self.configuration.compat.maxHeaderBytes
        // A text or command packet is collected whole, bounded by the text limit (a larger `size` is refused from the
        // header, before any payload is buffered). Media packets stream into the blob store as they arrive.
        framing.maxCollectedPayloadBytes = max(4096, self.configuration.limits.maxTextBytes)
        // Not the media limit: a larger media packet is refused with `media-too-large` and its bytes skipped, and
        // the session goes on (the framing has no way to skip them unread).
        framing.maxPayloadBytes = 1 << 62
        let streamed = Set(CompatTransport.mediaTypes.keys)
        return try await self.bind(port: self.configuration.compatPort) { [framing] channel, tls, client in
            let pipeline = channel.pipeline.syncOperations
            if let tls { try pipeline.addHandler(tls) }
            try pipeline.addHandler(
                ByteToMessageHandler(
                    CompatSelectiveDecoder(streamedTypes: streamed, configuration: framing),
                    maximumBufferSize: framing.maxHeaderBytes + framing.maxCollectedPayloadBytes + 1024
                )
            )
            try pipeline.addHandler(MessageToByteHandler(CompatOutputEncoder(configuration: framing)))
            try pipeline.addHandler(
                SessionHandler(requests: Self.requests(context, CompatTransport(), channel, client: client))
            )
        }
    }

    /// A connection's session: for `client` (said by a trusted proxy), else for the connection's peer.
    static func requests<Transport: SessionTransport>(
        _ context: SessionContext,
        _ transport: Transport,
        _ channel: any Channel,
        client: (ip: String, port: Int)? = nil
    ) -> SessionRequests<Transport> {
        let address = channel.remoteAddress
        let ip = client?.ip ?? address?.ipAddress ?? "?"
        return SessionRequests(
            context: context,
            transport: transport,
            remoteAddress: "\(ip):\(client?.port ?? address?.port ?? 0)",
            clientIP: ip
        )
    }

    /// Binds a listener whose connections get the handlers `handlers` adds, given a TLS handler to put first when
    /// TLS is configured, and the client a trusted proxy said the connection is for (nil: its peer). A trusted proxy's
    /// connection gets them once its PROXY protocol header is read (``ProxyHeaderHandler``).
    func bind(
        port: Int,
        handlers: @escaping @Sendable (any Channel, (any ChannelHandler)?, (ip: String, port: Int)?) throws -> Void
    ) async throws -> any Channel {
        let limits = self.configuration.limits
        let tls = self.tls
        let proxies = self.configuration.trustedProxies
        return try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 256)
            .childChannelOption(
                .writeBufferWaterMark,
                value: .init(low: limits.outboundBufferBytes / 2, high: limits.outboundBufferBytes)
            )
            .childChannelOption(
                .recvAllocator,
                value: AdaptiveRecvByteBufferAllocator(
                    minimum: 64,
                    initial: min(max(limits.initialReadBytes, 64), 65_536),
                    maximum: 65_536
                )
            )
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    guard proxies.contains(channel.remoteAddress) else {
                        return try handlers(channel, tls.map { NIOSSLServerHandler(context: $0) }, nil)
                    }
                    let header = ProxyHeaderHandler(timeout: TimeAmount(limits.authTimeout)) { channel, client in
                        try handlers(channel, tls.map { NIOSSLServerHandler(context: $0) }, client)
                    }
                    try channel.pipeline.syncOperations.addHandler(header)
                }
            }
            .bind(host: self.configuration.host, port: port)
            .get()
    }
}

/// A port the server could not listen on, and why, in plain words.
public struct ListenFailed: Error, CustomStringConvertible {
    public enum Port: String, Sendable {
        case native, compat, http, forward
    }

    public var port: Port
    public var number: Int
    public var host: String
    /// Why: "the port is in use", "the port needs privileges", …
    public var reason: String

    init(port: Port, number: Int, host: String, _ error: any Error) {
        self.port = port
        self.number = number
        self.host = host
        self.reason = Self.reason(for: error, host: host)
    }

    /// Why a bind failed, in plain words.
    public static func reason(for error: any Error, host: String) -> String {
        switch (error as? IOError)?.errnoCode {
        case EADDRINUSE?: "the port is in use (another program listens on it)"
        case EACCES?: "ports below 1024 need privileges"
        case EADDRNOTAVAIL?: "\(host) is not an address of this machine"
        default: "\(error)"
        }
    }

    public var description: String {
        "cannot listen on the \(self.port.rawValue) port \(self.number) of \(self.host): \(self.reason)"
    }
}
