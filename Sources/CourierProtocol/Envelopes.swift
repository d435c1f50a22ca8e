public import CourierWire
public import NIOCore
public import SwiftProtobuf

/// What a client sends in each native `message` frame.
public typealias ClientEnvelope = Courier_V1_ClientEnvelope

/// What the server sends in each native `message` frame.
public typealias ServerEnvelope = Courier_V1_ServerEnvelope

extension NativeFrame {
    /// A `message` frame carrying one serialized envelope.
    ///
    /// - Parameters:
    ///   - envelope: The envelope to serialize.
    ///   - streamID: The stream the frame belongs to; 0, the connection, for session messages.
    ///   - allocator: Allocates the frame's buffer.
    /// - Throws: ``CourierProtocolError`` with code `envelope-invalid` if protobuf refuses to serialize it.
    public init(
        envelope: some SwiftProtobuf.Message,
        streamID: UInt32 = 0,
        allocator: ByteBufferAllocator = ByteBufferAllocator()
    ) throws {
        let bytes: [UInt8]
        do {
            bytes = try envelope.serializedBytes()
        } catch {
            throw CourierProtocolError(.envelopeInvalid, "cannot serialize \(type(of: envelope)): \(error)")
        }
        var payload = allocator.buffer(capacity: bytes.count)
        payload.writeBytes(bytes)
        self.init(kind: .message, streamID: streamID, payload: payload)
    }

    /// Parses this frame's payload as an envelope.
    ///
    /// - Parameters:
    ///   - type: The envelope type: ``ClientEnvelope`` on the server, ``ServerEnvelope`` on a client, or
    ///     `Courier_V1_Ack` in an `ack` frame.
    ///   - kind: The frame kind expected: `message`, or `ack` for a bare acknowledgement.
    /// - Returns: The envelope. Fields it does not know are kept as unknown fields and ignored.
    /// - Throws: ``CourierProtocolError`` with code `envelope-invalid` if the frame is not a `message` frame or its
    ///   payload is not a valid protobuf encoding of `type`.
    public func envelope<Envelope: SwiftProtobuf.Message>(
        as type: Envelope.Type,
        kind: NativeFrame.Kind = .message
    ) throws -> Envelope {
        guard self.kind == kind else {
            throw CourierProtocolError(.envelopeInvalid, "a \(self.kind) frame where a \(kind) frame belongs")
        }
        let payload = self.payload
        do {
            // One copy: ByteBufferView is not a SwiftProtobufContiguousBytes.
            return try Envelope(serializedBytes: Array(payload.readableBytesView))
        } catch {
            throw CourierProtocolError(.envelopeInvalid, "\(payload.readableBytes) bytes are not a \(type): \(error)")
        }
    }
}
