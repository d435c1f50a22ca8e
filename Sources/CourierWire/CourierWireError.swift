/// An error from one of Courier's framings: what went wrong (``Code``), a message for people, and where it was thrown.
///
/// Codes are stable: `docs/PROTOCOL.md` lists each one and what a peer does when it sees it. Two errors are equal when
/// their codes and messages are; the source location is for logs only.
public struct CourierWireError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What kind of framing error this is. New codes may be added in any release, so switch with a `default`.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable, CaseIterable {
            case headerTooLong = "header-too-long"
            case headerNotJSON = "header-not-json"
            case headerNotObject = "header-not-object"
            case typeMissing = "type-missing"
            case sizeMissing = "size-missing"
            case sizeInvalid = "size-invalid"
            case sizeOverLimit = "size-over-limit"
            case endMarkerMissing = "end-marker-missing"
            case truncated = "truncated"
            case badPreface = "bad-preface"
            case unsupportedVersion = "unsupported-version"
            case frameTooLarge = "frame-too-large"
            case invalidFrame = "invalid-frame"
            case webSocketViolation = "websocket-violation"
            case inflateFailed = "inflate-failed"
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// Compat: no CRLF within ``CompatFraming/Configuration/maxHeaderBytes`` bytes.
        public static let headerTooLong = Code(.headerTooLong)
        /// Compat: the header is not valid UTF-8 JSON.
        public static let headerNotJSON = Code(.headerNotJSON)
        /// Compat: the header is JSON, but not an object.
        public static let headerNotObject = Code(.headerNotObject)
        /// Compat: the header has no `type`, or its `type` is not a string.
        public static let typeMissing = Code(.typeMissing)
        /// Compat: the header has no `size`.
        public static let sizeMissing = Code(.sizeMissing)
        /// Compat: `size` is neither a non-negative JSON integer nor a string of decimal digits.
        public static let sizeInvalid = Code(.sizeInvalid)
        /// Compat: `size` is over the decoder's payload limit (decided from the header alone).
        public static let sizeOverLimit = Code(.sizeOverLimit)
        /// Compat: the configured end marker does not follow the payload.
        public static let endMarkerMissing = Code(.endMarkerMissing)
        /// Both: the stream ended inside a packet or frame.
        public static let truncated = Code(.truncated)
        /// Native: the peer's first bytes are not Courier's preface (it speaks HTTP, the compat format, or noise).
        public static let badPreface = Code(.badPreface)
        /// Native: the preface names a protocol version this side does not speak.
        public static let unsupportedVersion = Code(.unsupportedVersion)
        /// Native: a frame's length is over ``NativeFraming/Configuration/maxFramePayloadBytes``. WebSocket: a message
        /// (its fragments together, or inflated) over ``WebSocketMessageCodec/Configuration/maxMessageBytes``.
        public static let frameTooLarge = Code(.frameTooLarge)
        /// Native: a control frame with the wrong payload length or on the wrong stream.
        public static let invalidFrame = Code(.invalidFrame)
        /// WebSocket: a frame that breaks RFC 6455 (unmasked from a client, a continuation with nothing to continue,
        /// a reserved bit not negotiated, a fragmented or oversized control frame).
        public static let webSocketViolation = Code(.webSocketViolation)
        /// WebSocket: a compressed message (permessage-deflate) whose bytes do not inflate.
        public static let inflateFailed = Code(.inflateFailed)

        /// Every code this version defines.
        static var all: [Code] { Base.allCases.map(Code.init) }

        /// The stable, hyphenated name of the code, as `docs/PROTOCOL.md` lists it.
        public var description: String { self.base.rawValue }
    }

    /// What kind of error this is.
    public var code: Code
    /// A description for people; it never contains payload bytes.
    public var message: String
    /// The source file that threw the error.
    public var file: String
    /// The source line that threw the error.
    public var line: Int

    /// Creates an error.
    public init(_ code: Code, _ message: String, file: String = #fileID, line: Int = #line) {
        self.code = code
        self.message = message
        self.file = file
        self.line = line
    }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.code)
        hasher.combine(self.message)
    }

    public var description: String { "\(self.code): \(self.message)" }
}
