import CourierWire
import FuzzSupport
import NIOCore

/// Feeds the input (less its first byte, which picks the configuration and the cuts) to both compat decoders.
/// Besides not crashing, they must agree: the streaming decoder's parts, joined, are the collecting decoder's packets,
/// skips and final error; and the packets, encoded again, decode to themselves.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCompat(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: start, count: count)
    guard let control = bytes.first else { return 0 }
    var configuration = CompatFraming.Configuration(endMarker: control & 1 == 1 ? Array("<E>".utf8) : nil)
    configuration.maxHeaderBytes = 512
    configuration.maxPayloadBytes = 8192
    configuration.maxCollectedPayloadBytes = 8192
    let input = ByteBuffer(bytes: bytes.dropFirst())
    let chunks = cut(input, step: Int(control >> 1) + 1)

    let collected = run(CompatFrameDecoder(configuration: configuration), chunks)
    let streamed = run(CompatStreamingDecoder(configuration: configuration), chunks)
    let joined = join(streamed.outputs)
    guard joined == collected.outputs, streamed.code == collected.code else {
        fatalError("the decoders disagree: \(collected) vs \(streamed)")
    }
    let whole = run(CompatFrameDecoder(configuration: configuration), [input])
    guard whole.outputs == collected.outputs, whole.code == collected.code else {
        fatalError("the cuts changed the result: \(whole) vs \(collected)")
    }

    var again = ByteBuffer()
    var frames: [CompatMessage] = []
    for case .frame(let frame) in collected.outputs {
        try! CompatFraming.write(frame, configuration: configuration, into: &again)
        frames.append(.frame(frame))
    }
    let reencoded = run(CompatFrameDecoder(configuration: configuration), [again])
    guard reencoded.outputs == frames, reencoded.code == nil else {
        fatalError("re-encoded packets do not decode to themselves: \(reencoded) vs \(frames)")
    }
    return 0
}

/// Joins streamed parts into the messages a collecting decoder yields, checking that they are well formed.
func join(_ parts: [CompatFramePart]) -> [CompatMessage] {
    var messages: [CompatMessage] = []
    var current: (CompatHeader, ByteBuffer)?
    for part in parts {
        switch part {
        case .head(let header):
            precondition(current == nil, "a head inside a packet")
            if header.size == 0 {
                messages.append(.frame(CompatFrame(header: header, payload: ByteBuffer())))
            } else {
                current = (header, ByteBuffer())
            }
        case .body(var bytes, let isLast):
            precondition(current != nil, "a body outside a packet")
            current!.1.writeBuffer(&bytes)
            precondition(isLast == (current!.1.readableBytes == current!.0.size), "isLast on the wrong piece")
            if isLast {
                messages.append(.frame(CompatFrame(header: current!.0, payload: current!.1)))
                current = nil
            }
        case .skipped(let skip):
            current = nil
            messages.append(.skipped(skip))
        }
    }
    return messages
}
