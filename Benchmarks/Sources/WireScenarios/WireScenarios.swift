import CourierWire
import Foundation
import NIOCore
import NIOEmbedded
import NIOExtras

// The decode scenarios that the benchmarks time and `WireProfile` runs under a profiler: Courier's framings and
// their closest SwiftNIO Extras analogues, each in a ByteToMessageHandler fed 64 KiB reads, as on a server.

/// Payload bytes per stream.
public let streamBytes = 16 * 1024 * 1024
/// The size of each read fed to a decoder.
public let readSize = 64 * 1024
/// The payload sizes measured.
public let payloadSizes = [64, 4 * 1024, 1024 * 1024]

/// One decoder and the encoded stream it decodes.
public struct Scenario {
    public var name: String
    public var frames: Int
    /// Decodes the scenario's stream once, checking that every frame came out.
    public var run: () throws -> Void
}

/// Encoded stream of `streamBytes / size` frames of `size` bytes, cut into `readSize` reads. All frames are alike,
/// so one is encoded and its bytes repeated.
func reads(_ encode: (inout ByteBuffer, ByteBuffer) -> Void, size: Int) -> [ByteBuffer] {
    var one = ByteBuffer()
    encode(&one, ByteBuffer(repeating: 0x5A, count: size))
    var wire = ByteBuffer()
    wire.reserveCapacity(one.readableBytes * (streamBytes / size))
    for _ in 0..<(streamBytes / size) { wire.writeImmutableBuffer(one) }
    var pieces: [ByteBuffer] = []
    while wire.readableBytes > 0 {
        pieces.append(wire.readSlice(length: min(readSize, wire.readableBytes))!)
    }
    return pieces
}

/// Swallows decoded messages, counting them, so nothing piles up in the channel.
final class CountingSink<Message>: ChannelInboundHandler {
    typealias InboundIn = Message
    var count = 0
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.count += 1
    }
}

/// Copies every byte once into a buffer that is reused, as a decoder's cumulation buffer is: memcpy speed.
@inline(never)
func copyAll(_ pieces: [ByteBuffer]) {
    var copy = ByteBuffer()
    copy.reserveCapacity(readSize)
    for piece in pieces {
        copy.clear()
        copy.writeImmutableBuffer(piece)
        precondition(copy.readableBytes == piece.readableBytes)
    }
}

/// Feeds `pieces` through `decoder` in a ByteToMessageHandler and checks every frame came out.
/// Not inlined, so that a profile can attribute a scenario's whole cost to it.
@inline(never)
func decodeAll<Decoder: ByteToMessageDecoder>(_ decoder: Decoder, _ pieces: [ByteBuffer], expecting frames: Int) throws
{
    let channel = EmbeddedChannel()
    let sink = CountingSink<Decoder.InboundOut>()
    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(decoder, maximumBufferSize: 4 * 1024 * 1024))
    try channel.pipeline.syncOperations.addHandler(sink)
    for piece in pieces {
        channel.pipeline.fireChannelRead(piece)
    }
    precondition(sink.count == frames, "decoded \(sink.count) frames, expected \(frames)")
    _ = try channel.finish()
}

/// "64 B", "4 KiB", "1 MiB".
public func label(_ size: Int) -> String {
    size >= 1024 * 1024 ? "\(size / (1024 * 1024)) MiB" : size >= 1024 ? "\(size / 1024) KiB" : "\(size) B"
}

/// The five scenarios for one payload size, in the order the benchmarks list them.
public func scenarios(size: Int) -> [Scenario] {
    let frames = streamBytes / size
    var nativeConfiguration = NativeFraming.Configuration()
    nativeConfiguration.expectsPreface = false
    let native = reads(
        { wire, payload in
            NativeFraming.write(NativeFrame(kind: .message, streamID: 1, payload: payload), into: &wire)
        },
        size: size
    )
    let lengthField = reads(
        { wire, payload in
            wire.writeInteger(UInt32(payload.readableBytes))
            wire.writeImmutableBuffer(payload)
        },
        size: size
    )
    let compat = reads(
        { wire, payload in
            try! CompatFraming.write(CompatFrame(type: "txt", payload: payload), into: &wire)
        },
        size: size
    )
    let contentLength = reads(
        { wire, payload in
            wire.writeString("Content-Length: \(payload.readableBytes)\r\n\r\n")
            wire.writeImmutableBuffer(payload)
        },
        size: size
    )
    let copySource = native
    return [
        Scenario(name: "copy ceiling \(label(size))", frames: frames) {
            copyAll(copySource)
        },
        Scenario(name: "native \(label(size))", frames: frames) {
            try decodeAll(NativeFrameDecoder(configuration: nativeConfiguration), native, expecting: frames)
        },
        Scenario(name: "LengthFieldBasedFrameDecoder \(label(size))", frames: frames) {
            try decodeAll(
                LengthFieldBasedFrameDecoder(lengthFieldBitLength: .thirtyTwoBits),
                lengthField,
                expecting: frames
            )
        },
        Scenario(name: "compat \(label(size))", frames: frames) {
            try decodeAll(CompatFrameDecoder(), compat, expecting: frames)
        },
        Scenario(name: "ContentLengthHeaderFrameDecoder \(label(size))", frames: frames) {
            try decodeAll(NIOJSONRPCFraming.ContentLengthHeaderFrameDecoder(), contentLength, expecting: frames)
        },
    ]
}

/// The header parsers Courier could use for a compat header, alone: `JSONSerialization` (what `CompatHeader` uses) and
/// `JSONDecoder`, each parsing `{"size":64,"type":"txt"}` once per 64 B frame of a stream. Profiling only
/// (`WireProfile`); not part of the benchmark suite.
public func headerParserScenarios() -> [Scenario] {
    let frames = streamBytes / 64
    let header = Data(#"{"size":64,"type":"txt"}"#.utf8)
    struct Header: Decodable {
        var type: String
        var size: Int
    }
    return [
        Scenario(name: "JSONSerialization header", frames: frames) {
            for _ in 0..<frames {
                let object = try JSONSerialization.jsonObject(with: header, options: [.fragmentsAllowed])
                precondition((object as? [String: Any])?["size"] as? NSNumber == 64)
            }
        },
        Scenario(name: "JSONDecoder header", frames: frames) {
            let decoder = JSONDecoder()
            for _ in 0..<frames {
                let decoded = try decoder.decode(Header.self, from: header)
                precondition(decoded.size == 64)
            }
        },
    ]
}
