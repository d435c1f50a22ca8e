/// A media type as RFC 9110 (section 8.3.1) spells it: one `type/subtype` and its parameters, never a list.
///
/// Courier keeps and serves only the ``canonical`` spelling: the type and subtype and the parameters' names in lower
/// case, each parameter after `"; "`, a value as a token where it is one and quoted otherwise. Anything the grammar
/// does not take — a second type after a comma (`image/png, text/html`, which a browser reads as its last type), bytes
/// outside printable ASCII, a parameter without a value, a parameter named twice — is no media type at all.
public struct MediaType: Hashable, Sendable, CustomStringConvertible {
    /// The type, in lower case (`image`).
    public let type: String
    /// The subtype, in lower case (`png`).
    public let subtype: String
    /// The parameters in the order given, names in lower case, values unquoted.
    public let parameters: [(name: String, value: String)]

    /// Parses `text` by RFC 9110's grammar (whitespace around it and around each `;` allowed), or nil.
    public init?(_ text: some StringProtocol) {
        var parser = Parser(bytes: Array(text.utf8))
        parser.skipSpace()
        guard let type = parser.token(), parser.take(UInt8(ascii: "/")), let subtype = parser.token() else {
            return nil
        }
        var parameters: [(name: String, value: String)] = []
        while true {
            parser.skipSpace()
            if parser.isAtEnd { break }
            guard parser.take(UInt8(ascii: ";")) else { return nil }
            parser.skipSpace()
            // `*( OWS ";" OWS [ parameter ] )`: an empty one (`text/plain;`) is allowed, and dropped.
            if parser.isAtEnd || parser.peek == UInt8(ascii: ";") { continue }
            guard let name = parser.token(), parser.take(UInt8(ascii: "=")),
                let value = parser.token() ?? parser.quotedString()
            else { return nil }
            let lowered = name.lowercased()
            guard !parameters.contains(where: { $0.name == lowered }) else { return nil }
            parameters.append((lowered, value))
        }
        self.type = type.lowercased()
        self.subtype = subtype.lowercased()
        self.parameters = parameters
    }

    /// `type/subtype`, without parameters: what decides how the bytes are read.
    public var essence: String { "\(self.type)/\(self.subtype)" }

    /// The one spelling Courier stores and serves.
    public var canonical: String {
        var text = self.essence
        for (name, value) in self.parameters {
            text += "; \(name)="
            if !value.isEmpty, value.utf8.allSatisfy(Parser.isTokenByte) {
                text += value
            } else {
                text += "\""
                for character in value {
                    if character == "\"" || character == "\\" { text += "\\" }
                    text.append(character)
                }
                text += "\""
            }
        }
        return text
    }

    public var description: String { self.canonical }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.canonical == rhs.canonical }
    public func hash(into hasher: inout Hasher) { hasher.combine(self.canonical) }

    /// The canonical spelling of `text`, or nil when it is no media type.
    public static func canonical(_ text: some StringProtocol) -> String? { MediaType(text)?.canonical }

    private struct Parser {
        let bytes: [UInt8]
        var index = 0

        var isAtEnd: Bool { self.index == self.bytes.count }
        var peek: UInt8? { self.isAtEnd ? nil : self.bytes[self.index] }

        /// `tchar` (RFC 9110, section 5.6.2).
        static func isTokenByte(_ byte: UInt8) -> Bool {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "A")...UInt8(ascii: "Z"):
                return true
            default:
                return Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
            }
        }

        mutating func skipSpace() {
            while let byte = self.peek, byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") { self.index += 1 }
        }

        mutating func take(_ byte: UInt8) -> Bool {
            guard self.peek == byte else { return false }
            self.index += 1
            return true
        }

        mutating func token() -> String? {
            let start = self.index
            while let byte = self.peek, Self.isTokenByte(byte) { self.index += 1 }
            guard self.index > start else { return nil }
            return String(decoding: self.bytes[start..<self.index], as: UTF8.self)
        }

        /// A quoted string's content, unescaped: printable ASCII and spaces only (no tab, no `obs-text`).
        mutating func quotedString() -> String? {
            guard self.take(UInt8(ascii: "\"")) else { return nil }
            var content: [UInt8] = []
            while let byte = self.peek {
                self.index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return String(decoding: content, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    guard let escaped = self.peek, (0x20...0x7E).contains(escaped) else { return nil }
                    self.index += 1
                    content.append(escaped)
                case 0x20...0x7E:
                    content.append(byte)
                default:
                    return nil
                }
            }
            return nil
        }
    }
}
