import CourierTesting
import Foundation
import NIOCore
import NIOTestUtils
import Testing

@testable import CourierWire

/// The end marker used by the marker tests: short, and not made of JSON or CRLF bytes.
let testMarker: [UInt8] = Array("\u{1}END\u{2}".utf8)

func buffer(_ string: String) -> ByteBuffer { ByteBuffer(string: string) }

func compatBytes(_ frames: [CompatFrame], marker: [UInt8]? = nil) throws -> ByteBuffer {
    var out = ByteBuffer()
    for frame in frames {
        try CompatFraming.write(frame, configuration: .init(endMarker: marker), into: &out)
    }
    return out
}

/// A header as the source notes' client writes it: pretty-printed by Foundation, `size` as a string.
func prettyHeader(type: String, size: Int) throws -> ByteBuffer {
    let json = try JSONSerialization.data(
        withJSONObject: ["type": type, "size": String(size)],
        options: [.prettyPrinted]
    )
    var out = ByteBuffer(bytes: json)
    out.writeString("\r\n")
    return out
}

@Suite("Compat framing")
struct CompatDecoderTests {
    @Test("ByteToMessageDecoderVerifier: collecting decoder, compact and pretty headers, no marker")
    func verifierWithoutMarker() throws {
        var pretty = try prettyHeader(type: "txt", size: 4)
        pretty.writeString("a\r\nb")
        let extra = CompatFrame(
            type: "img",
            payload: buffer("\r\n\r\n"),
            fields: ["mime": .string("image/png"), "n": .array([.integer(1), .null, .bool(true)])]
        )
        let pairs: [(ByteBuffer, [CompatMessage])] = [
            (
                try compatBytes([CompatFrame(type: "txt", payload: buffer("hello"))]),
                [.frame(CompatFrame(type: "txt", payload: buffer("hello")))]
            ),
            (
                try compatBytes([CompatFrame(type: "txt", payload: ByteBuffer())]),
                [.frame(CompatFrame(type: "txt", payload: ByteBuffer()))]
            ),
            (pretty, [.frame(CompatFrame(type: "txt", payload: buffer("a\r\nb")))]),
            (try compatBytes([extra]), [.frame(extra)]),
            (
                buffer("{\"type\":\"txt\",\"size\":\"3\"}\r\nabc{\"size\":0,\"type\":\"x\"}\r\n"),
                [
                    .frame(CompatFrame(type: "txt", payload: buffer("abc"))),
                    .frame(CompatFrame(type: "x", payload: ByteBuffer())),
                ]
            ),
        ]
        try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: pairs) { CompatFrameDecoder() }
    }

    @Test("ByteToMessageDecoderVerifier: collecting decoder with an end marker skips corrupt packets")
    func verifierWithMarker() throws {
        let marker = testMarker
        var corrupt = buffer("not json\r\nzz")
        corrupt.writeBytes(marker)
        let good = CompatFrame(type: "txt", payload: buffer("ok"))
        let pairs: [(ByteBuffer, [CompatMessage])] = [
            (try compatBytes([good], marker: marker), [.frame(good)]),
            (
                corrupt,
                [
                    .skipped(
                        CompatSkip(
                            byteCount: 12 + marker.count,
                            reason: CourierWireError(.headerNotJSON, "the header is not valid UTF-8 JSON")
                        )
                    )
                ]
            ),
        ]
        try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: pairs) {
            CompatFrameDecoder(configuration: .init(endMarker: marker))
        }
    }

    @Test("The notes' demo: five texts and a ~20 MB image, pretty headers, sizes as strings, one write and dribbles")
    func notesDemo() throws {
        let seed = TestSeed.make(for: "notesDemo")
        var random = SeededRandom(seed: seed)
        let texts = ["你好", "猪头", "先生", "今天天气好", "吃饭了吗"]
        var image: [UInt8] = []
        random.appendBytes(20 * 1024 * 1024 + 12345, to: &image)
        var wire = ByteBuffer()
        var expected: [CompatFrame] = []
        for text in texts {
            var header = try prettyHeader(type: "txt", size: text.utf8.count)
            wire.writeBuffer(&header)
            wire.writeString(text)
            expected.append(CompatFrame(type: "txt", payload: buffer(text)))
        }
        var header = try prettyHeader(type: "img", size: image.count)
        wire.writeBuffer(&header)
        wire.writeBytes(image)
        expected.append(CompatFrame(type: "img", payload: ByteBuffer(bytes: image)))

        for chunks in [[wire], DecoderDriver.randomCuts(of: wire, using: &random)] {
            let collected = DecoderDriver.decode(CompatFrameDecoder(), chunks: chunks)
            #expect(collected.error == nil)
            #expect(collected.outputs == expected.map { .frame($0) })

            let streamed = DecoderDriver.decode(CompatStreamingDecoder(), chunks: chunks)
            #expect(streamed.error == nil)
            #expect(try reassemble(streamed.outputs) == expected)
        }
    }

    @Test("Headers keep every key; size may be an integer or a string of digits")
    func headerFields() throws {
        let wire = buffer(
            #"{"type":"img","size":"0003","mime":"image/png","w":640,"r":1.5,"ok":true,"x":null}"# + "\r\nabc"
        )
        let outcome = DecoderDriver.decode(CompatFrameDecoder(), chunks: [wire])
        #expect(outcome.error == nil)
        guard case .frame(let frame) = outcome.outputs.first else {
            Issue.record("no frame: \(outcome)")
            return
        }
        #expect(frame.header.type == "img")
        #expect(frame.header.size == 3)
        #expect(
            frame.header.fields == [
                "mime": .string("image/png"), "w": .integer(640), "r": .double(1.5), "ok": .bool(true), "x": .null,
            ]
        )
    }

    @Test("Found by fuzzing: an integral double in a header field survives encoding and decoding again")
    func integralDoubleField() throws {
        let wire = buffer(#"{"type":"img","size":"0003","w":6.0,"big":1e300,"neg":-0.0}"# + "\r\nabc")
        let first = DecoderDriver.decode(CompatFrameDecoder(), chunks: [wire])
        guard case .frame(let frame) = first.outputs.first else {
            Issue.record("no frame: \(first)")
            return
        }
        #expect(frame.header.fields == ["w": .integer(6), "big": .double(1e300), "neg": .integer(0)])
        let again = DecoderDriver.decode(CompatFrameDecoder(), chunks: [try compatBytes([frame])])
        #expect(again.outputs == [.frame(frame)])
    }

    @Test("Found by fuzzing: a long decimal in a header field reads as the correctly rounded double, stably")
    func longDecimalField() throws {
        let digits = "122222222222222222222222222222222222222222.5"
        let wire = buffer(#"{"type":"img","size":3,"r":"# + digits + #","s":1.2222222222222222e+41}"# + "\r\nabc")
        let first = DecoderDriver.decode(CompatFrameDecoder(), chunks: [wire])
        guard case .frame(let frame) = first.outputs.first else {
            Issue.record("no frame: \(first)")
            return
        }
        #expect(frame.header.fields["s"] == .double(1.2222222222222222e+41))
        #expect(frame.header.fields["r"] == .double(1.2222222222222222e+41))
        let again = DecoderDriver.decode(CompatFrameDecoder(), chunks: [try compatBytes([frame])])
        #expect(again.outputs == [.frame(frame)])
    }

    @Test("The encoder writes compact JSON with no CR or LF before the header's CRLF, and decodes back")
    func encoderRoundTrip() throws {
        let frame = CompatFrame(type: "t\r\n\"x", payload: buffer("p"), fields: ["name": .string("a\nb/c")])
        var wire = ByteBuffer()
        try CompatFrameEncoder().encode(data: frame, out: &wire)
        let text = String(buffer: wire)
        #expect(text == #"{"name":"a\nb/c","size":1,"type":"t\r\n\"x"}"# + "\r\np")
        #expect(DecoderDriver.decode(CompatFrameDecoder(), chunks: [wire]).outputs == [.frame(frame)])
    }

    @Test("Streaming: a payload is handed out in pieces as it arrives; a zero-size packet is its head alone")
    func streamingParts() throws {
        let payload = ByteBuffer(repeating: 0x0D, count: 100_000)
        let wire = try compatBytes([
            CompatFrame(type: "big", payload: payload),
            CompatFrame(type: "empty", payload: ByteBuffer()),
        ])
        let chunks = stride(from: 0, to: wire.readableBytes, by: 30_000).map {
            wire.getSlice(at: $0, length: min(30_000, wire.readableBytes - $0))!
        }
        let parts = DecoderDriver.decode(CompatStreamingDecoder(), chunks: chunks)
        #expect(parts.error == nil)
        let bodies = parts.outputs.compactMap { part -> (Int, Bool)? in
            if case .body(let bytes, let isLast) = part { return (bytes.readableBytes, isLast) }
            return nil
        }
        #expect(bodies.count == 4, "four reads carry the payload, so it comes in four pieces")
        #expect(bodies.map(\.0).reduce(0, +) == 100_000)
        #expect(bodies.map(\.1) == [false, false, false, true])
        #expect(parts.outputs.last == .head(CompatHeader(type: "empty", size: 0)))
    }

    @Test("Streaming takes a payload over the collecting cap; collecting refuses it")
    func collectingCap() throws {
        var configuration = CompatFraming.Configuration()
        configuration.maxCollectedPayloadBytes = 1000
        let wire = try compatBytes([CompatFrame(type: "f", payload: ByteBuffer(repeating: 7, count: 1001))])
        let streamed = DecoderDriver.decode(CompatStreamingDecoder(configuration: configuration), chunks: [wire])
        #expect(streamed.error == nil)
        #expect(try reassemble(streamed.outputs).first?.payload.readableBytes == 1001)
        let collected = DecoderDriver.decode(CompatFrameDecoder(configuration: configuration), chunks: [wire])
        #expect((collected.error as? CourierWireError)?.code == .sizeOverLimit)
    }

    @Test("A size of 2^62 is refused from the header alone, before any payload arrives")
    func hugeSizeRefusedFromHeader() throws {
        for header in [#"{"type":"img","size":4611686018427387904}"#, #"{"type":"img","size":"4611686018427387904"}"#] {
            let collected = DecoderDriver.decode(CompatFrameDecoder(), chunks: [buffer(header + "\r\n")], finish: false)
            #expect((collected.error as? CourierWireError)?.code == .sizeOverLimit)
            let outcome = DecoderDriver.decode(
                CompatStreamingDecoder(),
                chunks: [buffer(header + "\r\n")],
                finish: false
            )
            #expect((outcome.error as? CourierWireError)?.code == .sizeOverLimit)
        }
    }

    @Test("A header of exactly maxHeaderBytes is accepted; one byte more is refused")
    func headerLimit() throws {
        var configuration = CompatFraming.Configuration()
        configuration.maxHeaderBytes = 64
        let base = #"{"type":"t","size":0,"pad":""}"#
        let exact = base.replacingOccurrences(
            of: #""pad":"""#,
            with: #""pad":"\#(String(repeating: "x", count: 64 - base.utf8.count))""#
        )
        #expect(exact.utf8.count == 64)
        let ok = DecoderDriver.decode(
            CompatFrameDecoder(configuration: configuration),
            chunks: DecoderDriver.bytewise(buffer(exact + "\r\n"))
        )
        #expect(ok.error == nil)
        #expect(ok.outputs.count == 1)
        let long = exact.replacingOccurrences(of: "\"pad\":\"", with: "\"pad\":\"y")
        let refused = DecoderDriver.decode(
            CompatFrameDecoder(configuration: configuration),
            chunks: DecoderDriver.bytewise(buffer(long + "\r\n")),
            finish: false
        )
        #expect((refused.error as? CourierWireError)?.code == .headerTooLong)
    }
}

/// Joins streamed parts back into whole packets, checking that they are well formed.
func reassemble(_ parts: [CompatFramePart]) throws -> [CompatFrame] {
    var frames: [CompatFrame] = []
    var current: (CompatHeader, ByteBuffer)?
    for part in parts {
        switch part {
        case .head(let header):
            try #require(current == nil, "a head arrived inside a packet")
            if header.size == 0 {
                frames.append(CompatFrame(header: header, payload: ByteBuffer()))
            } else {
                current = (header, ByteBuffer())
            }
        case .body(var bytes, let isLast):
            try #require(current != nil, "a body arrived outside a packet")
            current!.1.writeBuffer(&bytes)
            try #require(isLast == (current!.1.readableBytes == current!.0.size), "isLast must mark the last piece")
            if isLast {
                frames.append(CompatFrame(header: current!.0, payload: current!.1))
                current = nil
            }
        case .skipped:
            current = nil
        }
    }
    try #require(current == nil, "the stream ended inside a packet")
    return frames
}
