import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import Foundation
import Testing

@Suite(
    "A push gateway for phones (Matrix's Push Gateway API): notify bodies from the outbox, retries, rejected pushkeys"
)
struct PushGatewayTests {
    static let path = "/api/v1/push/gateways"

    static func register(
        _ fixture: ServerFixture,
        token: String,
        appID: String = "org.example.courier.ios",
        pushkey: String,
        url: String
    ) async throws -> (status: Int, body: String) {
        let body = try JSONSerialization.data(withJSONObject: ["app_id": appID, "pushkey": pushkey, "url": url])
        return try await PushSubscriptionHTTPTests.call(
            fixture.ports.http,
            "POST",
            token: token,
            body: String(decoding: body, as: UTF8.self),
            path: Self.path
        )
    }

    /// The members of a JSON object given as compact JSON (as the service lists a notification's).
    static func object(_ json: String?) -> [String: Any] {
        (json.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) } as? [String: Any]) ?? [:]
    }

    @Test(
        "registered over HTTP (checked, 401 without a token); an away phone's gateway gets the notify body: event, room, sender, unread, prio"
    )
    func notified() async throws {
        let service = try await TestPushService.start()
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                let bob = try await fixture.user("bob")
                try await fixture.store.createGroup(name: "family", owner: "alice", members: ["bob"], nowMs: 0)
                let (alice, _) = try await NativeTestClient.login(fixture, "alice", device: "laptop")
                let (phone, welcome) = try await NativeTestClient.login(fixture, "bob", device: "iPhone")
                let url = service.gateway("sygnal")

                // Refused: no token; not an URL; a pushkey with a space; a body that is not the shape.
                let refusals = [
                    try await PushSubscriptionHTTPTests.call(
                        fixture.ports.http,
                        "POST",
                        token: nil,
                        body: #"{"app_id":"a","pushkey":"k","url":"\#(url)"}"#,
                        path: Self.path
                    ),
                    try await Self.register(fixture, token: welcome.token, pushkey: "k", url: "ftp://x/notify"),
                    try await Self.register(fixture, token: welcome.token, pushkey: "a b", url: url),
                    try await PushSubscriptionHTTPTests.call(
                        fixture.ports.http,
                        "POST",
                        token: welcome.token,
                        body: #"{"app_id":"a"}"#,
                        path: Self.path
                    ),
                ]
                #expect(refusals.map(\.status) == [401, 400, 400, 400], "\(refusals)")
                let codes = refusals.map { PushSubscriptionHTTPTests.code($0.body) }
                #expect(codes == ["auth-failed", "invalid-request", "invalid-request", "invalid-request"])
                #expect(try await fixture.store.pushSubscriptions(of: bob.id).isEmpty)

                let added = try await Self.register(fixture, token: welcome.token, pushkey: "apns-bob", url: url)
                #expect(added.status == 201, "\(added)")
                await phone.close()
                try await PushDeliveryTests.waitAway(fixture, "bob", "iPhone")

                _ = try await alice.sendText("你好，bob 👋\nsecond line", to: .user("bob"), id: "n-1")
                // The badge counts what is unread when the push is made: the second message waits for the first.
                _ = try await PushDeliveryTests.pushes(service, to: "sygnal", count: 1)
                _ = try await alice.sendText("晚饭？", to: .group("family"), id: "n-2")
                let pushes = try await PushDeliveryTests.pushes(service, to: "sygnal", count: 2)
                let failure = pushes.compactMap(\.error).first
                #expect(failure == nil, "\(failure ?? "")")
                let first = try #require(pushes[0].payload)
                #expect(first["event_id"] == "n-1")
                #expect(first["room_id"] == "u:alice")
                #expect(first["sender"] == "alice")
                #expect(first["prio"] == "high")
                #expect(Self.object(first["content"])["body"] as? String == "你好，bob 👋")
                #expect(Self.object(first["counts"])["unread"] as? Int == 1)
                let listed = Data((first["devices"] ?? "").utf8)
                let devices = (try? JSONSerialization.jsonObject(with: listed)) as? [[String: Any]]
                #expect(devices?.count == 1)
                #expect(devices?.first?["app_id"] as? String == "org.example.courier.ios")
                #expect(devices?.first?["pushkey"] as? String == "apns-bob")
                #expect(pushes[0].headers["content-type"] == "application/json")
                let second = try #require(pushes[1].payload)
                #expect(second["event_id"] == "n-2" && second["room_id"] == "g:family" && second["prio"] == "low")
                #expect(Self.object(second["counts"])["unread"] as? Int == 2)

                // Hidden previews: the event and the room only, as Matrix's event_id_only format sends.
                try await fixture.store.setPushPreviews(false, for: bob.id)
                _ = try await alice.sendText("秘密", to: .user("bob"), id: "n-3")
                let third = try await PushDeliveryTests.pushes(service, to: "sygnal", count: 3)[2]
                let hidden = try #require(third.payload)
                #expect(hidden["event_id"] == "n-3" && hidden["sender"] == nil && hidden["content"] == nil)
                await alice.close()
            },
            configure: PushDeliveryTests.configure
        )
    }

    @Test(
        "5xx retried with the same event; 404 drops the push and keeps the pushkey; a pushkey the gateway rejects is dropped; a revoked device's goes"
    )
    func retriedRejectedRevoked() async throws {
        let service = try await TestPushService.start()
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                let bob = try await fixture.user("bob")
                let carol = try await fixture.user("carol")
                let (alice, _) = try await NativeTestClient.login(fixture, "alice", device: "laptop")
                let (bobPhone, bobWelcome) = try await NativeTestClient.login(fixture, "bob", device: "phone")
                let (carolPhone, carolWelcome) = try await NativeTestClient.login(fixture, "carol", device: "phone")
                #expect(
                    try await Self.register(
                        fixture,
                        token: bobWelcome.token,
                        pushkey: "fcm-bob",
                        url: service.gateway("bobs")
                    ).status == 201
                )
                #expect(
                    try await Self.register(
                        fixture,
                        token: carolWelcome.token,
                        pushkey: "fcm-carol",
                        url: service.gateway("carols")
                    ).status == 201
                )
                await bobPhone.close()
                await carolPhone.close()
                try await PushDeliveryTests.waitAway(fixture, "bob", "phone")
                try await PushDeliveryTests.waitAway(fixture, "carol", "phone")

                try await service.answer("bobs", with: ["503", "404", "200:rejected"])
                _ = try await alice.sendText("one", to: .user("bob"), id: "r-1")
                let tries = try await PushDeliveryTests.pushes(service, to: "bobs", count: 2)
                #expect(tries.map(\.status) == [503, 404])
                #expect(tries.compactMap { $0.payload?["event_id"] } == ["r-1", "r-1"])
                #expect(try await fixture.store.pushSubscriptions(of: bob.id).count == 1, "404 keeps the pushkey")
                _ = try await alice.sendText("two", to: .user("bob"), id: "r-2")
                _ = try await PushDeliveryTests.pushes(service, to: "bobs", count: 3)
                try await waitUntil("the rejected pushkey is dropped") {
                    try await fixture.store.pushSubscriptions(of: bob.id).isEmpty
                }
                // carol's device is revoked: her gateway hears of nothing more.
                _ = try await alice.sendText("before", to: .user("carol"), id: "c-1")
                _ = try await PushDeliveryTests.pushes(service, to: "carols", count: 1)
                let device = try #require(try await fixture.store.devices(of: "carol").first)
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                try await fixture.store.revokeDevice(device.id, of: "carol", nowMs: now)
                #expect(try await fixture.store.pushSubscriptions(of: carol.id).isEmpty)
                _ = try await alice.sendText("after", to: .user("carol"), id: "c-2")
                _ = try await alice.sendText("three", to: .user("bob"), id: "r-3")
                try await waitUntil("the outbox is empty") { try await fixture.store.pushOutbox().isEmpty }
                let all = try await service.received()
                #expect(all.filter { $0.name == "carols" }.count == 1)
                #expect(all.filter { $0.name == "bobs" }.count == 3)
                await alice.close()
            },
            configure: PushDeliveryTests.configure
        )
    }
}
