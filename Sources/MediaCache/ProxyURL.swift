public import Foundation

/// The URLs a player is given: an origin URL wrapped so that the request comes to the proxy.
///
/// Two forms, both understood by the proxy:
/// - the notes' form, `http://127.0.0.1:PORT/?url=<percent-encoded origin URL>`;
/// - a path form, `http://127.0.0.1:PORT/r/<origin URL in base64url>/<the origin's last path component>`, for players
///   that decide what a resource is by its extension (`.m3u8`, `.ts`, `.mp4`); playlists are rewritten to it.
public struct ProxyURL: Sendable, Hashable {
    public var host: String
    public var port: Int

    public init(host: String = "127.0.0.1", port: Int) {
        self.host = host
        self.port = port
    }

    /// The query form.
    public func query(for origin: URL) -> URL {
        var components = URLComponents()
        components.scheme = "http"
        components.host = self.host
        components.port = self.port
        components.path = "/"
        components.percentEncodedQuery = "url=" + Self.percentEncode(origin.absoluteString)
        return components.url!
    }

    /// The path form.
    public func path(for origin: URL) -> URL {
        let encoded = Data(origin.absoluteString.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        let last =
            origin.lastPathComponent.isEmpty || origin.lastPathComponent == "/" ? "resource" : origin.lastPathComponent
        return URL(string: "http://\(self.host):\(self.port)/r/\(encoded)/\(Self.percentEncode(last))")!
    }

    /// The origin URL a proxy request names, from its path and query (either form); nil when it names none.
    public static func origin(path: String, query: String?) -> URL? {
        if path == "/" || path.isEmpty {
            guard let query else { return nil }
            for pair in query.split(separator: "&") where pair.hasPrefix("url=") {
                guard let text = String(pair.dropFirst(4)).removingPercentEncoding else { return nil }
                return URL(string: text)
            }
            return nil
        }
        let parts = path.split(separator: "/", omittingEmptySubsequences: true)
        guard parts.count >= 2, parts[0] == "r" else { return nil }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        guard let data = Data(base64Encoded: base64), let text = String(data: data, encoding: .utf8) else { return nil }
        return URL(string: text)
    }

    /// Percent-encodes everything but unreserved characters (RFC 3986), so the value survives any query or path.
    static func percentEncode(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }
}
