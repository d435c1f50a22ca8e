import CourierWire
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
    guard cutResult.frames == wholeResult.frames, cutResult.code == wholeResult.code else {
        fatalError("the cuts changed the result: \(cutResult) vs \(wholeResult)")
    }

    var again = ByteBuffer()
    if configuration.expectsPreface && !wholeResult.frames.isEmpty {
        NativeFraming.writePreface(into: &again)
    }
    let encoder = NativeFrameEncoder(configuration: configuration)
    for frame in wholeResult.frames {
        try! encoder.encode(data: frame, out: &again)
    }
    guard input.readableBytesView.starts(with: again.readableBytesView) else {
        fatalError("re-encoding the frames does not give back the input")
    }
    if wholeResult.code == nil, !configuration.expectsPreface || !wholeResult.frames.isEmpty {
        guard again.readableBytes == input.readableBytes else {
            fatalError("the input decoded without error, but its frames do not cover it")
        }
    }
    return 0
}

func cut(_ input: ByteBuffer, step: Int) -> [ByteBuffer] {
    var rest = input
    var chunks: [ByteBuffer] = []
    var length = step
    while rest.readableBytes > 0 {
        chunks.append(rest.readSlice(length: min(length, rest.readableBytes))!)
        length = length % 13 + 1
    }
    return chunks
}

func run(_ decoder: NativeFrameDecoder, _ chunks: [ByteBuffer]) -> (frames: [NativeFrame], code: CourierWireError.Code?)
{
    let processor = NIOSingleStepByteToMessageProcessor(decoder)
    var frames: [NativeFrame] = []
    do {
        for chunk in chunks {
            try processor.process(buffer: chunk) { frames.append($0) }
        }
        try processor.finishProcessing(seenEOF: true) { frames.append($0) }
        return (frames, nil)
    } catch let error as CourierWireError {
        return (frames, error.code)
    } catch {
        fatalError("the decoder threw something other than CourierWireError: \(error)")
    }
}
