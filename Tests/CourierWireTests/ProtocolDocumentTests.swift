import CourierTesting
import Foundation
import NIOCore
import Testing

@testable import CourierWire

/// Decodes the hex examples of `docs/PROTOCOL.md`, so the document cannot drift from the code.
@Suite("docs/PROTOCOL.md examples")
struct ProtocolDocumentTests {
    /// The bytes of the example introduced by `<!-- example: NAME -->`, read from its hex dump.
    static func example(_ name: String) throws -> ByteBuffer {
        let url = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("docs/PROTOCOL.md")
        let document = try String(contentsOf: url, encoding: .utf8)
        let marker = "<!-- example: \(name) -->"
        let start = try #require(document.range(of: marker), "no example \(name) in PROTOCOL.md")
        let fenceOpen = try #require(document.range(of: "```text\n", range: start.upperBound..<document.endIndex))
        let fenceClose = try #require(document.range(of: "```", range: fenceOpen.upperBound..<document.endIndex))
        var bytes = ByteBuffer()
        for line in document[fenceOpen.upperBound..<fenceClose.lowerBound].split(separator: "\n") {
            // "OFFS  hh hh … (16 columns of 3)  ascii": the hex is the 47 characters after the offset.
            let hex = line.dropFirst(6).prefix(47)
            for pair in hex.split(separator: " ") {
                bytes.writeInteger(try #require(UInt8(pair, radix: 16), "bad hex \(pair) in \(name)"))
            }
            let offset = try #require(Int(line.prefix(4), radix: 16))
            #expect(offset + hex.split(separator: " ").count == bytes.readableBytes, "offset column of \(name)")
        }
        return bytes
    }

    @Test("Every error code is in the document's table of codes")
    func errorCodes() throws {
        let url = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("docs/PROTOCOL.md")
        let document = try String(contentsOf: url, encoding: .utf8)
        let listed = Set(
            document.split(separator: "\n").compactMap { line -> String? in
                guard line.hasPrefix("| `") else { return nil }
                return line.dropFirst(3).split(separator: "`").first.map(String.init)
            }
        )
        for code in CourierWireError.Code.all {
            #expect(listed.contains(code.description), "\(code) is missing from PROTOCOL.md")
        }
    }

    @Test("The compat example decodes to a compact and a pretty-printed packet")
    func compat() throws {
        let wire = try Self.example("compat")
        let expected: [CompatMessage] = [
            .frame(CompatFrame(type: "txt", payload: ByteBuffer(string: "你好"))),
            .frame(CompatFrame(type: "txt", payload: ByteBuffer(string: "hi"))),
        ]
        let outcome = DecoderDriver.decode(CompatFrameDecoder(), chunks: [wire])
        #expect(outcome.error == nil)
        #expect(outcome.outputs == expected)
        // The first packet is exactly what Courier's encoder writes.
        var encoded = ByteBuffer()
        try CompatFrameEncoder().encode(
            data: CompatFrame(type: "txt", payload: ByteBuffer(string: "你好")),
            out: &encoded
        )
        #expect(wire.getSlice(at: 0, length: encoded.readableBytes) == encoded)
    }

    @Test("The compat marker example skips the garbage and keeps both packets")
    func compatMarker() throws {
        let wire = try Self.example("compat-marker")
        let outcome = DecoderDriver.decode(
            CompatFrameDecoder(configuration: .init(endMarker: Array("<END>".utf8))),
            chunks: DecoderDriver.bytewise(wire)
        )
        #expect(outcome.error == nil)
        #expect(
            outcome.outputs == [
                .frame(CompatFrame(type: "txt", payload: ByteBuffer(string: "hi"))),
                .skipped(
                    CompatSkip(
                        byteCount: 9,
                        reason: CourierWireError(.headerNotJSON, "the header is not valid UTF-8 JSON")
                    )
                ),
                .frame(CompatFrame(type: "txt", payload: ByteBuffer(string: "yo"))),
            ]
        )
    }

    @Test("The native example decodes to its three frames, and encoding them gives the same bytes")
    func native() throws {
        let wire = try Self.example("native")
        let frames = [
            NativeFrame(kind: .message, streamID: 0, payload: ByteBuffer(string: "你好")),
            NativeFrame.ping(0x0102_0304_0506_0708),
            NativeFrame(kind: .mediaChunk, flags: .endStream, streamID: 3, payload: ByteBuffer(string: "abc")),
        ]
        let outcome = DecoderDriver.decode(NativeFrameDecoder(), chunks: [wire])
        #expect(outcome.error == nil)
        #expect(outcome.outputs == frames)
        #expect(nativeBytes(frames, preface: true) == wire)
    }
}
