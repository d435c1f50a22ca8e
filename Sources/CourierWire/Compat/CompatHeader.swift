import Foundation
import NIOCore

/// The JSON header in front of every compat packet: `{"type":…,"size":…}` plus any other keys the sender chose.
public struct CompatHeader: Hashable, Sendable {
    /// What the payload is, in the sender's words: `txt`, `img`, … Required.
    public var type: String
    /// How many payload bytes follow the header's CRLF.
    public var size: Int
    /// Every other key of the header, kept as the sender wrote it (`mime`, `name`, …). Keys named `type` or `size`
    /// here are ignored when the header is written: the properties above are the header's `type` and `size`.
    public var fields: [String: JSONValue]

    /// Creates a header.
    public init(type: String, size: Int, fields: [String: JSONValue] = [:]) {
        self.type = type
        self.size = size
        self.fields = fields
    }

    /// A header field by key: `type` and `size` as well as the others.
    public subscript(key: String) -> JSONValue? {
        switch key {
        case "type": .string(self.type)
        case "size": .integer(Int64(self.size))
        default: self.fields[key]
        }
    }
}

extension CompatHeader {
    /// Parses a header from the bytes before its CRLF.
    ///
    /// Accepts compact and pretty-printed JSON. `size` may be a JSON integer or a string of decimal digits.
    /// - Throws: ``CourierWireError`` with ``CourierWireError/Code/headerNotJSON``,
    ///   ``CourierWireError/Code/headerNotObject``, ``CourierWireError/Code/typeMissing``,
    ///   ``CourierWireError/Code/sizeMissing`` or ``CourierWireError/Code/sizeInvalid``.
    static func parse(_ bytes: UnsafeRawBufferPointer) throws(CourierWireError) -> CompatHeader {
        // Valid UTF-8 JSON never holds a raw NUL; UTF-16 and UTF-32 JSON always do, and Foundation would accept them.
        guard bytes.isEmpty || memchr(bytes.baseAddress!, 0, bytes.count) == nil else {
            throw CourierWireError(.headerNotJSON, "the header is not valid UTF-8 JSON")
        }
        let data = Data(bytes)
        let object: Any
        do {
            object = try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])
        } catch {
            throw CourierWireError(.headerNotJSON, "the header is not valid UTF-8 JSON")
        }
        guard let dictionary = object as? [String: Any] else {
            throw CourierWireError(.headerNotObject, "the header is JSON but not an object")
        }
        guard let type = dictionary["type"] as? String else {
            throw CourierWireError(.typeMissing, "the header has no string \"type\"")
        }
        guard let size = dictionary["size"] else {
            throw CourierWireError(.sizeMissing, "the header has no \"size\"")
        }
        var fields: [String: JSONValue] = [:]
        if dictionary.count > 2 {
            for (key, value) in dictionary where key != "type" && key != "size" {
                fields[key] = JSONValue(foundation: value)
            }
        }
        return CompatHeader(type: type, size: try Self.size(from: size), fields: fields)
    }

    /// Reads `size`: a non-negative JSON integer, or a string of 1 to 19 decimal digits.
    private static func size(from value: Any) throws(CourierWireError) -> Int {
        // Numbers first: Courier's own encoder writes them, and a failed cast costs more than a successful one.
        if let number = value as? NSNumber {
            guard case .integer(let size) = JSONValue.numberKind(number) else {
                throw CourierWireError(.sizeInvalid, "\"size\" is a number but not an integer")
            }
            guard size >= 0 else {
                throw CourierWireError(.sizeInvalid, "\"size\" is negative (\(size))")
            }
            return Int(size)
        }
        guard let text = value as? String else {
            throw CourierWireError(.sizeInvalid, "\"size\" is neither an integer nor a string of digits")
        }
        let utf8 = text.utf8
        guard !utf8.isEmpty, utf8.count <= 19,
            utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
        else {
            throw CourierWireError(.sizeInvalid, "\"size\" is a string but not 1 to 19 decimal digits")
        }
        // 19 digits fit in 64 bits unless they are above Int64.max, which `Int(_:)` reports as nil.
        guard let size = Int(text) else {
            throw CourierWireError(.sizeInvalid, "\"size\" does not fit in 64 bits")
        }
        return size
    }

    /// Writes the header as compact JSON, keys sorted, with `size` as an integer. The output never contains CR or LF.
    func write(into buffer: inout ByteBuffer) throws {
        let data = try compatHeaderJSONEncoder.encode(self)
        buffer.writeBytes(data)
    }
}

// Thread-safe once configured; sharing it avoids an allocation per packet.
private let compatHeaderJSONEncoder: JSONEncoder = {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return encoder
}()

private struct HeaderKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

extension CompatHeader: Encodable {
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: HeaderKey.self)
        try container.encode(self.type, forKey: HeaderKey(stringValue: "type"))
        try container.encode(self.size, forKey: HeaderKey(stringValue: "size"))
        for (key, value) in self.fields where key != "type" && key != "size" {
            try container.encode(value, forKey: HeaderKey(stringValue: key))
        }
    }
}
