import CourierTesting
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing

@testable import CourierWire

/// Collects what the codec passes on: messages, and the errors it reports.
private final class Sink: ChannelInboundHandler {
    typealias InboundIn = WebSocketMessage
    var messages: [WebSocketMessage] = []
    var errors: [CourierWireError] = []

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.messages.append(self.unwrapInboundIn(data))
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let error = error as? CourierWireError { self.errors.append(error) }
    }
}

@Suite("WebSocket messages")
struct WebSocketCodecTests {
    /// A server-side codec on an embedded channel, and what it reads.
    private static func server(
        maxMessageBytes: Int = 1024,
        deflate: Bool = false
    ) throws -> (EmbeddedChannel, Sink) {
        let sink = Sink()
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(
            WebSocketMessageCodec(
                role: .server,
                configuration: .init(maxMessageBytes: maxMessageBytes, deflate: deflate)
            )
        )
        try channel.pipeline.syncOperations.addHandler(sink)
        return (channel, sink)
    }

    /// A frame as a browser sends it: masked.
    private static func frame(
        _ opcode: WebSocketOpcode,
        _ bytes: [UInt8],
        fin: Bool = true,
        rsv1: Bool = false,
        masked: Bool = true
    ) -> WebSocketFrame {
        var data = ByteBuffer(bytes: bytes)
        let key: WebSocketMaskingKey? = masked ? .random() : nil
        if let key { data.webSocketMask(key) }
        return WebSocketFrame(fin: fin, rsv1: rsv1, opcode: opcode, maskKey: key, data: data)
    }

    /// A client codec's frame as NIO's decoder reads it on the other side: its data masked (NIO's encoder masks).
    private static func onTheWire(_ frame: WebSocketFrame) -> WebSocketFrame {
        var frame = frame
        if let key = frame.maskKey { frame.data.webSocketMask(key) }
        return frame
    }

    private static func text(_ message: WebSocketMessage?) -> String? {
        if case .text(let bytes)? = message { String(buffer: bytes) } else { nil }
    }

    @Test("fragments are joined into one message, whatever control frames come between them")
    func fragments() throws {
        let (channel, sink) = try Self.server()
        let text = Array("你好，世界 👋 مرحبا".utf8)
        try channel.writeInbound(Self.frame(.text, Array(text[0..<5]), fin: false))
        try channel.writeInbound(Self.frame(.ping, [1, 2, 3]))
        try channel.writeInbound(Self.frame(.continuation, Array(text[5..<11]), fin: false))
        try channel.writeInbound(Self.frame(.continuation, Array(text[11...])))
        // The ping between fragments was answered by the codec itself (``pingsInsideAMessage``).
        #expect(sink.messages.count == 1)
        #expect(try channel.readOutbound(as: WebSocketFrame.self)?.opcode == .pong)
        #expect(Self.text(sink.messages.last) == "你好，世界 👋 مرحبا")
        #expect(sink.errors.isEmpty)
    }

    @Test("a message over the limit is refused as its fragments arrive, before the rest is gathered")
    func oversize() throws {
        let (channel, sink) = try Self.server(maxMessageBytes: 100)
        try channel.writeInbound(Self.frame(.binary, [UInt8](repeating: 7, count: 60), fin: false))
        #expect(sink.errors.isEmpty)
        try channel.writeInbound(Self.frame(.continuation, [UInt8](repeating: 7, count: 60), fin: false))
        #expect(sink.errors.map(\.code) == [.frameTooLarge])
        // Nothing after the error is read.
        try channel.writeInbound(Self.frame(.text, Array("late".utf8)))
        #expect(sink.messages.isEmpty)
        #expect(sink.errors.count == 1)
    }

    @Test(
        "frames RFC 6455 forbids are reported, once each connection",
        arguments: [
            ("unmasked", 0), ("continuation first", 1), ("new message inside one", 2), ("reserved opcode", 3),
            ("compressed without deflate", 4), ("close code 1005", 5), ("close reason not UTF-8", 6),
        ]
    )
    func violations(name: String, index: Int) throws {
        let (channel, sink) = try Self.server()
        switch index {
        case 0: try channel.writeInbound(Self.frame(.text, Array("hi".utf8), masked: false))
        case 1: try channel.writeInbound(Self.frame(.continuation, Array("hi".utf8)))
        case 2:
            try channel.writeInbound(Self.frame(.text, Array("h".utf8), fin: false))
            try channel.writeInbound(Self.frame(.text, Array("i".utf8)))
        case 3: try channel.writeInbound(Self.frame(WebSocketOpcode(encodedWebSocketOpcode: 3)!, [1]))
        case 4: try channel.writeInbound(Self.frame(.text, Array("hi".utf8), rsv1: true))
        case 5: try channel.writeInbound(Self.frame(.connectionClose, [0x03, 0xED]))
        case 7: try channel.writeInbound(Self.frame(.connectionClose, [0x07, 0xD0]))
        default: try channel.writeInbound(Self.frame(.connectionClose, [0x03, 0xE8, 0xC3, 0x28]))
        }
        #expect(sink.errors.map(\.code) == [.webSocketViolation], "\(name)")
        #expect(sink.messages.isEmpty, "\(name)")
    }

    @Test("a close is answered with a close echoing its code, and nothing goes out after it")
    func closeHandshake() throws {
        let (channel, sink) = try Self.server()
        try channel.writeInbound(Self.frame(.connectionClose, [0x03, 0xE8] + Array("再见".utf8)))
        #expect(sink.messages == [.close(code: 1000, reason: "再见")])
        let echo = try #require(try channel.readOutbound(as: WebSocketFrame.self))
        #expect(echo.opcode == .connectionClose && echo.maskKey == nil)
        #expect(echo.data.getInteger(at: echo.data.readerIndex, as: UInt16.self) == 1000)
        try channel.writeOutbound(WebSocketMessage.text("too late"))
        #expect(try channel.readOutbound(as: WebSocketFrame.self) == nil)
    }

    @Test("deflate: messages round-trip between a client and a server codec, the large ones compressed")
    func deflateRoundTrip() throws {
        let (server, sink) = try Self.server(maxMessageBytes: 1 << 20, deflate: true)
        let client = EmbeddedChannel()
        try client.pipeline.syncOperations.addHandler(
            WebSocketMessageCodec(role: .client, configuration: .init(maxMessageBytes: 1 << 20, deflate: true))
        )
        let seed = TestSeed.make(for: "deflateRoundTrip")
        var random = SeededRandom(seed: seed)
        let words = ["消息", "メッセージ", "message", "رسالة", "🙂", " ", "\n"]
        for length in [0, 10, 255, 256, 4096, 200_000] {
            var text = ""
            while text.utf8.count < length { text += words[Int.random(in: 0..<words.count, using: &random)] }
            try client.writeOutbound(WebSocketMessage.text(text))
            let frame = try #require(try client.readOutbound(as: WebSocketFrame.self))
            #expect(frame.maskKey != nil)
            // Short messages go as they are; long ones of repetitive text shrink.
            #expect(frame.rsv1 == (text.utf8.count >= 256), "length \(text.utf8.count)")
            if frame.rsv1 { #expect(frame.length < text.utf8.count) }
            try server.writeInbound(Self.onTheWire(frame))
            #expect(Self.text(sink.messages.last) == text, "seed \(seed)")
        }
        #expect(sink.errors.isEmpty)
    }

    @Test("deflate: a small message that inflates past the limit is refused, and so are bytes that are not deflate")
    func deflateBombAndGarbage() throws {
        let client = EmbeddedChannel()
        try client.pipeline.syncOperations.addHandler(
            WebSocketMessageCodec(role: .client, configuration: .init(maxMessageBytes: 1 << 22, deflate: true))
        )
        // Four megabytes of one letter deflate to a few kilobytes.
        try client.writeOutbound(WebSocketMessage.text(String(repeating: "a", count: 1 << 22)))
        let bomb = try #require(try client.readOutbound(as: WebSocketFrame.self))
        #expect(bomb.rsv1 && bomb.length < 10_000)
        let (server, sink) = try Self.server(maxMessageBytes: 1 << 16, deflate: true)
        try server.writeInbound(Self.onTheWire(bomb))
        #expect(sink.errors.map(\.code) == [.frameTooLarge])
        #expect(sink.messages.isEmpty)

        let (other, otherSink) = try Self.server(maxMessageBytes: 1 << 16, deflate: true)
        try other.writeInbound(Self.frame(.text, [0xFF, 0xFE, 0xFD, 0x00, 0x13], rsv1: true))
        #expect(otherSink.errors.map(\.code) == [.inflateFailed])
    }

    @Test("permessage-deflate: which offers are taken, and the answer")
    func negotiation() {
        let answer = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
        // Chromium's offer, Firefox's, and Courier's own.
        #expect(PerMessageDeflate.negotiate(["permessage-deflate; client_max_window_bits"]) == answer)
        #expect(PerMessageDeflate.negotiate(["permessage-deflate"]) == answer)
        #expect(PerMessageDeflate.negotiate([PerMessageDeflate.clientOffer]) == answer)
        // A smaller server window cannot be honoured; a later offer can.
        #expect(PerMessageDeflate.negotiate(["permessage-deflate; server_max_window_bits=10"]) == nil)
        #expect(
            PerMessageDeflate.negotiate(["permessage-deflate; server_max_window_bits=10, permessage-deflate"])
                == answer
        )
        #expect(PerMessageDeflate.negotiate(["permessage-deflate; client_max_window_bits=20"]) == nil)
        #expect(PerMessageDeflate.negotiate(["permessage-deflate; unknown_thing"]) == nil)
        #expect(
            PerMessageDeflate.negotiate(["permessage-deflate; client_no_context_takeover; client_no_context_takeover"])
                == nil
        )
        #expect(PerMessageDeflate.negotiate(["x-webkit-deflate-frame"]) == nil)
        // Empty parameters are not an offer (and must not crash the parser).
        for broken in ["permessage-deflate; ;", "permessage-deflate;=", "permessage-deflate; =15", ";", "=;="] {
            #expect(PerMessageDeflate.negotiate([broken]) == nil, "\(broken)")
        }
        // A window size asked for is confirmed.
        #expect(
            PerMessageDeflate.negotiate(["permessage-deflate; server_max_window_bits=15"])
                == answer + "; server_max_window_bits=15"
        )
        #expect(PerMessageDeflate.negotiate([]) == nil)
        #expect(PerMessageDeflate.accepted([answer]))
        #expect(!PerMessageDeflate.accepted([]))
    }

    @Test("inside a fragmented message, a ping is answered here and not passed on; after a close, nothing is read")
    func pingsInsideAMessage() throws {
        let (channel, sink) = try Self.server()
        try channel.writeInbound(Self.frame(.text, Array("half".utf8), fin: false))
        try channel.writeInbound(Self.frame(.ping, [9]))
        #expect(sink.messages.isEmpty, "a ping inside a message is no activity of the peer's")
        let pong = try #require(try channel.readOutbound(as: WebSocketFrame.self))
        #expect(pong.opcode == .pong && pong.data == ByteBuffer(bytes: [9]))
        try channel.writeInbound(Self.frame(.connectionClose, [0x03, 0xE8]))
        try channel.writeInbound(Self.frame(.text, Array("after the close".utf8)))
        #expect(sink.messages == [.close(code: 1000, reason: "")])
    }

    @Test("a server that inflates lazily passes compressed messages on as they came; their reader inflates them")
    func lazyInflation() throws {
        let sink = Sink()
        let server = EmbeddedChannel()
        var configuration = WebSocketMessageCodec.Configuration(maxMessageBytes: 1 << 16, deflate: true)
        configuration.inflatesLazily = true
        try server.pipeline.syncOperations.addHandler(
            WebSocketMessageCodec(role: .server, configuration: configuration)
        )
        try server.pipeline.syncOperations.addHandler(sink)
        let client = EmbeddedChannel()
        try client.pipeline.syncOperations.addHandler(
            WebSocketMessageCodec(role: .client, configuration: .init(maxMessageBytes: 1 << 22, deflate: true))
        )
        let text = String(repeating: "惰性解压 ", count: 200)
        try client.writeOutbound(WebSocketMessage.text(text))
        try server.writeInbound(Self.onTheWire(try #require(try client.readOutbound(as: WebSocketFrame.self))))
        let message = try #require(sink.messages.last)
        guard case .deflated(true, let bytes) = message else {
            Issue.record("\(message)")
            return
        }
        #expect(bytes.readableBytes < text.utf8.count)
        #expect(Self.text(try message.inflated(limit: 1 << 16)) == text)
        #expect(throws: CourierWireError.self) { _ = try message.inflated(limit: 100) }
    }
}
