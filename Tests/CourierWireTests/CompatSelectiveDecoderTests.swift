import CourierTesting
import NIOCore
import Testing

@testable import CourierWire

@Suite("Compat framing: the selective decoder (small packets whole, media in parts)")
struct CompatSelectiveDecoderTests {
    /// Joins a decoder's outputs back into packets: collected ones as they are, streamed ones from their parts.
    static func packets(_ inputs: [CompatInput]) -> [CompatFrame] {
        var packets: [CompatFrame] = []
        var open: (CompatHeader, ByteBuffer)?
        for input in inputs {
            switch input {
            case .packet(let frame):
                packets.append(frame)
            case .head(let header):
                if header.size == 0 {
                    packets.append(CompatFrame(header: header, payload: ByteBuffer()))
                } else {
                    open = (header, ByteBuffer())
                }
            case .body(var bytes, let isLast):
                open!.1.writeBuffer(&bytes)
                if isLast {
                    packets.append(CompatFrame(header: open!.0, payload: open!.1))
                    open = nil
                }
            case .skipped:
                open = nil
            }
        }
        return packets
    }

    @Test("texts come whole and media in parts, cut at every point of a burst, with and without an end marker")
    func burstAtEveryCut() throws {
        let seed = TestSeed.make(for: "selective burst")
        var random = SeededRandom(seed: seed)
        var image: [UInt8] = []
        random.appendBytes(3000, to: &image)
        let frames = [
            CompatFrame(type: "txt", payload: ByteBuffer(string: "你好"), fields: ["to": "bob"]),
            CompatFrame(type: "img", payload: ByteBuffer(bytes: image), fields: ["mime": "image/png"]),
            CompatFrame(type: "txt", payload: ByteBuffer(string: "after"), fields: ["to": "bob"]),
            CompatFrame(type: "voice", payload: ByteBuffer(bytes: [1, 2, 3])),
            CompatFrame(type: "ping", payload: ByteBuffer()),
        ]
        for marker in [nil, testMarker] {
            let wire = try compatBytes(frames, marker: marker)
            for cut in stride(from: 1, to: wire.readableBytes, by: 97) {
                let outcome = DecoderDriver.decode(
                    CompatSelectiveDecoder(streamedTypes: ["img", "voice"], configuration: .init(endMarker: marker)),
                    chunks: [
                        wire.getSlice(at: 0, length: cut)!, wire.getSlice(at: cut, length: wire.readableBytes - cut)!,
                    ]
                )
                #expect(outcome.error == nil, "cut \(cut)")
                #expect(Self.packets(outcome.outputs) == frames, "cut \(cut), seed \(seed)")
                // The texts never come in parts; the media never whole.
                for input in outcome.outputs {
                    if case .packet(let frame) = input { #expect(!["img", "voice"].contains(frame.header.type)) }
                    if case .head(let header) = input { #expect(["img", "voice"].contains(header.type)) }
                }
            }
            let bytewise = DecoderDriver.decode(
                CompatSelectiveDecoder(streamedTypes: ["img", "voice"], configuration: .init(endMarker: marker)),
                chunks: DecoderDriver.bytewise(wire)
            )
            #expect(Self.packets(bytewise.outputs) == frames)
        }
    }

    @Test("a streamed packet may be as large as maxPayloadBytes; a collected one only maxCollectedPayloadBytes")
    func limitsPerKind() throws {
        var configuration = CompatFraming.Configuration()
        configuration.maxCollectedPayloadBytes = 10
        configuration.maxPayloadBytes = 1000
        let media = DecoderDriver.decode(
            CompatSelectiveDecoder(streamedTypes: ["file"], configuration: configuration),
            chunks: [ByteBuffer(string: #"{"type":"file","size":900}"# + "\r\n")],
            finish: false
        )
        #expect(media.error == nil)
        #expect(media.outputs.count == 1)
        let text = DecoderDriver.decode(
            CompatSelectiveDecoder(streamedTypes: ["file"], configuration: configuration),
            chunks: [ByteBuffer(string: #"{"type":"txt","size":11}"# + "\r\n")]
        )
        #expect((text.error as? CourierWireError)?.code == .sizeOverLimit)
        let huge = DecoderDriver.decode(
            CompatSelectiveDecoder(streamedTypes: ["file"], configuration: configuration),
            chunks: [ByteBuffer(string: #"{"type":"file","size":1001}"# + "\r\n")]
        )
        #expect((huge.error as? CourierWireError)?.code == .sizeOverLimit)
    }

    @Test("streamed parts are written back byte for byte by the output encoder")
    func encoderRoundTrip() throws {
        let encoder = CompatOutputEncoder(configuration: .init(endMarker: testMarker))
        var out = ByteBuffer()
        let header = CompatHeader(type: "img", size: 6, fields: ["sha256": "x"])
        try encoder.encode(data: .head(header), out: &out)
        try encoder.encode(data: .body(ByteBuffer(string: "abc")), out: &out)
        try encoder.encode(data: .body(ByteBuffer(string: "def")), out: &out)
        try encoder.encode(data: .end, out: &out)
        try encoder.encode(data: .packet(CompatFrame(type: "txt", payload: ByteBuffer(string: "hi"))), out: &out)
        let expected = try compatBytes(
            [
                CompatFrame(type: "img", payload: ByteBuffer(string: "abcdef"), fields: ["sha256": "x"]),
                CompatFrame(type: "txt", payload: ByteBuffer(string: "hi")),
            ],
            marker: testMarker
        )
        #expect(out == expected)
    }
}
