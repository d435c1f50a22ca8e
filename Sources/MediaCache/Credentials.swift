import CourierVocabulary
import Crypto
import Foundation
import NIOHTTP1

/// The credentials a player's request carries, kept out of everything the cache stores or lists.
///
/// A URL's credential parameters (``MediaCacheConfiguration/credentialParameters``) are removed before it becomes a
/// key or a record; what they and the `Authorization` and `Cookie` headers held becomes a digest that is added to the
/// key, so each credential has its own cached copy and a request without it, or with another, never reads it.
struct Credentials: Sendable, Hashable {
    /// The SHA-256 of the credential material, in hex; nil for a request without credentials.
    let digest: String?

    init(url: URL, headers: HTTPHeaders, parameters: Set<String>) {
        var material: [String] = []
        for name in ["Authorization", "Cookie"] {
            for value in headers[name] { material.append("\(name.lowercased()):\(value)") }
        }
        let components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        if let user = components?.percentEncodedUser {
            material.append("userinfo:\(user):\(components?.percentEncodedPassword ?? "")")
        }
        for item in components?.percentEncodedQueryItems ?? [] where Self.isCredential(item.name, parameters) {
            material.append("\(Self.decoded(item.name))=\(item.value.map(Self.decoded) ?? "")")
        }
        guard !material.isEmpty else {
            self.digest = nil
            return
        }
        let hash = SHA256.hash(data: Array(material.sorted().joined(separator: "\n").utf8))
        self.digest = SHA256Hex.string(hash)
    }

    /// The cache key of a request: the app's key of the URL without credentials, and the credentials' digest.
    func key(_ base: String) -> String {
        self.digest.map { "\(base)#credential-sha256=\($0)" } ?? base
    }

    /// Whether a key belongs to a request that carried credentials.
    static func isPrivate(key: String) -> Bool {
        key.contains("#credential-sha256=")
    }

    /// A URL without its credential parameters (the rest of the query kept in order) and without a user name or
    /// password before its host.
    static func stripped(_ url: URL, parameters: Set<String>) -> URL {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return url }
        let items = components.percentEncodedQueryItems ?? []
        let hasUser = components.percentEncodedUser != nil || components.percentEncodedPassword != nil
        guard hasUser || items.contains(where: { Self.isCredential($0.name, parameters) }) else { return url }
        components.percentEncodedUser = nil
        components.percentEncodedPassword = nil
        if !items.isEmpty {
            let kept = items.filter { !Self.isCredential($0.name, parameters) }
            components.percentEncodedQueryItems = kept.isEmpty ? nil : kept
        }
        if let stripped = components.url { return stripped }
        // Never the URL with its credentials: a name of its own that holds none.
        let digest = SHA256Hex.string(SHA256.hash(data: Array(url.absoluteString.utf8)))
        return URL(string: "urn:courier-stripped:\(digest)")!
    }

    /// Whether a query parameter's name, as the URL spells it, is one of the credential parameters: compared as an
    /// origin's framework would read it, decoded (`%74oken` is `token`; `+` is a space), without regard to case,
    /// without an array's or a map's brackets (`token[]`, `token[0]`), and without the characters a name cannot hold
    /// but a parser may drop (`Token%00`, ` token`, `to%0Aken`). Matching too much only keeps more out of the cache's
    /// keys and lists; matching too little would list a credential.
    static func isCredential(_ encodedName: String, _ parameters: Set<String>) -> Bool {
        parameters.contains(Self.canonicalName(encodedName))
    }

    /// A parameter name as ``isCredential(_:_:)`` compares it.
    static func canonicalName(_ encodedName: String) -> String {
        let decoded = Self.decoded(encodedName).lowercased()
        let unbracketed = decoded.split(separator: "[", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        return String(
            unbracketed.unicodeScalars.filter { scalar in
                scalar.properties.isAlphabetic || scalar.properties.numericType != nil
                    || "_-.".unicodeScalars.contains(scalar)
            }.map(Character.init)
        )
    }

    private static func decoded(_ text: String) -> String {
        let spaced = text.replacingOccurrences(of: "+", with: " ")
        return spaced.removingPercentEncoding ?? spaced
    }
}
