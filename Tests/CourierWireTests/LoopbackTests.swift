import CourierTesting
import NIOCore
import NIOPosix
import Testing

@testable import CourierWire

/// The framings over real TCP sockets on 127.0.0.1: decoders in `ByteToMessageHandler`s on the server, the same
/// decoders over the client's `AsyncSequence<ByteBuffer>`.
@Suite("Loopback", .serialized, .timeLimit(.minutes(1)))
struct LoopbackTests {

    /// A server that echoes every decoded message back through the encoder, one task per connection; a connection
    /// whose decoder fails is closed, and the others carry on.
    static func withEchoServer<
        Decoder: NIOSingleStepByteToMessageDecoder & Sendable,
        Encoder: MessageToByteEncoder & Sendable
    >(
        decoder: Decoder,
        encoder: Encoder,
        writePreface: Bool = false,
        _ body: @Sendable (Int) async throws -> Void
    ) async throws where Decoder.InboundOut == Encoder.OutboundIn, Decoder.InboundOut: Sendable {
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: "127.0.0.1", port: 0) { channel in
                channel.eventLoop.makeCompletedFuture {
                    if writePreface {
                        try channel.pipeline.syncOperations.addHandler(NativePrefaceHandler())
                    }
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(decoder))
                    try channel.pipeline.syncOperations.addHandler(MessageToByteHandler(encoder))
                    return try NIOAsyncChannel<Decoder.InboundOut, Encoder.OutboundIn>(
                        wrappingChannelSynchronously: channel
                    )
                }
            }
        let port = server.channel.localAddress!.port!
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask {
                try await server.executeThenClose { connections in
                    try await withThrowingDiscardingTaskGroup { connectionGroup in
                        for try await connection in connections {
                            connectionGroup.addTask {
                                // One bad peer ends its own connection only.
                                try? await connection.executeThenClose { inbound, outbound in
                                    for try await message in inbound {
                                        try await outbound.write(message)
                                    }
                                }
                            }
                        }
                    }
                }
            }
            try await body(port)
            server.channel.close(promise: nil)
        }
    }

    /// Connects a raw byte client to `port`.
    static func connect(_ port: Int) async throws -> NIOAsyncChannel<ByteBuffer, ByteBuffer> {
        try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
    }

    @Test("Native: an HTTP client is refused and closed; a Courier client on the same server is served")
    func nativeRefusesStrangers() async throws {
        try await Self.withEchoServer(
            decoder: NativeFrameDecoder(),
            encoder: NativeFrameEncoder(),
            writePreface: true
        ) { port in
            let good = try await Self.connect(port)
            let stranger = try await Self.connect(port)
            try await stranger.executeThenClose { inbound, outbound in
                try await outbound.write(ByteBuffer(string: "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
                var received = 0
                for try await bytes in inbound { received += bytes.readableBytes }
                #expect(received == NativeFraming.prefaceLength, "the stranger gets the server's preface, then EOF")
            }
            try await good.executeThenClose { inbound, outbound in
                var hello = ByteBuffer()
                NativeFraming.writePreface(into: &hello)
                NativeFraming.write(NativeFrame(kind: .message, payload: ByteBuffer(string: "hi")), into: &hello)
                try await outbound.write(hello)
                var frames = inbound.decode(using: NativeFrameDecoder()).makeAsyncIterator()
                #expect(try await frames.next() == NativeFrame(kind: .message, payload: ByteBuffer(string: "hi")))
            }
        }
    }

    @Test("Native: over a real socket, a text written between the chunks of a 20 MB image arrives between them")
    func nativeInterleaving() async throws {
        try await Self.withEchoServer(
            decoder: NativeFrameDecoder(),
            encoder: NativeFrameEncoder(),
            writePreface: true
        ) { port in
            let client = try await Self.connect(port)
            try await client.executeThenClose { inbound, outbound in
                let chunkSize = 64 * 1024
                let chunks = 320
                var wire = ByteBuffer()
                NativeFraming.writePreface(into: &wire)
                for index in 0..<chunks {
                    let flags: NativeFrame.Flags = index == chunks - 1 ? .endStream : []
                    NativeFraming.write(
                        NativeFrame(
                            kind: .mediaChunk,
                            flags: flags,
                            streamID: 1,
                            payload: ByteBuffer(repeating: UInt8(index & 0xFF), count: chunkSize)
                        ),
                        into: &wire
                    )
                    if index == 10 {
                        NativeFraming.write(
                            NativeFrame(kind: .message, payload: ByteBuffer(string: "sent after chunk 10")),
                            into: &wire
                        )
                    }
                }
                try await outbound.write(wire)
                var chunksBeforeText: Int?
                var received = 0
                for try await frame in inbound.decode(using: NativeFrameDecoder()) {
                    if frame.kind == .message {
                        chunksBeforeText = received
                    } else {
                        #expect(frame.payload == ByteBuffer(repeating: UInt8(received & 0xFF), count: chunkSize))
                        received += 1
                        if frame.flags.contains(.endStream) { break }
                    }
                }
                #expect(received == chunks)
                #expect(chunksBeforeText == 11)
            }
        }
    }

    @Test("Compat: the notes' burst in one write comes back whole, decoded over the client's AsyncSequence")
    func compatBurst() async throws {
        let seed = TestSeed.make(for: "compatBurst")
        var random = SeededRandom(seed: seed)
        var image: [UInt8] = []
        random.appendBytes(20 * 1024 * 1024, to: &image)
        var wire = ByteBuffer()
        var expected: [CompatMessage] = []
        for text in ["你好", "猪头", "先生", "今天天气好", "吃饭了吗"] {
            var header = try prettyHeader(type: "txt", size: text.utf8.count)
            wire.writeBuffer(&header)
            wire.writeString(text)
            expected.append(.frame(CompatFrame(type: "txt", payload: ByteBuffer(string: text))))
        }
        var header = try prettyHeader(type: "img", size: image.count)
        wire.writeBuffer(&header)
        wire.writeBytes(image)
        expected.append(.frame(CompatFrame(type: "img", payload: ByteBuffer(bytes: image))))
        let burst = wire
        let want = expected
        let echoed = CompatFrameEncoder()
        try await Self.withEchoServer(
            decoder: CompatFrameDecoder(),
            encoder: CompatMessageEncoder(inner: echoed)
        ) { port in
            let client = try await Self.connect(port)
            try await client.executeThenClose { inbound, outbound in
                try await outbound.write(burst)
                var received: [CompatMessage] = []
                for try await message in inbound.decode(using: CompatFrameDecoder()) {
                    received.append(message)
                    if received.count == want.count { break }
                }
                #expect(received == want)
            }
        }
    }
}

/// Echoes collected compat messages: frames are re-encoded (compact), skips are dropped.
struct CompatMessageEncoder: MessageToByteEncoder, Sendable {
    typealias OutboundIn = CompatMessage
    let inner: CompatFrameEncoder

    func encode(data: CompatMessage, out: inout ByteBuffer) throws {
        if case .frame(let frame) = data {
            try self.inner.encode(data: frame, out: &out)
        }
    }
}
