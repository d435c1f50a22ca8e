public import NIOCore
public import NIOWebSocket

/// WebSocket frames ⇄ whole messages (``WebSocketMessage``), after NIO's frame decoder and before the handler that
/// reads messages: fragments joined, permessage-deflate undone and done (when negotiated), masks checked, the close
/// handshake answered. Each limit holds before the work it bounds: a message's fragments stop being gathered, and an
/// inflate stops, at ``Configuration/maxMessageBytes``.
///
/// A frame that breaks RFC 6455 (or a message over the limit) is reported as a ``CourierWireError`` through
/// `errorCaught`, once; the handler after this one says why and closes. NIO's own frame decoder errors are reported
/// the same way. Nothing is kept between messages but the fragments of one under way: an idle connection costs this
/// handler's fields only.
public final class WebSocketMessageCodec: ChannelDuplexHandler, RemovableChannelHandler {
    public typealias InboundIn = WebSocketFrame
    public typealias InboundOut = WebSocketMessage
    public typealias OutboundIn = WebSocketMessage
    public typealias OutboundOut = WebSocketFrame

    /// Which end this is: a server reads masked frames and writes unmasked ones; a client the other way round.
    public enum Role: Sendable {
        case server, client
    }

    public struct Configuration: Sendable, Hashable {
        /// The largest message, its fragments together (and, when compressed, inflated).
        public var maxMessageBytes: Int = 1 << 20
        /// Whether permessage-deflate was negotiated (see ``PerMessageDeflate``).
        public var deflate: Bool = false
        /// Text messages shorter than this go out uncompressed even when deflate is on (compressing them costs more
        /// than it saves). Binary messages (media chunks, mostly compressed already) always go out as they are.
        public var minimumDeflateBytes: Int = 256
        /// Whether compressed messages are passed on as ``WebSocketMessage/deflated(text:_:)``, to be inflated by
        /// their reader when it takes them (a server: what waits in a session's inbox stays compressed, so a burst
        /// of small frames that inflate to the limit each costs what came over the wire), rather than inflated here.
        public var inflatesLazily: Bool = false

        public init(maxMessageBytes: Int = 1 << 20, deflate: Bool = false) {
            self.maxMessageBytes = maxMessageBytes
            self.deflate = deflate
        }
    }

    private let role: Role
    private let configuration: Configuration
    /// A text or binary message whose later fragments have not all come.
    private var partial: (opcode: WebSocketOpcode, compressed: Bool, bytes: ByteBuffer)?
    /// A close frame went out: the peer gets nothing after it.
    private var closeSent = false
    /// The peer's close frame came: nothing it sends after it is read.
    private var closeReceived = false
    /// An error was reported: the frames after it are dropped.
    private var failed = false

    public init(role: Role, configuration: Configuration = .init()) {
        self.role = role
        self.configuration = configuration
    }

    // MARK: Reading

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.failed, !self.closeReceived else { return }
        do {
            if let message = try self.read(self.unwrapInboundIn(data), context: context) {
                context.fireChannelRead(self.wrapInboundOut(message))
            }
        } catch {
            self.fail(context: context, error)
        }
    }

    public func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let error = error as? NIOWebSocketError else {
            context.fireErrorCaught(error)
            return
        }
        guard !self.failed else { return }
        switch error {
        case .invalidFrameLength:
            self.fail(
                context: context,
                CourierWireError(.frameTooLarge, "a frame is over \(self.configuration.maxMessageBytes) bytes")
            )
        case .fragmentedControlFrame:
            self.fail(context: context, CourierWireError(.webSocketViolation, "a control frame is fragmented"))
        case .multiByteControlFrameLength:
            self.fail(context: context, CourierWireError(.webSocketViolation, "a control frame is over 125 bytes"))
        }
    }

    private func fail(context: ChannelHandlerContext, _ error: any Error) {
        self.failed = true
        self.partial = nil
        context.fireErrorCaught(error)
    }

    /// The message `frame` completes, if any.
    private func read(_ frame: WebSocketFrame, context: ChannelHandlerContext) throws -> WebSocketMessage? {
        switch (self.role, frame.maskKey) {
        case (.server, nil):
            throw CourierWireError(.webSocketViolation, "a client's frame is not masked")
        case (.client, _?):
            throw CourierWireError(.webSocketViolation, "a server's frame is masked")
        default:
            break
        }
        guard !frame.rsv2, !frame.rsv3 else {
            throw CourierWireError(.webSocketViolation, "a reserved bit is set")
        }
        let data = frame.unmaskedData
        switch frame.opcode {
        case .ping, .pong, .connectionClose:
            guard !frame.rsv1 else { throw CourierWireError(.webSocketViolation, "a control frame is compressed") }
            if self.partial != nil, frame.opcode != .connectionClose {
                // Inside a fragmented message, pings are answered here and not passed on: they are not the peer's
                // activity, and a message begun and never finished cannot keep a connection alive with them.
                if frame.opcode == .ping, !self.closeSent {
                    context.writeAndFlush(
                        self.wrapOutboundOut(self.frame(for: .pong(data), context: context)),
                        promise: nil
                    )
                }
                return nil
            }
            return try self.control(frame.opcode, data, context: context)
        case .text, .binary:
            guard self.partial == nil else {
                throw CourierWireError(.webSocketViolation, "a new message began before the last one ended")
            }
            guard !frame.rsv1 || self.configuration.deflate else {
                throw CourierWireError(.webSocketViolation, "a compressed message, and compression was not negotiated")
            }
            try self.check(size: data.readableBytes)
            guard frame.fin else {
                self.partial = (frame.opcode, frame.rsv1, data)
                return nil
            }
            return try self.message(frame.opcode, compressed: frame.rsv1, data, context: context)
        case .continuation:
            guard var partial = self.partial else {
                throw CourierWireError(.webSocketViolation, "a continuation frame with no message to continue")
            }
            guard !frame.rsv1 else { throw CourierWireError(.webSocketViolation, "a continuation frame is compressed") }
            try self.check(size: partial.bytes.readableBytes + data.readableBytes)
            self.partial = nil
            partial.bytes.writeImmutableBuffer(data)
            guard frame.fin else {
                self.partial = partial
                return nil
            }
            return try self.message(partial.opcode, compressed: partial.compressed, partial.bytes, context: context)
        default:
            throw CourierWireError(.webSocketViolation, "opcode \(frame.opcode) is reserved")
        }
    }

    private func check(size: Int) throws {
        guard size <= self.configuration.maxMessageBytes else {
            throw CourierWireError(.frameTooLarge, "a message is over \(self.configuration.maxMessageBytes) bytes")
        }
    }

    private func message(
        _ opcode: WebSocketOpcode,
        compressed: Bool,
        _ bytes: ByteBuffer,
        context: ChannelHandlerContext
    ) throws -> WebSocketMessage {
        guard compressed else { return opcode == .text ? .text(bytes) : .binary(bytes) }
        if self.configuration.inflatesLazily { return .deflated(text: opcode == .text, bytes) }
        let payload = try DeflateStreams.current.inflate(
            bytes,
            limit: self.configuration.maxMessageBytes,
            allocator: context.channel.allocator
        )
        return opcode == .text ? .text(payload) : .binary(payload)
    }

    private func control(
        _ opcode: WebSocketOpcode,
        _ data: ByteBuffer,
        context: ChannelHandlerContext
    ) throws -> WebSocketMessage {
        switch opcode {
        case .ping:
            return .ping(data)
        case .pong:
            return .pong(data)
        default:
            var data = data
            let code = data.readInteger(as: UInt16.self)
            guard data.readableBytes == 0 || code != nil else {
                throw CourierWireError(.webSocketViolation, "a close frame of one byte")
            }
            // The codes a peer may send: RFC 6455's defined ones and the registered and private ranges.
            if let code, !([1000, 1001, 1002, 1003] + Array(1007...1014)).contains(code), !(3000...4999).contains(code)
            {
                throw CourierWireError(.webSocketViolation, "close code \(code) may not be sent")
            }
            guard let reason = String(validating: data.readableBytesView, as: UTF8.self) else {
                throw CourierWireError(.webSocketViolation, "a close frame's reason is not UTF-8")
            }
            // The handshake: answered at once (echoing the code), and nothing goes out after it.
            self.closeReceived = true
            self.partial = nil
            if !self.closeSent {
                self.closeSent = true
                context.writeAndFlush(
                    self.wrapOutboundOut(self.frame(for: .close(code: code, reason: ""), context: context)),
                    promise: nil
                )
            }
            return .close(code: code, reason: reason)
        }
    }

    // MARK: Writing

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let message = self.unwrapOutboundIn(data)
        guard !self.closeSent else {
            // After a close frame, RFC 6455 allows nothing more: the message is dropped as if it had gone.
            promise?.succeed()
            return
        }
        if case .close = message { self.closeSent = true }
        context.write(self.wrapOutboundOut(self.frame(for: message, context: context)), promise: promise)
    }

    private func frame(for message: WebSocketMessage, context: ChannelHandlerContext) -> WebSocketFrame {
        let opcode: WebSocketOpcode
        var data: ByteBuffer
        var compressed = false
        switch message {
        case .text(let bytes):
            opcode = .text
            data = bytes
            if self.configuration.deflate, bytes.readableBytes >= self.configuration.minimumDeflateBytes,
                let deflated = DeflateStreams.current.deflate(bytes, allocator: context.channel.allocator)
            {
                data = deflated
                compressed = true
            }
        case .binary(let bytes):
            opcode = .binary
            data = bytes
        case .deflated(let text, let bytes):
            // Compressed already (a message passed on as it came).
            opcode = text ? .text : .binary
            data = bytes
            compressed = true
        case .ping(let bytes):
            opcode = .ping
            data = bytes.getSlice(at: bytes.readerIndex, length: min(125, bytes.readableBytes)) ?? ByteBuffer()
        case .pong(let bytes):
            opcode = .pong
            data = bytes.getSlice(at: bytes.readerIndex, length: min(125, bytes.readableBytes)) ?? ByteBuffer()
        case .close(let code, let reason):
            opcode = .connectionClose
            data = context.channel.allocator.buffer(capacity: 2 + 123)
            // 1005 and 1006 are never sent (RFC 6455, 7.4.1): an empty payload stands for "no code".
            if let code, code != 1005, code != 1006 {
                data.writeInteger(code)
                data.writeString(Self.truncated(reason, toUTF8Bytes: 123))
            }
        }
        // NIO's encoder applies the mask.
        let maskKey: WebSocketMaskingKey? = self.role == .client ? .random() : nil
        return WebSocketFrame(fin: true, rsv1: compressed, opcode: opcode, maskKey: maskKey, data: data)
    }

    /// `text`'s longest prefix of whole characters within `limit` UTF-8 bytes.
    static func truncated(_ text: String, toUTF8Bytes limit: Int) -> String {
        guard text.utf8.count > limit else { return text }
        var result = ""
        for character in text {
            guard result.utf8.count + character.utf8.count <= limit else { break }
            result.append(character)
        }
        return result
    }
}

@available(*, unavailable)
extension WebSocketMessageCodec: Sendable {}
