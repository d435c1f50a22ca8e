public import CourierWire
public import NIOCore

/// Cuts `input` into pieces whose lengths start at `step` and then cycle through 1…13, so the same input is also
/// decoded across many different read boundaries.
public func cut(_ input: ByteBuffer, step: Int) -> [ByteBuffer] {
    var rest = input
    var chunks: [ByteBuffer] = []
    var length = step
    while rest.readableBytes > 0 {
        chunks.append(rest.readSlice(length: min(length, rest.readableBytes))!)
        length = length % 13 + 1
    }
    return chunks
}

/// Decodes `chunks` to EOF, returning what came out and the code of the error that stopped it, if any. Any error
/// other than a `CourierWireError` is a finding.
public func run<Decoder: NIOSingleStepByteToMessageDecoder>(
    _ decoder: Decoder,
    _ chunks: [ByteBuffer]
) -> (outputs: [Decoder.InboundOut], code: CourierWireError.Code?) {
    let processor = NIOSingleStepByteToMessageProcessor(decoder)
    var outputs: [Decoder.InboundOut] = []
    do {
        for chunk in chunks {
            try processor.process(buffer: chunk) { outputs.append($0) }
        }
        try processor.finishProcessing(seenEOF: true) { outputs.append($0) }
        return (outputs, nil)
    } catch let error as CourierWireError {
        return (outputs, error.code)
    } catch {
        fatalError("a decoder threw something other than CourierWireError: \(error)")
    }
}
