public import NIOCore

/// The outcome of feeding a byte stream through a decoder: what it yielded, and the error that stopped it, if any.
public struct DecodeOutcome<Output> {
    /// Every message the decoder yielded, in order, including those before an error.
    public var outputs: [Output]
    /// The error that ended decoding, or `nil` if the stream decoded to its end.
    public var error: (any Error)?
}

/// Feeds chunks to a `NIOSingleStepByteToMessageDecoder` as a channel would, then signals EOF.
public enum DecoderDriver {
    /// Decodes `chunks` in order and finishes with EOF, collecting outputs up to the first error.
    public static func decode<Decoder: NIOSingleStepByteToMessageDecoder>(
        _ decoder: Decoder,
        chunks: some Sequence<ByteBuffer>,
        finish: Bool = true
    ) -> DecodeOutcome<Decoder.InboundOut> {
        let processor = NIOSingleStepByteToMessageProcessor(decoder)
        var outputs: [Decoder.InboundOut] = []
        do {
            for chunk in chunks {
                try processor.process(buffer: chunk) { outputs.append($0) }
            }
            if finish {
                try processor.finishProcessing(seenEOF: true) { outputs.append($0) }
            }
            return DecodeOutcome(outputs: outputs, error: nil)
        } catch {
            return DecodeOutcome(outputs: outputs, error: error)
        }
    }

    /// Cuts `bytes` into pieces at random points: piece lengths are log-uniform from 1 byte to `maxPiece`.
    public static func randomCuts(
        of bytes: ByteBuffer,
        maxPiece: Int = 64 * 1024,
        using random: inout SeededRandom
    ) -> [ByteBuffer] {
        var rest = bytes
        var pieces: [ByteBuffer] = []
        while rest.readableBytes > 0 {
            let length = min(rest.readableBytes, 1 + random.logUniformSize(upTo: maxPiece - 1))
            pieces.append(rest.readSlice(length: length)!)
        }
        return pieces
    }

    /// Cuts `bytes` into one-byte pieces.
    public static func bytewise(_ bytes: ByteBuffer) -> [ByteBuffer] {
        bytes.readableBytesView.map { ByteBuffer(bytes: [$0]) }
    }
}
