public import NIOCore

/// One whole WebSocket message, as ``WebSocketMessageCodec`` reads and writes it: fragments joined, per-message
/// deflate undone, masks removed. Control messages (ping, pong, close) are carried too, so that what answers them can
/// count them as the peer's activity.
public enum WebSocketMessage: Hashable, Sendable {
    /// A text message: UTF-8 bytes (checked by the reader that parses them).
    case text(ByteBuffer)
    /// A binary message.
    case binary(ByteBuffer)
    /// A ping, with its application data (at most 125 bytes).
    case ping(ByteBuffer)
    /// A pong, with the application data of the ping it answers.
    case pong(ByteBuffer)
    /// The close handshake: a status code (nil when the frame had none) and a reason (at most 123 bytes of UTF-8).
    case close(code: UInt16?, reason: String)
    /// A compressed text or binary message not inflated yet (``WebSocketMessageCodec/Configuration/inflatesLazily``):
    /// its reader inflates it when it takes it (``inflated(limit:)``), so that what waits unread stays compressed.
    case deflated(text: Bool, ByteBuffer)
}

extension WebSocketMessage {
    /// The message with a ``deflated(text:_:)`` one inflated (at most `limit` bytes); any other as it is.
    ///
    /// - Throws: ``CourierWireError`` `frameTooLarge` past the limit, `inflateFailed` for bytes that are not deflate.
    public func inflated(limit: Int) throws -> WebSocketMessage {
        guard case .deflated(let text, let bytes) = self else { return self }
        let inflated = try DeflateStreams.current.inflate(bytes, limit: limit, allocator: ByteBufferAllocator())
        return text ? .text(inflated) : .binary(inflated)
    }

    /// A text message of `string`'s UTF-8 bytes.
    public static func text(_ string: String) -> WebSocketMessage {
        .text(ByteBuffer(string: string))
    }

    /// Close status codes of RFC 6455, section 7.4.1, that Courier sends.
    public enum CloseCode {
        /// The purpose of the connection was fulfilled (a logout, a goodbye).
        public static let normal: UInt16 = 1000
        /// The server is going away (stopping) or the peer left.
        public static let goingAway: UInt16 = 1001
        /// The peer broke the WebSocket protocol.
        public static let protocolError: UInt16 = 1002
        /// A text message that is not UTF-8, or a compressed one that does not inflate.
        public static let invalidPayload: UInt16 = 1007
        /// The peer broke Courier's rules over a sound WebSocket (an invalid envelope, a refused login).
        public static let policyViolation: UInt16 = 1008
        /// A message over the size limit.
        public static let messageTooBig: UInt16 = 1009
        /// The server failed.
        public static let internalError: UInt16 = 1011
        /// The server is restarting, or full: try again later.
        public static let tryAgainLater: UInt16 = 1013
    }
}
