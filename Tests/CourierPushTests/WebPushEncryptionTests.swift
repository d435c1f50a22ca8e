import CourierTesting
import Crypto
import Foundation
import Testing

@testable import CourierPush

@Suite("Web Push message encryption (RFC 8291, aes128gcm), checked against the RFC and PyPI's http-ece")
struct WebPushEncryptionTests {
    // RFC 8291, section 5 and Appendix A: the worked example's keys, salt and body.
    static let plaintext = "When I grow up, I want to be a watermelon"
    static let userAgentPublic =
        "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    static let authSecret = "BTBZMqHH6r4Tts7J_aSIgg"
    static let senderPrivate = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
    static let salt = "DGv6ra1nlYgDCS1FRnbzlw"
    static let body =
        "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"

    @Test("RFC 8291's worked example (Appendix A), byte for byte")
    func rfcExample() throws {
        let keys = try PushSubscriptionKeys(p256dh: Self.userAgentPublic, auth: Self.authSecret)
        let sender = try P256.KeyAgreement.PrivateKey(rawRepresentation: Base64URL.decode(Self.senderPrivate)!)
        let body = try WebPushEncryption.encrypt(
            Array(Self.plaintext.utf8),
            for: keys,
            paddedTo: 0,
            sender: sender,
            salt: Base64URL.decode(Self.salt)!
        )
        #expect(Base64URL.encode(body) == Self.body)
    }

    @Test(
        "every push takes a fresh key and salt: the same payload to the same subscriber never repeats a byte of header"
    )
    func freshEachTime() throws {
        let keys = try PushSubscriptionKeys(p256dh: Self.userAgentPublic, auth: Self.authSecret)
        let first = try WebPushEncryption.encrypt(Array("你好".utf8), for: keys)
        let second = try WebPushEncryption.encrypt(Array("你好".utf8), for: keys)
        #expect(first.count == second.count)
        #expect(first.prefix(16) != second.prefix(16), "the salts")
        #expect(first[21..<86] != second[21..<86], "the ephemeral keys")
        #expect(first[86...] != second[86...])
    }

    /// Opens a push's body with http-ece (PyPI), as a browser would: the subscriber's private key and auth secret.
    static func openWithHTTPECE(_ body: [UInt8], privateKey: [UInt8], auth: [UInt8]) async throws -> [UInt8] {
        let script = """
            import base64, sys
            import http_ece
            from cryptography.hazmat.primitives.asymmetric import ec
            def b(s): return base64.urlsafe_b64decode(s + '=' * (-len(s) % 4))
            key = ec.derive_private_key(int.from_bytes(b(sys.argv[1]), 'big'), ec.SECP256R1())
            out = http_ece.decrypt(b(sys.argv[3]), private_key=key, auth_secret=b(sys.argv[2]), version='aes128gcm')
            sys.stdout.write(base64.urlsafe_b64encode(out).decode().rstrip('='))
            """
        let result = try await ExternalProgram.run(
            "/usr/bin/env",
            ["python3", "-c", script, Base64URL.encode(privateKey), Base64URL.encode(auth), Base64URL.encode(body)]
        )
        guard result.status == 0, let opened = Base64URL.decode(result.output.trimmingCharacters(in: .whitespaces))
        else {
            throw ExternalProgram.Failure(
                description: "http-ece (scripts/test installs it from PyPI) failed: \(result.status) \(result.errors)"
            )
        }
        return opened
    }

    @Test(
        "http-ece (PyPI) opens what is sealed: Chinese, Japanese, emoji and right-to-left text, padded or not, up to the largest payload",
        arguments: [
            ("你好，世界！今晚一起吃火锅吗？", 0),
            ("こんにちは、元気ですか", 256),
            ("👋🏽👨‍👩‍👧‍👦🇨🇳", 0),
            ("مرحبا بالعالم — שלום עולם", 100),
            ("", 0),
            (String(repeating: "長", count: WebPushEncryption.maxPayload / 3), 0),
        ]
    )
    func openedByHTTPECE(text: String, paddedTo: Int) async throws {
        let subscriber = P256.KeyAgreement.PrivateKey()
        var auth = [UInt8](repeating: 0, count: 16)
        for index in auth.indices { auth[index] = UInt8.random(in: 0...255) }
        let keys = try PushSubscriptionKeys(p256dh: Array(subscriber.publicKey.x963Representation), auth: auth)
        let payload = Array(text.utf8)
        let body = try WebPushEncryption.encrypt(payload, for: keys, paddedTo: paddedTo)
        #expect(body.count == WebPushEncryption.headerSize + max(payload.count, paddedTo) + 1 + 16)
        #expect(body.count <= WebPushEncryption.recordSize)
        let opened = try await Self.openWithHTTPECE(
            body,
            privateKey: Array(subscriber.rawRepresentation),
            auth: auth
        )
        #expect(opened == payload, "subscriber \(Base64URL.encode(subscriber.rawRepresentation)), auth \(auth)")

        // The control: one flipped bit of the record, or another subscriber's secret, and http-ece refuses it.
        var tampered = body
        tampered[tampered.count - 20] ^= 0x01
        await #expect(throws: ExternalProgram.Failure.self) {
            _ = try await Self.openWithHTTPECE(tampered, privateKey: Array(subscriber.rawRepresentation), auth: auth)
        }
        var otherAuth = auth
        otherAuth[0] ^= 0x80
        await #expect(throws: ExternalProgram.Failure.self) {
            _ = try await Self.openWithHTTPECE(body, privateKey: Array(subscriber.rawRepresentation), auth: otherAuth)
        }
    }

    @Test("a payload that fills the 4,096-byte record is taken; one byte more is refused before any work")
    func payloadLimit() throws {
        let keys = try PushSubscriptionKeys(p256dh: Self.userAgentPublic, auth: Self.authSecret)
        #expect(WebPushEncryption.maxPayload == 3993)
        let full = try WebPushEncryption.encrypt(
            [UInt8](repeating: 0x61, count: WebPushEncryption.maxPayload),
            for: keys
        )
        #expect(full.count == WebPushEncryption.recordSize)
        #expect(throws: PushError(.payloadTooLarge, "")) {
            _ = try WebPushEncryption.encrypt(
                [UInt8](repeating: 0x61, count: WebPushEncryption.maxPayload + 1),
                for: keys
            )
        }
        // Padding never takes the record past its size.
        let padded = try WebPushEncryption.encrypt(Array("短".utf8), for: keys, paddedTo: 1_000_000)
        #expect(padded.count == WebPushEncryption.recordSize)
    }

    @Test("subscription keys that are not what they claim are refused")
    func badKeys() throws {
        let point = Base64URL.decode(Self.userAgentPublic)!
        let auth = Base64URL.decode(Self.authSecret)!
        var offCurve = point
        offCurve[64] ^= 0x01
        let compressed = Array(try P256.KeyAgreement.PublicKey(x963Representation: point).compressedRepresentation)
        let cases: [(String, () throws -> PushSubscriptionKeys)] = [
            ("not base64url", { try PushSubscriptionKeys(p256dh: "BCVx+sr7/N", auth: Self.authSecret) }),
            ("auth not base64url", { try PushSubscriptionKeys(p256dh: Self.userAgentPublic, auth: "你好") }),
            ("empty", { try PushSubscriptionKeys(p256dh: "", auth: "") }),
            ("a point off the curve", { try PushSubscriptionKeys(p256dh: offCurve, auth: auth) }),
            ("a compressed point", { try PushSubscriptionKeys(p256dh: compressed, auth: auth) }),
            ("a point one byte short", { try PushSubscriptionKeys(p256dh: Array(point.dropLast()), auth: auth) }),
            ("auth of 15 bytes", { try PushSubscriptionKeys(p256dh: point, auth: Array(auth.dropLast())) }),
            ("auth of 17 bytes", { try PushSubscriptionKeys(p256dh: point, auth: auth + [0]) }),
        ]
        for (name, make) in cases {
            #expect(throws: PushError.self, "\(name)") { _ = try make() }
            do {
                _ = try make()
            } catch let error as PushError {
                #expect(error.code == .badSubscriptionKeys, "\(name)")
            }
        }
        #expect(try PushSubscriptionKeys(p256dh: Self.userAgentPublic + "=", auth: Self.authSecret + "==").auth == auth)
        // The secret never shows in what the keys print.
        let keys = try PushSubscriptionKeys(p256dh: point, auth: auth)
        for shown in [String(describing: keys), String(reflecting: keys)] {
            #expect(!shown.contains(Self.authSecret) && shown.contains(Self.userAgentPublic))
        }
    }

    @Test("base64url: what is encoded decodes back, whatever the length; what is not base64url is refused")
    func base64URL() {
        let seed = TestSeed.make(for: "WebPushEncryptionTests.base64URL")
        var random = SeededRandom(seed: seed)
        for length in 0..<70 {
            var bytes: [UInt8] = []
            random.appendBytes(length, to: &bytes)
            let text = Base64URL.encode(bytes)
            #expect(!text.contains("=") && !text.contains("+") && !text.contains("/"))
            #expect(
                text
                    == Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                    .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            )
            #expect(Base64URL.decode(text) == bytes, "seed \(seed), length \(length)")
        }
        #expect(Base64URL.decode("QQ==") == [0x41] && Base64URL.decode("QUI=") == [0x41, 0x42])
        for bad in ["A", "AAAAA", "AB=C", "A B", "ab+/", "中文", "AB\u{0}", "AR", "AAAA====", "QQ=", "QUI==", "="] {
            #expect(Base64URL.decode(bad) == nil, "\(bad)")
        }
    }
}
