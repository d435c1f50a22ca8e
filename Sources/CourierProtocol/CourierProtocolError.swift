/// An error turning frames into typed messages or back.
public struct CourierProtocolError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong, as a stable code.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Hashable, Sendable {
            case envelopeInvalid = "envelope-invalid"
        }
        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// A frame's payload is not a valid envelope, or an envelope could not be serialized.
        public static let envelopeInvalid = Code(.envelopeInvalid)

        /// The code as it appears in `Error.code` and in docs/PROTOCOL.md.
        public var description: String { self.value.rawValue }
    }

    /// The error's code.
    public var code: Code
    /// A human-readable explanation.
    public var message: String

    /// Creates an error.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(self.code): \(self.message)" }
}
