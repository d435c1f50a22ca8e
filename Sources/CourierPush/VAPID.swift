internal import Crypto
internal import Foundation

/// A server's Voluntary Application Server Identification key (RFC 8292): an ECDSA P-256 key pair whose public half
/// the browser is given at subscription (`applicationServerKey`), and which signs a short JWT for each push service.
///
/// The private key is a credential: ``description`` and ``debugDescription`` show only the public key.
public struct VAPIDKey: Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The longest a token may live, by RFC 8292 §2: 24 hours.
    public static let longestLifetimeSeconds: Int64 = 86_400

    private let key: P256.Signing.PrivateKey
    /// The key of ``topic(for:)``, derived from the private key (never the signing key itself).
    private let topicKey: SymmetricKey

    /// A new key pair.
    public init() {
        self.init(key: P256.Signing.PrivateKey())
    }

    /// A key pair kept before (``privateKeyBytes``).
    ///
    /// - Throws: When the bytes are not a P-256 private scalar.
    public init(privateKeyBytes: [UInt8]) throws {
        self.init(key: try P256.Signing.PrivateKey(rawRepresentation: privateKeyBytes))
    }

    private init(key: P256.Signing.PrivateKey) {
        self.key = key
        self.topicKey = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: key.rawRepresentation),
            info: Array("courier push topics".utf8),
            outputByteCount: 32
        )
    }

    /// The `Topic` header of a conversation's pushes (RFC 8030 §5.4): a push service keeps only the newest push
    /// with a topic, so a burst in one conversation leaves one waiting. 32 characters of base64url (the RFC's most):
    /// the first 24 bytes of an HMAC of the conversation's key under a key of this server's, so that the push service
    /// cannot tell who talks by trying names.
    public func topic(for conversationKey: String) -> String {
        Base64URL.encode(
            Array(HMAC<SHA256>.authenticationCode(for: Array(conversationKey.utf8), using: self.topicKey)).prefix(24)
        )
    }

    /// The private scalar (32 bytes), to keep with the server's data, never to show.
    public var privateKeyBytes: [UInt8] { Array(self.key.rawRepresentation) }

    /// The public key as the browser takes it and `GET /api/v1/push/vapid-public-key` gives it: the uncompressed
    /// point, base64url.
    public var publicKey: String { Base64URL.encode(self.key.publicKey.x963Representation) }

    public var description: String { "VAPIDKey(public: \(self.publicKey))" }
    public var debugDescription: String { self.description }

    /// The `Authorization` header's value for a push to `endpoint`: `vapid t=<JWT>, k=<public key>`, the JWT signed
    /// with ES256 for the endpoint's origin.
    ///
    /// - Parameters:
    ///   - endpoint: The subscription's endpoint.
    ///   - subject: A contact for the push service's operator (`mailto:` or `https:`), the JWT's `sub`.
    ///   - nowSeconds: The time, in seconds since 1970.
    ///   - lifetimeSeconds: How long the token is good for, the JWT's `exp` after now: at most
    ///     ``longestLifetimeSeconds`` (longer is cut to it), at least 1.
    /// - Throws: ``PushError`` `bad-endpoint` when the endpoint has no origin.
    public func authorization(
        for endpoint: String,
        subject: String,
        nowSeconds: Int64,
        lifetimeSeconds: Int64 = 12 * 3600
    ) throws -> String {
        guard let audience = Self.audience(of: endpoint) else {
            throw PushError(.badEndpoint, "a push endpoint is an absolute http(s) URL")
        }
        let expires = nowSeconds + min(max(1, lifetimeSeconds), Self.longestLifetimeSeconds)
        return "vapid t=\(try self.token(audience: audience, subject: subject, expires: expires)), k=\(self.publicKey)"
    }

    /// A JWT (`header.claims.signature`, each base64url) for one audience.
    func token(audience: String, subject: String, expires: Int64) throws -> String {
        struct Claims: Encodable {
            var aud: String
            var exp: Int64
            var sub: String
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let header = Base64URL.encode(Array(#"{"alg":"ES256","typ":"JWT"}"#.utf8))
        let claims = Base64URL.encode(try encoder.encode(Claims(aud: audience, exp: expires, sub: subject)))
        let signingInput = "\(header).\(claims)"
        // ES256: ECDSA over SHA-256, the signature as r ‖ s (RFC 7518 §3.4), which is the raw representation.
        let signature = try self.key.signature(for: Array(signingInput.utf8))
        return "\(signingInput).\(Base64URL.encode(signature.rawRepresentation))"
    }

    /// An endpoint's origin, `scheme://host[:port]` lowercased, the port left out when it is the scheme's own; nil
    /// unless the endpoint is an absolute `https://` or `http://` URL with a host and no user part.
    public static func audience(of endpoint: String) -> String? {
        guard let components = URLComponents(string: endpoint),
            let scheme = components.scheme?.lowercased(), scheme == "https" || scheme == "http",
            let host = components.host?.lowercased(), !host.isEmpty,
            components.user == nil, components.password == nil
        else { return nil }
        let defaultPort = scheme == "https" ? 443 : 80
        let bracketed = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        if let port = components.port, port != defaultPort { return "\(scheme)://\(bracketed):\(port)" }
        return "\(scheme)://\(bracketed)"
    }
}
