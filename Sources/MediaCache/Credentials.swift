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
        let items = URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems ?? []
        for item in items where parameters.contains(item.name.lowercased()) {
            material.append("\(item.name.lowercased())=\(item.value ?? "")")
        }
        guard !material.isEmpty else {
            self.digest = nil
            return
        }
        let hash = SHA256.hash(data: Array(material.sorted().joined(separator: "\n").utf8))
        self.digest = hash.map { String(format: "%02x", $0) }.joined()
    }

    /// The cache key of a request: the app's key of the URL without credentials, and the credentials' digest.
    func key(_ base: String) -> String {
        self.digest.map { "\(base)#credential-sha256=\($0)" } ?? base
    }

    /// Whether a key belongs to a request that carried credentials.
    static func isPrivate(key: String) -> Bool {
        key.contains("#credential-sha256=")
    }

    /// A URL without its credential parameters (the rest of the query kept in order).
    static func stripped(_ url: URL, parameters: Set<String>) -> URL {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false),
            let items = components.percentEncodedQueryItems,
            items.contains(where: { parameters.contains($0.name.lowercased()) })
        else { return url }
        let kept = items.filter { !parameters.contains($0.name.lowercased()) }
        components.percentEncodedQueryItems = kept.isEmpty ? nil : kept
        return components.url ?? url
    }
}
