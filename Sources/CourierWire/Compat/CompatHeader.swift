import Foundation
import NIOCore

/// The JSON header in front of every compat packet: `{"type":…,"size":…}` plus any other keys the sender chose.
public struct CompatHeader: Hashable, Sendable {
    /// What the payload is, in the sender's words: `txt`, `img`, … Required.
    public var type: String
    /// How many payload bytes follow the header's CRLF.
    public var size: Int
    /// Every other key of the header, kept as the sender wrote it (`mime`, `name`, …).
    public var fields: [String: JSONValue]

    /// Creates a header.
    public init(type: String, size: Int, fields: [String: JSONValue] = [:]) {
        self.type = type
        self.size = size
        self.fields = fields
    }
}

extension CompatHeader {
    /// Parses a header from the bytes before its CRLF.
    ///
    /// Accepts compact and pretty-printed JSON. `size` may be a JSON integer or a string of decimal digits.
    /// - Throws: ``CourierWireError`` with ``CourierWireError/Code/headerNotJSON``,
    ///   ``CourierWireError/Code/headerNotObject``, ``CourierWireError/Code/typeMissing``,
    ///   ``CourierWireError/Code/sizeMissing`` or ``CourierWireError/Code/sizeInvalid``.
    static func parse(_ data: Data) throws(CourierWireError) -> CompatHeader {
        do {
            return try compatHeaderJSONDecoder.decode(CompatHeader.self, from: data)
        } catch let error as CourierWireError {
            throw error
        } catch {
            throw CourierWireError(.headerNotJSON, "the header is not valid UTF-8 JSON")
        }
    }

    /// Writes the header as compact JSON, keys sorted, with `size` as an integer. The output never contains CR or LF.
    func write(into buffer: inout ByteBuffer) throws {
        let data = try compatHeaderJSONEncoder.encode(self)
        buffer.writeBytes(data)
    }
}

// Both are thread-safe once configured; sharing them avoids an allocation per packet.
private let compatHeaderJSONDecoder = JSONDecoder()
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

    static let type = HeaderKey(stringValue: "type")
    static let size = HeaderKey(stringValue: "size")
}

extension CompatHeader: Codable {
    public init(from decoder: any Decoder) throws {
        let container: KeyedDecodingContainer<HeaderKey>
        do {
            container = try decoder.container(keyedBy: HeaderKey.self)
        } catch {
            throw CourierWireError(.headerNotObject, "the header is JSON but not an object")
        }
        guard let type = try? container.decode(String.self, forKey: .type) else {
            throw CourierWireError(.typeMissing, "the header has no string \"type\"")
        }
        guard container.contains(.size) else {
            throw CourierWireError(.sizeMissing, "the header has no \"size\"")
        }
        self.type = type
        self.size = try Self.decodeSize(container)
        var fields: [String: JSONValue] = [:]
        for key in container.allKeys where key.stringValue != "type" && key.stringValue != "size" {
            fields[key.stringValue] = try container.decode(JSONValue.self, forKey: key)
        }
        self.fields = fields
    }

    private static func decodeSize(_ container: KeyedDecodingContainer<HeaderKey>) throws -> Int {
        if let size = try? container.decode(Int.self, forKey: .size) {
            guard size >= 0 else {
                throw CourierWireError(.sizeInvalid, "\"size\" is negative (\(size))")
            }
            return size
        }
        if let text = try? container.decode(String.self, forKey: .size) {
            let utf8 = text.utf8
            guard !utf8.isEmpty, utf8.count <= 19, utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
            else {
                throw CourierWireError(.sizeInvalid, "\"size\" is a string but not 1 to 19 decimal digits")
            }
            // 19 digits always fit in Int64 except above Int64.max, which `Int(_:)` reports as nil.
            guard let size = Int(text) else {
                throw CourierWireError(.sizeInvalid, "\"size\" does not fit in 64 bits")
            }
            return size
        }
        throw CourierWireError(.sizeInvalid, "\"size\" is neither a non-negative integer nor a string of digits")
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: HeaderKey.self)
        try container.encode(self.type, forKey: .type)
        try container.encode(self.size, forKey: .size)
        for (key, value) in self.fields where key != "type" && key != "size" {
            try container.encode(value, forKey: HeaderKey(stringValue: key))
        }
    }
}
