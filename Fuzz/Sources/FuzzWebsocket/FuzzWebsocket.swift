import CourierWire
import FuzzSupport
import NIOCore
import NIOEmbedded
import NIOWebSocket

/// What the codec passed on, and the errors it reported.
final class Collected: ChannelInboundHandler {
    typealias InboundIn = WebSocketMessage
    var messages: [WebSocketMessage] = []
    var errors: [any Error] = []

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.messages.append(self.unwrapInboundIn(data))
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.errors.append(error)
    }
}

let limit = 4096

/// Runs `chunks` through NIO's frame decoder and a server's message codec, as the gateway's pipeline has them.
func decode(_ chunks: [ByteBuffer], deflate: Bool, lazily: Bool) -> (messages: [WebSocketMessage], code: String?) {
    let channel = EmbeddedChannel()
    let collected = Collected()
    var configuration = WebSocketMessageCodec.Configuration(maxMessageBytes: limit, deflate: deflate)
    configuration.inflatesLazily = lazily
    try! channel.pipeline.syncOperations.addHandler(
        ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: limit + 14))
    )
    try! channel.pipeline.syncOperations.addHandler(WebSocketMessageCodec(role: .server, configuration: configuration))
    try! channel.pipeline.syncOperations.addHandler(collected)
    for chunk in chunks {
        do {
            try channel.writeInbound(chunk)
        } catch {
            break
        }
        if !collected.errors.isEmpty { break }
    }
    _ = try? channel.finish()
    guard let error = collected.errors.first else { return (collected.messages, nil) }
    guard let wire = error as? CourierWireError else {
        fatalError("the codec reported something other than CourierWireError: \(error)")
    }
    return (collected.messages, "\(wire.code)")
}

/// Feeds the input (less its first byte: deflate on or off, inflating lazily or not, and the cuts) to the gateway's
/// frame decoder and message codec. Besides not crashing: every error is a `CourierWireError`, the messages and the
/// error do not depend on the cuts, no message is over the limit, and a message passed on compressed inflates within
/// the limit or fails with a `CourierWireError`.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzWebSocket(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: start, count: count)
    guard let control = bytes.first else { return 0 }
    let deflate = control & 1 == 1
    let lazily = control & 2 == 2
    let input = ByteBuffer(bytes: bytes.dropFirst())
    let whole = decode([input], deflate: deflate, lazily: lazily)
    let cuts = decode(cut(input, step: Int(control >> 2) + 1), deflate: deflate, lazily: lazily)
    guard whole.messages == cuts.messages, whole.code == cuts.code else {
        fatalError("the cuts changed the result: \(whole) vs \(cuts)")
    }
    for message in whole.messages {
        switch message {
        case .text(let payload), .binary(let payload):
            guard payload.readableBytes <= limit else { fatalError("a message of \(payload.readableBytes) bytes") }
        case .deflated:
            do {
                switch try message.inflated(limit: limit) {
                case .text(let payload), .binary(let payload):
                    guard payload.readableBytes <= limit else { fatalError("inflated past the limit") }
                default:
                    fatalError("a compressed message inflated to a control message")
                }
            } catch is CourierWireError {
                continue
            } catch {
                fatalError("inflating threw something other than CourierWireError: \(error)")
            }
        case .ping(let payload), .pong(let payload):
            guard payload.readableBytes <= 125 else { fatalError("a control frame of \(payload.readableBytes) bytes") }
        case .close(_, let reason):
            guard reason.utf8.count <= 123 else { fatalError("a close reason of \(reason.utf8.count) bytes") }
        }
    }
    return 0
}
