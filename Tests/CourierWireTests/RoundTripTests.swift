import CourierTesting
import Foundation
import NIOCore
import Testing

@testable import CourierWire

/// Random streams of frames, encoded, cut at random points and decoded again: what comes out must equal what went in.
///
/// Each stream holds one payload whose size is log-uniform from 0 B to 4 MiB and up to three short ones (log-uniform
/// from 0 B to 16 KiB: the texts that stick to a large packet), all random binary with CRLF, end markers and whole
/// compat headers planted in them. A run is 1,000 streams per framing, about 550 MB in all; the test prints the count.
@Suite("Randomized round trips")
struct RoundTripTests {
    /// Streams per framing per run; two framings make the 2,000.
    static let streamsPerFraming = 1000
    /// Payload sizes are log-uniform from 0 B to this.
    static let maxPayload = 4 * 1024 * 1024
    /// Streams whose encoding is under this are also decoded one byte at a time and all at once.
    static let smallStream = 16 * 1024

    /// Random payload bytes: windows of one random pool, with CRLF and end-marker bytes planted in them.
    struct PayloadMaker {
        let pool: ByteBuffer

        init(random: inout SeededRandom) {
            var bytes: [UInt8] = []
            random.appendBytes(RoundTripTests.maxPayload + 65_536, to: &bytes)
            self.pool = ByteBuffer(bytes: bytes)
        }

        func make(size: Int, random: inout SeededRandom) -> ByteBuffer {
            let offset = Int.random(in: 0...(self.pool.readableBytes - size), using: &random)
            var payload = self.pool.getSlice(at: offset, length: size)!
            // Own storage, so planting bytes does not write into the shared pool.
            payload = ByteBuffer(bytes: payload.readableBytesView)
            for planted in [[0x0D, 0x0A], testMarker, Array(#"{"type":"x","size":0}"#.utf8) + [0x0D, 0x0A]] as [[UInt8]]
            where size >= planted.count && Bool.random(using: &random) {
                payload.setBytes(planted, at: Int.random(in: 0...(size - planted.count), using: &random))
            }
            return payload
        }

        /// 0 to 3 small frames and one of any size, in random order.
        func sizes(random: inout SeededRandom) -> [Int] {
            var sizes = (0..<Int.random(in: 0...3, using: &random)).map { _ in random.logUniformSize(upTo: 16 * 1024) }
            sizes.insert(
                random.logUniformSize(upTo: RoundTripTests.maxPayload),
                at: Int.random(in: 0...sizes.count, using: &random)
            )
            return sizes
        }
    }

    /// The cuts each stream is decoded with.
    static func cuts(of wire: ByteBuffer, random: inout SeededRandom) -> [[ByteBuffer]] {
        var cuts = [DecoderDriver.randomCuts(of: wire, using: &random)]
        if wire.readableBytes < Self.smallStream {
            cuts.append(DecoderDriver.bytewise(wire))
            cuts.append([wire])
        }
        return cuts
    }

    @Test("Compat: collecting and streaming decoders give back every packet, byte for byte")
    func compatRoundTrips() async throws {
        let seed = TestSeed.make(for: "compatRoundTrips")
        var random = SeededRandom(seed: seed)
        let maker = PayloadMaker(random: &random)
        var totalBytes = 0
        for streamIndex in 0..<Self.streamsPerFraming {
            // Seconds of CPU in all: let the tests waiting on sockets have the cooperative threads between streams.
            await Task.yield()
            let marker = Bool.random(using: &random) ? testMarker : nil
            var wire = ByteBuffer()
            var frames: [CompatFrame] = []
            for size in maker.sizes(random: &random) {
                let payload = maker.make(size: size, random: &random)
                let type = ["txt", "img", "voice", "视频", "file\r\n"].randomElement(using: &random)!
                let fields: [String: JSONValue] =
                    Bool.random(using: &random) ? [:] : ["name": .string("a b.jpg"), "w": .integer(Int64(size))]
                let frame = CompatFrame(type: type, payload: payload, fields: fields)
                if Bool.random(using: &random) {
                    try CompatFraming.write(frame, configuration: .init(endMarker: marker), into: &wire)
                } else {
                    // Pretty-printed, `size` as a string, the way the notes' client writes it.
                    var object: [String: Any] = ["type": type, "size": String(size)]
                    if case .string(let name)? = fields["name"], case .integer(let w)? = fields["w"] {
                        object["name"] = name
                        object["w"] = w
                    }
                    wire.writeBytes(try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted]))
                    wire.writeString("\r\n")
                    var bytes = payload
                    wire.writeBuffer(&bytes)
                    if let marker { wire.writeBytes(marker) }
                }
                frames.append(frame)
            }
            totalBytes += wire.readableBytes
            let configuration = CompatFraming.Configuration(endMarker: marker)
            for chunks in Self.cuts(of: wire, random: &random) {
                let collected = DecoderDriver.decode(CompatFrameDecoder(configuration: configuration), chunks: chunks)
                #expect(collected.error == nil, "stream \(streamIndex)")
                #expect(collected.outputs == frames.map { .frame($0) }, "stream \(streamIndex), \(chunks.count) pieces")
                let streamed = DecoderDriver.decode(
                    CompatStreamingDecoder(configuration: configuration),
                    chunks: chunks
                )
                #expect(streamed.error == nil, "stream \(streamIndex)")
                #expect(try reassemble(streamed.outputs) == frames, "stream \(streamIndex), \(chunks.count) pieces")
            }
        }
        print("compatRoundTrips: \(Self.streamsPerFraming) streams, \(totalBytes) bytes")
    }

    @Test("Native: the decoder gives back every frame, byte for byte")
    func nativeRoundTrips() async throws {
        let seed = TestSeed.make(for: "nativeRoundTrips")
        var random = SeededRandom(seed: seed)
        let maker = PayloadMaker(random: &random)
        var configuration = NativeFraming.Configuration()
        configuration.maxFramePayloadBytes = Self.maxPayload
        let encoder = NativeFrameEncoder(configuration: configuration)
        let kinds: [NativeFrame.Kind] = [
            .message, .mediaChunk, .ack, NativeFrame.Kind(rawValue: 0x80), NativeFrame.Kind(rawValue: 0xFF),
        ]
        var totalBytes = 0
        for streamIndex in 0..<Self.streamsPerFraming {
            await Task.yield()
            var wire = ByteBuffer()
            NativeFraming.writePreface(into: &wire)
            var frames: [NativeFrame] = []
            for size in maker.sizes(random: &random) {
                let frame = NativeFrame(
                    kind: kinds.randomElement(using: &random)!,
                    flags: NativeFrame.Flags(rawValue: UInt8.random(in: 0...255, using: &random)),
                    streamID: UInt32.random(in: 1...UInt32.max, using: &random),
                    payload: maker.make(size: size, random: &random)
                )
                try encoder.encode(data: frame, out: &wire)
                frames.append(frame)
            }
            totalBytes += wire.readableBytes
            for chunks in Self.cuts(of: wire, random: &random) {
                let outcome = DecoderDriver.decode(NativeFrameDecoder(configuration: configuration), chunks: chunks)
                #expect(outcome.error == nil, "stream \(streamIndex)")
                #expect(outcome.outputs == frames, "stream \(streamIndex), \(chunks.count) pieces")
            }
        }
        print("nativeRoundTrips: \(Self.streamsPerFraming) streams, \(totalBytes) bytes")
    }
}
