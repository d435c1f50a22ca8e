import CourierTesting
import NIOCore
import NIOTestUtils
import Testing

@testable import CourierWire

func nativeBytes(_ frames: [NativeFrame], preface: Bool = false) -> ByteBuffer {
    var out = ByteBuffer()
    if preface { NativeFraming.writePreface(into: &out) }
    for frame in frames { NativeFraming.write(frame, into: &out) }
    return out
}

let noPreface: NativeFraming.Configuration = {
    var configuration = NativeFraming.Configuration()
    configuration.expectsPreface = false
    return configuration
}()

@Suite("Native framing")
struct NativeDecoderTests {
    static let text = NativeFrame(kind: .message, payload: ByteBuffer(string: "你好"))
    static let chunk = NativeFrame(
        kind: .mediaChunk,
        flags: .endStream,
        streamID: 3,
        payload: ByteBuffer(repeating: 0xAB, count: 300)
    )

    @Test("ByteToMessageDecoderVerifier over frames of every kind")
    func verifier() throws {
        let frames: [NativeFrame] = [
            Self.text,
            Self.chunk,
            NativeFrame(kind: .message, streamID: 5, payload: ByteBuffer()),
            .ping(0x0102_0304_0506_0708), .pong(42),
            .windowUpdate(streamID: 3, increment: 65_536),
            .resetStream(streamID: 3, code: .cancel),
            .goaway(lastStreamID: 7, code: .noError, message: "bye"),
            NativeFrame(kind: NativeFrame.Kind(rawValue: 0x90), streamID: 9, payload: ByteBuffer(string: "extension")),
        ]
        let pairs = frames.map { (nativeBytes([$0]), [$0]) }
        try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: pairs) {
            NativeFrameDecoder(configuration: noPreface)
        }
    }

    @Test("Preface then frames, whole and one byte at a time")
    func prefaceThenFrames() throws {
        let wire = nativeBytes([Self.text, Self.chunk], preface: true)
        for chunks in [[wire], DecoderDriver.bytewise(wire)] {
            let outcome = DecoderDriver.decode(NativeFrameDecoder(), chunks: chunks)
            #expect(outcome.error == nil)
            #expect(outcome.outputs == [Self.text, Self.chunk])
        }
    }

    @Test(
        "A peer speaking something else is refused on its first byte",
        arguments: [
            ("HTTP", Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8)),
            ("HTTP/2 preface", Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)),
            ("compat framing", Array(#"{"type":"txt","size":2}"#.utf8) + [0x0D, 0x0A, 0x68, 0x69]),
            ("TLS ClientHello", [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03]),
            ("empty frame header", [UInt8](repeating: 0, count: 16)),
        ]
    )
    func strangersRefused(_ name: String, _ bytes: [UInt8]) throws {
        let outcome = DecoderDriver.decode(
            NativeFrameDecoder(),
            chunks: [ByteBuffer(bytes: bytes[..<1])],
            finish: false
        )
        #expect((outcome.error as? CourierWireError)?.code == .badPreface, "\(name)")
    }

    @Test("Random bytes are refused within the preface")
    func randomBytesRefused() throws {
        let seed = TestSeed.make(for: "randomBytesRefused")
        var random = SeededRandom(seed: seed)
        for _ in 0..<1000 {
            var bytes: [UInt8] = []
            random.appendBytes(NativeFraming.prefaceLength, to: &bytes)
            let outcome = DecoderDriver.decode(NativeFrameDecoder(), chunks: [ByteBuffer(bytes: bytes)], finish: false)
            let code = (outcome.error as? CourierWireError)?.code
            #expect(code == .badPreface || code == .unsupportedVersion, "bytes \(bytes)")
        }
    }

    @Test("A preface with another version is refused")
    func otherVersion() throws {
        var wire = ByteBuffer(bytes: NativeFraming.magic)
        wire.writeInteger(UInt16(2))
        let outcome = DecoderDriver.decode(NativeFrameDecoder(), chunks: [wire], finish: false)
        #expect((outcome.error as? CourierWireError)?.code == .unsupportedVersion)
    }

    @Test("A frame over the maximum size is refused from its header alone")
    func frameTooLarge() throws {
        var configuration = noPreface
        configuration.maxFramePayloadBytes = 1000
        var header = ByteBuffer()
        header.writeMultipleIntegers(UInt32(1001), NativeFrame.Kind.message.rawValue, UInt8(0), UInt32(0))
        let outcome = DecoderDriver.decode(
            NativeFrameDecoder(configuration: configuration),
            chunks: [header],
            finish: false
        )
        #expect((outcome.error as? CourierWireError)?.code == .frameTooLarge)
        // The default allows exactly 1 MiB.
        let big = NativeFrame(kind: .mediaChunk, streamID: 1, payload: ByteBuffer(repeating: 1, count: 1 << 20))
        #expect(
            DecoderDriver.decode(NativeFrameDecoder(configuration: noPreface), chunks: [nativeBytes([big])]).outputs
                == [big]
        )
        var out = ByteBuffer()
        #expect(throws: CourierWireError.self) {
            try NativeFrameEncoder(configuration: configuration).encode(
                data: NativeFrame(kind: .message, payload: ByteBuffer(repeating: 0, count: 1001)),
                out: &out
            )
        }
    }

    @Test(
        "Control frames with the wrong length or stream are invalid",
        arguments: [
            NativeFrame(kind: .ping, payload: ByteBuffer(repeating: 0, count: 7)),
            NativeFrame(kind: .ping, streamID: 1, payload: ByteBuffer(repeating: 0, count: 8)),
            NativeFrame(kind: .pong, payload: ByteBuffer(repeating: 0, count: 9)),
            NativeFrame(kind: .windowUpdate, payload: ByteBuffer(repeating: 0, count: 8)),
            NativeFrame(kind: .resetStream, streamID: 0, payload: ByteBuffer(repeating: 0, count: 4)),
            NativeFrame(kind: .resetStream, streamID: 1, payload: ByteBuffer(repeating: 0, count: 3)),
            NativeFrame(kind: .goaway, payload: ByteBuffer(repeating: 0, count: 7)),
            NativeFrame(kind: .goaway, streamID: 3, payload: ByteBuffer(repeating: 0, count: 8)),
            NativeFrame(kind: .mediaChunk, streamID: 0, payload: ByteBuffer(repeating: 0, count: 8)),
        ]
    )
    func invalidControlFrames(_ frame: NativeFrame) throws {
        let outcome = DecoderDriver.decode(
            NativeFrameDecoder(configuration: noPreface),
            chunks: [nativeBytes([Self.text, frame, Self.text])]
        )
        #expect(outcome.outputs == [Self.text], "frames before the invalid one are delivered, none after")
        #expect((outcome.error as? CourierWireError)?.code == .invalidFrame)
    }

    @Test("Control frame helpers write what the accessors read")
    func controlFrameAccessors() throws {
        let frames = DecoderDriver.decode(
            NativeFrameDecoder(configuration: noPreface),
            chunks: [
                nativeBytes([
                    .ping(0xDEAD_BEEF), .windowUpdate(streamID: 3, increment: 4096),
                    .resetStream(streamID: 5, code: .flowControlError),
                    .goaway(lastStreamID: 11, code: .frameTooLarge, message: "too big"),
                ])
            ]
        ).outputs
        try #require(frames.count == 4)
        #expect(frames[0].pingData == 0xDEAD_BEEF)
        #expect(frames[1].windowIncrement == 4096 && frames[1].streamID == 3)
        #expect(frames[2].errorCode == .flowControlError && frames[2].streamID == 5)
        #expect(frames[3].errorCode == .frameTooLarge)
        #expect(frames[3].goaway?.lastStreamID == 11 && frames[3].goaway?.message == "too big")
        #expect(frames[0].windowIncrement == nil && frames[1].pingData == nil)
    }

    @Test("Unknown kinds reach the caller, who can tell extensions from critical kinds")
    func unknownKinds() throws {
        let critical = NativeFrame(kind: NativeFrame.Kind(rawValue: 0x42), payload: ByteBuffer(string: "?"))
        let extensionFrame = NativeFrame(kind: NativeFrame.Kind(rawValue: 0xC0), payload: ByteBuffer(string: "!"))
        let outcome = DecoderDriver.decode(
            NativeFrameDecoder(configuration: noPreface),
            chunks: [nativeBytes([critical, extensionFrame])]
        )
        #expect(outcome.outputs == [critical, extensionFrame])
        #expect(!critical.kind.isExtension && extensionFrame.kind.isExtension)
        #expect(NativeFrame.Kind.known.allSatisfy { !$0.isExtension })
    }

    @Test("A stream that ends inside the preface or a frame is truncated")
    func truncated() throws {
        let wire = nativeBytes([Self.chunk], preface: true)
        for length in [3, NativeFraming.prefaceLength + 4, wire.readableBytes - 1] {
            let outcome = DecoderDriver.decode(NativeFrameDecoder(), chunks: [wire.getSlice(at: 0, length: length)!])
            #expect((outcome.error as? CourierWireError)?.code == .truncated, "cut at \(length)")
        }
        #expect(
            DecoderDriver.decode(NativeFrameDecoder(), chunks: [ByteBuffer]()).error == nil,
            "a peer that says nothing is not an error"
        )
    }
}
