public import NIOCore
import NIOPosix
import Synchronization

/// A TCP connection that sends and receives bytes as they are, for tests of what arrives below any framing.
public final class RawConnection: Sendable {
    public let channel: any Channel
    private let received: ByteCollector

    /// Connects to a port on 127.0.0.1; with `reading` false, reads nothing until ``resumeReading()`` (a client
    /// that stops reading: the kernel's buffers fill, then the peer's writes wait). `from` is the local address to
    /// connect from (any of 127.0.0.0/8 on Linux: as many client addresses as a test needs).
    public static func connect(
        port: Int,
        host: String = "127.0.0.1",
        from: String? = nil,
        reading: Bool = true
    ) async throws
        -> RawConnection
    {
        let collector = ByteCollector()
        var bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        if let from { bootstrap = bootstrap.bind(to: try SocketAddress(ipAddress: from, port: 0)) }
        let channel =
            try await bootstrap
            .channelOption(.autoRead, value: reading)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(collector)
                }
            }
            .connect(host: host, port: port).get()
        return RawConnection(channel: channel, received: collector)
    }

    private init(channel: any Channel, received: ByteCollector) {
        self.channel = channel
        self.received = received
    }

    /// Writes bytes.
    public func write(_ bytes: [UInt8]) async throws {
        try await self.channel.writeAndFlush(ByteBuffer(bytes: bytes)).get()
    }

    /// Everything received so far.
    public var bytes: [UInt8] { self.received.bytes }

    /// How many bytes were received so far.
    public var count: Int { self.received.count }

    /// Starts reading (after a connection made with `reading` false).
    public func resumeReading() async throws {
        try await self.channel.setOption(.autoRead, value: true).get()
        self.channel.read()
    }

    /// Waits until the server closes the connection (or `timeout` passes) and returns everything received.
    public func readUntilClosed(timeout: Duration = Patience.reply) async throws -> [UInt8] {
        try await self.channel.closeFuture.get()
        return self.received.bytes
    }

    /// Waits until at least `count` bytes have arrived, or the connection closed, or `timeout` passed.
    public func read(atLeast count: Int, timeout: Duration = Patience.reply) async throws -> [UInt8] {
        let deadline = ContinuousClock.now + timeout
        while self.received.count < count, self.channel.isActive, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        return self.received.bytes
    }

    /// Closes the connection.
    public func close() async {
        try? await self.channel.close().get()
    }
}

private final class ByteCollector: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    private let storage = Mutex<[UInt8]>([])

    var bytes: [UInt8] { self.storage.withLock { $0 } }
    var count: Int { self.storage.withLock { $0.count } }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = self.unwrapInboundIn(data)
        self.storage.withLock { $0 += buffer.readableBytesView }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
