public import NIOCore

/// The PROXY protocol's version 1 header (HAProxy's proxy-protocol.txt, 2.1), which a proxy in front (nginx's stream
/// module with `proxy_protocol on`) sends first on each connection to say whose it is:
/// `PROXY TCP4 203.0.113.7 192.0.2.1 51234 6970\r\n`, at most 107 bytes with its CRLF.
///
/// A value: fed the connection's first bytes, it says whether the header is whole, what it said and what follows
/// it, or why they are not a header. Only a proxy the server trusts is read this way; from anyone else these bytes
/// would be a client's own.
public struct ProxyHeader: Sendable, Equatable {
    /// The client's address and port, as the proxy saw them; nil for `PROXY UNKNOWN` (a proxy's own health check):
    /// the connection is the proxy's.
    public var source: (ip: String, port: Int)?

    public init(source: (ip: String, port: Int)?) {
        self.source = source
    }

    public static func == (lhs: ProxyHeader, rhs: ProxyHeader) -> Bool {
        lhs.source?.ip == rhs.source?.ip && lhs.source?.port == rhs.source?.port
    }

    /// The longest header, CRLF included (the specification's bound).
    public static let maxBytes = 107

    /// What the bytes so far make.
    public enum Outcome: Sendable, Equatable {
        /// Not whole yet; no more than ``maxBytes`` are held.
        case incomplete
        /// The header, and the bytes after it (the client's own).
        case header(ProxyHeader, rest: ByteBuffer)
        /// Not a version 1 header: why, for the log. The connection is closed.
        case invalid(String)
    }

    /// The header's bytes gathered so far.
    public struct Reader: Sendable {
        private var held = ByteBuffer()

        public init() {}

        /// Adds bytes read from the connection.
        public mutating func feed(_ bytes: ByteBuffer) -> Outcome {
            var bytes = bytes
            self.held.writeBuffer(&bytes)
            let view = self.held.readableBytesView
            // A version 2 header starts with a binary signature; a client's own bytes with anything else.
            let signature: [UInt8] = Array("PROXY ".utf8)
            let compared = min(view.count, signature.count)
            guard view.prefix(compared).elementsEqual(signature.prefix(compared)) else {
                if view.first == 0x0D {
                    return .invalid("a PROXY protocol version 2 header (only version 1 is read: nginx's own)")
                }
                return .invalid("the connection does not start with a PROXY protocol header")
            }
            guard let lineFeed = view.firstIndex(of: 0x0A) else {
                return self.held.readableBytes >= ProxyHeader.maxBytes
                    ? .invalid("a PROXY protocol header longer than \(ProxyHeader.maxBytes) bytes") : .incomplete
            }
            let length = lineFeed - view.startIndex + 1
            guard length <= ProxyHeader.maxBytes else {
                return .invalid("a PROXY protocol header longer than \(ProxyHeader.maxBytes) bytes")
            }
            guard length >= 2, view[lineFeed - 1] == 0x0D,
                let line = self.held.readString(length: length - 2)
            else { return .invalid("a PROXY protocol header that does not end with CRLF") }
            self.held.moveReaderIndex(forwardBy: 2)
            let rest = self.held.slice()
            self.held = ByteBuffer()
            return ProxyHeader.parse(line).map { .header($0, rest: rest) } ?? .invalid("a malformed PROXY header")
        }
    }

    /// Reads a header's line, without its CRLF.
    static func parse(_ line: String) -> ProxyHeader? {
        let fields = line.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        guard fields.count >= 2, fields[0] == "PROXY" else { return nil }
        if fields[1] == "UNKNOWN" { return ProxyHeader(source: nil) }
        guard fields.count == 6, fields[1] == "TCP4" || fields[1] == "TCP6" else { return nil }
        let four = fields[1] == "TCP4"
        guard let client = Self.address(fields[2], four: four), Self.address(fields[3], four: four) != nil,
            let source = Self.port(fields[4]), Self.port(fields[5]) != nil
        else { return nil }
        return ProxyHeader(source: (client, source))
    }

    /// `text` as an IPv4 address (`four`) or an IPv6 address, in its one spelling (lowercase, zeros compressed);
    /// nil when it is not one.
    static func address(_ text: String, four: Bool) -> String? {
        guard !text.contains("\0"), let address = try? SocketAddress(ipAddress: text, port: 0) else { return nil }
        switch address {
        case .v4 where four, .v6 where !four: return address.ipAddress
        default: return nil
        }
    }

    /// A port in decimal with no leading zero (the specification's form).
    static func port(_ text: String) -> Int? {
        guard !text.isEmpty, text.count <= 5, text.allSatisfy({ ("0"..."9").contains($0) }),
            text == "0" || !text.hasPrefix("0"),
            let port = Int(text), (0...65535).contains(port)
        else { return nil }
        return port
    }
}
