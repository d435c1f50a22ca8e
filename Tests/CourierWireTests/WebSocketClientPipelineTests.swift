import Crypto
import Foundation
import NIOCore
import NIOEmbedded
import Testing

@testable import CourierWire

/// What the client's handlers after the upgrade read.
/// (Used on the embedded channel's loop alone: this test's thread.)
private final class Received: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = WebSocketMessage
    var messages: [WebSocketMessage] = []

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.messages.append(self.unwrapInboundIn(data))
    }
}

@Suite("The WebSocket client's handshake")
struct WebSocketClientPipelineTests {
    @Test("frames that come in the same read as the server's 101 reach the handlers added by the upgrade, in order")
    func framesWithTheUpgrade() throws {
        let channel = EmbeddedChannel()
        let received = Received()
        var options = WebSocketClientOptions(host: "127.0.0.1")
        options.deflate = false
        let upgraded = try channel.pipeline.syncOperations.addWebSocketClientHandlers(options) { [received] }
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 80)).wait()
        var request = ""
        while let part = try channel.readOutbound(as: IOData.self) {
            guard case .byteBuffer(let buffer) = part else { continue }
            request += String(buffer: buffer)
        }
        let key = try #require(
            request.split(separator: "\r\n").first { $0.lowercased().hasPrefix("sec-websocket-key:") }?
                .split(separator: ":", maxSplits: 1).last?.trimmingCharacters(in: .whitespaces),
            "\(request)"
        )
        let accept = Data(Insecure.SHA1.hash(data: Data((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").utf8)))
            .base64EncodedString()
        // The 101 and two frames (unmasked, as a server sends them) in one read.
        var bytes = ByteBuffer(
            string: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                + "Sec-WebSocket-Accept: \(accept)\r\n\r\n"
        )
        let text = Array("你好 👋".utf8)
        bytes.writeBytes([0x81, UInt8(text.count)] + text)
        bytes.writeBytes([0x82, 0x02, 0x2A, 0x00])
        try channel.writeInbound(bytes)
        channel.embeddedEventLoop.run()
        #expect(try upgraded.wait() == false, "no deflate asked for")
        #expect(received.messages == [.text(ByteBuffer(bytes: text)), .binary(ByteBuffer(bytes: [0x2A, 0x00]))])
        _ = try? channel.finish()
    }
}
