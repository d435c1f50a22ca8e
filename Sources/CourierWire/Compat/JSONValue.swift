import Foundation

/// A JSON value, as kept for the header keys that the compat framing does not interpret itself.
public enum JSONValue: Hashable, Sendable {
    case null
    case bool(Bool)
    /// A number with no fractional part that fits in 64 bits, however it was written (`6`, `6.0`, `6e0`).
    case integer(Int64)
    /// Any other number.
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])
}

extension JSONValue {
    /// The kind of number Foundation's JSON parser made of a JSON number.
    enum NumberKind {
        case bool
        case integer(Int64)
        case double
    }

    /// Classifies an `NSNumber` from `JSONSerialization`: booleans are `c`, fractions, exponents and integers too
    /// large for 64 bits are `d` (or an `NSDecimalNumber`), everything else is an integer.
    static func numberKind(_ number: NSNumber) -> NumberKind {
        switch UInt8(bitPattern: number.objCType.pointee) {
        case UInt8(ascii: "c"), UInt8(ascii: "B"):
            return .bool
        case UInt8(ascii: "d"), UInt8(ascii: "f"):
            return .double
        case UInt8(ascii: "Q"), UInt8(ascii: "L"), UInt8(ascii: "I"):
            return number.uint64Value > UInt64(Int64.max) ? .double : .integer(number.int64Value)
        default:
            return .integer(number.int64Value)
        }
    }

    /// Converts what `JSONSerialization` returns.
    init(foundation value: Any) {
        switch value {
        case let string as String:
            self = .string(string)
        case let number as NSNumber:
            switch Self.numberKind(number) {
            case .bool: self = .bool(number.boolValue)
            case .integer(let integer): self = .integer(integer)
            case .double:
                // JSON has one number type: keep integral values as integers, so that writing the value out
                // (`6.0` is written `6`) and reading it back gives the same value.
                // Foundation keeps long numbers as NSDecimalNumber, whose doubleValue can be an ulp off; reading its
                // decimal text gives the correctly rounded double, so writing it out and reading it back agrees.
                let double: Double
                if let decimal = number as? NSDecimalNumber, let exact = Double(decimal.stringValue) {
                    double = exact
                } else {
                    double = number.doubleValue
                }
                if double.rounded() == double, let integer = Int64(exactly: double) {
                    self = .integer(integer)
                } else {
                    self = .double(double)
                }
            }
        case let array as [Any]:
            self = .array(array.map(JSONValue.init(foundation:)))
        case let object as [String: Any]:
            self = .object(object.mapValues(JSONValue.init(foundation:)))
        default:
            self = .null
        }
    }
}

extension JSONValue: Encodable {
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}
