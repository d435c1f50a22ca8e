import CourierStore
import Testing

@Suite(
    "Bots in the store: a user of kind bot with an owner, a token that does not expire, revoked by its owner's command"
)
struct BotStoreTests {
    @Test(
        "made with a token, shown as a bot in profiles, listed with its owner; tokens renewed and revoked",
        arguments: StoreKind.allCases
    )
    func lifecycle(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = StoreFixture.start
            _ = try await fixture.users("alice")
            let token = try await store.addBot(name: "Helper-1", owner: "alice", nowMs: now)
            let session = try await store.authenticate(token: token, nowMs: now)
            #expect(session.user.name == "Helper-1")
            // A bot's token does not expire with the users' tokens.
            let years = Int64(50) * 365 * 86_400_000
            #expect(try await store.authenticate(token: token, nowMs: now + years).user.id == session.user.id)
            #expect(try await store.isBot(session.user.id))
            let alice = try #require(try await store.user(named: "alice"))
            #expect(try await store.isBot(alice.id) == false)
            let profiles = try await store.profiles(of: ["helper-1", "alice"], for: nil)
            #expect(profiles.map(\.user) == ["Helper-1", "alice"] && profiles.map(\.bot) == [true, false])
            // A display name set later keeps it a bot.
            try await store.setProfile(of: session.user.id, ProfileUpdate(displayName: "助手 🤖"), nowMs: now + 1)
            let named = try await store.profiles(of: ["Helper-1"], for: nil)
            #expect(named.first?.displayName == "助手 🤖" && named.first?.bot == true)

            // Names follow the users' rules: taken in any case, or reading as another's.
            for (name, owner) in [
                ("helper-1", "alice"), ("HELPER-l", "alice"), ("other", "nobody"), ("other", "Helper-1"),
            ] {
                await #expect(throws: CourierStoreError.self, "\(name) owned by \(owner)") {
                    _ = try await store.addBot(name: name, owner: owner, nowMs: now)
                }
            }
            var bots = try await store.bots(nowMs: now)
            #expect(bots == [Bot(name: "Helper-1", owner: "alice", createdMs: now, removedMs: nil, tokens: 1)])

            // A new token ends the old; revoking ends every one; neither is for a person's account.
            let second = try #require(try await store.revokeBotTokens(of: "helper-1", replacing: true, nowMs: now + 2))
            await #expect(throws: CourierStoreError.self) {
                _ = try await store.authenticate(token: token, nowMs: now + 3)
            }
            #expect(try await store.authenticate(token: second, nowMs: now + 3).user.id == session.user.id)
            try await store.revokeBotTokens(of: "Helper-1", replacing: false, nowMs: now + 4)
            await #expect(throws: CourierStoreError.self) {
                _ = try await store.authenticate(token: second, nowMs: now + 5)
            }
            bots = try await store.bots(nowMs: now + 5)
            #expect(bots.map(\.tokens) == [0])
            await #expect(throws: CourierStoreError.self) {
                try await store.revokeBotTokens(of: "alice", replacing: true, nowMs: now + 6)
            }
            // No password logs a bot in.
            await #expect(throws: CourierStoreError.self) {
                _ = try await store.login(
                    user: "Helper-1",
                    password: "",
                    deviceName: "x",
                    renewing: nil,
                    reusing: nil,
                    nowMs: now + 7
                )
            }
        }
    }
}
