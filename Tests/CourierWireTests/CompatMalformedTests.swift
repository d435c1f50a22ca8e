import CourierTesting
import NIOCore
import Testing

@testable import CourierWire

/// A malformed packet and the code it must give.
struct MalformedCase: CustomTestStringConvertible, Sendable {
    var name: String
    var bytes: [UInt8]
    var code: CourierWireError.Code
    var testDescription: String { self.name }

    init(_ name: String, _ text: String, _ code: CourierWireError.Code) {
        self.name = name
        self.bytes = Array(text.utf8)
        self.code = code
    }

    init(_ name: String, bytes: [UInt8], _ code: CourierWireError.Code) {
        self.name = name
        self.bytes = bytes
        self.code = code
    }

    /// Every case, each a packet that a decoder must refuse.
    static let all: [MalformedCase] = [
        MalformedCase("header not JSON", "hello\r\n", .headerNotJSON),
        MalformedCase("header not UTF-8", bytes: [0x7B, 0x22, 0xFF, 0xFE, 0x22, 0x7D, 0x0D, 0x0A], .headerNotJSON),
        MalformedCase("empty header", "\r\n", .headerNotJSON),
        MalformedCase("header is an array", "[1,2]\r\n", .headerNotObject),
        MalformedCase("header is a string", "\"txt\"\r\n", .headerNotObject),
        MalformedCase("type missing", #"{"size":1}"# + "\r\nx", .typeMissing),
        MalformedCase("type not a string", #"{"type":5,"size":1}"# + "\r\nx", .typeMissing),
        MalformedCase("size missing", #"{"type":"txt"}"# + "\r\n", .sizeMissing),
        MalformedCase("size negative", #"{"type":"txt","size":-1}"# + "\r\n", .sizeInvalid),
        MalformedCase("size fractional", #"{"type":"txt","size":1.5}"# + "\r\nx", .sizeInvalid),
        MalformedCase("size boolean", #"{"type":"txt","size":true}"# + "\r\nx", .sizeInvalid),
        MalformedCase("size string with a letter", #"{"type":"txt","size":"12a"}"# + "\r\n", .sizeInvalid),
        MalformedCase("size empty string", #"{"type":"txt","size":""}"# + "\r\n", .sizeInvalid),
        MalformedCase("size string with a sign", #"{"type":"txt","size":"+1"}"# + "\r\nx", .sizeInvalid),
        MalformedCase("size over 64 bits", #"{"type":"txt","size":100000000000000000000}"# + "\r\n", .sizeInvalid),
        MalformedCase(
            "size string over 64 bits",
            #"{"type":"txt","size":"99999999999999999999"}"# + "\r\n",
            .sizeInvalid
        ),
        MalformedCase("size 2^62", #"{"type":"img","size":4611686018427387904}"# + "\r\n", .sizeOverLimit),
        MalformedCase("size just over 2 GiB", #"{"type":"img","size":2147483649}"# + "\r\n", .sizeOverLimit),
        MalformedCase(
            "header over 16 KiB",
            #"{"type":""# + String(repeating: "a", count: 16 * 1024) + "\"}\r\n",
            .headerTooLong
        ),
    ]
}

@Suite("Compat framing: malformed input")
struct CompatMalformedTests {
    static let good1 = CompatFrame(type: "txt", payload: ByteBuffer(string: "before"))
    static let good2 = CompatFrame(type: "txt", payload: ByteBuffer(string: "after"))

    @Test(
        "Without an end marker, corruption is fatal with its code, and earlier packets are still delivered",
        arguments: MalformedCase.all
    )
    func fatalWithoutMarker(_ malformed: MalformedCase) throws {
        var wire = try compatBytes([Self.good1])
        wire.writeBytes(malformed.bytes)
        var after = try compatBytes([Self.good2])
        wire.writeBuffer(&after)
        for cut in [[wire], DecoderDriver.bytewise(wire)] {
            let collected = DecoderDriver.decode(CompatFrameDecoder(), chunks: cut)
            #expect(collected.outputs == [.frame(Self.good1)])
            #expect((collected.error as? CourierWireError)?.code == malformed.code)
            let streamed = DecoderDriver.decode(CompatStreamingDecoder(), chunks: cut)
            #expect(try reassemble(streamed.outputs) == [Self.good1])
            #expect((streamed.error as? CourierWireError)?.code == malformed.code)
        }
    }

    @Test(
        "With an end marker, a corrupt packet is skipped to the next marker and decoding resumes",
        arguments: MalformedCase.all
    )
    func resyncWithMarker(_ malformed: MalformedCase) throws {
        let marker = testMarker
        var wire = try compatBytes([Self.good1], marker: marker)
        wire.writeBytes(malformed.bytes)
        wire.writeBytes(marker)
        var after = try compatBytes([Self.good2], marker: marker)
        wire.writeBuffer(&after)
        let skipped = malformed.bytes.count + marker.count
        for cut in [[wire], DecoderDriver.bytewise(wire)] {
            // Both decoders under the same payload limit, so their skips must agree to the letter.
            var configuration = CompatFraming.Configuration(endMarker: marker)
            configuration.maxCollectedPayloadBytes = configuration.maxPayloadBytes
            let collected = DecoderDriver.decode(CompatFrameDecoder(configuration: configuration), chunks: cut)
            #expect(collected.error == nil)
            try #require(collected.outputs.count == 3)
            #expect(collected.outputs.first == .frame(Self.good1))
            #expect(collected.outputs.last == .frame(Self.good2))
            guard case .skipped(let skip) = collected.outputs[1] else {
                Issue.record("expected a skip, got \(collected.outputs[1])")
                continue
            }
            #expect(skip.byteCount == skipped)
            #expect(skip.reason.code == malformed.code)
            let streamed = DecoderDriver.decode(CompatStreamingDecoder(configuration: configuration), chunks: cut)
            #expect(streamed.error == nil)
            #expect(try reassemble(streamed.outputs) == [Self.good1, Self.good2])
            #expect(streamed.outputs.filter { if case .skipped = $0 { true } else { false } } == [.skipped(skip)])
        }
    }

    @Test("With an end marker, a packet whose marker is missing after the payload is skipped; neighbours survive")
    func missingMarkerAfterPayload() throws {
        let marker = testMarker
        var wire = try compatBytes([Self.good1], marker: marker)
        // Declares 3 bytes but carries 5 before the marker: the marker is not where it must be.
        let bad = #"{"type":"txt","size":3}"# + "\r\nabcde"
        wire.writeString(bad)
        wire.writeBytes(marker)
        var after = try compatBytes([Self.good2], marker: marker)
        wire.writeBuffer(&after)
        let collected = DecoderDriver.decode(
            CompatFrameDecoder(configuration: .init(endMarker: marker)),
            chunks: [wire]
        )
        #expect(
            collected.outputs == [
                .frame(Self.good1),
                .skipped(
                    CompatSkip(
                        byteCount: bad.utf8.count + marker.count,
                        reason: CourierWireError(.endMarkerMissing, "the end marker does not follow the payload")
                    )
                ),
                .frame(Self.good2),
            ]
        )
        // The streaming decoder has already handed out the head: the skip abandons that packet.
        let streamed = DecoderDriver.decode(
            CompatStreamingDecoder(configuration: .init(endMarker: marker)),
            chunks: DecoderDriver.bytewise(wire)
        )
        #expect(streamed.error == nil)
        #expect(try reassemble(streamed.outputs) == [Self.good1, Self.good2])
        #expect(
            streamed.outputs.contains {
                if case .skipped(let s) = $0 { s.reason.code == .endMarkerMissing } else { false }
            }
        )
    }

    @Test("Garbage between packets is skipped with the marker; a stream that ends inside a packet reports a skip")
    func garbageAndEOFWhileSkipping() throws {
        let marker = testMarker
        var wire = ByteBuffer(string: "\u{0}\u{0}garbage")
        wire.writeBytes(marker)
        var good = try compatBytes([Self.good1], marker: marker)
        wire.writeBuffer(&good)
        wire.writeString("trailing junk without a marker")
        let outcome = DecoderDriver.decode(
            CompatFrameDecoder(configuration: .init(endMarker: marker)),
            chunks: DecoderDriver.bytewise(wire)
        )
        #expect(outcome.error == nil)
        try #require(outcome.outputs.count == 3)
        #expect(skipReason(outcome.outputs[0])?.code == .headerNotJSON)
        #expect(outcome.outputs[1] == .frame(Self.good1))
        if case .skipped(let skip) = outcome.outputs.last {
            #expect(skip.byteCount == "trailing junk without a marker".utf8.count)
            #expect(skip.reason.code == .truncated)
        } else {
            Issue.record("expected the trailing junk to be reported as skipped")
        }
    }

    @Test(
        "A stream that ends inside a packet is truncated",
        arguments: [
            #"{"type":"txt","size":5}"# + "\r\nab",
            #"{"type":"txt","si"#,
            #"{"type":"txt","size":0}"#,
        ]
    )
    func truncated(_ text: String) throws {
        let collected = DecoderDriver.decode(CompatFrameDecoder(), chunks: [ByteBuffer(string: text)])
        #expect((collected.error as? CourierWireError)?.code == .truncated)
        let streamed = DecoderDriver.decode(CompatStreamingDecoder(), chunks: [ByteBuffer(string: text)])
        #expect((streamed.error as? CourierWireError)?.code == .truncated)
    }
}

func skipReason(_ message: CompatMessage) -> CourierWireError? {
    if case .skipped(let skip) = message { return skip.reason }
    return nil
}

@Suite("Compat framing: resynchronisation and limits")
struct CompatResyncTests {
    static let good = CompatFrame(type: "txt", payload: ByteBuffer(string: "ok"))

    @Test("A corrupt header full of markers costs two skips, not one per marker")
    func headerFullOfMarkers() throws {
        let marker = testMarker
        var wire = ByteBuffer(string: #"{"a":""#)
        for _ in 0..<1000 {
            wire.writeString("x")
            wire.writeBytes(marker)
        }
        wire.writeString("\"\r\n")
        wire.writeBytes(marker)
        let corruptBytes = wire.readableBytes
        var good = try compatBytes([Self.good], marker: marker)
        wire.writeBuffer(&good)
        let outcome = DecoderDriver.decode(CompatFrameDecoder(configuration: .init(endMarker: marker)), chunks: [wire])
        #expect(outcome.error == nil)
        try #require(outcome.outputs.count == 3, "\(outcome.outputs.count) outputs")
        // The first resync tries what follows the first marker; the second skips the rest of that header.
        let skips = outcome.outputs.compactMap { message -> CompatSkip? in
            if case .skipped(let skip) = message { return skip }
            return nil
        }
        #expect(skips.map(\.byteCount) == [6 + 1 + marker.count, corruptBytes - (6 + 1 + marker.count)])
        #expect(skips.allSatisfy { $0.reason.code == .headerNotJSON })
        #expect(outcome.outputs.last == .frame(Self.good))
    }

    @Test("A resync lands on a good header that lost its packet's start (one retry inside a corrupt header)")
    func retryInsideHeader() throws {
        let marker = testMarker
        // The end of a packet whose start was lost, its marker, then a good packet: all before one CRLF.
        var wire = ByteBuffer(string: "tail of a lost payload")
        wire.writeBytes(marker)
        var good = try compatBytes([Self.good], marker: marker)
        wire.writeBuffer(&good)
        let outcome = DecoderDriver.decode(
            CompatFrameDecoder(configuration: .init(endMarker: marker)),
            chunks: DecoderDriver.bytewise(wire)
        )
        #expect(outcome.error == nil)
        #expect(outcome.outputs.count == 2)
        #expect(skipReason(outcome.outputs[0])?.code == .headerNotJSON)
        #expect(outcome.outputs.last == .frame(Self.good))
    }

    @Test("A size declared too large swallows the next packet up to its marker (documented)")
    func sizeTooLargeSwallowsNext() throws {
        let marker = testMarker
        var wire = ByteBuffer(string: #"{"type":"txt","size":10}"# + "\r\nabc")
        wire.writeBytes(marker)
        var next = try compatBytes([Self.good, Self.good], marker: marker)
        wire.writeBuffer(&next)
        let outcome = DecoderDriver.decode(CompatFrameDecoder(configuration: .init(endMarker: marker)), chunks: [wire])
        #expect(outcome.error == nil)
        try #require(outcome.outputs.count == 2)
        #expect(skipReason(outcome.outputs[0])?.code == .endMarkerMissing)
        #expect(outcome.outputs[1] == .frame(Self.good), "the packet after the swallowed one decodes")
    }

    @Test("With a marker, a stream ending inside a payload reports the packet's bytes as skipped")
    func eofInsidePayloadWithMarker() throws {
        let marker = testMarker
        let head = #"{"type":"txt","size":100}"# + "\r\n"
        let wire = ByteBuffer(string: head + String(repeating: "p", count: 40))
        for decoderOutputs in [
            DecoderDriver.decode(CompatFrameDecoder(configuration: .init(endMarker: marker)), chunks: [wire]).outputs
                .map { skipReasonAndCount($0) },
            DecoderDriver.decode(CompatStreamingDecoder(configuration: .init(endMarker: marker)), chunks: [wire])
                .outputs.compactMap { part -> (CourierWireError.Code, Int)? in
                    if case .skipped(let skip) = part { return (skip.reason.code, skip.byteCount) }
                    return nil
                },
        ] {
            #expect(decoderOutputs.count == 1)
            #expect(decoderOutputs.first?.0 == .truncated)
            #expect(decoderOutputs.first?.1 == head.utf8.count + 40)
        }
    }

    @Test("The streaming decoder enforces the header limit too, and resyncs past it with a marker")
    func streamingHeaderLimit() throws {
        var configuration = CompatFraming.Configuration(endMarker: testMarker)
        configuration.maxHeaderBytes = 32
        var wire = ByteBuffer(string: String(repeating: "h", count: 40))
        wire.writeBytes(testMarker)
        var good = try compatBytes([Self.good], marker: testMarker)
        wire.writeBuffer(&good)
        let outcome = DecoderDriver.decode(
            CompatStreamingDecoder(configuration: configuration),
            chunks: DecoderDriver.bytewise(wire)
        )
        #expect(outcome.error == nil)
        #expect(try reassemble(outcome.outputs) == [Self.good])
        #expect(
            outcome.outputs.first
                == .skipped(
                    CompatSkip(
                        byteCount: 40 + testMarker.count,
                        reason: CourierWireError(.headerTooLong, "no CRLF within 32 header bytes")
                    )
                )
        )
        configuration.endMarker = nil
        let fatal = DecoderDriver.decode(CompatStreamingDecoder(configuration: configuration), chunks: [wire])
        #expect((fatal.error as? CourierWireError)?.code == .headerTooLong)
    }

    @Test("A size equal to the payload limit is accepted; one more is refused")
    func payloadLimitBoundary() throws {
        var configuration = CompatFraming.Configuration()
        configuration.maxPayloadBytes = 100
        for (size, accepted) in [(100, true), (101, false)] {
            let wire = try compatBytes([CompatFrame(type: "f", payload: ByteBuffer(repeating: 1, count: size))])
            let streamed = DecoderDriver.decode(CompatStreamingDecoder(configuration: configuration), chunks: [wire])
            let collected = DecoderDriver.decode(CompatFrameDecoder(configuration: configuration), chunks: [wire])
            for error in [streamed.error, collected.error] {
                #expect((error as? CourierWireError)?.code == (accepted ? nil : .sizeOverLimit), "size \(size)")
            }
        }
    }

    @Test("decodeLast without EOF (the decoder being removed) leaves a partial packet in the buffer")
    func removalLeavesBytes() throws {
        var buffer = ByteBuffer(string: #"{"type":"txt","size":5}"# + "\r\nab")
        var decoder = CompatFrameDecoder()
        #expect(try decoder.decodeLast(buffer: &buffer, seenEOF: false) == nil)
        #expect(buffer.readableBytes == 27)
        var native = NativeFrameDecoder()
        var bytes = ByteBuffer(bytes: NativeFraming.magic)
        #expect(try native.decodeLast(buffer: &bytes, seenEOF: false) == nil)
        #expect(bytes.readableBytes == NativeFraming.magic.count)
    }

    @Test("The encoder refuses a header whose size is not the payload's length")
    func encoderChecksSize() throws {
        var frame = CompatFrame(type: "txt", payload: ByteBuffer(string: "abc"))
        frame.header.size = 4
        var out = ByteBuffer()
        #expect(throws: CourierWireError.self) { try CompatFrameEncoder().encode(data: frame, out: &out) }
        #expect(out.readableBytes == 0, "nothing is written")
    }
}

func skipReasonAndCount(_ message: CompatMessage) -> (CourierWireError.Code, Int) {
    if case .skipped(let skip) = message { return (skip.reason.code, skip.byteCount) }
    return (.truncated, -1)
}
