import CourierServerTesting
import CourierTesting
import Foundation
import Testing

@Suite("Web Push: subscriptions registered and removed over HTTP with a device token")
struct PushSubscriptionHTTPTests {
    // A P-256 point and a 16-byte secret (RFC 8291's example keys).
    static let p256dh = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    static let auth = "BTBZMqHH6r4Tts7J_aSIgg"

    /// The status and body of a request to the subscriptions, with curl.
    static func call(
        _ port: Int,
        _ method: String,
        token: String?,
        body: String,
        path: String = "/api/v1/push/subscriptions"
    ) async throws -> (status: Int, body: String) {
        var arguments = [
            "--silent", "--show-error", "--max-time", "60", "--request", method, "--header",
            "Content-Type: application/json", "--data-binary", body, "--write-out", "\n%{http_code}",
        ]
        if let token { arguments += ["--header", "Authorization: Bearer \(token)"] }
        let output = try await HTTPTests.curl(arguments + ["http://127.0.0.1:\(port)\(path)"])
        let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
        return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
    }

    static func subscription(_ endpoint: String, p256dh: String = Self.p256dh, auth: String = Self.auth) -> String {
        #"{"endpoint":"\#(endpoint)","expirationTime":null,"keys":{"p256dh":"\#(p256dh)","auth":"\#(auth)"}}"#
    }

    /// The error code of a JSON refusal.
    static func code(_ body: String) -> String? {
        let object = try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: [String: String]]
        return object?["error"]?["code"]
    }

    @Test("a device registers an https endpoint and removes it; the rest is refused with a JSON error and its status")
    func registerAndRemove() async throws {
        try await ServerFixture.with { fixture in
            let user = try await fixture.user("alice")
            try await fixture.user("bob")
            let (_, alice) = try await NativeTestClient.login(fixture, "alice", device: "浏览器")
            let (_, bob) = try await NativeTestClient.login(fixture, "bob", device: "web")
            let port = fixture.ports.http
            let endpoint = "https://fcm.googleapis.com/fcm/send/dQw4w9WgXcQ:APA91bE-subscription_1"

            let added = try await Self.call(port, "POST", token: alice.token, body: Self.subscription(endpoint))
            #expect(added.status == 201, "\(added)")
            #expect(try await fixture.store.pushSubscriptions(of: user.id).map(\.endpoint) == [endpoint])

            for (token, body, status, code) in [
                (nil, Self.subscription(endpoint), 401, "auth-failed"),
                ("ct_nonsense", Self.subscription(endpoint), 401, "auth-failed"),
                (alice.token, "{not json", 400, "invalid-request"),
                (alice.token, Self.subscription("http://push.example/plain"), 400, "invalid-request"),
                (alice.token, Self.subscription("ftp://push.example/x"), 400, "invalid-request"),
                (alice.token, Self.subscription("/relative"), 400, "invalid-request"),
                (alice.token, Self.subscription("https://push.example/订阅"), 400, "invalid-request"),
                (alice.token, Self.subscription("https://push.example/a#b"), 400, "invalid-request"),
                (alice.token, Self.subscription("https://push.example/a b"), 400, "invalid-request"),
                (alice.token, Self.subscription("https://push%2Eexample/a"), 400, "invalid-request"),
                (alice.token, Self.subscription(endpoint, p256dh: "BCVx"), 400, "invalid-request"),
                (alice.token, Self.subscription(endpoint, auth: "AAAA"), 400, "invalid-request"),
                (
                    alice.token, String(repeating: " ", count: 9000) + Self.subscription(endpoint), 413,
                    "invalid-request"
                ),
            ] as [(String?, String, Int, String)] {
                let answer = try await Self.call(port, "POST", token: token, body: body)
                #expect(answer.status == status, "\(body.prefix(80)): \(answer)")
                #expect(Self.code(answer.body) == code, "\(body.prefix(80)): \(answer)")
            }

            let unsigned = try await Self.call(port, "DELETE", token: nil, body: #"{"endpoint":"\#(endpoint)"}"#)
            #expect(unsigned.status == 401 && Self.code(unsigned.body) == "auth-failed", "\(unsigned)")
            let garbled = try await Self.call(port, "DELETE", token: alice.token, body: "[1, 2")
            #expect(garbled.status == 400 && Self.code(garbled.body) == "invalid-request", "\(garbled)")
            // Only its user removes it; then it is gone.
            let notBobs = try await Self.call(port, "DELETE", token: bob.token, body: #"{"endpoint":"\#(endpoint)"}"#)
            #expect(notBobs.status == 404 && Self.code(notBobs.body) == "not-found", "\(notBobs)")
            let removed = try await Self.call(port, "DELETE", token: alice.token, body: #"{"endpoint":"\#(endpoint)"}"#)
            #expect(removed.status == 204, "\(removed)")
            #expect(try await fixture.store.pushSubscriptions(of: user.id).isEmpty)
            let again = try await Self.call(port, "DELETE", token: alice.token, body: #"{"endpoint":"\#(endpoint)"}"#)
            #expect(again.status == 404, "\(again)")
        }
    }

    @Test("with private targets allowed (courier serve --allow-private-targets), an http endpoint on loopback is taken")
    func privateTargets() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            let (_, alice) = try await NativeTestClient.login(fixture, "alice", device: "web")
            let answer = try await Self.call(
                fixture.ports.http,
                "POST",
                token: alice.token,
                body: Self.subscription("http://127.0.0.1:9/push/1")
            )
            #expect(answer.status == 201, "\(answer)")
        } configure: {
            $0.push.allowPrivateTargets = true
        }
    }
}
