import CourierProtocol
import CourierWire

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
}

/// A framing the session runs over: the native port's protobuf envelopes, or the compat port's JSON headers.
protocol SessionTransport: Sendable {
    associatedtype Inbound: Sendable
    associatedtype Outbound: Sendable

    /// The port's name in logs and metrics.
    var name: String { get }

    /// Interprets one inbound frame.
    func interpret(_ frame: Inbound) -> TransportInput<Outbound>

    /// The frames that carry one envelope to the client, or none if the client cannot receive it.
    func frames(for envelope: ServerEnvelope) throws -> [Outbound]

    /// The frames sent before closing for a reason: an error, and where the framing has one, a goodbye.
    func closingFrames(code: String, message: String) -> [Outbound]
}

/// The native port: one protobuf envelope per `message` frame; acks may also come as `ack` frames.
struct NativeTransport: SessionTransport {
    var name: String { "native" }

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
        case .pong, .windowUpdate:
            return .ignore
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

    func frames(for envelope: ServerEnvelope) throws -> [NativeFrame] {
        [try NativeFrame(envelope: envelope)]
    }

    func closingFrames(code: String, message: String) -> [NativeFrame] {
        var envelope = ServerEnvelope()
        envelope.error.code = code
        envelope.error.message = message
        let goawayCode: NativeErrorCode =
            switch code {
            case ErrorCodes.envelopeInvalid, ErrorCodes.unsupported, ErrorCodes.notAuthenticated: .protocolError
            case ErrorCodes.internalError: .internalError
            default: .noError
            }
        return ((try? NativeFrame(envelope: envelope)).map { [$0] } ?? [])
            + [.goaway(lastStreamID: 0, code: goawayCode, message: code)]
    }
}
