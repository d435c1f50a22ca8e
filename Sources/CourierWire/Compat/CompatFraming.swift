public import NIOCore

/// The compat framing: the format of the source notes, spoken on Courier's compat port.
///
/// A packet is a UTF-8 JSON object (compact or pretty-printed, LF line breaks allowed inside it), a CRLF, then exactly
/// `size` payload bytes, then — only when ``Configuration/endMarker`` is set — the end marker. `docs/PROTOCOL.md`
/// describes it byte by byte.
public enum CompatFraming {
    /// Limits and options shared by the compat decoders and encoder.
    public struct Configuration: Sendable, Hashable {
        /// The most bytes a header may have before its CRLF. A longer header is corrupt. Default 16 KiB.
        public var maxHeaderBytes: Int = 16 * 1024
        /// The largest `size` the streaming decoder accepts; a larger one is corrupt, decided from the header alone,
        /// before anything is allocated. Default 2 GiB.
        public var maxPayloadBytes: Int = 2 * 1024 * 1024 * 1024
        /// The largest payload the collecting decoder gathers into one frame. A packet over this is corrupt for it
        /// (the streaming decoder takes such packets). Default 64 MiB.
        public var maxCollectedPayloadBytes: Int = 64 * 1024 * 1024
        /// Bytes that follow every payload, or `nil` (the default) for none. With a marker, a corrupt packet is
        /// skipped up to and including the next marker and decoding goes on; without one, corruption is fatal.
        public var endMarker: [UInt8]? = nil

        /// The defaults: 16 KiB headers, 2 GiB streamed payloads, 64 MiB collected payloads, no end marker.
        public init() {}

        /// The defaults with the given end marker.
        /// - Parameter endMarker: the marker, which must not be empty.
        public init(endMarker: [UInt8]?) {
            precondition(endMarker.map { !$0.isEmpty } ?? true, "an end marker must have at least one byte")
            self.endMarker = endMarker
        }
    }

    /// The two bytes that end a header.
    static let crlf: [UInt8] = [0x0D, 0x0A]

    /// Writes a header and its CRLF: the start of a packet whose payload the caller writes next.
    /// - Throws: an encoding error only if a header field cannot be written as JSON (a non-finite double).
    public static func writeHead(_ header: CompatHeader, into buffer: inout ByteBuffer) throws {
        try header.write(into: &buffer)
        buffer.writeBytes(Self.crlf)
    }

    /// Writes the end marker that closes a packet, if the configuration has one; for senders that stream a payload
    /// after ``writeHead(_:into:)``.
    public static func writeEnd(configuration: Configuration, into buffer: inout ByteBuffer) {
        if let marker = configuration.endMarker {
            buffer.writeBytes(marker)
        }
    }

    /// Writes a whole packet: header, CRLF, payload and, if the configuration has one, the end marker.
    /// - Throws: ``CourierWireError`` with ``CourierWireError/Code/sizeInvalid`` if `header.size` is not the
    ///   payload's length, or an encoding error if a header field cannot be written as JSON (a non-finite double).
    public static func write(
        _ frame: CompatFrame,
        configuration: Configuration = .init(),
        into buffer: inout ByteBuffer
    ) throws {
        guard frame.header.size == frame.payload.readableBytes else {
            throw CourierWireError(
                .sizeInvalid,
                "header.size \(frame.header.size) is not the payload's length \(frame.payload.readableBytes)"
            )
        }
        try Self.writeHead(frame.header, into: &buffer)
        buffer.writeImmutableBuffer(frame.payload)
        Self.writeEnd(configuration: configuration, into: &buffer)
    }
}

/// A whole compat packet: its header and its payload.
public struct CompatFrame: Hashable, Sendable {
    /// The header; its `size` equals the payload's length.
    public var header: CompatHeader
    /// The payload bytes.
    public var payload: ByteBuffer

    /// Creates a packet, setting `header.size` from the payload.
    public init(type: String, payload: ByteBuffer, fields: [String: JSONValue] = [:]) {
        self.header = CompatHeader(type: type, size: payload.readableBytes, fields: fields)
        self.payload = payload
    }

    /// Creates a packet from a header whose `size` must equal the payload's length.
    public init(header: CompatHeader, payload: ByteBuffer) {
        precondition(header.size == payload.readableBytes, "header.size must equal the payload's length")
        self.header = header
        self.payload = payload
    }
}

/// A corrupt compat packet that a decoder with an end marker skipped.
public struct CompatSkip: Hashable, Sendable {
    /// How many bytes were discarded, from the packet's first byte up to and including the end marker that closed it.
    public var byteCount: Int
    /// Why the packet was corrupt.
    public var reason: CourierWireError

    /// Creates a skip event.
    public init(byteCount: Int, reason: CourierWireError) {
        self.byteCount = byteCount
        self.reason = reason
    }
}
