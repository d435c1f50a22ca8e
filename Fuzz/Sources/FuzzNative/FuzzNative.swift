import CourierWire
import FuzzSupport
import NIOCore

/// Feeds the input (less its first byte, which picks the cuts) to the native decoder. Besides not crashing, the frames
/// it yields must not depend on the cuts, and encoding them again must give back the input's bytes exactly.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzNative(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: start, count: count)
    guard let control = bytes.first else { return 0 }
    var configuration = NativeFraming.Configuration()
    configuration.maxFramePayloadBytes = 4096
    configuration.expectsPreface = control & 1 == 1
    let input = ByteBuffer(bytes: bytes.dropFirst())

    let cutResult = run(NativeFrameDecoder(configuration: configuration), cut(input, step: Int(control >> 1) + 1))
    let wholeResult = run(NativeFrameDecoder(configuration: configuration), [input])
    guard cutResult.outputs == wholeResult.outputs, cutResult.code == wholeResult.code else {
        fatalError("the cuts changed the result: \(cutResult) vs \(wholeResult)")
    }

    var again = ByteBuffer()
    if configuration.expectsPreface && !wholeResult.outputs.isEmpty {
        NativeFraming.writePreface(into: &again)
    }
    let encoder = NativeFrameEncoder(configuration: configuration)
    for frame in wholeResult.outputs {
        try! encoder.encode(data: frame, out: &again)
    }
    guard input.readableBytesView.starts(with: again.readableBytesView) else {
        fatalError("re-encoding the frames does not give back the input")
    }
    if wholeResult.code == nil, !configuration.expectsPreface || !wholeResult.outputs.isEmpty {
        guard again.readableBytes == input.readableBytes else {
            fatalError("the input decoded without error, but its frames do not cover it")
        }
    }
    return 0
}
