public import CourierProtocol
public import CourierWire
public import NIOCore
import NIOPosix
public import NIOSSL
import Synchronization

/// A bare client of the native port for tests: it sends envelopes and raw bytes, and reads what the server sends,
/// with a deadline on every read. It speaks the protocol exactly as written, with no retries or state, so tests
/// can also send what a correct client never would.
public actor NativeTestClient {
    /// What the server sent, in order: envelopes, then the end of the connection.
    public enum Received: Sendable {
        case envelope(ServerEnvelope)
        case frame(NativeFrame)
        case closed
    }

    public typealias Timeout = TestClientTimeout

    public let channel: any Channel
    private let inbox: FrameInbox<NativeFrame>
    private var nextRequestID: UInt64 = 1
    /// Envelopes read past while looking for another one, handed out by later reads first.
    private var backlog: [ServerEnvelope] = []
    /// Frames other than envelopes (media chunks, window updates) read past while looking for an envelope, handed out
    /// by ``expectFrame(timeout:_:where:)`` first.
    private var frameBacklog: [NativeFrame] = []

    /// Connects to a native port on 127.0.0.1, over TLS when `tls` is given (the certificate must list the IP
    /// address); from the local address `from`, if given; sending `first` before anything else (a proxy's PROXY
    /// protocol header), if given.
    public static func connect(
        port: Int,
        host: String = "127.0.0.1",
        from: String? = nil,
        tls: TLSConfiguration? = nil,
        first: [UInt8]? = nil
    ) async throws -> NativeTestClient {
        let inbox = FrameInbox<NativeFrame>()
        let context = try tls.map { try NIOSSLContext(configuration: $0) }
        var bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        if let from { bootstrap = bootstrap.bind(to: try SocketAddress(ipAddress: from, port: 0)) }
        let channel =
            try await bootstrap
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let first { try channel.pipeline.syncOperations.addHandler(WritesFirst(first)) }
                    try channel.pipeline.syncOperations.addNativeHandlers(
                        tls: try context.map { try NIOSSLClientHandler(context: $0, serverHostname: nil) }
                    )
                    try channel.pipeline.syncOperations.addHandler(FrameCollector(inbox))
                }
            }
            .connect(host: host, port: port).get()
        return NativeTestClient(channel: channel, inbox: inbox)
    }

    private init(channel: any Channel, inbox: FrameInbox<NativeFrame>) {
        self.channel = channel
        self.inbox = inbox
    }

    /// Sends an envelope, giving it the next request id unless it has one.
    ///
    /// - Returns: The request id used.
    @discardableResult
    public func send(_ envelope: ClientEnvelope) async throws -> UInt64 {
        var envelope = envelope
        if envelope.requestID == 0 {
            envelope.requestID = self.nextRequestID
            self.nextRequestID += 1
        }
        try await self.channel.writeAndFlush(try NativeFrame(envelope: envelope)).get()
        return envelope.requestID
    }

    /// Sends a frame as it is.
    public func send(frame: NativeFrame) async throws {
        try await self.channel.writeAndFlush(frame).get()
    }

    /// Sends raw bytes, below the framing.
    public func send(bytes: [UInt8]) async throws {
        try await self.channel.pipeline.context(handlerType: NativePrefaceHandler.self).flatMap { context in
            context.writeAndFlush(NIOAny(ByteBuffer(bytes: bytes)))
        }.get()
    }

    /// The next thing the server sends, or `.closed`; throws ``Timeout`` after `timeout`.
    public func receive(timeout: Duration = Patience.reply) async throws -> Received {
        if !self.backlog.isEmpty { return .envelope(self.backlog.removeFirst()) }
        guard let frame = try await self.inbox.next(timeout: timeout) else { return .closed }
        if frame.kind == .message, let envelope = try? frame.envelope(as: ServerEnvelope.self) {
            return .envelope(envelope)
        }
        return .frame(frame)
    }

    /// Reads until an envelope matches, keeping the others for later reads.
    public func expect<T: Sendable>(
        timeout: Duration = Patience.reply,
        _ what: String = "an envelope",
        _ match: @Sendable (ServerEnvelope) -> T?
    ) async throws -> T {
        if let index = self.backlog.firstIndex(where: { match($0) != nil }) {
            return match(self.backlog.remove(at: index))!
        }
        let deadline = ContinuousClock.now + timeout
        var skipped: [ServerEnvelope] = []
        defer { self.backlog += skipped }
        while true {
            let left = deadline - .now
            guard left > .zero else { throw Timeout(description: "no \(what) within \(timeout); got \(skipped)") }
            switch try await self.receive(timeout: left) {
            case .envelope(let envelope):
                if let value = match(envelope) { return value }
                skipped.append(envelope)
            case .frame(let frame):
                self.frameBacklog.append(frame)
            case .closed:
                throw Timeout(description: "the connection closed before \(what); got \(skipped)")
            }
        }
    }

    /// Reads until a frame that is not an envelope matches, keeping envelopes and other frames for later reads.
    public func expectFrame(
        timeout: Duration = Patience.reply,
        _ what: String = "a frame",
        where match: @Sendable (NativeFrame) -> Bool
    ) async throws -> NativeFrame {
        if let index = self.frameBacklog.firstIndex(where: match) {
            return self.frameBacklog.remove(at: index)
        }
        let deadline = ContinuousClock.now + timeout
        while true {
            let left = deadline - .now
            guard left > .zero else { throw Timeout(description: "no \(what) within \(timeout)") }
            guard let frame = try await self.inbox.next(timeout: left) else {
                throw Timeout(description: "the connection closed before \(what)")
            }
            if frame.kind == .message, let envelope = try? frame.envelope(as: ServerEnvelope.self) {
                self.backlog.append(envelope)
            } else if match(frame) {
                return frame
            } else {
                self.frameBacklog.append(frame)
            }
        }
    }

    /// Reads until the server closes the connection, returning the envelopes it sent first.
    public func expectClose(timeout: Duration = Patience.reply) async throws -> [ServerEnvelope] {
        var envelopes = self.backlog
        self.backlog = []
        let deadline = ContinuousClock.now + timeout
        while true {
            let left = deadline - .now
            guard left > .zero else { throw Timeout(description: "still open after \(timeout)") }
            switch try await self.receive(timeout: left) {
            case .envelope(let envelope): envelopes.append(envelope)
            case .frame: continue
            case .closed: return envelopes
            }
        }
    }

    /// Stops reading from the socket (as a client that hangs would): the server's writes back up.
    public func stopReading() async throws {
        try await self.channel.setOption(ChannelOptions.autoRead, value: false).get()
    }

    /// Reads from the socket again.
    public func resumeReading() async throws {
        try await self.channel.setOption(ChannelOptions.autoRead, value: true).get()
    }

    /// Whether the connection is still open.
    public var isActive: Bool { self.channel.isActive }

    /// Closes the connection.
    public func close() async {
        try? await self.channel.close().get()
    }
}

/// Writes its bytes as the connection starts, before the handlers after it write theirs.
final class WritesFirst: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    let bytes: [UInt8]

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    func channelActive(context: ChannelHandlerContext) {
        context.writeAndFlush(NIOAny(ByteBuffer(bytes: self.bytes)), promise: nil)
        context.fireChannelActive()
    }
}
