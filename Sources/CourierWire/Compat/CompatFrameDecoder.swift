public import NIOCore

/// What the collecting compat decoder yields: a whole packet, or the news that a corrupt one was skipped.
public enum CompatMessage: Hashable, Sendable {
    /// A whole packet.
    case frame(CompatFrame)
    /// A corrupt packet was discarded (only with an end marker configured).
    case skipped(CompatSkip)
}

/// Decodes the compat framing into whole packets, up to ``CompatFraming/Configuration/maxCollectedPayloadBytes``.
///
/// Use it where packets are small (texts, commands). A payload is a slice of the bytes received, not a copy. Install
/// it with `ByteToMessageHandler(CompatFrameDecoder(), maximumBufferSize:)` or decode any
/// `AsyncSequence<ByteBuffer>` with `.decode(using:)`.
public struct CompatFrameDecoder: NIOSingleStepByteToMessageDecoder, Sendable {
    public typealias InboundOut = CompatMessage

    private var core: CompatDecoderCore

    /// Creates a decoder.
    /// - Parameter configuration: the limits and the optional end marker.
    public init(configuration: CompatFraming.Configuration = .init()) {
        self.core = CompatDecoderCore(mode: .collecting, configuration: configuration)
    }

    /// - Throws: ``CourierWireError`` on corruption when no end marker is configured.
    public mutating func decode(buffer: inout ByteBuffer) throws -> CompatMessage? {
        Self.message(try self.core.decode(buffer: &buffer))
    }

    /// - Throws: ``CourierWireError`` with ``CourierWireError/Code/truncated`` if the stream ends inside a packet.
    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> CompatMessage? {
        Self.message(try self.core.decodeLast(buffer: &buffer, seenEOF: seenEOF))
    }

    private static func message(_ output: CompatDecoderCore.Output?) -> CompatMessage? {
        switch output {
        case .none: return nil
        case .frame(let frame): return .frame(frame)
        case .skipped(let skip): return .skipped(skip)
        case .head, .body: preconditionFailure("a collecting decoder yields whole packets only")
        }
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

/// A piece of a compat packet, as the streaming decoder hands it out.
public enum CompatFramePart: Hashable, Sendable {
    /// A packet begins. When `header.size` is 0 the packet is already complete; otherwise `.body` parts follow.
    case head(CompatHeader)
    /// The next payload bytes. `isLast` is true on the part that completes the payload, handed out only once the end
    /// marker (if configured) has been checked.
    case body(ByteBuffer, isLast: Bool)
    /// A corrupt packet was discarded (only with an end marker configured). If it follows a `.head`, that packet is
    /// abandoned: drop what was received of it.
    case skipped(CompatSkip)
}

/// Decodes the compat framing as a stream of parts (head, body…), so a 2 GiB payload never sits in memory.
///
/// Body parts are slices of the bytes as they arrive; their boundaries depend on how TCP cut the stream.
public struct CompatStreamingDecoder: NIOSingleStepByteToMessageDecoder, Sendable {
    public typealias InboundOut = CompatFramePart

    private var core: CompatDecoderCore

    /// Creates a decoder.
    /// - Parameter configuration: the limits and the optional end marker.
    public init(configuration: CompatFraming.Configuration = .init()) {
        self.core = CompatDecoderCore(mode: .streaming, configuration: configuration)
    }

    /// - Throws: ``CourierWireError`` on corruption when no end marker is configured.
    public mutating func decode(buffer: inout ByteBuffer) throws -> CompatFramePart? {
        Self.part(try self.core.decode(buffer: &buffer))
    }

    /// - Throws: ``CourierWireError`` with ``CourierWireError/Code/truncated`` if the stream ends inside a packet.
    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> CompatFramePart? {
        Self.part(try self.core.decodeLast(buffer: &buffer, seenEOF: seenEOF))
    }

    private static func part(_ output: CompatDecoderCore.Output?) -> CompatFramePart? {
        switch output {
        case .none: return nil
        case .head(let header): return .head(header)
        case .body(let bytes, let isLast): return .body(bytes, isLast: isLast)
        case .skipped(let skip): return .skipped(skip)
        case .frame: preconditionFailure("a streaming decoder yields parts only")
        }
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

/// Encodes whole compat packets: compact JSON header, CRLF, payload and the end marker if configured.
public struct CompatFrameEncoder: MessageToByteEncoder, Sendable {
    public typealias OutboundIn = CompatFrame

    private let configuration: CompatFraming.Configuration

    /// Creates an encoder.
    /// - Parameter configuration: only ``CompatFraming/Configuration/endMarker`` matters when encoding.
    public init(configuration: CompatFraming.Configuration = .init()) {
        self.configuration = configuration
    }

    public func encode(data: CompatFrame, out: inout ByteBuffer) throws {
        try CompatFraming.write(data, configuration: self.configuration, into: &out)
    }
}

/// What the selective compat decoder yields: whole small packets, and large ones in parts.
public enum CompatInput: Hashable, Sendable {
    /// A whole packet of a collected type.
    case packet(CompatFrame)
    /// A packet of a streamed type begins. When `header.size` is 0 it is already complete; otherwise `.body` parts
    /// follow.
    case head(CompatHeader)
    /// The next payload bytes of the streamed packet; `isLast` on the part that completes it.
    case body(ByteBuffer, isLast: Bool)
    /// A corrupt packet was discarded (only with an end marker configured). If it follows a `.head`, that packet is
    /// abandoned.
    case skipped(CompatSkip)
}

/// Decodes the compat framing for a server that takes both small commands and large media: packets whose type is in
/// `streamedTypes` come out in parts (a 2 GiB payload never sits in memory, up to
/// ``CompatFraming/Configuration/maxPayloadBytes``); every other packet comes out whole, up to
/// ``CompatFraming/Configuration/maxCollectedPayloadBytes`` (a larger `size` is corrupt, decided from the header).
public struct CompatSelectiveDecoder: NIOSingleStepByteToMessageDecoder, Sendable {
    public typealias InboundOut = CompatInput

    private var core: CompatDecoderCore

    /// Creates a decoder.
    /// - Parameters:
    ///   - streamedTypes: the packet types handed out in parts.
    ///   - configuration: the limits and the optional end marker.
    public init(streamedTypes: Set<String>, configuration: CompatFraming.Configuration = .init()) {
        self.core = CompatDecoderCore(mode: .selective(streamedTypes), configuration: configuration)
    }

    /// - Throws: ``CourierWireError`` on corruption when no end marker is configured.
    public mutating func decode(buffer: inout ByteBuffer) throws -> CompatInput? {
        Self.input(try self.core.decode(buffer: &buffer))
    }

    /// - Throws: ``CourierWireError`` with ``CourierWireError/Code/truncated`` if the stream ends inside a packet.
    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> CompatInput? {
        Self.input(try self.core.decodeLast(buffer: &buffer, seenEOF: seenEOF))
    }

    private static func input(_ output: CompatDecoderCore.Output?) -> CompatInput? {
        switch output {
        case .none: nil
        case .frame(let frame): .packet(frame)
        case .head(let header): .head(header)
        case .body(let bytes, let isLast): .body(bytes, isLast: isLast)
        case .skipped(let skip): .skipped(skip)
        }
    }

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

/// What a compat sender writes: whole packets, or a packet whose payload it streams (a head, bodies, an end).
public enum CompatOutput: Hashable, Sendable {
    /// A whole packet.
    case packet(CompatFrame)
    /// The header and CRLF of a packet whose `size` payload bytes follow as `.body` parts, then `.end`.
    case head(CompatHeader)
    /// Payload bytes of the packet being streamed.
    case body(ByteBuffer)
    /// The streamed packet is complete: writes the end marker, if configured.
    case end
}

/// Encodes ``CompatOutput``: whole packets as ``CompatFrameEncoder`` does, and streamed ones part by part (the
/// sender keeps the bodies to the header's `size`).
public struct CompatOutputEncoder: MessageToByteEncoder, Sendable {
    public typealias OutboundIn = CompatOutput

    private let configuration: CompatFraming.Configuration

    /// Creates an encoder.
    /// - Parameter configuration: only ``CompatFraming/Configuration/endMarker`` matters when encoding.
    public init(configuration: CompatFraming.Configuration = .init()) {
        self.configuration = configuration
    }

    public func encode(data: CompatOutput, out: inout ByteBuffer) throws {
        switch data {
        case .packet(let frame): try CompatFraming.write(frame, configuration: self.configuration, into: &out)
        case .head(let header): try CompatFraming.writeHead(header, into: &out)
        case .body(let bytes): out.writeImmutableBuffer(bytes)
        case .end: CompatFraming.writeEnd(configuration: self.configuration, into: &out)
        }
    }
}
