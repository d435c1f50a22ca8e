import CourierProtocol
import CourierWire
import NIOCore

/// What a connection's framing turns an inbound frame into.
enum TransportInput<Outbound> {
    /// A request.
    case envelope(ClientEnvelope)
    /// A frame the transport answers itself (a ping): write these.
    case reply([Outbound])
    /// A frame to skip (an unknown extension kind, a pong).
    case ignore
    /// The client says it is leaving.
    case goodbye
    /// A frame the transport refuses itself (a malformed header field): answer with this error, go on.
    case refuse(code: String, message: String, id: String)
    /// A frame that breaks the protocol: close with this code.
    case violation(code: String, message: String)
    /// Upload bytes on a stream (native `mediaChunk`); `end` on the stream's last frame.
    case streamChunk(streamID: UInt32, bytes: ByteBuffer, end: Bool)
    /// The client grants a fetch stream more bytes.
    case streamWindow(streamID: UInt32, increment: UInt32)
    /// The client abandons a stream.
    case streamReset(streamID: UInt32)
    /// A media message whose bytes follow inline (a compat `img` packet): `envelope` is its `send`, with the media's
    /// digest still empty, and `size` bytes come next as ``inlineBytes(_:isLast:)``.
    case inlineMedia(ClientEnvelope, size: Int64)
    /// The next bytes of the inline media.
    case inlineBytes(ByteBuffer, isLast: Bool)
    /// The inline media packet was broken off (a corrupt packet skipped): drop what came of it, answer this error.
    case inlineAbandoned(code: String, message: String)
    /// A frame that breaks the framing, found only as it is read (a WebSocket message that does not inflate, or
    /// inflates past the limit): close as for a decoder's error (``SessionTransport/closingFrames(framingError:)``).
    case brokenFraming(any Error)
}

/// What a transport writes for one envelope: frames, and media bytes that the connection streams from the blob
/// store, each chunk wrapped by `wrap` (the compat port's inline media).
enum TransportOutput<Outbound: Sendable> {
    case frame(Outbound)
    case media(sha256: String, size: Int64, wrap: @Sendable (ByteBuffer) -> Outbound, end: Outbound)
}

/// A stream's frames, on a transport that has streams (the native port).
enum StreamOutput {
    case chunk(streamID: UInt32, bytes: ByteBuffer, end: Bool)
    case window(streamID: UInt32, increment: UInt32)
    case reset(streamID: UInt32, code: NativeErrorCode)
}

/// A framing the session runs over: the native port's protobuf envelopes, or the compat port's JSON headers.
protocol SessionTransport: Sendable {
    associatedtype Inbound: Sendable
    associatedtype Outbound: Sendable

    /// The port's name in logs and metrics.
    var name: String { get }

    /// Interprets one inbound frame.
    func interpret(_ frame: Inbound) -> TransportInput<Outbound>

    /// What carries one envelope to the client, or nothing if the client cannot receive it.
    func frames(for envelope: ServerEnvelope) throws -> [TransportOutput<Outbound>]

    /// A stream's frame, or nil on a transport without streams.
    func frame(for output: StreamOutput) -> Outbound?

    /// The frames sent before closing for a reason: an error, and where the framing has one, a goodbye.
    func closingFrames(code: String, message: String) -> [Outbound]

    /// What to send before closing a connection whose bytes broke the framing (the decoder's error).
    func closingFrames(framingError: any Error) -> [Outbound]

    /// Whether event bodies may go out as the bytes the store holds (the transport only serializes the envelope);
    /// false when it reads them to translate (the compat port).
    var sendsRawBodies: Bool { get }

    /// Whether media goes inline in the connection's byte stream (then an envelope's outputs must not be interleaved
    /// with other writes); false when it travels on streams of its own.
    var streamsMediaInline: Bool { get }

    /// Whether ``frame(envelopeBytes:)`` makes frames: a protobuf envelope serialized elsewhere (``EventWire``).
    var takesEncodedEnvelopes: Bool { get }

    /// The frame carrying a serialized `ServerEnvelope`, on a transport that ``takesEncodedEnvelopes``.
    func frame(envelopeBytes: ByteBuffer) -> Outbound?
}

extension SessionTransport {
    var takesEncodedEnvelopes: Bool { false }

    func frame(envelopeBytes: ByteBuffer) -> Outbound? { nil }
}

/// The native port: one protobuf envelope per `message` frame; acks may also come as `ack` frames.
struct NativeTransport: SessionTransport {
    var name: String { "native" }
    var streamsMediaInline: Bool { false }
    var sendsRawBodies: Bool { true }
    var takesEncodedEnvelopes: Bool { true }

    func frame(envelopeBytes: ByteBuffer) -> NativeFrame? {
        NativeFrame(kind: .message, payload: envelopeBytes)
    }

    func interpret(_ frame: NativeFrame) -> TransportInput<NativeFrame> {
        switch frame.kind {
        case .message:
            do {
                return .envelope(try frame.envelope(as: ClientEnvelope.self))
            } catch {
                return .violation(code: ErrorCodes.envelopeInvalid, message: "\(error)")
            }
        case .ack:
            do {
                var envelope = ClientEnvelope()
                envelope.ack = try frame.envelope(as: Courier_V1_Ack.self, kind: .ack)
                return .envelope(envelope)
            } catch {
                return .violation(code: ErrorCodes.envelopeInvalid, message: "\(error)")
            }
        case .ping:
            return .reply([.pong(frame.pingData ?? 0)])
        case .pong:
            return .ignore
        case .mediaChunk, .windowUpdate, .resetStream:
            return Self.streamInput(frame) ?? .ignore
        case .goaway:
            return .goodbye
        case let kind where kind.isExtension:
            return .ignore
        default:
            return .violation(
                code: ErrorCodes.unsupported,
                message: "\(frame.kind) frames are not used by this server yet"
            )
        }
    }

    /// What a media stream's frame (a chunk, a window update, a reset) asks for; nil for a frame of another kind.
    static func streamInput<Outbound>(_ frame: NativeFrame) -> TransportInput<Outbound>? {
        switch frame.kind {
        case .mediaChunk:
            .streamChunk(streamID: frame.streamID, bytes: frame.payload, end: frame.flags.contains(.endStream))
        case .windowUpdate:
            frame.streamID == 0
                ? .ignore : .streamWindow(streamID: frame.streamID, increment: frame.windowIncrement ?? 0)
        case .resetStream:
            .streamReset(streamID: frame.streamID)
        default:
            nil
        }
    }

    func frames(for envelope: ServerEnvelope) throws -> [TransportOutput<NativeFrame>] {
        [.frame(try NativeFrame(envelope: envelope))]
    }

    func frame(for output: StreamOutput) -> NativeFrame? {
        switch output {
        case .chunk(let stream, let bytes, let end):
            NativeFrame(kind: .mediaChunk, flags: end ? .endStream : [], streamID: stream, payload: bytes)
        case .window(let stream, let increment):
            .windowUpdate(streamID: stream, increment: increment)
        case .reset(let stream, let code):
            .resetStream(streamID: stream, code: code)
        }
    }

    func closingFrames(code: String, message: String) -> [NativeFrame] {
        let envelope = ServerEnvelope.failure(code: code, message: message)
        let goawayCode: NativeErrorCode =
            switch code {
            case ErrorCodes.envelopeInvalid, ErrorCodes.unsupported, ErrorCodes.notAuthenticated,
                ErrorCodes.framingError:
                .protocolError
            case ErrorCodes.internalError: .internalError
            default: .noError
            }
        return ((try? NativeFrame(envelope: envelope)).map { [$0] } ?? [])
            + [.goaway(lastStreamID: 0, code: goawayCode, message: code)]
    }

    /// As docs/PROTOCOL.md says: a peer whose preface is not Courier's gets nothing more (it would understand
    /// nothing); another version gets a `goaway` with `unsupportedVersion` alone (after the preface already sent);
    /// a frame over the limit `frameTooLarge`, any other broken frame `protocolError`, each after a `framing-error`.
    func closingFrames(framingError: any Error) -> [NativeFrame] {
        let code = (framingError as? CourierWireError)?.code
        let goawayCode: NativeErrorCode
        switch code {
        case .badPreface?, .truncated?:
            return []
        case .unsupportedVersion?:
            return [.goaway(lastStreamID: 0, code: .unsupportedVersion, message: "this server speaks version 1")]
        case .frameTooLarge?:
            goawayCode = .frameTooLarge
        default:
            goawayCode = .protocolError
        }
        let envelope = ServerEnvelope.failure(code: ErrorCodes.framingError, message: "\(framingError)")
        return ((try? NativeFrame(envelope: envelope)).map { [$0] } ?? [])
            + [.goaway(lastStreamID: 0, code: goawayCode, message: code.map { "\($0)" } ?? ErrorCodes.framingError)]
    }
}

extension ServerEnvelope {
    /// The `error` envelope a transport sends before it closes.
    static func failure(code: String, message: String) -> ServerEnvelope {
        var envelope = ServerEnvelope()
        envelope.error.code = code
        envelope.error.message = message
        return envelope
    }
}
