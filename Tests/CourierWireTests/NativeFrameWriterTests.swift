import NIOCore
import NIOEmbedded
import Testing

@testable import CourierWire

/// Frames leave as the bytes they hold: the writer copies nothing.
@Suite struct NativeFrameWriterTests {
    static func limit(_ bytes: Int) -> NativeFraming.Configuration {
        var configuration = NativeFraming.Configuration()
        configuration.maxFramePayloadBytes = bytes
        configuration.expectsPreface = false
        return configuration
    }

    @Test("the writer hands a frame's own bytes to the channel, and refuses one over the limit")
    func writes() throws {
        let channel = EmbeddedChannel(handler: NativeFrameWriter(configuration: Self.limit(100)))
        let frame = NativeFrame(kind: .mediaChunk, flags: .endStream, streamID: 7, payload: ByteBuffer(string: "chunk"))
        try channel.writeOutbound(frame)
        let written = try #require(try channel.readOutbound(as: ByteBuffer.self))
        #expect(written == frame.bytes)
        var decoder = NativeFrameDecoder(configuration: Self.limit(100))
        var wire = written
        #expect(try decoder.decode(buffer: &wire) == frame)
        // The same storage, not a copy.
        let same = written.withUnsafeReadableBytes { a in
            frame.bytes.withUnsafeReadableBytes { $0.baseAddress == a.baseAddress }
        }
        #expect(same)

        let tooBig = NativeFrame(kind: .mediaChunk, streamID: 7, payload: ByteBuffer(repeating: 1, count: 101))
        #expect(throws: CourierWireError.self) { try channel.writeOutbound(tooBig) }
        #expect(try channel.readOutbound(as: ByteBuffer.self) == nil)
        _ = try? channel.finish()
    }
}
