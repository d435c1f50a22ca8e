import CourierProtocol
import CourierWire
import NIOCore
import SwiftProtobuf

/// Which way the bench's connections reach the server.
public enum BenchTransport: String, Sendable, Hashable, CaseIterable {
    /// The native port: protobuf envelopes in Courier's binary frames.
    case native
    /// The WebSocket gateway (`/ws` on the HTTP port): the same envelopes in JSON, as the web chat sends them.
    case websocket
}

/// What a bench connection reads, whatever its transport.
enum BenchInbound {
    case envelope(ServerEnvelope)
    case ping(UInt64)
    case pong(UInt64)
    /// Something the bench does not look at (a media frame, a keep-alive's answer).
    case other
    /// An envelope that does not parse.
    case undecodable
}

/// What a bench connection writes, whatever its transport.
enum BenchOutbound {
    case envelope(ClientEnvelope)
    case ping(UInt64)
    case pong(UInt64)
}

/// The native port's frames ⇄ the bench's envelopes.
final class NativeBenchWire: ChannelDuplexHandler {
    typealias InboundIn = NativeFrame
    typealias InboundOut = BenchInbound
    typealias OutboundIn = BenchOutbound
    typealias OutboundOut = NativeFrame

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = Self.unwrapInboundIn(data)
        let inbound: BenchInbound
        switch frame.kind {
        case .ping: inbound = .ping(frame.pingData ?? 0)
        case .pong: inbound = .pong(frame.pingData ?? 0)
        case .message: inbound = (try? frame.envelope(as: ServerEnvelope.self)).map { .envelope($0) } ?? .undecodable
        default: inbound = .other
        }
        context.fireChannelRead(Self.wrapInboundOut(inbound))
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let frame: NativeFrame
        switch Self.unwrapOutboundIn(data) {
        case .envelope(let envelope):
            guard let encoded = try? NativeFrame(envelope: envelope) else {
                promise?.fail(BenchError("an envelope that does not serialize"))
                return
            }
            frame = encoded
        case .ping(let opaque): frame = .ping(opaque)
        case .pong(let opaque): frame = .pong(opaque)
        }
        context.write(Self.wrapOutboundOut(frame), promise: promise)
    }
}

/// The gateway's JSON text messages ⇄ the bench's envelopes; the bench's pings are WebSocket pings, their 8 bytes
/// the opaque number.
final class WebSocketBenchWire: ChannelDuplexHandler {
    typealias InboundIn = WebSocketMessage
    typealias InboundOut = BenchInbound
    typealias OutboundIn = BenchOutbound
    typealias OutboundOut = WebSocketMessage

    private static let decoding: JSONDecodingOptions = {
        var options = JSONDecodingOptions()
        options.ignoreUnknownFields = true
        return options
    }()

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let inbound: BenchInbound
        switch Self.unwrapInboundIn(data) {
        case .text(let bytes):
            if bytes.readableBytes == 2, bytes.getString(at: bytes.readerIndex, length: 2) == "{}" {
                inbound = .other
            } else {
                let envelope = try? ServerEnvelope(
                    jsonUTF8Bytes: Array(bytes.readableBytesView),
                    options: Self.decoding
                )
                inbound = envelope.map { .envelope($0) } ?? .undecodable
            }
        case .ping(let bytes):
            inbound = .ping(bytes.getInteger(at: bytes.readerIndex, as: UInt64.self) ?? 0)
        case .pong(let bytes):
            inbound = .pong(bytes.getInteger(at: bytes.readerIndex, as: UInt64.self) ?? 0)
        case .binary, .close, .deflated:
            inbound = .other
        }
        context.fireChannelRead(Self.wrapInboundOut(inbound))
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let message: WebSocketMessage
        switch Self.unwrapOutboundIn(data) {
        case .envelope(let envelope):
            guard let json: [UInt8] = try? envelope.jsonUTF8Bytes() else {
                promise?.fail(BenchError("an envelope that does not serialize"))
                return
            }
            message = .text(ByteBuffer(bytes: json))
        case .ping(let opaque):
            var bytes = context.channel.allocator.buffer(capacity: 8)
            bytes.writeInteger(opaque)
            message = .ping(bytes)
        case .pong(let opaque):
            var bytes = context.channel.allocator.buffer(capacity: 8)
            bytes.writeInteger(opaque)
            message = .pong(bytes)
        }
        context.write(Self.wrapOutboundOut(message), promise: promise)
    }
}
