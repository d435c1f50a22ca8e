import CourierTesting
import Foundation
import Testing

@testable import CourierPush

@Suite("VAPID (RFC 8292): the Authorization header a push service checks, verified with PyPI's cryptography")
struct VAPIDTests {
    /// Verifies `t` with the key in `k` as a push service does (ES256, RFC 7515/7518) and returns the JWT's header and
    /// claims; fails when the signature does not verify.
    static func verify(_ authorization: String) async throws -> (header: [String: String], claims: [String: Any]) {
        let script = """
            import base64, json, re, sys
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.asymmetric import ec, utils
            def b(s): return base64.urlsafe_b64decode(s + '=' * (-len(s) % 4))
            m = re.fullmatch(r'vapid t=([A-Za-z0-9_.-]+), k=([A-Za-z0-9_-]+)', sys.argv[1])
            token, k = m.group(1), m.group(2)
            header, claims, signature = token.split('.')
            raw = b(signature)
            assert len(raw) == 64, len(raw)
            key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b(k))
            der = utils.encode_dss_signature(int.from_bytes(raw[:32], 'big'), int.from_bytes(raw[32:], 'big'))
            key.verify(der, (header + '.' + claims).encode(), ec.ECDSA(hashes.SHA256()))
            print(json.dumps({'header': json.loads(b(header)), 'claims': json.loads(b(claims))}))
            """
        let result = try await ExternalProgram.run("/usr/bin/env", ["python3", "-c", script, authorization])
        guard result.status == 0,
            let object = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any],
            let header = object["header"] as? [String: String],
            let claims = object["claims"] as? [String: Any]
        else {
            throw ExternalProgram.Failure(description: "the token did not verify: \(result.status) \(result.errors)")
        }
        return (header, claims)
    }

    @Test(
        "the token verifies with the key it names: ES256 for the endpoint's origin, with the expiry and contact given"
    )
    func verifies() async throws {
        let key = VAPIDKey()
        let now = Int64(Date().timeIntervalSince1970)
        let expires = now + 12 * 3600
        let authorization = try key.authorization(
            for: "https://updates.push.services.mozilla.com/wpush/v2/gAAAAABk-推送?x=1",
            subject: "mailto:运维@example.com",
            nowSeconds: now
        )
        #expect(authorization.hasSuffix(", k=\(key.publicKey)"))
        let (header, claims) = try await Self.verify(authorization)
        #expect(header == ["alg": "ES256", "typ": "JWT"])
        #expect(claims["aud"] as? String == "https://updates.push.services.mozilla.com")
        #expect((claims["exp"] as? NSNumber)?.int64Value == expires)
        #expect(claims["sub"] as? String == "mailto:运维@example.com")

        // The control: another key's signature under this key's name does not verify.
        let other = try VAPIDKey().authorization(
            for: "https://push.example/x",
            subject: "mailto:a@b.c",
            nowSeconds: now
        )
        let forged = other.replacingOccurrences(
            of: String(other.split(separator: " ").last!.dropFirst(2)),
            with: key.publicKey
        )
        await #expect(throws: ExternalProgram.Failure.self) { _ = try await Self.verify(forged) }
    }

    @Test("a key kept and read back signs as the same key; it never shows its private half")
    func keptKey() async throws {
        let key = VAPIDKey()
        let again = try VAPIDKey(privateKeyBytes: key.privateKeyBytes)
        #expect(again.publicKey == key.publicKey)
        #expect(Base64URL.decode(key.publicKey)?.count == 65)
        #expect(Base64URL.decode(key.publicKey)?.first == 0x04)
        let secret = Base64URL.encode(key.privateKeyBytes)
        for shown in [key.description, key.debugDescription, String(describing: key), String(reflecting: key)] {
            #expect(!shown.contains(secret))
            #expect(shown.contains(key.publicKey))
        }
        // Signed by the key read back; a lifetime past RFC 8292's 24 hours is cut to them.
        let (_, claims) = try await Self.verify(
            try again.authorization(
                for: "https://fcm.googleapis.com/fcm/send/abc",
                subject: "https://courier.example",
                nowSeconds: 1_000,
                lifetimeSeconds: 7 * 86_400
            )
        )
        #expect((claims["exp"] as? NSNumber)?.int64Value == 1_000 + VAPIDKey.longestLifetimeSeconds)
        #expect(throws: (any Error).self) { _ = try VAPIDKey(privateKeyBytes: [UInt8](repeating: 0, count: 32)) }
        #expect(throws: (any Error).self) { _ = try VAPIDKey(privateKeyBytes: [1, 2, 3]) }
    }

    @Test("the audience is the endpoint's origin, lowercased, with its port unless it is the scheme's own")
    func audiences() {
        let cases: [(String, String?)] = [
            ("https://fcm.googleapis.com/fcm/send/abc:def", "https://fcm.googleapis.com"),
            ("HTTPS://Push.Example.COM:443/a/b", "https://push.example.com"),
            ("https://push.example:8443/x", "https://push.example:8443"),
            ("http://127.0.0.1:8080/push/1", "http://127.0.0.1:8080"),
            ("http://push.example:80/", "http://push.example"),
            ("https://[::1]:9000/x", "https://[::1]:9000"),
            ("https://user:pw@push.example/x", nil),
            ("ftp://push.example/x", nil),
            ("/relative/path", nil),
            ("https:///nohost", nil),
            ("not a url", nil),
            ("", nil),
        ]
        for (endpoint, audience) in cases {
            #expect(VAPIDKey.audience(of: endpoint) == audience, "\(endpoint)")
        }
        #expect(throws: PushError(.badEndpoint, "")) {
            _ = try VAPIDKey().authorization(for: "ftp://x/y", subject: "mailto:a@b.c", nowSeconds: 1)
        }
    }

    @Test(
        "a conversation's topic: 32 base64url characters, the same each time, different between conversations and servers"
    )
    func topics() {
        let key = VAPIDKey()
        let conversations = ["d:alice/bob", "d:alice/carol", "g:茶话会", "g:👋🏽", "g:مرحبا", ""]
        let topics = conversations.map { key.topic(for: $0) }
        for topic in topics {
            #expect(topic.count == 32)
            #expect(Base64URL.decode(topic)?.count == 24)
        }
        #expect(Set(topics).count == conversations.count)
        #expect(conversations.map { key.topic(for: $0) } == topics)
        #expect(VAPIDKey().topic(for: "d:alice/bob") != topics[0], "another server's key gives another topic")
    }
}
