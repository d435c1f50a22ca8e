import CourierPostgresTesting
import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import Foundation
import Testing

@Suite(
    "Webhooks: a bot's updates signed as Standard Webhooks say (PyPI's standardwebhooks checks them), and incoming hooks"
)
struct WebhookTests {
    static func configure(_ configuration: inout ServerConfiguration) {
        PushDeliveryTests.configure(&configuration)
        configuration.api.webhookRetryBase = .milliseconds(50)
        configuration.api.webhookRetryCap = .milliseconds(200)
        configuration.api.webhookPollInterval = .milliseconds(200)
    }

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// Sets the bot's webhook to the service's receiver `name`, and tells the receiver its secret.
    static func setWebhook(
        port: Int,
        token: String,
        _ service: TestPushService,
        name: String
    ) async throws -> BotAPITests.Answer {
        let answer = try await BotAPITests.call(
            port,
            "PUT",
            "/api/v1/webhook",
            token: token,
            json: ["url": service.webhook(name)]
        )
        if let secret = answer.json["secret"] as? String { try await service.expect(secret: secret, for: name) }
        return answer
    }

    static func deliveries(
        _ service: TestPushService,
        to name: String,
        count: Int
    ) async throws
        -> [TestPushService.Push]
    {
        try await PushDeliveryTests.pushes(service, to: name, count: count)
    }

    static func messageID(_ push: TestPushService.Push) -> String? {
        guard let message = push.payload?["message"],
            let object = try? JSONSerialization.jsonObject(with: Data(message.utf8)) as? [String: Any]
        else { return nil }
        return object["id"] as? String
    }

    @Test(
        "set by a bot: each update POSTed in order, signed (standardwebhooks verifies it, and refuses it replayed six minutes later), retried with the same webhook-id; the long poll says 409 meanwhile"
    )
    func delivered() async throws {
        let service = try await TestPushService.start()
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                let token = try await fixture.store.addBot(name: "helper", owner: "alice", nowMs: Self.now())
                let port = fixture.ports.http
                let (alice, welcome) = try await NativeTestClient.login(fixture, "alice")

                // Only a bot, only an URL.
                let byUser = try await Self.setWebhook(port: port, token: welcome.token, service, name: "x")
                #expect(byUser.status == 400 && byUser.code == "invalid-request", "\(byUser)")
                let notURL = try await BotAPITests.call(
                    port,
                    "PUT",
                    "/api/v1/webhook",
                    token: token,
                    json: ["url": "ftp://example.com/x"]
                )
                #expect(notURL.status == 400, "\(notURL)")

                let set = try await Self.setWebhook(port: port, token: token, service, name: "hooky")
                #expect(set.status == 200, "\(set)")
                let secret = try #require(set.json["secret"] as? String)
                #expect(secret.hasPrefix("whsec_") && Data(base64Encoded: String(secret.dropFirst(6)))?.count == 24)
                let polled = try await BotAPITests.call(port, "GET", "/api/v1/updates", token: token)
                #expect(polled.status == 409 && polled.code == "conflict", "\(polled)")

                try await service.answer("hooky", with: ["500", "503:1"])
                for index in 1...3 {
                    _ = try await alice.sendText("第\(index)条 🔔", to: .user("helper"), id: "w-\(index)")
                }
                let received = try await Self.deliveries(service, to: "hooky", count: 5)
                #expect(received.map(\.status) == [500, 503, 200, 200, 200])
                let failures = received.compactMap(\.error)
                let signed = received.allSatisfy { $0.signatureValid }
                let replaysRefused = received.allSatisfy { $0.replayRefused }
                #expect(signed, "\(failures)")
                #expect(replaysRefused)
                // The same update until it is taken, with the same webhook-id; then the next, in order.
                #expect(received.map(Self.messageID) == ["w-1", "w-1", "w-1", "w-2", "w-3"])
                let ids = received.map { $0.headers["webhook-id"] ?? "" }
                #expect(ids[0] == ids[1] && ids[1] == ids[2] && Set(ids).count == 3, "\(ids)")
                #expect(received[0].headers["content-type"] == "application/json")
                // Recorded once the last is taken (a moment after the receiver has it).
                try await waitUntil("the deliveries recorded") {
                    let info = try await BotAPITests.call(port, "GET", "/api/v1/webhook", token: token)
                    return info.json["last_error"] == nil && info.json["failing_since_ms"] == nil
                        && (info.json["delivered_update_id"] as? Int ?? 0) > 0
                }
                let info = try await BotAPITests.call(port, "GET", "/api/v1/webhook", token: token)
                #expect(info.json["disabled"] as? Bool == false, "\(info)")

                // Removed: the long poll answers again, without what the webhook delivered.
                let removed = try await BotAPITests.call(port, "DELETE", "/api/v1/webhook", token: token)
                #expect(removed.status == 204, "\(removed)")
                let after = try await BotAPITests.call(port, "GET", "/api/v1/updates", token: token)
                #expect(after.status == 200 && BotAPITests.updates(after).isEmpty, "\(after)")
                await alice.close()
            },
            configure: Self.configure
        )
    }

    @Test(
        "the webhooks a node holds show in /metrics by state: failing while the receiver fails, then not; none once removed"
    )
    func shownInMetrics() async throws {
        let service = try await TestPushService.start()
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                let token = try await fixture.store.addBot(name: "helper", owner: "alice", nowMs: Self.now())
                let port = fixture.ports.http
                func held(_ state: String) async throws -> Int {
                    try await fixture.metric("courier_webhooks_held{state=\"\(state)\"}")
                }
                try await service.answer("shown", with: Array(repeating: "500", count: 1000))
                _ = try await Self.setWebhook(port: port, token: token, service, name: "shown")
                let (alice, _) = try await NativeTestClient.login(fixture, "alice")
                _ = try await alice.sendText("监控 📈", to: .user("helper"), id: "m-1")
                try await waitUntil("the webhook shows failing") { try await held("failing") == 1 }
                #expect(try await held("all") == 1)
                try await service.answer("shown", with: ["200"])
                try await waitUntil("the webhook no longer shows failing") { try await held("failing") == 0 }
                #expect(try await held("all") == 1)
                let removed = try await BotAPITests.call(port, "DELETE", "/api/v1/webhook", token: token)
                #expect(removed.status == 204, "\(removed)")
                try await waitUntil("the webhook is let go") { try await held("all") == 0 }
                await alice.close()
            },
            configure: Self.configure
        )
    }

    @Test(
        "a webhook failing past webhook-disable-after is turned off and its owner told by the bot; 410 turns it off at once; the long poll then has the updates"
    )
    func disabled() async throws {
        let service = try await TestPushService.start()
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                let token = try await fixture.store.addBot(name: "helper", owner: "alice", nowMs: Self.now())
                let port = fixture.ports.http
                try await service.answer("failing", with: ["200"] + Array(repeating: "500", count: 1000))
                _ = try await Self.setWebhook(port: port, token: token, service, name: "failing")
                let (bob, _) = try await NativeTestClient.login(fixture, "bob")
                // The first is taken; the second fails until the webhook is turned off.
                _ = try await bob.sendText("hi", to: .user("helper"), id: "d-0")
                _ = try await Self.deliveries(service, to: "failing", count: 1)
                _ = try await bob.sendText("hello?", to: .user("helper"), id: "d-1")
                try await waitUntil("the webhook is turned off") {
                    let info = try await BotAPITests.call(port, "GET", "/api/v1/webhook", token: token)
                    return info.json["disabled"] as? Bool == true
                }
                let info = try await BotAPITests.call(port, "GET", "/api/v1/webhook", token: token)
                #expect(info.json["last_error"] as? String == "HTTP 500", "\(info)")
                #expect(try await service.received().filter { $0.name == "failing" }.count >= 2)
                // The owner hears of it from the bot.
                let (alice, _) = try await NativeTestClient.login(fixture, "alice")
                let told = try await fixture.store.history(
                    for: try #require(try await fixture.store.user(named: "alice")).id,
                    in: .user("helper"),
                    beforeSeq: 0,
                    limit: 5
                )
                let text = told.messages.compactMap { try? Courier_V1_Body(serializedBytes: $0.body).text }
                #expect(text.count == 1 && text[0].contains("turned off the webhook of bot helper"), "\(text)")
                // Off: the long poll has what was not delivered, and not what was.
                let polled = try await BotAPITests.call(port, "GET", "/api/v1/updates", token: token)
                #expect(BotAPITests.updates(polled).map { BotAPITests.message($0)["id"] as? String } == ["d-1"])

                // Set again, and answered 410: off at once, after one attempt.
                try await service.answer("gone", with: ["410"])
                _ = try await Self.setWebhook(port: port, token: token, service, name: "gone")
                _ = try await bob.sendText("still there?", to: .user("helper"), id: "d-2")
                try await waitUntil("the webhook answered 410 is off") {
                    let info = try await BotAPITests.call(port, "GET", "/api/v1/webhook", token: token)
                    return info.json["disabled"] as? Bool == true
                }
                #expect(try await service.received().filter { $0.name == "gone" }.count == 1)
                await alice.close()
                await bob.close()
            },
            configure: { configuration in
                Self.configure(&configuration)
                configuration.api.webhookDisableAfter = .milliseconds(300)
            }
        )
    }

    @Test(
        "incoming hooks: a POST of {\"text\"} posts into the group as the bot; bad JSON, unknown and revoked hooks refused; rate-limited"
    )
    func incoming() async throws {
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                _ = try await fixture.store.addBot(name: "deploy", owner: "alice", nowMs: Self.now())
                try await fixture.store.createGroup(
                    name: "ops",
                    owner: "alice",
                    members: ["deploy"],
                    byOwner: false,
                    nowMs: Self.now()
                )
                let (token, id) = try await fixture.store.createIncomingHook(
                    group: "ops",
                    bot: "deploy",
                    nowMs: Self.now()
                )
                #expect(token.hasPrefix("hk_"))
                let port = fixture.ports.http
                let (alice, _) = try await NativeTestClient.login(fixture, "alice")
                let posted = try await BotAPITests.call(
                    port,
                    "POST",
                    "/hooks/\(token)",
                    token: nil,
                    json: ["text": "部署完成 ✅ v1.2"]
                )
                #expect(posted.status == 200 && posted.body == "ok", "\(posted)")
                let received = try await alice.messages(1)
                #expect(received.map(\.body.text) == ["部署完成 ✅ v1.2"] && received.first?.from == "deploy")
                #expect(received.first?.conversation.group == "ops")

                let bad = try await BotAPITests.call(port, "POST", "/hooks/\(token)", token: nil, raw: "{oops")
                #expect(bad.status == 400 && bad.code == "invalid-request", "\(bad)")
                let unknown = try await BotAPITests.call(
                    port,
                    "POST",
                    "/hooks/hk_nothing",
                    token: nil,
                    json: ["text": "x"]
                )
                #expect(unknown.status == 404 && unknown.code == "unknown-hook", "\(unknown)")
                // Past the hook's burst (the bad post counted): 429 with Retry-After, nothing posted.
                var statuses: [Int] = []
                for index in 0..<3 {
                    statuses.append(
                        try await BotAPITests.call(
                            port,
                            "POST",
                            "/hooks/\(token)",
                            token: nil,
                            json: ["text": "burst \(index)"]
                        ).status
                    )
                }
                #expect(statuses == [200, 429, 429], "\(statuses)")
                try await fixture.store.revokeIncomingHook(id, nowMs: Self.now())
                let revoked = try await BotAPITests.call(
                    port,
                    "POST",
                    "/hooks/\(token)",
                    token: nil,
                    json: ["text": "after"]
                )
                #expect(revoked.status == 404, "\(revoked)")
                let history = try await fixture.store.history(
                    for: try #require(try await fixture.store.user(named: "alice")).id,
                    in: .group("ops"),
                    beforeSeq: 0,
                    limit: 10
                )
                let texts = history.messages.compactMap { try? Courier_V1_Body(serializedBytes: $0.body).text }
                #expect(texts == ["burst 0", "部署完成 ✅ v1.2"], "\(texts)")
                await alice.close()
            },
            configure: { configuration in
                Self.configure(&configuration)
                configuration.api.hookPostBurst = 3
                configuration.api.hookPostsPerSecond = 0.001
            }
        )
    }

    @Test(
        "two nodes on PostgreSQL: one node at a time sends the webhook, each update once, whichever node committed it",
        .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
    )
    func acrossNodes() async throws {
        let service = try await TestPushService.start()
        try await ClusterFixture.with(
            nodes: 2,
            { cluster in
                for name in ["alice", "carol"] { try await cluster.user(name) }
                let token = try await cluster.store.addBot(name: "helper", owner: "alice", nowMs: Self.now())
                let ports = cluster.nodes.map(\.ports)
                _ = try await Self.setWebhook(port: ports[1].http, token: token, service, name: "both")
                let (alice, _) = try await NativeTestClient.login(port: ports[0].native, "alice")
                let (carol, _) = try await NativeTestClient.login(port: ports[1].native, "carol")
                let count = 15
                async let fromAlice: Void = {
                    for index in 0..<count {
                        _ = try await alice.sendText("a\(index)", to: .user("helper"), id: "a-\(index)")
                    }
                }()
                async let fromCarol: Void = {
                    for index in 0..<count {
                        _ = try await carol.sendText("c\(index)", to: .user("helper"), id: "c-\(index)")
                    }
                }()
                _ = try await (fromAlice, fromCarol)
                let received = try await Self.deliveries(service, to: "both", count: 2 * count)
                try await waitUntil("every update delivered") {
                    let info = try await BotAPITests.call(ports[0].http, "GET", "/api/v1/webhook", token: token)
                    let updates = try await cluster.store.events(
                        for: try #require(try await cluster.store.user(named: "helper")).id,
                        after: 0,
                        limit: 1000
                    )
                    return info.json["delivered_update_id"] as? Int == Int(updates.last?.cursor ?? 0)
                }
                let all = try await service.received().filter { $0.name == "both" }
                #expect(all.count == 2 * count, "\(all.count) deliveries")
                #expect(Set(all.compactMap(Self.messageID)).count == 2 * count)
                let signed = all.allSatisfy { $0.signatureValid }
                #expect(signed)
                // In each sender's order.
                let ids = received.compactMap(Self.messageID)
                for prefix in ["a-", "c-"] {
                    let mine = ids.filter { $0.hasPrefix(prefix) }
                    #expect(mine == (0..<count).map { "\(prefix)\($0)" }, "\(mine)")
                }
                await alice.close()
                await carol.close()
            },
            configure: Self.configure
        )
    }
}
