import CourierProtocol
import CourierWire
import NIOCore
import SwiftProtobuf

/// Parses the input as the payload of a native `message` frame, as the server does with every client envelope.
/// Besides not crashing, parsing must either fail with `envelope-invalid` or give an envelope that survives its own
/// serialization: serializing it and parsing again gives the same envelope (unknown fields included).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzEnvelope(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: start, count: count)
    let frame = NativeFrame(kind: .message, payload: ByteBuffer(bytes: bytes))
    let envelope: ClientEnvelope
    do {
        envelope = try frame.envelope(as: ClientEnvelope.self)
    } catch let error as CourierProtocolError {
        guard error.code == .envelopeInvalid else { fatalError("unexpected code \(error.code)") }
        return 0
    } catch {
        fatalError("parsing threw something other than CourierProtocolError: \(error)")
    }
    let again: ClientEnvelope
    do {
        again = try NativeFrame(envelope: envelope).envelope(as: ClientEnvelope.self)
    } catch {
        fatalError("an envelope that parsed does not survive its own serialization: \(error)")
    }
    guard again == envelope else {
        fatalError("serializing and parsing changed the envelope:\n\(envelope)\nvs\n\(again)")
    }
    return 0
}
