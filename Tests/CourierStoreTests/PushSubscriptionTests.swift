import CourierStore
import Synchronization
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
            for shown in [String(describing: kept[0]), String(reflecting: kept[0]), "\(kept)"] {
                #expect(shown.contains("https://push.example/a") && !shown.contains("\(Self.auth)"), "\(shown)")
            }

            // The same browser's subscription registered by bob (another login in that browser, the same keys) is
            // his now; one who only learned the endpoint, with other keys, cannot take it.
            await #expect(throws: CourierStoreError.self) {
                try await fixture.store.addPushSubscription(
                    endpoint: "https://push.example/a",
                    p256dh: Self.key,
                    auth: [1] + Self.auth.dropFirst(),
                    for: bob,
                    nowMs: now + 2
                )
            }
            #expect(try await Self.endpoints(fixture, ids["alice"]!) == ["https://push.example/a", shared])
            try await fixture.store.addPushSubscription(
                endpoint: shared,
                p256dh: Self.key,
                auth: Self.auth,
                for: bob,
                nowMs: now + 2
            )
            #expect(try await Self.endpoints(fixture, ids["alice"]!) == ["https://push.example/a"])
            let bobs = try await fixture.store.pushSubscriptions(of: ids["bob"]!)
            #expect(bobs.map(\.endpoint) == [shared] && bobs[0].device == bob.device.id)

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
            // A device logged out cannot register again (a registration that waited past its revocation).
            await #expect(throws: CourierStoreError.self) {
                try await fixture.store.addPushSubscription(
                    endpoint: "https://push.example/c",
                    p256dh: Self.key,
                    auth: Self.auth,
                    for: phone,
                    nowMs: now + 4
                )
            }
            #expect(try await Self.endpoints(fixture, ids["alice"]!) == ["https://push.example/b"])
            // A new password logs every device out: nothing is left.
            try await fixture.store.setPassword(user: "alice", password: "新密码-2026", nowMs: now + 5)
            #expect(try await Self.endpoints(fixture, ids["alice"]!).isEmpty)
        }
    }

    @Test(
        "past a device's or a user's limit the oldest subscription makes room; an endpoint too long is refused",
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
            let clock = Mutex(StoreFixture.start)
            func add(_ endpoint: String, _ session: DeviceSession) async throws {
                let now = clock.withLock {
                    $0 += 1
                    return $0
                }
                try await fixture.store.addPushSubscription(
                    endpoint: "https://p.example/" + endpoint,
                    p256dh: Self.key,
                    auth: Self.auth,
                    for: session,
                    nowMs: now
                )
            }
            func kept() async throws -> [String] {
                try await Self.endpoints(fixture, ids["alice"]!).map {
                    String($0.dropFirst("https://p.example/".count))
                }
            }
            try await add("1", phone)
            try await add("2", phone)
            try await add("3", phone)
            #expect(try await kept() == ["2", "3"], "the device's oldest made room")
            // Registering one it has again is no new one (it is the newest now).
            try await add("2", phone)
            #expect(try await kept() == ["3", "2"])
            try await add("4", laptop)
            try await add("5", laptop)
            #expect(try await kept() == ["2", "4", "5"], "the user's oldest made room")
            let long = String(repeating: "长", count: 16)
            do {
                try await add(long, laptop)
                Issue.record("an endpoint past the limit was taken")
            } catch let error as CourierStoreError {
                #expect(error.code == .invalidRequest)
            }
            #expect(try await kept() == ["2", "4", "5"])
        }
    }
}
