import CourierPostgresTesting
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import Foundation
import Testing

/// The HTTP API's limits: request rates per user and per address, body sizes, updates per poll, polls per user.
extension BotAPITests {
    @Test("a user's request rate: past its burst, 429 rate-limited with Retry-After")
    func rate() async throws {
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                let token = try await fixture.store.addBot(name: "helper", owner: "alice", nowMs: Self.now())
                var statuses: [Int] = []
                var limited: Answer?
                for _ in 0..<4 {
                    let answer = try await Self.call(fixture.ports.http, "GET", "/api/v1/me", token: token)
                    statuses.append(answer.status)
                    if answer.status == 429 { limited = answer }
                }
                #expect(statuses.prefix(2) == [200, 200] && statuses.contains(429), "\(statuses)")
                #expect(limited?.code == "rate-limited" && limited?.headers["retry-after"] != nil)
            },
            configure: { configuration in
                configuration.api.requestsPerSecond = 0.01
                configuration.api.requestBurst = 2
            }
        )
    }

    @Test("an address's request rate, counted before the token: past its burst, 429 whatever the token")
    func addressRate() async throws {
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                let first = try await fixture.store.addBot(name: "helper", owner: "alice", nowMs: Self.now())
                let second = try await fixture.store.addBot(name: "other", owner: "alice", nowMs: Self.now())
                var statuses: [Int] = []
                for token in [first, second, "ct_unknown", second] {
                    statuses.append(try await Self.call(fixture.ports.http, "GET", "/api/v1/me", token: token).status)
                }
                #expect(statuses == [200, 200, 401, 429], "\(statuses)")
            },
            configure: { configuration in
                configuration.api.requestsPerSecondPerAddress = 0.01
                configuration.api.requestBurstPerAddress = 3
            }
        )
    }

    @Test("the body, updates-per-poll, polls-per-user and hook-body limits: 413, a short page, 409, 413")
    func sizeAndPollLimits() async throws {
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                let token = try await fixture.store.addBot(name: "helper", owner: "alice", nowMs: Self.now())
                let port = fixture.ports.http
                let long = try await Self.call(
                    port,
                    "POST",
                    "/api/v1/messages",
                    token: token,
                    json: ["to": "alice", "text": String(repeating: "长", count: 400)]
                )
                #expect(long.status == 413, "\(long)")
                let (alice, _) = try await NativeTestClient.login(fixture, "alice")
                for index in 1...3 { _ = try await alice.sendText("第\(index)条", to: .user("helper"), id: "l-\(index)") }
                let page = Self.updates(try await Self.call(port, "GET", "/api/v1/updates", token: token))
                #expect(page.map { Self.message($0)["id"] as? String } == ["l-1", "l-2"])
                let last = try await Self.call(
                    port,
                    "GET",
                    "/api/v1/updates?offset=\(page[1]["update_id"] as? Int ?? 0)",
                    token: token
                )
                let rest = Self.updates(last)
                #expect(rest.map { Self.message($0)["id"] as? String } == ["l-2", "l-3"])
                let lastID = try #require(rest.last?["update_id"] as? Int)
                async let waiting = Self.call(
                    port,
                    "GET",
                    "/api/v1/updates?offset=\(lastID + 1)&timeout=50",
                    token: token
                )
                try await waitUntil("the first poll waits") {
                    try await Self.call(port, "GET", "/metrics", token: nil).body.contains(
                        "courier_api_polls_waiting 1"
                    )
                }
                let second = try await Self.call(port, "GET", "/api/v1/updates?timeout=1", token: token)
                #expect(second.status == 409 && second.code == "conflict", "\(second)")
                _ = try await alice.sendText("醒醒", to: .user("helper"), id: "l-4")
                #expect(Self.updates(try await waiting).map { Self.message($0)["id"] as? String } == ["l-4"])

                try await fixture.store.createGroup(
                    name: "ops",
                    owner: "alice",
                    members: ["helper"],
                    byOwner: false,
                    nowMs: Self.now()
                )
                let (hook, _) = try await fixture.store.createIncomingHook(
                    group: "ops",
                    bot: "helper",
                    nowMs: Self.now()
                )
                let big = try await Self.call(
                    port,
                    "POST",
                    "/hooks/\(hook)",
                    token: nil,
                    json: ["text": String(repeating: "🚀", count: 40)]
                )
                #expect(big.status == 413, "\(big)")
                await alice.close()
            },
            configure: { configuration in
                configuration.api.maxBodyBytes = 1024
                configuration.api.maxUpdatesPerPoll = 2
                configuration.api.maxPollsPerUser = 1
                configuration.api.maxHookBodyBytes = 64
            }
        )
    }
}
