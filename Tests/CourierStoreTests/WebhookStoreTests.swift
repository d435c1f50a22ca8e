import CourierStore
import Testing

@Suite("Webhooks in the store: one node at a time holds a bot's webhook; outcomes recorded only by its holder, for it")
struct WebhookStoreTests {
    @Test(
        "set by a bot only, claimed under a lease, recorded by its holder, replaced, disabled, removed",
        arguments: StoreKind.allCases
    )
    func webhooks(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = StoreFixture.start
            _ = try await fixture.users("alice")
            let token = try await store.addBot(name: "helper", owner: "alice", nowMs: now)
            let bot = try await store.authenticate(token: token, nowMs: now)
            let person = try await PushSubscriptionTests.login(fixture, "alice", "laptop")
            await #expect(throws: CourierStoreError.self) {
                _ = try await store.setWebhook(url: "https://hooks.example/a", for: person, nowMs: now)
            }
            let first = try await store.setWebhook(url: "https://hooks.example/a", for: bot, nowMs: now)
            #expect(first.secret.count == 24 && first.spelledSecret.hasPrefix("whsec_"))
            #expect(!"\(first)".contains(first.spelledSecret.dropFirst(6)))
            #expect(try await store.botOwner(of: bot.user.id) == "alice")

            // n1 holds it; n2 gets nothing until the lease ends, then takes it.
            let held = try await store.claimWebhooks(node: "n1", nowMs: now, leaseMs: 1000, limit: 10)
            #expect(held.map(\.user) == [bot.user.id])
            #expect(try await store.claimWebhooks(node: "n2", nowMs: now + 500, leaseMs: 1000, limit: 10).isEmpty)
            var row = held[0]
            row.cursor = 42
            #expect(try await store.recordWebhook(row, node: "n2") == false, "not n2's")
            #expect(try await store.recordWebhook(row, node: "n1"))
            #expect(try await store.webhook(of: bot.user.id)?.cursor == 42)
            let taken = try await store.claimWebhooks(node: "n2", nowMs: now + 1001, leaseMs: 1000, limit: 10)
            #expect(taken.map(\.cursor) == [42])
            #expect(try await store.recordWebhook(row, node: "n1") == false, "n1 lost it")

            // Replaced: the secret is new, what was delivered stays delivered, and an outcome for the old one is
            // not recorded for the new one.
            let second = try await store.setWebhook(url: "https://hooks.example/b", for: bot, nowMs: now + 2)
            #expect(second.secret != first.secret && second.cursor == 42 && second.createdMs > first.createdMs)
            var stale = taken[0]
            stale.cursor = 50
            _ = try await store.claimWebhooks(node: "n2", nowMs: now + 3, leaseMs: 1000, limit: 10)
            #expect(try await store.recordWebhook(stale, node: "n2") == false)
            // Disabled: no node takes it.
            var current = try #require(
                try await store.claimWebhooks(node: "n2", nowMs: now + 4, leaseMs: 1000, limit: 10).first
            )
            current.disabledMs = now + 4
            current.lastError = "HTTP 410"
            #expect(try await store.recordWebhook(current, node: "n2"))
            try await store.releaseWebhooks(node: "n2")
            #expect(try await store.claimWebhooks(node: "n1", nowMs: now + 5, leaseMs: 1000, limit: 10).isEmpty)
            #expect(try await store.removeWebhook(of: bot.user.id, nowMs: now + 6)?.url == "https://hooks.example/b")
            #expect(try await store.webhook(of: bot.user.id) == nil)
            #expect(try await store.removeWebhook(of: bot.user.id, nowMs: now + 6) == nil)
        }
    }

    @Test(
        "incoming hooks: made for a bot and a group, found by their secret only, listed without it, revoked",
        arguments: StoreKind.allCases
    )
    func incomingHooks(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = StoreFixture.start
            _ = try await fixture.users("alice")
            _ = try await store.addBot(name: "deploy", owner: "alice", nowMs: now)
            try await store.createGroup(name: "ops", owner: "alice", members: ["deploy"], byOwner: false, nowMs: now)
            await #expect(throws: CourierStoreError.self) {
                _ = try await store.createIncomingHook(group: "ops", bot: "alice", nowMs: now)
            }
            await #expect(throws: CourierStoreError.self) {
                _ = try await store.createIncomingHook(group: "nowhere", bot: "deploy", nowMs: now)
            }
            let (token, id) = try await store.createIncomingHook(group: "ops", bot: "deploy", nowMs: now)
            let found = try #require(try await store.incomingHook(token: token))
            #expect(found.id == id && found.bot.name == "deploy" && found.group == "ops")
            #expect(try await store.incomingHook(token: token + "x") == nil)
            #expect(try await store.incomingHook(token: "ct_" + token.dropFirst(3)) == nil)
            #expect(
                try await store.incomingHooks() == [
                    IncomingHook(id: id, bot: "deploy", group: "ops", createdMs: now, revokedMs: nil)
                ]
            )
            try await store.revokeIncomingHook(id, nowMs: now + 1)
            #expect(try await store.incomingHook(token: token) == nil)
            #expect(try await store.incomingHooks().map(\.revokedMs) == [now + 1])
            await #expect(throws: CourierStoreError.self) { try await store.revokeIncomingHook(id, nowMs: now + 2) }
        }
    }

    @Test(
        "a bot's new token drops its webhook and keeps its hooks; revoking it drops both; a removed bot's webhook is taken by no node",
        arguments: StoreKind.allCases
    )
    func revocation(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = StoreFixture.start
            _ = try await fixture.users("alice")
            let token = try await store.addBot(name: "helper", owner: "alice", nowMs: now)
            try await store.createGroup(name: "ops", owner: "alice", members: ["helper"], byOwner: false, nowMs: now)
            let bot = try await store.authenticate(token: token, nowMs: now)
            let (hook, _) = try await store.createIncomingHook(group: "ops", bot: "helper", nowMs: now)
            _ = try await store.setWebhook(url: "https://hooks.example/a", for: bot, nowMs: now)
            let renewed = try #require(try await store.revokeBotTokens(of: "helper", replacing: true, nowMs: now + 1))
            #expect(try await store.webhook(of: bot.user.id) == nil, "a stolen token's webhook goes with it")
            #expect(try await store.incomingHook(token: hook) != nil)
            let again = try await store.authenticate(token: renewed, nowMs: now + 2)
            _ = try await store.setWebhook(url: "https://hooks.example/b", for: again, nowMs: now + 2)
            try await store.revokeBotTokens(of: "helper", replacing: false, nowMs: now + 3)
            #expect(try await store.webhook(of: bot.user.id) == nil)
            #expect(try await store.incomingHook(token: hook) == nil)

            // A removed bot's webhook: no node takes it.
            let third = try #require(try await store.revokeBotTokens(of: "helper", replacing: true, nowMs: now + 4))
            _ = try await store.setWebhook(
                url: "https://hooks.example/c",
                for: try await store.authenticate(token: third, nowMs: now + 4),
                nowMs: now + 4
            )
            #expect(try await store.claimWebhooks(node: "n1", nowMs: now + 5, leaseMs: 1000, limit: 10).count == 1)
            try await store.releaseWebhooks(node: "n1")
            try await store.removeUser(named: "helper", nowMs: now + 6)
            #expect(try await store.claimWebhooks(node: "n1", nowMs: now + 7, leaseMs: 1000, limit: 10).isEmpty)
        }
    }
}
