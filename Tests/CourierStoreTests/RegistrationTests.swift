import CourierStore
import CourierTesting
import Foundation
import Testing

@Suite("Sign-ups, invitations and one's own account")
struct RegistrationTests {
    static let day: Int64 = 86_400_000

    @Test(
        "an invitation makes as many accounts as it allows, until it expires or is revoked; its token is never stored",
        arguments: StoreKind.allCases
    )
    func invitations(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = StoreFixture.start
            try await fixture.users("alice")
            let (two, token) = try await store.createInvite(maxUses: 2, expiresMs: now + Self.day, nowMs: now)
            #expect(token.hasPrefix("ci_") && token.count > 40)
            #expect(try await !fixture.holdsText(token))

            func signUp(_ name: String, _ invite: String?, at ms: Int64 = now) async throws -> DeviceSession {
                try await store.signUp(
                    user: name,
                    password: "correct horse",
                    invite: invite,
                    requiresInvite: true,
                    deviceName: "phone",
                    nowMs: ms
                )
            }
            // Who holds no good invitation learns nothing of names: alice exists, and it is the invitation that is
            // refused.
            await expectCode(.inviteInvalid) { _ = try await signUp("alice", nil) }
            await expectCode(.inviteInvalid) { _ = try await signUp("alice", "ci_forged") }
            await expectCode(.inviteInvalid) { _ = try await signUp("carol", "ci_forged") }
            // Nor the password rules: the invitation is said first (as the server checks it, and PROTOCOL.md says).
            await expectCode(.inviteInvalid) {
                _ = try await store.signUp(
                    user: "carol",
                    password: "short",
                    invite: "ci_forged",
                    requiresInvite: true,
                    deviceName: "phone",
                    nowMs: now
                )
            }

            let li = try await signUp("li.wei", token)
            #expect(li.user.name == "li.wei" && li.device.name == "phone")
            // The session is a login's: its token authenticates.
            let liToken = try #require(li.token)
            #expect(try await store.authenticate(token: liToken, nowMs: now + 1).user.id == li.user.id)
            // A taken name does not use the invitation up.
            await expectCode(.nameTaken) { _ = try await signUp("ALICE", token) }
            #expect(try await store.invites().map(\.uses) == [1])
            _ = try await signUp("tanaka", token)
            await expectCode(.inviteUsedUp) { _ = try await signUp("carol", token) }
            #expect(
                try await store.invites() == [
                    Invite(id: two.id, createdMs: now, expiresMs: now + Self.day, maxUses: 2, uses: 2, revokedMs: nil)
                ]
            )

            // Expiry: good a millisecond before, refused at it.
            let (_, brief) = try await store.createInvite(maxUses: 5, expiresMs: now + 1_000, nowMs: now)
            _ = try await signUp("early", brief, at: now + 999)
            await expectCode(.inviteExpired) { _ = try await signUp("late", brief, at: now + 1_000) }

            // Revoked: refused as if it never existed; revoking twice is refused.
            let (open, kept) = try await store.createInvite(maxUses: 5, expiresMs: nil, nowMs: now)
            try await store.revokeInvite(open.id, nowMs: now + 5)
            await expectCode(.inviteInvalid) { _ = try await signUp("carol", kept) }
            await expectCode(.invalidRequest) { try await store.revokeInvite(open.id, nowMs: now + 6) }
            await expectCode(.invalidRequest) { try await store.revokeInvite(999_999, nowMs: now + 6) }
            #expect(try await store.invites().last?.revokedMs == now + 5)

            await expectCode(.invalidRequest) {
                _ = try await store.createInvite(maxUses: 0, expiresMs: nil, nowMs: now)
            }
            await expectCode(.invalidRequest) {
                _ = try await store.createInvite(maxUses: 1, expiresMs: now, nowMs: now)
            }
            #expect(try await store.users().map(\.name).sorted() == ["alice", "early", "li.wei", "tanaka"])
        }
    }

    @Test("many sign-ups racing for an invitation's last use make one account", arguments: StoreKind.allCases)
    func lastUseRace(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = StoreFixture.start
            let (_, token) = try await store.createInvite(maxUses: 1, expiresMs: nil, nowMs: now)
            let outcomes = await withTaskGroup(of: String.self, returning: [String].self) { group in
                for index in 0..<12 {
                    group.addTask {
                        do {
                            _ = try await store.signUp(
                                user: "racer\(index)",
                                password: "correct horse",
                                invite: token,
                                requiresInvite: true,
                                deviceName: "d",
                                nowMs: now
                            )
                            return "made"
                        } catch let error as CourierStoreError {
                            return "\(error.code)"
                        } catch {
                            return "\(error)"
                        }
                    }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            #expect(outcomes.filter { $0 == "made" }.count == 1, "\(outcomes)")
            #expect(Set(outcomes.filter { $0 != "made" }) == ["invite-used-up"], "\(outcomes)")
            #expect(try await store.users().count == 1)
            #expect(try await store.invites().map(\.uses) == [1])
        }
    }

    @Test(
        "a sign-up's password and name follow the rules; an open sign-up uses no invitation",
        arguments: StoreKind.allCases
    )
    func rules(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = StoreFixture.start
            try await fixture.users("alice")
            try await store.removeUser(named: "alice", nowMs: now)
            let (_, token) = try await store.createInvite(maxUses: 1, expiresMs: nil, nowMs: now)
            func open(_ name: String, _ password: String, invite: String? = nil) async throws -> DeviceSession {
                try await store.signUp(
                    user: name,
                    password: password,
                    invite: invite,
                    requiresInvite: false,
                    deviceName: "laptop",
                    nowMs: now
                )
            }
            // Seven characters are too few, whatever their bytes; eight are enough in any script.
            await expectCode(.weakPassword) { _ = try await open("bob", "1234567") }
            await expectCode(.weakPassword) { _ = try await open("bob", "密码密码密码密") }
            await expectCode(.weakPassword) { _ = try await open("bob", String(repeating: "x", count: 1_025)) }
            // The password is said before the name.
            await expectCode(.weakPassword) { _ = try await open("-bad", "short") }
            for bad in ["", "ålice", "bob smith", "-bob", "bob\u{0}x", String(repeating: "b", count: 33)] {
                await expectCode(.invalidName) { _ = try await open(bad, "correct horse") }
            }
            // A removed user's name is never given out again, in any case.
            await expectCode(.nameTaken) { _ = try await open("Alice", "correct horse") }
            let wang = try await open("wang", "密码密码密码密码")
            #expect(
                try await store.login(user: "wang", password: "密码密码密码密码", deviceName: "x", renewing: nil, nowMs: now)
                    .user.id == wang.user.id
            )
            _ = try await open("mohammed", "كلمة السر الطويلة", invite: token)
            // An open server takes no invitation: the one given was not used.
            #expect(try await store.invites().map(\.uses) == [0])
            await expectCode(.invalidRequest) {
                _ = try await store.signUp(
                    user: "x1",
                    password: "correct horse",
                    invite: nil,
                    requiresInvite: false,
                    deviceName: "bad\u{7}",
                    nowMs: now
                )
            }
        }
    }

    @Test(
        "changing one's password needs the present one and logs the other devices out unless they are kept",
        arguments: StoreKind.allCases
    )
    func ownPassword(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = StoreFixture.start
            let alice = try #require(try await fixture.users("alice")["alice"])
            func login(_ device: String, _ password: String = "pw-alice") async throws -> DeviceSession {
                try await store.login(user: "alice", password: password, deviceName: device, renewing: nil, nowMs: now)
            }
            let phone = try await login("phone")
            let laptop = try await login("laptop")
            await expectCode(.wrongPassword) {
                try await store.changePassword(
                    of: alice,
                    from: phone.device.id,
                    old: "pw-bob",
                    new: "新的密码很长很长",
                    keepDevices: false,
                    nowMs: now
                )
            }
            await expectCode(.weakPassword) {
                try await store.changePassword(
                    of: alice,
                    from: phone.device.id,
                    old: "pw-alice",
                    new: "short",
                    keepDevices: false,
                    nowMs: now
                )
            }
            // Nothing changed by the refusals.
            #expect(try await store.devices(of: "alice").allSatisfy { $0.revokedMs == nil })
            _ = try await login("tablet")

            try await store.changePassword(
                of: alice,
                from: phone.device.id,
                old: "pw-alice",
                new: "新的密码很长很长",
                keepDevices: false,
                nowMs: now + 10
            )
            let devices = try await store.devices(of: "alice")
            #expect(devices.filter { $0.revokedMs == nil }.map(\.name) == ["phone"])
            _ = try await store.authenticate(token: try #require(phone.token), nowMs: now + 11)
            await expectCode(.tokenRevoked) {
                _ = try await store.authenticate(token: try #require(laptop.token), nowMs: now + 11)
            }
            await expectCode(.authFailed) { _ = try await login("again") }
            let again = try await login("again", "新的密码很长很长")

            // Kept: every device stays.
            try await store.changePassword(
                of: alice,
                from: again.device.id,
                old: "新的密码很长很长",
                new: "third password",
                keepDevices: true,
                nowMs: now + 20
            )
            #expect(
                try await store.devices(of: "alice").filter { $0.revokedMs == nil }.map(\.name) == ["phone", "again"]
            )
            _ = try await login("fourth", "third password")
        }
    }

    @Test(
        "two devices changing the password at once: one wins, the other is refused and logged out, never both",
        arguments: StoreKind.allCases
    )
    func racingChanges(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = StoreFixture.start
            let alice = try #require(try await fixture.users("alice")["alice"])
            var password = "pw-alice"
            for round in 0..<5 {
                let phone = try await store.login(
                    user: "alice",
                    password: password,
                    deviceName: "phone",
                    renewing: nil,
                    nowMs: now
                )
                let laptop = try await store.login(
                    user: "alice",
                    password: password,
                    deviceName: "laptop",
                    renewing: nil,
                    nowMs: now
                )
                let old = password
                let outcomes = await withTaskGroup(of: (String, String?).self, returning: [String: String?].self) {
                    group in
                    for (device, new) in [
                        (phone.device.id, "phone's password \(round)"),
                        (laptop.device.id, "laptop's password \(round)"),
                    ] {
                        group.addTask {
                            do {
                                try await store.changePassword(
                                    of: alice,
                                    from: device,
                                    old: old,
                                    new: new,
                                    keepDevices: false,
                                    nowMs: now
                                )
                                return (new, nil)
                            } catch let error as CourierStoreError {
                                return (new, "\(error.code)")
                            } catch {
                                return (new, "\(error)")
                            }
                        }
                    }
                    return await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
                }
                let winners = outcomes.filter { $0.value == nil }.map(\.key)
                #expect(winners.count == 1, "round \(round): \(outcomes)")
                let losers = outcomes.compactMap(\.value)
                #expect(losers.allSatisfy { ["wrong-password", "token-revoked"].contains($0) }, "\(outcomes)")
                let winner = try #require(winners.first)
                // The winner's password is the password; the loser's device is logged out, the winner's not.
                _ = try await store.login(
                    user: "alice",
                    password: winner,
                    deviceName: "check",
                    renewing: nil,
                    nowMs: now
                )
                let active = try await store.devices(of: "alice").filter { $0.revokedMs == nil }.map(\.name)
                #expect(active == [winner.hasPrefix("phone") ? "phone" : "laptop", "check"], "\(active)")
                try await store.changePassword(
                    of: alice,
                    from: winner.hasPrefix("phone") ? phone.device.id : laptop.device.id,
                    old: winner,
                    new: "reset password \(round)",
                    keepDevices: false,
                    nowMs: now
                )
                password = "reset password \(round)"
            }
        }
    }

    @Test(
        "deleting one's account needs the password; its messages stay under its name, which is never given again",
        arguments: StoreKind.allCases
    )
    func deleteAccount(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = StoreFixture.start
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (try #require(ids["alice"]), try #require(ids["bob"]))
            let session = try await store.login(
                user: "alice",
                password: "pw-alice",
                deviceName: "phone",
                renewing: nil,
                nowMs: now
            )
            _ = try await fixture.sent(alice, "m1", to: .user("bob"), "你好，再见")
            _ = try await fixture.sent(bob, "m2", to: .user("alice"), "さようなら")
            try await store.createGroup(name: "team", owner: "bob", members: ["alice"], byOwner: false, nowMs: now)
            _ = try await fixture.sent(alice, "m3", to: .group("team"), "👋 leaving")

            await expectCode(.wrongPassword) { try await store.deleteAccount(alice, password: "pw-bob", nowMs: now) }
            #expect(try await store.user(named: "alice")?.removedMs == nil)
            try await store.deleteAccount(alice, password: "pw-alice", nowMs: now + 1)

            #expect(try await store.user(named: "alice")?.removedMs == now + 1)
            await expectCode(.tokenRevoked) {
                _ = try await store.authenticate(token: try #require(session.token), nowMs: now + 2)
            }
            await expectCode(.authFailed) {
                _ = try await store.login(
                    user: "alice",
                    password: "pw-alice",
                    deviceName: "x",
                    renewing: nil,
                    nowMs: now + 2
                )
            }
            #expect(try await store.group(named: "team").members == ["bob"])
            // Bob's history keeps both sides of the conversation and the group's message, under alice's name.
            let direct = try await store.history(for: bob, in: .user("alice"), beforeSeq: 0, limit: 10)
            // Newest first.
            #expect(direct.messages.map(\.from) == ["bob", "alice"])
            #expect(direct.messages.map(\.id) == ["m2", "m1"])
            #expect(direct.messages.allSatisfy { !$0.recalled })
            let group = try await store.history(for: bob, in: .group("team"), beforeSeq: 0, limit: 10)
            #expect(group.messages.map(\.from) == ["alice"])
            // The name is gone for good, to sign-ups as to the administrator.
            await expectCode(.nameTaken) {
                _ = try await store.signUp(
                    user: "ALICE",
                    password: "correct horse",
                    invite: nil,
                    requiresInvite: false,
                    deviceName: "d",
                    nowMs: now + 3
                )
            }
            await expectCode(.nameTaken) { _ = try await store.addUser(name: "alice", password: "x", nowMs: now + 3) }
        }
    }
}
