public import CourierProtocol
public import CourierWire
public import NIOCore
import NIOPosix
public import NIOSSL
public import NIOWebSocket
import SwiftProtobuf

/// A bare client of the WebSocket gateway for tests: JSON envelopes in text messages, media stream frames in binary
/// ones, and raw WebSocket frames for what a correct client never sends. Every read has a deadline.
public actor WebSocketTestClient {
    /// What the server sent, in order.
    public enum Received: Sendable {
        /// A text message that is a server envelope in JSON.
        case envelope(ServerEnvelope)
        /// Any other message (a binary media frame, a pong, a text that is not an envelope, the close frame).
        case message(WebSocketMessage)
        case closed
    }

    public typealias Timeout = TestClientTimeout

    public let channel: any Channel
    /// Whether the server accepted permessage-deflate.
    public let deflate: Bool
    private let inbox: FrameInbox<WebSocketMessage>
    private var nextRequestID: UInt64 = 1
    private var backlog: [ServerEnvelope] = []
    private var messageBacklog: [WebSocketMessage] = []

    /// Opens a WebSocket to `path` on an HTTP port of 127.0.0.1 (over TLS when `tls` is given: the certificate must
    /// list the IP address).
    ///
    /// - Throws: ``WebSocketNotUpgraded`` when the server answers the handshake with anything but 101.
    public static func connect(
        port: Int,
        path: String = "/ws",
        origin: String? = nil,
        deflate: Bool = true,
        maxMessageBytes: Int = (1 << 20) + 64,
        tls: TLSConfiguration? = nil,
        headers: [(name: String, value: String)] = []
    ) async throws -> WebSocketTestClient {
        let context = try tls.map { try NIOSSLContext(configuration: $0) }
        let inbox = FrameInbox<WebSocketMessage>()
        var options = WebSocketClientOptions(host: "127.0.0.1:\(port)")
        options.path = path
        options.origin = origin
        options.deflate = deflate
        options.maxMessageBytes = maxMessageBytes
        options.headers = headers
        let settings = options
        let group = MultiThreadedEventLoopGroup.singleton
        let upgraded = group.any().makePromise(of: Bool.self)
        let channel: any Channel
        do {
            channel =
                try await ClientBootstrap(group: group)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        if let context {
                            try channel.pipeline.syncOperations.addHandler(
                                try NIOSSLClientHandler(context: context, serverHostname: nil)
                            )
                        }
                        try channel.pipeline.syncOperations.addWebSocketClientHandlers(settings) {
                            [FrameCollector(inbox, addedWhenOpen: true)]
                        }
                        .cascade(to: upgraded)
                    }
                }
                .connect(host: "127.0.0.1", port: port)
                .get()
        } catch {
            upgraded.fail(error)
            throw error
        }
        do {
            let accepted = try await upgraded.futureResult.get()
            return WebSocketTestClient(channel: channel, deflate: accepted, inbox: inbox)
        } catch {
            try? await channel.close().get()
            throw error
        }
    }

    /// Opens a WebSocket and logs in with a password (by default "pw-" + the user's name); `ephemeral` asks for
    /// typing and presence notices.
    public static func login(
        port: Int,
        _ user: String,
        password: String? = nil,
        device: String = "web",
        ephemeral: Bool = false,
        origin: String? = nil,
        deflate: Bool = true,
        tls: TLSConfiguration? = nil
    ) async throws -> (WebSocketTestClient, Courier_V1_Welcome) {
        let client = try await WebSocketTestClient.connect(port: port, origin: origin, deflate: deflate, tls: tls)
        return (client, try await client.logIn(user, password: password, device: device, ephemeral: ephemeral))
    }

    private init(channel: any Channel, deflate: Bool, inbox: FrameInbox<WebSocketMessage>) {
        self.channel = channel
        self.deflate = deflate
        self.inbox = inbox
    }

    /// Sends an envelope as JSON, giving it the next request id unless it has one.
    ///
    /// - Returns: The request id used.
    @discardableResult
    public func send(_ envelope: ClientEnvelope) async throws -> UInt64 {
        var envelope = envelope
        if envelope.requestID == 0 {
            envelope.requestID = self.nextRequestID
            self.nextRequestID += 1
        }
        try await self.send(.text(try envelope.jsonString()))
        return envelope.requestID
    }

    /// Sends a message as it is (through the client's message codec: masked, and compressed when negotiated).
    public func send(_ message: WebSocketMessage) async throws {
        try await self.channel.writeAndFlush(message).get()
    }

    /// Sends a native frame as a binary message (a media stream's chunk, window update or reset).
    public func send(frame: NativeFrame) async throws {
        try await self.send(.binary(frame.bytes))
    }

    /// Sends a WebSocket frame as it is, below the message codec (unmasked, fragmented, reserved bits: whatever
    /// it says).
    public func send(rawFrame: WebSocketFrame) async throws {
        try await self.channel.pipeline.context(handlerType: WebSocketMessageCodec.self).flatMap { context in
            context.writeAndFlush(NIOAny(rawFrame))
        }.get()
    }

    /// The next thing the server sends, or `.closed`; throws ``Timeout`` after `timeout`.
    public func receive(timeout: Duration = Patience.reply) async throws -> Received {
        if !self.backlog.isEmpty { return .envelope(self.backlog.removeFirst()) }
        return try await self.next(timeout: timeout)
    }

    /// The next message from the socket, past the backlogs.
    private func next(timeout: Duration) async throws -> Received {
        guard let message = try await self.inbox.next(timeout: timeout) else { return .closed }
        // An envelope with nothing in it is the answer to the keep-alive `{}`: a message, not an envelope.
        if case .text(let bytes) = message,
            let envelope = try? ServerEnvelope(jsonUTF8Bytes: Array(bytes.readableBytesView)),
            envelope.body != nil || envelope.requestID != 0
        {
            return .envelope(envelope)
        }
        return .message(message)
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
            case .message(let message):
                self.messageBacklog.append(message)
            case .closed:
                throw Timeout(description: "the connection closed before \(what); got \(skipped)")
            }
        }
    }

    /// Reads until a message that is not an envelope matches, keeping the others for later reads.
    public func expectMessage(
        timeout: Duration = Patience.reply,
        _ what: String = "a message",
        where match: @Sendable (WebSocketMessage) -> Bool
    ) async throws -> WebSocketMessage {
        if let index = self.messageBacklog.firstIndex(where: match) {
            return self.messageBacklog.remove(at: index)
        }
        let deadline = ContinuousClock.now + timeout
        while true {
            let left = deadline - .now
            guard left > .zero else { throw Timeout(description: "no \(what) within \(timeout)") }
            switch try await self.next(timeout: left) {
            case .envelope(let envelope):
                self.backlog.append(envelope)
            case .message(let message):
                if match(message) { return message }
                self.messageBacklog.append(message)
            case .closed:
                throw Timeout(description: "the connection closed before \(what)")
            }
        }
    }

    /// Reads until a binary message carrying a native frame matches (a media stream's chunk, window update or reset),
    /// keeping envelopes and other messages for later reads.
    public func expectFrame(
        timeout: Duration = Patience.reply,
        _ what: String = "a frame",
        where match: @Sendable (NativeFrame) -> Bool
    ) async throws -> NativeFrame {
        let message = try await self.expectMessage(timeout: timeout, what) { message in
            Self.nativeFrame(message).map(match) ?? false
        }
        return Self.nativeFrame(message)!
    }

    /// The native frame a binary message carries, if it is one whole frame.
    public static func nativeFrame(_ message: WebSocketMessage) -> NativeFrame? {
        guard case .binary(var bytes) = message else { return nil }
        var configuration = NativeFraming.Configuration()
        configuration.expectsPreface = false
        var decoder = NativeFrameDecoder(configuration: configuration)
        guard let frame = try? decoder.decode(buffer: &bytes), bytes.readableBytes == 0 else { return nil }
        return frame
    }

    /// Reads until the server closes the connection: the envelopes it sent first, and the close frame's code (nil
    /// when it sent none).
    public func expectClose(
        timeout: Duration = Patience.reply
    ) async throws -> (envelopes: [ServerEnvelope], code: UInt16?, reason: String) {
        var envelopes = self.backlog
        self.backlog = []
        var close: (UInt16?, String)? = self.messageBacklog.lazy.compactMap { message -> (UInt16?, String)? in
            if case .close(let code, let reason) = message { return (code, reason) }
            return nil
        }.first
        let deadline = ContinuousClock.now + timeout
        while true {
            let left = deadline - .now
            guard left > .zero else { throw Timeout(description: "still open after \(timeout)") }
            switch try await self.receive(timeout: left) {
            case .envelope(let envelope): envelopes.append(envelope)
            case .message(.close(let code, let reason)): close = (code, reason)
            case .message: continue
            case .closed: return (envelopes, close?.0, close?.1 ?? "")
            }
        }
    }

    /// Stops reading from the socket (as a page that hangs would): the server's writes back up.
    public func stopReading() async throws {
        try await self.channel.setOption(ChannelOptions.autoRead, value: false).get()
    }

    /// Reads from the socket again.
    public func resumeReading() async throws {
        try await self.channel.setOption(ChannelOptions.autoRead, value: true).get()
    }

    /// Whether the connection is still open.
    public var isActive: Bool { self.channel.isActive }

    /// Closes the connection without the close handshake.
    public func close() async {
        try? await self.channel.close().get()
    }
}
