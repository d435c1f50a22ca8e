public import NIOCore

/// One frame of the native framing: a kind, flags, a stream id and a payload of at most
/// ``NativeFraming/Configuration/maxFramePayloadBytes``.
///
/// A frame keeps its bytes as they travel: the 10-byte header followed by the payload, in one `ByteBuffer`. A decoded
/// frame is so a single slice of the bytes received, small enough to pass through a channel pipeline without a heap
/// allocation, and encoding one is a single copy.
public struct NativeFrame: Hashable, Sendable {
    /// The header and the payload, as on the wire.
    private var wire: ByteBuffer

    /// Wraps bytes that hold exactly one frame, header first, whose length field the caller has checked.
    init(wire: ByteBuffer) {
        self.wire = wire
    }

    /// Creates a frame, copying the payload after a new header.
    public init(kind: Kind, flags: Flags = [], streamID: UInt32 = 0, payload: ByteBuffer = ByteBuffer()) {
        precondition(payload.readableBytes <= UInt32.max, "a frame payload must fit the 4-byte length field")
        var wire = ByteBuffer()
        wire.reserveCapacity(NativeFraming.frameHeaderLength + payload.readableBytes)
        wire.writeMultipleIntegers(
            UInt32(truncatingIfNeeded: payload.readableBytes),
            kind.rawValue,
            flags.rawValue,
            streamID
        )
        wire.writeImmutableBuffer(payload)
        self.wire = wire
    }

    /// What the frame carries.
    public var kind: Kind {
        get { Kind(rawValue: self.wire.getInteger(at: self.wire.readerIndex + 4)!) }
        set { self.wire.setInteger(newValue.rawValue, at: self.wire.readerIndex + 4) }
    }

    /// Per-frame flags; ``Flags/endStream`` marks the last frame of a stream.
    public var flags: Flags {
        get { Flags(rawValue: self.wire.getInteger(at: self.wire.readerIndex + 5)!) }
        set { self.wire.setInteger(newValue.rawValue, at: self.wire.readerIndex + 5) }
    }

    /// The stream the frame belongs to. Stream 0 is the connection itself; a client opens odd ids, a server even.
    public var streamID: UInt32 {
        get { self.wire.getInteger(at: self.wire.readerIndex + 6)! }
        set { self.wire.setInteger(newValue, at: self.wire.readerIndex + 6) }
    }

    /// The payload bytes (a slice of the frame's bytes; setting it copies the new payload).
    public var payload: ByteBuffer {
        get {
            self.wire.getSlice(
                at: self.wire.readerIndex + NativeFraming.frameHeaderLength,
                length: self.wire.readableBytes - NativeFraming.frameHeaderLength
            )!
        }
        set { self = NativeFrame(kind: self.kind, flags: self.flags, streamID: self.streamID, payload: newValue) }
    }

    /// The payload's length in bytes.
    public var payloadLength: Int { self.wire.readableBytes - NativeFraming.frameHeaderLength }

    /// The frame as it goes on the wire: header, then payload.
    public var bytes: ByteBuffer { self.wire }
}

extension NativeFrame: CustomStringConvertible {
    public var description: String {
        "NativeFrame(\(self.kind), flags: \(self.flags.rawValue), stream: \(self.streamID), \(self.payloadLength) payload bytes)"
    }
}

extension NativeFrame {
    /// A frame kind: one byte on the wire. Kinds below 0x80 are *critical*: a receiver that does not know one must
    /// end the connection with a `goaway` frame (``NativeErrorCode/protocolError``). Kinds 0x80 and up are
    /// *extensions*: a receiver that does not know one ignores the frame.
    public struct Kind: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public var rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }

        /// A typed message (a protobuf envelope), on stream 0 or on its own stream.
        public static let message = Kind(rawValue: 0x01)
        /// A piece of a media payload on its own (non-zero) stream; the last piece carries ``Flags/endStream``.
        public static let mediaChunk = Kind(rawValue: 0x02)
        /// An acknowledgement (its payload format belongs to CourierProtocol).
        public static let ack = Kind(rawValue: 0x03)
        /// Flow control: the payload is a 4-byte big-endian window increment for the stream (0: the connection).
        public static let windowUpdate = Kind(rawValue: 0x04)
        /// A liveness probe on stream 0 with 8 opaque bytes, answered by a ``pong`` with the same bytes.
        public static let ping = Kind(rawValue: 0x05)
        /// The answer to a ``ping``.
        public static let pong = Kind(rawValue: 0x06)
        /// Abandons one (non-zero) stream; the payload is a 4-byte ``NativeErrorCode``.
        public static let resetStream = Kind(rawValue: 0x07)
        /// Error or goodbye on stream 0: last processed stream id (4 bytes), a ``NativeErrorCode`` (4 bytes), then
        /// an optional UTF-8 message. The sender closes the connection after it.
        public static let goaway = Kind(rawValue: 0x08)

        /// Whether a receiver that does not know this kind ignores it (0x80 and up) rather than failing.
        public var isExtension: Bool { self.rawValue >= 0x80 }

        /// The kinds this version defines.
        public static let known: [Kind] = [
            .message, .mediaChunk, .ack, .windowUpdate, .ping, .pong, .resetStream, .goaway,
        ]

        public var description: String {
            switch self {
            case .message: "message"
            case .mediaChunk: "media-chunk"
            case .ack: "ack"
            case .windowUpdate: "window-update"
            case .ping: "ping"
            case .pong: "pong"
            case .resetStream: "reset-stream"
            case .goaway: "goaway"
            default: "unknown(0x\(String(self.rawValue, radix: 16)))"
            }
        }
    }

    /// Frame flags: one byte on the wire. Bits without a meaning here must be sent as 0 and ignored on receipt.
    public struct Flags: OptionSet, Hashable, Sendable {
        public var rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }

        /// The last frame of its stream.
        public static let endStream = Flags(rawValue: 0x01)
    }
}

/// The reason in a `goaway` or `resetStream` frame: 4 bytes on the wire. Unknown codes mean ``internalError``.
public struct NativeErrorCode: RawRepresentable, Hashable, Sendable {
    public var rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// A graceful goodbye.
    public static let noError = NativeErrorCode(rawValue: 0)
    /// The peer broke the protocol (an unknown critical kind, an invalid frame, a bad preface).
    public static let protocolError = NativeErrorCode(rawValue: 1)
    /// The preface named a version this side does not speak.
    public static let unsupportedVersion = NativeErrorCode(rawValue: 2)
    /// A frame was over the maximum frame size.
    public static let frameTooLarge = NativeErrorCode(rawValue: 3)
    /// The peer sent more than the window allowed.
    public static let flowControlError = NativeErrorCode(rawValue: 4)
    /// The stream is no longer wanted.
    public static let cancel = NativeErrorCode(rawValue: 5)
    /// Something failed on this side.
    public static let internalError = NativeErrorCode(rawValue: 6)
}

extension NativeFrame {
    /// A `ping` frame on stream 0.
    public static func ping(_ opaque: UInt64) -> NativeFrame {
        NativeFrame(kind: .ping, payload: ByteBuffer(integer: opaque))
    }

    /// The `pong` that answers a `ping`.
    public static func pong(_ opaque: UInt64) -> NativeFrame {
        NativeFrame(kind: .pong, payload: ByteBuffer(integer: opaque))
    }

    /// A `windowUpdate` frame granting `increment` more bytes on `streamID` (0: the whole connection).
    public static func windowUpdate(streamID: UInt32, increment: UInt32) -> NativeFrame {
        NativeFrame(kind: .windowUpdate, streamID: streamID, payload: ByteBuffer(integer: increment))
    }

    /// A `resetStream` frame abandoning `streamID`.
    public static func resetStream(streamID: UInt32, code: NativeErrorCode) -> NativeFrame {
        NativeFrame(kind: .resetStream, streamID: streamID, payload: ByteBuffer(integer: code.rawValue))
    }

    /// A `goaway` frame: the last stream this side processed, why it is leaving, and a message for logs.
    public static func goaway(lastStreamID: UInt32, code: NativeErrorCode, message: String = "") -> NativeFrame {
        var payload = ByteBuffer()
        payload.writeInteger(lastStreamID)
        payload.writeInteger(code.rawValue)
        payload.writeString(message)
        return NativeFrame(kind: .goaway, payload: payload)
    }

    /// The 8 opaque bytes of a `ping` or `pong`; `nil` for other kinds.
    public var pingData: UInt64? {
        guard self.kind == .ping || self.kind == .pong else { return nil }
        return self.payload.getInteger(at: self.payload.readerIndex)
    }

    /// The increment of a `windowUpdate`; `nil` for other kinds.
    public var windowIncrement: UInt32? {
        guard self.kind == .windowUpdate else { return nil }
        return self.payload.getInteger(at: self.payload.readerIndex)
    }

    /// The reason of a `resetStream` or `goaway`; `nil` for other kinds.
    public var errorCode: NativeErrorCode? {
        switch self.kind {
        case .resetStream: self.payload.getInteger(at: self.payload.readerIndex).map(NativeErrorCode.init(rawValue:))
        case .goaway: self.payload.getInteger(at: self.payload.readerIndex + 4).map(NativeErrorCode.init(rawValue:))
        default: nil
        }
    }

    /// The last processed stream id and the message of a `goaway`; `nil` for other kinds.
    public var goaway: (lastStreamID: UInt32, message: String)? {
        guard self.kind == .goaway, self.payloadLength >= 8,
            let last = self.payload.getInteger(at: self.payload.readerIndex, as: UInt32.self)
        else { return nil }
        let message = self.payload.getString(at: self.payload.readerIndex + 8, length: self.payload.readableBytes - 8)
        return (last, message ?? "")
    }
}
