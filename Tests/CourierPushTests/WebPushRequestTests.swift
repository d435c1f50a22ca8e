import CourierTesting
import Crypto
import Foundation
import Testing

@testable import CourierPush

@Suite("A push as the push service takes it (RFC 8030): headers, a sealed body, a signed Authorization")
struct WebPushRequestTests {
    @Test(
        "the headers a push service reads; the body opens with http-ece; the token verifies for the endpoint's origin"
    )
    func request() async throws {
        let subscriber = P256.KeyAgreement.PrivateKey()
        let auth = Array((0..<16).map { UInt8($0 * 13 & 0xFF) })
        let keys = try PushSubscriptionKeys(p256dh: Array(subscriber.publicKey.x963Representation), auth: auth)
        let key = VAPIDKey()
        let payload = Array(#"{"conversation":"g:茶话会","from":"小明","text":"今晚吃火锅 🍲"}"#.utf8)
        let topic = key.topic(for: "g:茶话会")
        let now = Int64(Date().timeIntervalSince1970)
        let push = try WebPushRequest(
            payload: payload,
            endpoint: "https://updates.push.services.mozilla.com/wpush/v2/gAAAA",
            keys: keys,
            key: key,
            subject: "mailto:ops@courier.example",
            urgency: .high,
            topic: topic,
            ttlSeconds: 90 * 86_400,
            nowSeconds: now
        )
        #expect(push.header("content-encoding") == "aes128gcm")
        #expect(push.header("Content-Type") == "application/octet-stream")
        #expect(push.header("Content-Length") == String(push.body.count))
        #expect(push.header("TTL") == String(WebPushRequest.longestTTLSeconds), "cut to four weeks")
        #expect(push.header("Urgency") == "high")
        #expect(push.header("Topic") == topic && topic.count <= 32)
        let opened = try await WebPushEncryptionTests.openWithHTTPECE(
            push.body,
            privateKey: Array(subscriber.rawRepresentation),
            auth: auth
        )
        #expect(opened == payload)
        let (_, claims) = try await VAPIDTests.verify(try #require(push.header("Authorization")))
        #expect(claims["aud"] as? String == "https://updates.push.services.mozilla.com")
        let expires = try #require((claims["exp"] as? NSNumber)?.int64Value)
        #expect(expires > now && expires <= now + VAPIDKey.longestLifetimeSeconds)
    }

    @Test("no topic, no Topic header; a normal push; a TTL below zero is zero")
    func plain() throws {
        let keys = try PushSubscriptionKeys(
            p256dh: "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
            auth: "BTBZMqHH6r4Tts7J_aSIgg"
        )
        let push = try WebPushRequest(
            payload: Array("New message".utf8),
            endpoint: "https://fcm.googleapis.com/fcm/send/x",
            keys: keys,
            key: VAPIDKey(),
            subject: "mailto:ops@courier.example",
            urgency: .normal,
            topic: nil,
            ttlSeconds: -5,
            nowSeconds: 1_000
        )
        #expect(push.header("Topic") == nil)
        #expect(push.header("Urgency") == "normal")
        #expect(push.header("TTL") == "0")
        #expect(push.headers.map(\.name).filter { $0 == "Authorization" }.count == 1)
        #expect(throws: PushError(.badEndpoint, "")) {
            _ = try WebPushRequest(
                payload: [1],
                endpoint: "ftp://x/y",
                keys: keys,
                key: VAPIDKey(),
                subject: "mailto:a@b.c",
                urgency: .low,
                topic: nil,
                ttlSeconds: 60,
                nowSeconds: 1
            )
        }
    }
}
