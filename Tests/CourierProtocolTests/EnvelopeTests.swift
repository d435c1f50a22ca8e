import CourierProtocol
import CourierWire
import NIOCore
import SwiftProtobuf
import Testing

@Suite("Envelopes in native frames")
struct EnvelopeTests {
    @Test("a client envelope survives a message frame's encoding")
    func roundTrip() throws {
        var envelope = ClientEnvelope()
        envelope.requestID = 42
        envelope.send.id = "m-1"
        envelope.send.to.group = "team"
        envelope.send.body.text = "你好, team"
        let frame = try NativeFrame(envelope: envelope)
        #expect(frame.kind == .message && frame.streamID == 0)
        let decoded = try frame.envelope(as: ClientEnvelope.self)
        #expect(decoded == envelope)
        guard case .send(let send)? = decoded.body, case .group("team")? = send.to.peer,
            case .text("你好, team")? = send.body.content
        else {
            Issue.record("decoded \(decoded)")
            return
        }
    }

    @Test("bytes that are not an envelope, and frames that carry none, are envelope-invalid")
    func invalidPayloads() throws {
        // Field 2 (hello) declared as a 200-byte message with 1 byte present.
        let truncated = NativeFrame(kind: .message, payload: ByteBuffer(bytes: [0x12, 0xC8, 0x01, 0x00]))
        #expect { _ = try truncated.envelope(as: ClientEnvelope.self) } throws: {
            ($0 as? CourierProtocolError)?.code == .envelopeInvalid
        }
        #expect { _ = try NativeFrame.ping(7).envelope(as: ClientEnvelope.self) } throws: {
            ($0 as? CourierProtocolError)?.code == .envelopeInvalid
        }
    }

    @Test("fields a receiver does not know are skipped, so newer peers can add them")
    func unknownFieldsAreIgnored() throws {
        var envelope = ServerEnvelope()
        envelope.requestID = 9
        envelope.sendAck.seq = 17
        var bytes: [UInt8] = try envelope.serializedBytes()
        // Field 900, varint 5: a field from a future version.
        bytes += [0xA0, 0x38, 0x05]
        let frame = NativeFrame(kind: .message, payload: ByteBuffer(bytes: bytes))
        let decoded = try frame.envelope(as: ServerEnvelope.self)
        #expect(decoded.requestID == 9 && decoded.sendAck.seq == 17)
    }
}
