import CourierPostgresTesting
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import Foundation
import Testing

@Suite("Web Push delivery: a push service on loopback (PyPI's http-ece) opens what the server sends an away device")
struct PushDeliveryTests {
    /// A server that may push to loopback over plain http, retrying quickly.
    static func configure(_ configuration: inout ServerConfiguration) {
        configuration.push.allowPrivateTargets = true
        configuration.push.retryBase = .milliseconds(50)
        configuration.push.retryCap = .seconds(2)
        configuration.push.subject = "mailto:ops@courier.example"
    }

    /// Logs a device in, registers a new subscriber of the push service for it, and logs its connection off: the
    /// device is away once the store says so.
    static func awayDevice(
        _ fixture: ServerFixture,
        _ service: TestPushService,
        user: String,
        device: String,
        name: String
    ) async throws -> (token: String, endpoint: String) {
        let (client, welcome) = try await NativeTestClient.login(fixture, user, device: device)
        let subscriber = try await service.subscribe(name)
        let added = try await PushSubscriptionHTTPTests.call(
            fixture.ports.http,
            "POST",
            token: welcome.token,
            body: subscriber.json
        )
        #expect(added.status == 201, "\(added)")
        await client.close()
        try await Self.waitAway(fixture, user, device)
        return (welcome.token, subscriber.endpoint)
    }

    static func waitAway(_ fixture: ServerFixture, _ user: String, _ device: String) async throws {
        try await waitUntil("\(user)'s \(device) is away") {
            try await fixture.store.devices(of: user).first { $0.name == device }?.connectedSinceMs == nil
        }
    }

    static func pushes(
        _ service: TestPushService,
        to name: String,
        count: Int
    ) async throws
        -> [TestPushService.Push]
    {
        var found: [TestPushService.Push] = []
        try await waitUntil("\(count) pushes to \(name)") {
            found = try await service.received().filter { $0.name == name }
            return found.count >= count
        }
        return found
    }

    @Test(
        "one push per message to an away device: opened by http-ece, RFC 8030 headers, a VAPID token for the endpoint's origin; none to a device online"
    )
    func delivered() async throws {
        let service = try await TestPushService.start()
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                try await fixture.user("carol")
                try await fixture.store.createGroup(name: "family", owner: "alice", members: ["bob"], nowMs: 0)
                let (alice, _) = try await NativeTestClient.login(fixture, "alice", device: "laptop")
                let bob = try await Self.awayDevice(fixture, service, user: "bob", device: "浏览器", name: "bob")
                _ = try await Self.awayDevice(fixture, service, user: "carol", device: "web", name: "carol")

                let text = "你好 👋🏽 مرحبا\nsecond line"
                let answer = try await alice.sendText(text, to: .user("bob"), id: "m-1")
                #expect((answer.ack?.seq ?? 0) > 0)
                let direct = try #require(try await Self.pushes(service, to: "bob", count: 1).first)
                let failure = direct.error
                #expect(failure == nil, "\(failure ?? "")")
                let payload = try #require(direct.payload)
                #expect(payload["conversation"] == #"{"user":"alice"}"#)
                #expect(payload["message_id"] == "m-1")
                #expect(payload["from"] == "alice")
                #expect(payload["text"] == "你好 👋🏽 مرحبا")
                #expect(payload["previews"] == "true")
                #expect(direct.headers["content-encoding"] == "aes128gcm")
                #expect(direct.headers["ttl"] == "86400")
                #expect(direct.headers["urgency"] == "high")
                let topic = try #require(direct.headers["topic"])
                #expect(topic.count <= 32 && topic.allSatisfy { $0.isLetter || $0.isNumber || "-_".contains($0) })
                #expect(direct.vapidValid, "\(direct)")
                #expect(direct.audience == service.origin)
                #expect(direct.subject == "mailto:ops@courier.example")
                #expect(direct.vapidKey == (try await PushKeyTests.publicKey(port: fixture.ports.http)))

                // A group's message is not urgent; its topic is the group's, not the direct conversation's.
                _ = try await alice.sendText("晚饭吃什么？", to: .group("family"), id: "m-2")
                let inGroup = try await Self.pushes(service, to: "bob", count: 2)[1]
                #expect(inGroup.headers["urgency"] == "normal")
                #expect(inGroup.headers["topic"] != topic)
                #expect(inGroup.payload?["conversation"] == #"{"group":"family"}"#)

                // bob comes back: nothing is pushed to him while he is online. carol's push, sent after his
                // message, shows his message was taken and passed over.
                let (back, _) = try await NativeTestClient.resume(port: fixture.ports.native, token: bob.token)
                try await waitUntil("bob's device is online") {
                    try await fixture.store.devices(of: "bob").first { $0.name == "浏览器" }?.connectedSinceMs != nil
                }
                _ = try await alice.sendText("are you there?", to: .user("bob"), id: "m-3")
                _ = try await alice.sendText("and you?", to: .user("carol"), id: "m-4")
                _ = try await Self.pushes(service, to: "carol", count: 1)
                try await waitUntil("the outbox is empty") { try await fixture.store.pushOutbox().isEmpty }
                #expect(try await service.received().filter { $0.name == "bob" }.count == 2)
                await back.close()
                await alice.close()
            },
            configure: Self.configure
        )
    }

    @Test(
        "429 and 5xx are retried (Retry-After honoured) with the same payload; 410 drops the subscription; 400 is not retried"
    )
    func retriedAndDropped() async throws {
        let service = try await TestPushService.start()
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                let bob = try await fixture.user("bob")
                try await fixture.user("dave")
                let (alice, _) = try await NativeTestClient.login(fixture, "alice", device: "laptop")
                _ = try await Self.awayDevice(fixture, service, user: "bob", device: "phone", name: "bob")
                _ = try await Self.awayDevice(fixture, service, user: "dave", device: "phone", name: "dave")
                try await service.answer("bob", with: ["429:1", "503", "201"])
                let start = ContinuousClock.now
                _ = try await alice.sendText("ping", to: .user("bob"), id: "r-1")
                let tries = try await Self.pushes(service, to: "bob", count: 3)
                #expect(tries.map(\.status) == [429, 503, 201])
                #expect(Set(tries.compactMap { $0.payload?["message_id"] }) == ["r-1"])
                // Not before the Retry-After second.
                #expect(ContinuousClock.now - start >= .seconds(1))

                // 410: the subscription is dropped; the next message owes bob nothing.
                try await service.answer("bob", with: ["410"])
                _ = try await alice.sendText("gone?", to: .user("bob"), id: "r-2")
                _ = try await Self.pushes(service, to: "bob", count: 4)
                try await waitUntil("bob's subscription is dropped") {
                    try await fixture.store.pushSubscriptions(of: bob.id).isEmpty
                }
                _ = try await alice.sendText("after", to: .user("bob"), id: "r-3")

                // 400: given up at once, not retried.
                try await service.answer("dave", with: ["400"])
                _ = try await alice.sendText("bad", to: .user("dave"), id: "r-4")
                _ = try await Self.pushes(service, to: "dave", count: 1)
                _ = try await alice.sendText("good", to: .user("dave"), id: "r-5")
                let daves = try await Self.pushes(service, to: "dave", count: 2)
                #expect(daves.compactMap { $0.payload?["message_id"] } == ["r-4", "r-5"])
                try await waitUntil("the outbox is empty") { try await fixture.store.pushOutbox().isEmpty }
                #expect(try await service.received().filter { $0.name == "bob" }.count == 4)
                let sent = try await fixture.metric("courier_pushes_total{outcome=\"sent\"}")
                let gone = try await fixture.metric("courier_pushes_total{outcome=\"gone\"}")
                let retried = try await fixture.metric("courier_pushes_total{outcome=\"retry\"}")
                let dropped = try await fixture.metric("courier_pushes_total{outcome=\"dropped\"}")
                let counts: [Int] = [sent, gone, retried, dropped]
                #expect(counts == [2, 1, 2, 1])
                // Each message's pushes waited once (its retries are not counted); none is being sent now.
                #expect(try await fixture.metric("courier_push_wait_seconds_count") == 4)
                #expect(try await fixture.metric("courier_push_jobs_sending") == 0)
                await alice.close()
            },
            configure: Self.configure
        )
    }

    @Test(
        "a user who hides previews gets \"New message\": no text and no display name in the payload; a muted conversation nothing"
    )
    func previewsAndMutes() async throws {
        let service = try await TestPushService.start()
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                let bob = try await fixture.user("bob")
                let (alice, _) = try await NativeTestClient.login(fixture, "alice", device: "laptop")
                _ = try await Self.awayDevice(fixture, service, user: "bob", device: "phone", name: "bob")
                try await fixture.store.setPushPreviews(false, for: bob.id)
                _ = try await alice.sendText("秘密のメッセージ", to: .user("bob"), id: "p-1")
                let hidden = try #require(try await Self.pushes(service, to: "bob", count: 1).first?.payload)
                #expect(hidden["text"] == nil && hidden["from_name"] == nil && hidden["previews"] == "false")
                #expect(hidden["message_id"] == "p-1")

                try await fixture.store.setNotify(.none, in: .user("alice"), for: bob.id, nowMs: 0)
                _ = try await alice.sendText("muted", to: .user("bob"), id: "p-2")
                try await waitUntil("the outbox is empty") { try await fixture.store.pushOutbox().isEmpty }
                #expect(try await service.received().count == 1)
                await alice.close()
            },
            configure: Self.configure
        )
    }

    @Test(
        "two nodes on PostgreSQL: every message to an away device pushed exactly once, whichever node committed it",
        .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
    )
    func onceAcrossNodes() async throws {
        let service = try await TestPushService.start()
        try await ClusterFixture.with(
            nodes: 2,
            { cluster in
                for name in ["alice", "bob", "carol"] { try await cluster.user(name) }
                let ports = cluster.nodes.map(\.ports)
                // bob registers through node 1 and goes away.
                let (bobClient, bob) = try await NativeTestClient.login(port: ports[1].native, "bob", device: "手机")
                let subscriber = try await service.subscribe("bob")
                let added = try await PushSubscriptionHTTPTests.call(
                    ports[1].http,
                    "POST",
                    token: bob.token,
                    body: subscriber.json
                )
                #expect(added.status == 201, "\(added)")
                await bobClient.close()
                try await waitUntil("bob's phone is away") {
                    try await cluster.store.devices(of: "bob").first?.connectedSinceMs == nil
                }
                // alice writes through node 0, carol through node 1, at once.
                let (alice, _) = try await NativeTestClient.login(port: ports[0].native, "alice")
                let (carol, _) = try await NativeTestClient.login(port: ports[1].native, "carol")
                let count = 25
                async let fromAlice: Void = {
                    for index in 0..<count {
                        _ = try await alice.sendText("a\(index)", to: .user("bob"), id: "a-\(index)")
                    }
                }()
                async let fromCarol: Void = {
                    for index in 0..<count {
                        _ = try await carol.sendText("c\(index)", to: .user("bob"), id: "c-\(index)")
                    }
                }()
                _ = try await (fromAlice, fromCarol)
                _ = try await Self.pushes(service, to: "bob", count: 2 * count)
                try await waitUntil("the outbox is empty") { try await cluster.store.pushOutbox().isEmpty }
                let ids = try await service.received().compactMap { $0.payload?["message_id"] }
                #expect(ids.count == 2 * count)
                #expect(Set(ids) == Set((0..<count).flatMap { ["a-\($0)", "c-\($0)"] }))
                let sent = [
                    try await cluster.metric("courier_pushes_total{outcome=\"sent\"}", of: 0),
                    try await cluster.metric("courier_pushes_total{outcome=\"sent\"}", of: 1),
                ]
                #expect(sent.reduce(0, +) == 2 * count, "\(sent)")
                await alice.close()
                await carol.close()
            },
            configure: Self.configure
        )
    }
}
