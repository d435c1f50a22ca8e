import CourierProtocol
import CourierWire
import NIOCore
import SwiftProtobuf

/// The WebSocket gateway (`GET /ws` on the HTTP port): the native session's envelopes in protobuf's canonical JSON
/// mapping, one per text message; media streams' frames as binary messages, each one native frame (its 10-byte header
/// and payload), so that uploads and fetches keep their flow control. docs/PROTOCOL.md, "The WebSocket gateway".
struct WebSocketTransport: SessionTransport {
    var name: String { "websocket" }
    // Bodies are read to be written as JSON.
    var sendsRawBodies: Bool { false }
    var streamsMediaInline: Bool { false }

    /// The largest media chunk a binary message carries (the native port's frame limit).
    let maxFramePayloadBytes: Int
    /// The most a compressed message may inflate to (``ServerConfiguration/WebSocket/maxMessageBytes``): messages
    /// wait in the session's inbox compressed, and are inflated one at a time as the session takes them.
    let maxMessageBytes: Int

    /// A page cannot send WebSocket pings: `{}` (an envelope with no request and no id) is its ping, and this the
    /// answer.
    static let keepAlive = "{}"

    private static let decoding: JSONDecodingOptions = {
        var options = JSONDecodingOptions()
        // As protobuf's binary form does: a newer client's fields this server does not know are skipped.
        options.ignoreUnknownFields = true
        return options
    }()

    func interpret(_ message: WebSocketMessage) -> TransportInput<WebSocketMessage> {
        switch message {
        case .text(let bytes):
            let envelope: ClientEnvelope
            do {
                envelope = try ClientEnvelope(jsonUTF8Bytes: Array(bytes.readableBytesView), options: Self.decoding)
            } catch {
                return .violation(code: ErrorCodes.envelopeInvalid, message: "not an envelope in JSON: \(error)")
            }
            if envelope.body == nil, envelope.requestID == 0 { return .reply([.text(Self.keepAlive)]) }
            return .envelope(envelope)
        case .binary(let bytes):
            return self.interpretStream(bytes)
        case .ping(let data):
            return .reply([.pong(data)])
        case .pong:
            return .ignore
        case .close:
            return .goodbye
        case .deflated:
            do {
                return self.interpret(try message.inflated(limit: self.maxMessageBytes))
            } catch {
                return .brokenFraming(error)
            }
        }
    }

    /// A binary message: exactly one native frame of a media stream.
    private func interpretStream(_ bytes: ByteBuffer) -> TransportInput<WebSocketMessage> {
        var configuration = NativeFraming.Configuration()
        configuration.expectsPreface = false
        configuration.maxFramePayloadBytes = self.maxFramePayloadBytes
        var decoder = NativeFrameDecoder(configuration: configuration)
        var buffer = bytes
        let frame: NativeFrame
        do {
            guard let decoded = try decoder.decode(buffer: &buffer), buffer.readableBytes == 0 else {
                return .violation(
                    code: ErrorCodes.envelopeInvalid,
                    message: "a binary message must be one whole native frame"
                )
            }
            frame = decoded
        } catch {
            return .violation(code: ErrorCodes.envelopeInvalid, message: "\(error)")
        }
        return NativeTransport.streamInput(frame)
            ?? .violation(
                code: ErrorCodes.envelopeInvalid,
                message: "binary messages carry media stream frames only, not \(frame.kind)"
            )
    }

    func frames(for envelope: ServerEnvelope) throws -> [TransportOutput<WebSocketMessage>] {
        [.frame(.text(try Self.json(envelope)))]
    }

    static func json(_ envelope: ServerEnvelope) throws -> ByteBuffer {
        let bytes: [UInt8] = try envelope.jsonUTF8Bytes()
        return ByteBuffer(bytes: bytes)
    }

    func frame(for output: StreamOutput) -> WebSocketMessage? {
        guard let frame = NativeTransport().frame(for: output) else { return nil }
        return .binary(frame.bytes)
    }

    func closingFrames(code: String, message: String) -> [WebSocketMessage] {
        let envelope = ServerEnvelope.failure(code: code, message: message)
        let status: UInt16 =
            switch code {
            case ErrorCodes.envelopeInvalid, ErrorCodes.unsupported, ErrorCodes.notAuthenticated,
                ErrorCodes.authFailed, ErrorCodes.tokenExpired, ErrorCodes.throttled, ErrorCodes.authTimeout:
                WebSocketMessage.CloseCode.policyViolation
            case ErrorCodes.internalError: WebSocketMessage.CloseCode.internalError
            case ErrorCodes.shuttingDown: WebSocketMessage.CloseCode.goingAway
            case ErrorCodes.serverFull: WebSocketMessage.CloseCode.tryAgainLater
            default: WebSocketMessage.CloseCode.normal
            }
        return ((try? Self.json(envelope)).map { [.text($0)] } ?? []) + [.close(code: status, reason: code)]
    }

    /// A `framing-error` envelope, then the close code RFC 6455 gives the fault.
    func closingFrames(framingError: any Error) -> [WebSocketMessage] {
        let wire = framingError as? CourierWireError
        let status: UInt16 =
            switch wire?.code {
            case .frameTooLarge?: WebSocketMessage.CloseCode.messageTooBig
            case .inflateFailed?: WebSocketMessage.CloseCode.invalidPayload
            default: WebSocketMessage.CloseCode.protocolError
            }
        let envelope = ServerEnvelope.failure(code: ErrorCodes.framingError, message: "\(framingError)")
        let reason = wire.map { "\($0.code)" } ?? ErrorCodes.framingError
        return ((try? Self.json(envelope)).map { [.text($0)] } ?? []) + [.close(code: status, reason: reason)]
    }
}
