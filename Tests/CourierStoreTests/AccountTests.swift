import CourierStore
import CourierTesting
import Foundation
import Testing

@Suite("Accounts, devices and tokens")
struct AccountTests {
    @Test("scrypt hashes carry their parameters, verify the right password and nothing else")
    func passwordHashes() throws {
        let stored = try PasswordHasher.standard.hash("correct horse")
        let parts = stored.split(separator: "$")
        #expect(parts.prefix(4) == ["scrypt", "15", "8", "1"])
        #expect(Data(base64Encoded: String(parts[4]))?.count == 16)
        #expect(Data(base64Encoded: String(parts[5]))?.count == 32)
        #expect(PasswordHasher.verify("correct horse", against: stored))
        #expect(!PasswordHasher.verify("correct horsf", against: stored))
        #expect(!PasswordHasher.verify("", against: stored))
        // The same password hashes differently each time (a fresh salt).
        #expect(try PasswordHasher.standard.hash("correct horse") != stored)
        // A damaged or foreign stored value never verifies.
        #expect(
            !PasswordHasher.verify(
                "correct horse",
                against: stored.replacingOccurrences(of: "scrypt$15", with: "scrypt$14")
            )
        )
        #expect(!PasswordHasher.verify("correct horse", against: "plain:correct horse"))
        #expect(!PasswordHasher.verify("correct horse", against: ""))
    }

    @Test("user names follow the rule and are unique without regard to case", arguments: StoreKind.allCases)
    func names(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            _ = try await fixture.store.addUser(name: "Alice", password: "x", nowMs: 1)
            for bad in ["", "-alice", "al ice", "al/ice", "ålice", String(repeating: "a", count: 33)] {
                await #expect(throws: CourierStoreError.self) {
                    _ = try await fixture.store.addUser(name: bad, password: "x", nowMs: 1)
                }
            }
            do {
                _ = try await fixture.store.addUser(name: "alice", password: "x", nowMs: 1)
                Issue.record("a second alice was created")
            } catch let error as CourierStoreError {
                #expect(error.code == .nameTaken)
            }
            #expect(try await fixture.store.users().map(\.name) == ["Alice"])
            #expect(try await fixture.store.user(named: "ALICE")?.name == "Alice")
        }
    }

    @Test(
        "a password login makes a device whose token authenticates until it expires or is revoked",
        arguments: StoreKind.allCases
    )
    func tokens(kind: StoreKind) async throws {
        var limits = StoreLimits()
        limits.tokenLifetime = .seconds(60)
        try await StoreFixture.with(kind, limits: limits) { fixture in
            let ids = try await fixture.users("alice")
            let now = StoreFixture.start
            let phone = try await fixture.store.login(
                user: "alice",
                password: "pw-alice",
                deviceName: "phone",
                nowMs: now
            )
            let laptop = try await fixture.store.login(
                user: "alice",
                password: "pw-alice",
                deviceName: "laptop",
                nowMs: now
            )
            let phoneToken = try #require(phone.token)
            let laptopToken = try #require(laptop.token)
            #expect(phoneToken != laptopToken && phoneToken.hasPrefix("ct_"))
            #expect(phone.user.id == ids["alice"])

            let session = try await fixture.store.authenticate(token: phoneToken, nowMs: now + 59_000)
            #expect(session.device.id == phone.device.id && session.device.name == "phone" && session.token == nil)
            await expectCode(.tokenExpired) {
                _ = try await fixture.store.authenticate(token: phoneToken, nowMs: now + 60_000)
            }
            await expectCode(.authFailed) {
                _ = try await fixture.store.authenticate(token: phoneToken + "x", nowMs: now)
            }

            // Revoking one device leaves the other working.
            try await fixture.store.revokeDevice(phone.device.id, of: "alice", nowMs: now + 1)
            await expectCode(.tokenRevoked) {
                _ = try await fixture.store.authenticate(token: phoneToken, nowMs: now + 2)
            }
            #expect(
                try await fixture.store.authenticate(token: laptopToken, nowMs: now + 2).device.id == laptop.device.id
            )
            let devices = try await fixture.store.devices(of: "alice")
            #expect(devices.map(\.name) == ["phone", "laptop"])
            #expect(devices.map { $0.revokedMs != nil } == [true, false])
            // The token itself is stored nowhere: only its hash (the check itself finds a name, as a control).
            #expect(try await fixture.holdsText("laptop"))
            #expect(try await !fixture.holdsText(laptopToken))
        }
    }

    @Test(
        "a login with the token it held renews that device (even expired); a revoked or another user's does not",
        arguments: StoreKind.allCases
    )
    func renewal(kind: StoreKind) async throws {
        var limits = StoreLimits()
        limits.tokenLifetime = .seconds(60)
        try await StoreFixture.with(kind, limits: limits) { fixture in
            try await fixture.users("alice", "bob")
            let now = StoreFixture.start
            let first = try await fixture.store.login(
                user: "alice",
                password: "pw-alice",
                deviceName: "laptop",
                nowMs: now
            )
            let old = try #require(first.token)
            // Past the old token's expiry: the login renews the same device, with a new token and expiry.
            let renewed = try await fixture.store.login(
                user: "alice",
                password: "pw-alice",
                deviceName: "laptop (again)",
                renewing: old,
                nowMs: now + 120_000
            )
            let new = try #require(renewed.token)
            #expect(renewed.device.id == first.device.id && renewed.device.name == "laptop" && new != old)
            #expect(renewed.device.expiresMs == now + 180_000)
            // The renewal never makes the expired token good again.
            await expectCode(.tokenExpired) {
                _ = try await fixture.store.authenticate(token: old, nowMs: now + 120_001)
            }
            #expect(try await fixture.store.authenticate(token: new, nowMs: now + 120_001).device.id == first.device.id)
            await expectCode(.authFailed) { _ = try await fixture.store.authenticate(token: old, nowMs: now + 120_001) }
            #expect(try await fixture.store.devices(of: "alice").count == 1)
            // A wrong password renews nothing: the token still works.
            await expectCode(.authFailed) {
                _ = try await fixture.store.login(
                    user: "alice",
                    password: "wrong",
                    deviceName: "x",
                    renewing: new,
                    nowMs: now + 120_002
                )
            }
            #expect(try await fixture.store.authenticate(token: new, nowMs: now + 120_003).device.id == first.device.id)
            // Another user's token, or a revoked device's: a new device.
            let bobs = try await fixture.store.login(
                user: "bob",
                password: "pw-bob",
                deviceName: "bob's",
                renewing: new,
                nowMs: now + 120_004
            )
            #expect(bobs.device.id != first.device.id)
            #expect(try await fixture.store.authenticate(token: new, nowMs: now + 120_005).device.id == first.device.id)
            try await fixture.store.revokeDevice(first.device.id, of: "alice", nowMs: now + 120_006)
            let fresh = try await fixture.store.login(
                user: "alice",
                password: "pw-alice",
                deviceName: "laptop",
                renewing: new,
                nowMs: now + 120_007
            )
            #expect(fresh.device.id != first.device.id)
            #expect(try await fixture.store.devices(of: "alice").count == 2)
        }
    }

    @Test(
        "after a renewal the previous token works until the new one is used, the grace ends, or it expires",
        arguments: StoreKind.allCases
    )
    func renewalGrace(kind: StoreKind) async throws {
        var limits = StoreLimits()
        limits.tokenLifetime = .seconds(3600)
        limits.renewalGrace = .seconds(60)
        try await StoreFixture.with(kind, limits: limits) { fixture in
            try await fixture.users("alice")
            let now = StoreFixture.start
            let first = try await fixture.store.login(user: "alice", password: "pw-alice", deviceName: "d", nowMs: now)
            let a = try #require(first.token)
            func renew(_ token: String, at ms: Int64) async throws -> DeviceSession {
                try await fixture.store.login(
                    user: "alice",
                    password: "pw-alice",
                    deviceName: "d",
                    renewing: token,
                    nowMs: ms
                )
            }
            func device(_ token: String, at ms: Int64) async throws -> DeviceID {
                try await fixture.store.authenticate(token: token, nowMs: ms).device.id
            }
            // Renewed while good: both tokens work, the old one with its own expiry.
            let second = try await renew(a, at: now + 1_000)
            let b = try #require(second.token)
            #expect(second.renewed && second.device.id == first.device.id)
            let viaOld = try await fixture.store.authenticate(token: a, nowMs: now + 2_000)
            #expect(viaOld.device.id == first.device.id && viaOld.device.expiresMs == now + 3_600_000)
            // The answer was lost: the client renews with the old token again; the old one still works, the lost
            // one does not.
            let third = try await renew(a, at: now + 3_000)
            let c = try #require(third.token)
            #expect(third.device.id == first.device.id)
            #expect(try await device(a, at: now + 4_000) == first.device.id)
            await expectCode(.authFailed) { _ = try await device(b, at: now + 4_000) }
            // Past the grace, the old token stops working.
            await expectCode(.authFailed) { _ = try await device(a, at: now + 1_000 + 60_000) }
            #expect(try await device(c, at: now + 1_000 + 60_000) == first.device.id)

            // Renewed, then abandoned (the new token never reached the client): the old token is the token again,
            // with its own expiry, past the grace; the new one is gone.
            let fourth = try await renew(c, at: now + 100_000)
            let d = try #require(fourth.token)
            try await fixture.store.abandonRenewal(of: first.device.id)
            await expectCode(.authFailed) { _ = try await device(d, at: now + 100_001) }
            let back = try await fixture.store.authenticate(token: c, nowMs: now + 500_000)
            #expect(back.device.id == first.device.id && back.device.expiresMs == now + 3_000 + 3_600_000)
            await expectCode(.tokenExpired) { _ = try await device(c, at: now + 3_000 + 3_600_000) }

            // Renewed, then the new token used: the old one stops at once, inside the grace.
            let fifth = try await renew(c, at: now + 600_000)
            let e = try #require(fifth.token)
            #expect(try await device(c, at: now + 600_001) == first.device.id)
            #expect(try await device(e, at: now + 600_002) == first.device.id)
            await expectCode(.authFailed) { _ = try await device(c, at: now + 600_003) }
            #expect(try await fixture.store.devices(of: "alice").count == 1)
        }
    }

    @Test("wrong passwords, unknown and removed users all fail with auth-failed", arguments: StoreKind.allCases)
    func wrongCredentials(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            try await fixture.users("alice", "bob")
            let now = StoreFixture.start
            await expectCode(.authFailed) {
                _ = try await fixture.store.login(user: "alice", password: "pw-bob", deviceName: "d", nowMs: now)
            }
            await expectCode(.authFailed) {
                _ = try await fixture.store.login(user: "carol", password: "pw-carol", deviceName: "d", nowMs: now)
            }
            let bob = try await fixture.store.login(user: "bob", password: "pw-bob", deviceName: "d", nowMs: now)
            try await fixture.store.removeUser(named: "bob", nowMs: now + 1)
            await expectCode(.authFailed) {
                _ = try await fixture.store.login(user: "bob", password: "pw-bob", deviceName: "d", nowMs: now)
            }
            await expectCode(.tokenRevoked) {
                _ = try await fixture.store.authenticate(token: bob.token!, nowMs: now + 2)
            }
            // The name stays taken.
            await expectCode(.nameTaken) { _ = try await fixture.store.addUser(name: "bob", password: "x", nowMs: now) }
        }
    }

    @Test(
        "a user has at most max-devices-per-user devices that can connect: one more logs out the one used longest ago, never the password; renewal, revoked and expired ones do not count",
        arguments: StoreKind.allCases
    )
    func devicesPerUser(kind: StoreKind) async throws {
        var limits = StoreLimits()
        limits.maxDevicesPerUser = 3
        limits.tokenLifetime = .seconds(3600)
        try await StoreFixture.with(kind, limits: limits) { fixture in
            try await fixture.users("alice", "bob")
            let now = StoreFixture.start
            let login = { @Sendable (user: String, device: String, renewing: String?, at: Int64) in
                try await fixture.store.login(
                    user: user,
                    password: "pw-" + user,
                    deviceName: device,
                    renewing: renewing,
                    nowMs: at
                )
            }
            func usable(_ user: String, at: Int64) async throws -> [String] {
                try await fixture.store.devices(of: user).filter { $0.revokedMs == nil && $0.expiresMs > at }.map(
                    \.name
                )
            }
            var sessions: [DeviceSession] = []
            for name in ["手机", "laptop", "tablet"] { sessions.append(try await login("alice", name, nil, now)) }
            // A fourth: the oldest (none seen, the first made) is logged out, and its token stops working.
            _ = try await login("alice", "new phone", nil, now + 1)
            #expect(try await usable("alice", at: now + 1) == ["laptop", "tablet", "new phone"])
            await expectCode(.tokenRevoked) {
                _ = try await fixture.store.authenticate(token: sessions[0].token!, nowMs: now + 1)
            }
            // Another user is not concerned; a renewal makes no device and logs none out.
            _ = try await login("bob", "phone", nil, now + 1)
            let renewed = try await login("alice", "laptop", sessions[1].token, now + 2)
            #expect(renewed.device.id == sessions[1].device.id)
            #expect(try await usable("alice", at: now + 2).count == 3)
            // A revoked device frees a place: the next login logs nobody out.
            try await fixture.store.revokeDevice(sessions[2].device.id, of: "alice", nowMs: now + 3)
            _ = try await login("alice", "new laptop", nil, now + 4)
            #expect(try await usable("alice", at: now + 4) == ["laptop", "new phone", "new laptop"])
            // Expired ones do not count; renewing one makes it usable again, which counts as one more.
            let later = now + 3_600_000 + 10
            for name in ["later", "x", "y"] { _ = try await login("alice", name, nil, later) }
            _ = try await login("alice", "laptop", renewed.token, later)
            #expect(try await usable("alice", at: later) == ["laptop", "x", "y"])
            // Ten logins at once for bob: every one gets in, and bob is left with three devices.
            let results = await withTaskGroup(of: Bool.self) { group in
                for index in 0..<10 {
                    group.addTask { (try? await login("bob", "d\(index)", nil, now + 10)) != nil }
                }
                return await group.reduce(into: [Bool]()) { $0.append($1) }
            }
            #expect(results.allSatisfy { $0 }, "\(results)")
            #expect(try await usable("bob", at: now + 10).count == 3)
        }
    }

    @Test(
        "a client that keeps no token takes its device over again: by its own name, or the oldest idle one of a name",
        arguments: StoreKind.allCases
    )
    func devicesReused(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            try await fixture.users("carol")
            let now = StoreFixture.start
            let login = { @Sendable (reuse: DeviceReuse, name: String, at: Int64) in
                try await fixture.store.login(
                    user: "carol",
                    password: "pw-carol",
                    deviceName: name,
                    renewing: nil,
                    reusing: reuse,
                    nowMs: at
                )
            }
            // A hundred logins of a client without a name, none connected: one device throughout.
            var last: DeviceSession?
            var previous: DeviceSession?
            for index in 0..<100 {
                previous = last
                last = try await login(.idle(named: "compat"), "compat", now + Int64(index))
            }
            let devices = try await fixture.store.devices(of: "carol")
            #expect(devices.count == 1 && devices[0].name == "compat", "\(devices)")
            // Each login gave a new token; the one before it stopped working.
            _ = try await fixture.store.authenticate(token: last!.token!, nowMs: now + 200)
            await expectCode(.authFailed) {
                _ = try await fixture.store.authenticate(token: previous!.token!, nowMs: now + 200)
            }
            // Named clients: each its own device, again and again.
            let phone = try await login(.named("compat/phone-1"), "compat/phone-1", now + 300)
            let phoneAgain = try await login(.named("compat/phone-1"), "compat/phone-1", now + 301)
            let tablet = try await login(.named("compat/tablet"), "compat/tablet", now + 302)
            #expect(phone.device.id == phoneAgain.device.id && tablet.device.id != phone.device.id)
            await expectCode(.authFailed) {
                _ = try await fixture.store.authenticate(token: phone.token!, nowMs: now + 303)
            }
            // A revoked device is never taken over: a new one is made.
            try await fixture.store.revokeDevice(phone.device.id, of: "carol", nowMs: now + 304)
            let fresh = try await login(.named("compat/phone-1"), "compat/phone-1", now + 305)
            #expect(fresh.device.id != phone.device.id)
            #expect(try await fixture.store.devices(of: "carol").count == 4)
        }
    }

    @Test("changing a password revokes every device of the user", arguments: StoreKind.allCases)
    func passwordChange(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            try await fixture.users("alice")
            let now = StoreFixture.start
            let old = try await fixture.store.login(user: "alice", password: "pw-alice", deviceName: "d", nowMs: now)
            try await fixture.store.setPassword(user: "alice", password: "new secret", nowMs: now + 1)
            await expectCode(.tokenRevoked) {
                _ = try await fixture.store.authenticate(token: old.token!, nowMs: now + 2)
            }
            await expectCode(.authFailed) {
                _ = try await fixture.store.login(user: "alice", password: "pw-alice", deviceName: "d", nowMs: now)
            }
            _ = try await fixture.store.login(user: "alice", password: "new secret", deviceName: "d", nowMs: now + 3)
        }
    }

    @Test(
        "another process's (or node's) revocations and removals reach a running server through the changes table",
        arguments: StoreKind.allCases
    )
    func changesAcrossProcesses(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { server in
            try await server.users("alice", "bob")
            let now = StoreFixture.start
            let device = try await server.store.login(user: "alice", password: "pw-alice", deviceName: "d", nowMs: now)
                .device
            let start = try await server.store.latestChangeID()

            // A second store on the same database, as the admin commands (or another node) open it.
            try await server.another { admin in
                try await admin.revokeDevice(device.id, of: "alice", nowMs: now)
                try await admin.createGroup(name: "team", owner: "alice", members: ["bob"], nowMs: now)
                try await admin.removeUser(named: "bob", nowMs: now)
            }

            let (changes, latest) = try await server.store.changes(after: start)
            let alice = try #require(try await server.store.user(named: "alice")).id
            let bob = try #require(try await server.store.user(named: "bob")).id
            #expect(changes.contains(.deviceRevoked(device.id)))
            #expect(changes.contains(.logAppended(alice)) && changes.contains(.logAppended(bob)))
            #expect(changes.contains(.userRemoved(bob)))
            #expect(try await server.store.changes(after: latest).changes.isEmpty)
            try await server.store.pruneChanges(olderThanMs: now + 1)
            #expect(try await server.store.changes(after: 0).changes.isEmpty)
        }
    }
}

func expectCode(
    _ code: CourierStoreError.Code,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> Void
) async {
    do {
        try await body()
        Issue.record("expected \(code), nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as CourierStoreError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected \(code), got \(error)", sourceLocation: sourceLocation)
    }
}
