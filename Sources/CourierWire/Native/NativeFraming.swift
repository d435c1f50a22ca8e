public import NIOCore

/// The native framing spoken on Courier's main port: binary, length-prefixed and multiplexed.
///
/// Each side first sends the 10-byte preface (``magic`` and a 2-byte version), then frames of a 10-byte header —
/// payload length (4 bytes), kind (1), flags (1), stream id (4), all big-endian — and the payload.
/// `docs/PROTOCOL.md` describes it byte by byte.
public enum NativeFraming {
    /// Limits shared by the native decoder and encoder.
    public struct Configuration: Sendable, Hashable {
        /// The largest frame payload accepted or sent; a larger length is fatal, decided from the header alone.
        /// Default 1 MiB: large payloads travel as many `mediaChunk` frames.
        public var maxFramePayloadBytes: Int = 1 << 20
        /// Whether the decoder expects the peer's preface before the first frame. Default `true`.
        public var expectsPreface: Bool = true

        /// The defaults: 1 MiB frames, preface expected.
        public init() {}
    }

    /// The protocol version this build speaks, sent in the preface.
    public static let version: UInt16 = 1

    /// The first eight bytes either side sends: `89 43 52 57 0D 0A 1A 0A`. The high first byte tells it from text
    /// protocols (HTTP, the compat format's `{`), the CR LF, SUB and LF catch a channel that rewrites line endings.
    public static let magic: [UInt8] = [0x89, 0x43, 0x52, 0x57, 0x0D, 0x0A, 0x1A, 0x0A]

    /// The length of the preface: the magic and a 2-byte version.
    public static let prefaceLength = 10

    /// The length of every frame header.
    public static let frameHeaderLength = 10

    /// Writes this side's preface: the magic and ``version``.
    public static func writePreface(into buffer: inout ByteBuffer) {
        buffer.writeBytes(Self.magic)
        buffer.writeInteger(Self.version)
    }

    /// Writes one frame: its header, then its payload.
    public static func write(_ frame: NativeFrame, into buffer: inout ByteBuffer) {
        buffer.writeImmutableBuffer(frame.bytes)
    }
}

/// Decodes the native framing: the peer's preface, then frames.
///
/// Every error is fatal for the connection: the receiver sends a `goaway` where it can and closes. A payload is a slice
/// of the bytes received, not a copy.
public struct NativeFrameDecoder: NIOSingleStepByteToMessageDecoder, Sendable {
    public typealias InboundOut = NativeFrame

    private enum State: Sendable {
        /// Waiting for the preface; the first ``prefaceChecked`` readable bytes already match the magic.
        case preface
        case frames
        /// An error was thrown (``failure``); every later call throws it again.
        case failed
    }

    private let maxFramePayloadBytes: Int
    // Plain fields rather than an enum with payloads keep the per-frame path free of copies.
    private var state: State
    private var prefaceChecked = 0
    private var failure: CourierWireError?

    /// Creates a decoder.
    /// - Parameter configuration: the frame size limit and whether a preface comes first.
    public init(configuration: NativeFraming.Configuration = .init()) {
        precondition(
            configuration.maxFramePayloadBytes >= 0 && configuration.maxFramePayloadBytes <= Int(UInt32.max),
            "maxFramePayloadBytes must fit the 4-byte length field"
        )
        self.maxFramePayloadBytes = configuration.maxFramePayloadBytes
        self.state = configuration.expectsPreface ? .preface : .frames
    }

    private mutating func fail(_ error: CourierWireError) throws -> Never {
        self.state = .failed
        self.failure = error
        throw error
    }

    /// - Throws: ``CourierWireError`` with ``CourierWireError/Code/badPreface``,
    ///   ``CourierWireError/Code/unsupportedVersion``, ``CourierWireError/Code/frameTooLarge`` or
    ///   ``CourierWireError/Code/invalidFrame``.
    public mutating func decode(buffer: inout ByteBuffer) throws -> NativeFrame? {
        switch self.state {
        case .frames:
            break
        case .preface:
            guard try self.decodePreface(buffer: &buffer) else { return nil }
        case .failed:
            throw self.failure!
        }

        let readerIndex = buffer.readerIndex
        guard
            let (length, kindByte, _, streamID) = buffer.getMultipleIntegers(
                at: readerIndex,
                as: (UInt32, UInt8, UInt8, UInt32).self
            )
        else { return nil }
        guard Int(length) <= self.maxFramePayloadBytes else {
            try self.fail(
                CourierWireError(
                    .frameTooLarge,
                    "a frame of \(length) payload bytes is over the limit of \(self.maxFramePayloadBytes)"
                )
            )
        }
        guard buffer.readableBytes >= NativeFraming.frameHeaderLength + Int(length) else { return nil }
        // Only the control kinds (and media chunks) have rules to check; messages and extensions have none.
        if kindByte >= NativeFrame.Kind.mediaChunk.rawValue && kindByte <= NativeFrame.Kind.goaway.rawValue {
            let kind = NativeFrame.Kind(rawValue: kindByte)
            if let problem = Self.controlFrameProblem(kind: kind, length: Int(length), streamID: streamID) {
                try self.fail(CourierWireError(.invalidFrame, "\(kind) frame on stream \(streamID): \(problem)"))
            }
        }
        return NativeFrame(wire: buffer.readSlice(length: NativeFraming.frameHeaderLength + Int(length))!)
    }

    /// Checks the preface as far as it has arrived, so a stranger is refused on its first wrong byte.
    /// Returns whether the whole preface has been read.
    private mutating func decodePreface(buffer: inout ByteBuffer) throws -> Bool {
        let magic = NativeFraming.magic
        let checked = self.prefaceChecked
        let available = min(buffer.readableBytes, magic.count)
        for offset in checked..<max(checked, available) {
            let byte = buffer.getInteger(at: buffer.readerIndex + offset, as: UInt8.self)!
            guard byte == magic[offset] else {
                // A TLS record (a handshake, or the alert a TLS server answers a plain hello with) begins 0x16 or
                // 0x15: the peer speaks TLS, and the fix is to speak it too.
                let tls = offset == 0 && (byte == 0x15 || byte == 0x16)
                try self.fail(
                    CourierWireError(
                        .badPreface,
                        tls
                            ? "the peer speaks TLS (its first byte is 0x\(String(byte, radix: 16)), a TLS record) "
                                + "where this side speaks Courier's framing in the clear: a client reaching a TLS "
                                + "server connects over TLS (the courier command's --tls)"
                            : "byte \(offset) of the preface is 0x\(String(byte, radix: 16)), not "
                                + "0x\(String(magic[offset], radix: 16)): the peer does not speak Courier's native framing"
                    )
                )
            }
        }
        guard buffer.readableBytes >= NativeFraming.prefaceLength else {
            self.prefaceChecked = available
            return false
        }
        let version = buffer.getInteger(at: buffer.readerIndex + magic.count, as: UInt16.self)!
        guard version == NativeFraming.version else {
            try self.fail(
                CourierWireError(
                    .unsupportedVersion,
                    "the peer speaks version \(version); this side speaks \(NativeFraming.version)"
                )
            )
        }
        buffer.moveReaderIndex(forwardBy: NativeFraming.prefaceLength)
        self.state = .frames
        return true
    }

    /// What is wrong with a control frame's length or stream, or `nil` if nothing is.
    private static func controlFrameProblem(kind: NativeFrame.Kind, length: Int, streamID: UInt32) -> String? {
        switch kind {
        case .ping, .pong:
            if streamID != 0 { return "must be on stream 0" }
            if length != 8 { return "payload must be 8 bytes, not \(length)" }
        case .windowUpdate:
            if length != 4 { return "payload must be 4 bytes, not \(length)" }
        case .resetStream:
            if streamID == 0 { return "must not be on stream 0" }
            if length != 4 { return "payload must be 4 bytes, not \(length)" }
        case .goaway:
            if streamID != 0 { return "must be on stream 0" }
            if length < 8 { return "payload must be at least 8 bytes, not \(length)" }
        case .mediaChunk:
            if streamID == 0 { return "must not be on stream 0" }
        default:
            break
        }
        return nil
    }

    /// - Throws: as ``decode(buffer:)``, and ``CourierWireError/Code/truncated`` if the stream ends inside the
    ///   preface or a frame.
    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> NativeFrame? {
        if let frame = try self.decode(buffer: &buffer) {
            return frame
        }
        // Without EOF (the decoder is being removed) the rest of the bytes stay in the buffer for whoever reads next.
        guard seenEOF, buffer.readableBytes > 0 else { return nil }
        try self.fail(
            CourierWireError(.truncated, "the stream ended inside a frame (\(buffer.readableBytes) bytes left over)")
        )
    }

    // Concrete versions of NIOSingleStepByteToMessageDecoder's defaults: the generic ones in NIOCore wrap each frame
    // in NIOAny without specialization, which cost more than the decoding itself (see docs/BENCHMARKS.md).
    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        context.fireDecoded(try self.decode(buffer: &buffer))
    }

    public mutating func decodeLast(
        context: ChannelHandlerContext,
        buffer: inout ByteBuffer,
        seenEOF: Bool
    ) throws -> DecodingState {
        context.fireDecoded(try self.decodeLast(buffer: &buffer, seenEOF: seenEOF))
    }
}

/// Writes native frames: a frame's bytes are already as on the wire (``NativeFrame/bytes``), so it hands them to the
/// channel as they are, copying nothing (a media chunk of a quarter mebibyte as much as a text). It refuses a payload
/// over the limit rather than send what the peer must reject: the write fails, and the error goes down the pipeline
/// as an encoder's would.
public final class NativeFrameWriter: ChannelOutboundHandler, Sendable {
    public typealias OutboundIn = NativeFrame
    public typealias OutboundOut = ByteBuffer

    private let maxFramePayloadBytes: Int

    /// Creates a writer.
    /// - Parameter configuration: the frame size limit.
    public init(configuration: NativeFraming.Configuration = .init()) {
        self.maxFramePayloadBytes = configuration.maxFramePayloadBytes
    }

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let frame = Self.unwrapOutboundIn(data)
        guard frame.payloadLength <= self.maxFramePayloadBytes else {
            let error = CourierWireError(
                .frameTooLarge,
                "a payload of \(frame.payloadLength) bytes is over the limit of \(self.maxFramePayloadBytes)"
            )
            promise?.fail(error)
            context.fireErrorCaught(error)
            return
        }
        context.write(Self.wrapOutboundOut(frame.bytes), promise: promise)
    }
}

/// Encodes native frames into a buffer of the caller's (a test's, a fuzzer's): ``NativeFrameWriter`` is what a
/// pipeline uses. It refuses a payload over the limit rather than send what the peer must reject.
public struct NativeFrameEncoder: MessageToByteEncoder, Sendable {
    public typealias OutboundIn = NativeFrame

    private let maxFramePayloadBytes: Int

    /// Creates an encoder.
    /// - Parameter configuration: the frame size limit.
    public init(configuration: NativeFraming.Configuration = .init()) {
        self.maxFramePayloadBytes = configuration.maxFramePayloadBytes
    }

    /// - Throws: ``CourierWireError`` with ``CourierWireError/Code/frameTooLarge``.
    public func encode(data: NativeFrame, out: inout ByteBuffer) throws {
        guard data.payloadLength <= self.maxFramePayloadBytes else {
            throw CourierWireError(
                .frameTooLarge,
                "a payload of \(data.payloadLength) bytes is over the limit of \(self.maxFramePayloadBytes)"
            )
        }
        NativeFraming.write(data, into: &out)
    }
}
