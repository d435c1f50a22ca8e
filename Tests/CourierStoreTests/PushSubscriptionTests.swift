import CourierStore
import Testing

@Suite("Web Push subscriptions: kept per device, moved by endpoint, bounded, dropped with their device")
struct PushSubscriptionTests {
    static let key = [UInt8](repeating: 4, count: 65)
    static let auth = [UInt8](repeating: 7, count: 16)

    static func login(_ fixture: StoreFixture, _ name: String, _ device: String) async throws -> DeviceSession {
        try await fixture.store.login(
            user: name,
            password: "pw-" + name,
            deviceName: device,
            renewing: nil,
            reusing: nil,
            nowMs: StoreFixture.start
        )
    }

    static func endpoints(_ fixture: StoreFixture, _ user: UserID) async throws -> [String] {
        try await fixture.store.pushSubscriptions(of: user).map(\.endpoint)
    }

    @Test(
        "registered, moved to the device that registers it again, removed only by its user, dropped when its device is revoked",
        arguments: StoreKind.allCases
    )
    func lifecycle(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let phone = try await Self.login(fixture, "alice", "手机")
            let laptop = try await Self.login(fixture, "alice", "ノートPC")
            let bob = try await Self.login(fixture, "bob", "浏览器")
            let now = StoreFixture.start
            let shared = "https://push.example/wpush/v2/共享"
            try await fixture.store.addPushSubscription(
                endpoint: "https://push.example/a",
                p256dh: Self.key,
                auth: Self.auth,
                for: phone,
                nowMs: now
            )
            try await fixture.store.addPushSubscription(
                endpoint: shared,
                p256dh: Self.key,
                auth: Self.auth,
                for: laptop,
                nowMs: now + 1
            )
            let kept = try await fixture.store.pushSubscriptions(of: ids["alice"]!)
            #expect(kept.map(\.endpoint) == ["https://push.example/a", shared])
            #expect(kept[0].device == phone.device.id && kept[1].device == laptop.device.id)
            #expect(kept[0].p256dh == Self.key && kept[0].auth == Self.auth)

            // The same browser's subscription registered by bob (another login in that browser) is his now.
            try await fixture.store.addPushSubscription(
                endpoint: shared,
                p256dh: Self.key,
                auth: [1] + Self.auth.dropFirst(),
                for: bob,
                nowMs: now + 2
            )
            #expect(try await Self.endpoints(fixture, ids["alice"]!) == ["https://push.example/a"])
            let bobs = try await fixture.store.pushSubscriptions(of: ids["bob"]!)
            #expect(bobs.map(\.endpoint) == [shared] && bobs[0].auth.first == 1 && bobs[0].device == bob.device.id)

            // Only its user removes it.
            #expect(try await fixture.store.removePushSubscription(endpoint: shared, for: phone) == false)
            #expect(try await Self.endpoints(fixture, ids["bob"]!) == [shared])
            #expect(try await fixture.store.removePushSubscription(endpoint: shared, for: bob))
            #expect(try await Self.endpoints(fixture, ids["bob"]!).isEmpty)

            // A revoked device is pushed nothing: its subscriptions go with it, the user's others stay.
            try await fixture.store.addPushSubscription(
                endpoint: "https://push.example/b",
                p256dh: Self.key,
                auth: Self.auth,
                for: laptop,
                nowMs: now + 3
            )
            try await fixture.store.revokeDevice(phone.device.id, of: "alice", nowMs: now + 4)
            #expect(try await Self.endpoints(fixture, ids["alice"]!) == ["https://push.example/b"])
            // A new password logs every device out: nothing is left.
            try await fixture.store.setPassword(user: "alice", password: "新密码-2026", nowMs: now + 5)
            #expect(try await Self.endpoints(fixture, ids["alice"]!).isEmpty)
        }
    }

    @Test(
        "a device's and a user's subscriptions are bounded, and so is an endpoint's length",
        arguments: StoreKind.allCases
    )
    func limits(kind: StoreKind) async throws {
        var limits = StoreLimits()
        limits.maxPushSubscriptionsPerDevice = 2
        limits.maxPushSubscriptionsPerUser = 3
        limits.maxPushEndpointBytes = 64
        try await StoreFixture.with(kind, limits: limits) { fixture in
            let ids = try await fixture.users("alice")
            let phone = try await Self.login(fixture, "alice", "phone")
            let laptop = try await Self.login(fixture, "alice", "laptop")
            let now = StoreFixture.start
            func add(_ endpoint: String, _ session: DeviceSession) async throws {
                try await fixture.store.addPushSubscription(
                    endpoint: endpoint,
                    p256dh: Self.key,
                    auth: Self.auth,
                    for: session,
                    nowMs: now
                )
            }
            try await add("https://p.example/1", phone)
            try await add("https://p.example/2", phone)
            await #expect(throws: CourierStoreError.self) { try await add("https://p.example/3", phone) }
            // Registering one it has again is no new one.
            try await add("https://p.example/2", phone)
            try await add("https://p.example/3", laptop)
            await #expect(throws: CourierStoreError.self) { try await add("https://p.example/4", laptop) }
            #expect(try await Self.endpoints(fixture, ids["alice"]!).count == 3)
            let long = "https://p.example/" + String(repeating: "长", count: 16)
            #expect(long.utf8.count > 64)
            #expect(try await fixture.store.removePushSubscription(endpoint: "https://p.example/3", for: laptop))
            await #expect(throws: CourierStoreError.self) { try await add(long, laptop) }
            #expect(try await Self.endpoints(fixture, ids["alice"]!).count == 2)
        }
    }
}
