import CourierPostgresTesting
import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import Foundation
import Testing

@Suite("Sign-ups and one's own account over the native port", .serialized)
struct AccountServerTests {
    /// What a sign-up's hello came to: a session, or the code of the error the server closed with.
    enum Outcome {
        case welcomed(NativeTestClient, Courier_V1_Welcome)
        case refused(Courier_V1_Error)

        var code: String {
            switch self {
            case .welcomed: "welcome"
            case .refused(let error): error.code
            }
        }
    }

    static func signUp(
        port: Int,
        _ user: String,
        password: String = "correct horse",
        invite: String = ""
    ) async throws -> Outcome {
        let client = try await NativeTestClient.connect(port: port)
        var hello = ClientEnvelope()
        hello.hello.signUp.user = user
        hello.hello.signUp.password = password
        hello.hello.signUp.invite = invite
        hello.hello.deviceName = "phone"
        try await client.send(hello)
        let answer = try await client.expect("an answer to the sign-up") {
            $0.welcome != nil || $0.failure != nil ? $0 : nil
        }
        if let welcome = answer.welcome { return .welcomed(client, welcome) }
        let error = try #require(answer.failure)
        // A refused sign-up closes the connection.
        _ = try await client.expectClose()
        return .refused(error)
    }

    @Test("a closed server, the default, refuses sign-ups")
    func closedRegistration() async throws {
        try await ServerFixture.with { fixture in
            let outcome = try await Self.signUp(port: fixture.ports.native, "alice")
            #expect(outcome.code == ErrorCodes.registrationClosed)
            #expect(try await fixture.store.users().isEmpty)
        }
    }

    @Test("a server that takes invitations takes each one's uses, then refuses it")
    func invitations() async throws {
        try await ServerFixture.with { fixture in
            let port = fixture.ports.native
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let (_, token) = try await fixture.store.createInvite(maxUses: 2, expiresMs: now + 3_600_000, nowMs: now)
            #expect(try await Self.signUp(port: port, "alice").code == ErrorCodes.inviteInvalid)
            #expect(try await Self.signUp(port: port, "alice", invite: "ci_nope").code == ErrorCodes.inviteInvalid)
            #expect(
                try await Self.signUp(port: port, "alice", password: "short", invite: token).code
                    == ErrorCodes.weakPassword
            )
            guard case .welcomed(let alice, let welcome) = try await Self.signUp(port: port, "alice", invite: token)
            else {
                Issue.record("alice's sign-up was refused")
                return
            }
            #expect(welcome.user == "alice" && welcome.token.hasPrefix("ct_"))
            // The session works at once, and its token logs in again.
            #expect(try await alice.sendText("我来了", to: .user("alice")).ack != nil)
            let (again, _) = try await NativeTestClient.resume(port: port, token: welcome.token)
            #expect(try await Self.signUp(port: port, "Alice", invite: token).code == ErrorCodes.nameTaken)
            #expect(try await Self.signUp(port: port, "ålice", invite: token).code == ErrorCodes.invalidName)
            guard case .welcomed(let bob, _) = try await Self.signUp(port: port, "bob", invite: token) else {
                Issue.record("bob's sign-up was refused")
                return
            }
            #expect(try await Self.signUp(port: port, "carol", invite: token).code == ErrorCodes.inviteUsedUp)
            let (late, lateToken) = try await fixture.store.createInvite(maxUses: 1, expiresMs: now + 1, nowMs: now)
            _ = late
            #expect(try await Self.signUp(port: port, "carol", invite: lateToken).code == ErrorCodes.inviteExpired)
            #expect(try await fixture.store.users().map(\.name).sorted() == ["alice", "bob"])
            for client in [alice, again, bob] { await client.close() }
        } configure: {
            $0.accounts.registration = .invite
            // Every sign-up counts, refused ones too: this test makes more than the default five.
            $0.accounts.maxSignUpsPerAddress = 50
        }
    }

    @Test("guesses at invitations count against their address alone, never against the sign-ups all addresses share")
    func badInvitations() async throws {
        try await ServerFixture.with { fixture in
            let port = fixture.ports.native
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let (_, token) = try await fixture.store.createInvite(maxUses: 5, expiresMs: nil, nowMs: now)
            for guess in ["", "ci_guess1"] {
                #expect(try await Self.signUp(port: port, "guesser", invite: guess).code == ErrorCodes.inviteInvalid)
            }
            // The two sign-ups every address shares are still there for those who hold an invitation.
            for name in ["amina", "ravi"] {
                let outcome = try await Self.signUp(port: port, name, invite: token)
                #expect(outcome.code == "welcome")
                if case .welcomed(let client, _) = outcome { await client.close() }
            }
            #expect(try await Self.signUp(port: port, "third", invite: token).code == ErrorCodes.throttled)
            // The address's third bad guess is its last: then it is throttled before any lookup.
            #expect(try await Self.signUp(port: port, "guesser", invite: "ci_guess3").code == ErrorCodes.inviteInvalid)
            let throttled = try await Self.signUp(port: port, "guesser", invite: "ci_guess4")
            #expect(throttled.code == ErrorCodes.throttled)
            #expect(try await fixture.store.users().map(\.name).sorted() == ["amina", "ravi"])
        } configure: {
            $0.accounts.registration = .invite
            $0.accounts.maxSignUpsPerAddress = 3
            $0.accounts.maxSignUpsInAll = 2
        }
    }

    @Test(
        "a flood of sign-ups from one address makes at most max-sign-ups-per-address accounts; the rest are throttled before any hashing"
    )
    func signUpFlood() async throws {
        try await ServerFixture.with { fixture in
            let port = fixture.ports.native
            // Twenty at once: the ones in flight count, so no more than three get past the gate.
            let codes = try await withThrowingTaskGroup(of: String.self, returning: [String].self) { group in
                for index in 0..<20 {
                    group.addTask {
                        let outcome = try await Self.signUp(port: port, "flood\(index)")
                        if case .welcomed(let client, _) = outcome { await client.close() }
                        return outcome.code
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(codes.filter { $0 == "welcome" }.count == 3, "\(codes)")
            #expect(codes.filter { $0 == ErrorCodes.throttled }.count == 17, "\(codes)")
            #expect(try await fixture.store.users().count == 3)
            // Refused sign-ups count as well: one with a taken name, past the limit, is throttled with a wait.
            let refused = try await Self.signUp(port: port, "flood0")
            guard case .refused(let error) = refused else {
                Issue.record("a fourth sign-up got in")
                return
            }
            #expect(error.code == ErrorCodes.throttled && error.retryAfterMs > 0 && error.retryAfterMs <= 3_600_000)
            // A login is not held up by sign-ups.
            let (flooder, _) = try await NativeTestClient.login(
                port: port,
                try #require(try await fixture.store.users().first?.name),
                password: "correct horse"
            )
            await flooder.close()
        } configure: {
            $0.accounts.registration = .open
            $0.accounts.maxSignUpsPerAddress = 3
            $0.accounts.maxSignUpsInAll = 100
        }
    }

    @Test(
        "sign-ups spread over three nodes: the limit in all holds on the nodes together",
        .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
    )
    func signUpsAcrossNodes() async throws {
        try await ClusterFixture.with(nodes: 3) { cluster in
            var codes: [String] = []
            for index in 0..<9 {
                let outcome = try await Self.signUp(port: cluster.nodes[index % 3].ports.native, "node\(index)")
                if case .welcomed(let client, _) = outcome { await client.close() }
                codes.append(outcome.code)
            }
            // Four in all (each node alone would have taken four): the first four, whichever node they reached.
            #expect(codes.prefix(4).allSatisfy { $0 == "welcome" }, "\(codes)")
            #expect(codes.dropFirst(4).allSatisfy { $0 == ErrorCodes.throttled }, "\(codes)")
            #expect(try await cluster.store.users().count == 4)
        } configure: {
            $0.accounts.registration = .open
            $0.accounts.maxSignUpsInAll = 4
            $0.accounts.maxSignUpsPerAddress = 50
        }
    }

    @Test("a password change logs the other devices out, keeps this one, and counts wrong passwords as failed logins")
    func changePassword() async throws {
        try await ServerFixture.with { fixture in
            let port = fixture.ports.native
            try await fixture.user("alice")
            let (phone, _) = try await NativeTestClient.login(port: port, "alice", device: "phone")
            let (laptop, _) = try await NativeTestClient.login(port: port, "alice", device: "laptop")
            func change(_ old: String, _ new: String, keep: Bool = false) async throws -> ServerEnvelope {
                try await phone.request {
                    $0.changePassword.oldPassword = old
                    $0.changePassword.newPassword = new
                    $0.changePassword.keepDevices = keep
                }
            }
            #expect(try await change("pw-alice", "short").failure?.code == ErrorCodes.weakPassword)
            #expect(try await change("guess-1", "新しいパスワードです").failure?.code == ErrorCodes.wrongPassword)
            #expect(try await change("guess-2", "新しいパスワードです").failure?.code == ErrorCodes.wrongPassword)
            // Past the login limit of the name: refused before any check, the connection kept, even for the right one.
            let limited = try await change("pw-alice", "新しいパスワードです")
            #expect(limited.failure?.code == ErrorCodes.rateLimited && (limited.failure?.retryAfterMs ?? 0) > 0)
            // A password login of alice is throttled as well (the guesses were hers).
            #expect(
                try await AuthTests.failedLogin(fixture, user: "alice", password: "pw-alice").code
                    == ErrorCodes.throttled
            )
            #expect(try await phone.sendText("still here", to: .user("alice")).ack != nil)
            // Nothing changed: the laptop is still logged in.
            #expect(try await laptop.sendText("me too", to: .user("alice")).ack != nil)
            for client in [phone, laptop] { await client.close() }
        } configure: {
            $0.limits.maxFailedLoginsPerUser = 2
        }
        try await ServerFixture.with { fixture in
            let port = fixture.ports.native
            try await fixture.user("alice")
            let (phone, _) = try await NativeTestClient.login(port: port, "alice", device: "phone")
            let (laptop, laptopWelcome) = try await NativeTestClient.login(port: port, "alice", device: "laptop")
            let answer = try await phone.request {
                $0.changePassword.oldPassword = "pw-alice"
                $0.changePassword.newPassword = "新しいパスワードです"
            }
            #expect(answer.isDone, "\(answer)")
            // The laptop is logged out: its connection closes, its token no longer works.
            let closed = try await laptop.expectClose()
            #expect(closed.last?.failure?.code == ErrorCodes.tokenRevoked, "\(closed)")
            #expect(
                try await LoginStormTests.tokenLogin(port: port, token: laptopWelcome.token) == ErrorCodes.tokenRevoked
            )
            #expect(
                try await AuthTests.failedLogin(fixture, user: "alice", password: "pw-alice").code
                    == ErrorCodes.authFailed
            )
            let (fresh, _) = try await NativeTestClient.login(port: port, "alice", password: "新しいパスワードです")
            #expect(try await phone.sendText("still here", to: .user("alice")).ack != nil)
            for client in [phone, fresh] { await client.close() }
        }
    }

    /// The user's devices, as the server lists them to this connection.
    static func devices(_ client: NativeTestClient) async throws -> [Courier_V1_DeviceList.Device] {
        var envelope = ClientEnvelope()
        envelope.devices = Courier_V1_DevicesRequest()
        let requestID = try await client.send(envelope)
        return try await client.expect("the devices") { answer in
            if answer.requestID == requestID, case .devices(let list)? = answer.body { list.devices } else { nil }
        }
    }

    /// Asks to log out a device: the code of the error, or nil when done.
    static func revoke(_ id: UInt64, by client: NativeTestClient) async throws -> String? {
        var envelope = ClientEnvelope()
        envelope.revokeDevice.id = id
        let requestID = try await client.send(envelope)
        return try await client.expect("the answer") { answer -> String?? in
            guard answer.requestID == requestID else { return nil }
            return .some(answer.failure?.code)
        }
    }

    @Test("a user lists its devices and logs one out; another user's device is not its to revoke")
    func devices() async throws {
        try await ServerFixture.with { fixture in
            let port = fixture.ports.native
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (phone, _) = try await NativeTestClient.login(port: port, "alice", device: "手机")
            let (laptop, _) = try await NativeTestClient.login(port: port, "alice", device: "laptop")
            let (bob, _) = try await NativeTestClient.login(port: port, "bob", device: "bob's")
            let listed = try await Self.devices(phone)
            // This one first, then the newest.
            #expect(listed.map(\.name) == ["手机", "laptop"])
            #expect(listed.map(\.current) == [true, false])
            #expect(listed.allSatisfy { $0.expiresMs > $0.createdMs && $0.createdMs > 0 })
            let bobDevices = try await Self.devices(bob)
            #expect(bobDevices.map(\.name) == ["bob's"])
            #expect(try await Self.revoke(bobDevices[0].id, by: phone) == ErrorCodes.invalidRequest)
            #expect(try await Self.revoke(999_999, by: phone) == ErrorCodes.invalidRequest)
            #expect(try await bob.sendText("unharmed", to: .user("bob")).ack != nil)
            #expect(try await Self.revoke(listed[1].id, by: phone) == nil)
            #expect(try await laptop.expectClose().last?.failure?.code == ErrorCodes.tokenRevoked)
            let after = try await Self.devices(phone)
            #expect(after.map(\.name) == ["手机"])
            // Its own: answered, then closed.
            #expect(try await Self.revoke(after[0].id, by: phone) == nil)
            #expect(try await phone.expectClose().last?.failure?.code == ErrorCodes.tokenRevoked)
            await bob.close()
        }
    }

    @Test("a deleted account is closed at once, its name taken for good, its messages still bob's history")
    func deleteAccount() async throws {
        try await ServerFixture.with { fixture in
            let port = fixture.ports.native
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (alice, _) = try await NativeTestClient.login(port: port, "alice")
            let (bob, _) = try await NativeTestClient.login(port: port, "bob")
            #expect(try await alice.sendText("مع السلامة", to: .user("bob")).ack != nil)
            #expect(
                try await alice.request { $0.deleteAccount.password = "pw-bob" }.failure?.code
                    == ErrorCodes.wrongPassword
            )
            #expect(try await alice.request { $0.deleteAccount.password = "pw-alice" }.isDone)
            #expect(try await alice.expectClose().last?.failure?.code == ErrorCodes.tokenRevoked)
            #expect(
                try await AuthTests.failedLogin(fixture, user: "alice", password: "pw-alice").code
                    == ErrorCodes.authFailed
            )
            let page = try await bob.request {
                $0.history.conversation.user = "alice"
            }
            #expect(page.historyPage?.messages.map(\.from) == ["alice"])
            #expect(page.historyPage?.messages.map(\.body.text) == ["مع السلامة"])
            await bob.close()
        } configure: {
            $0.accounts.registration = .open
        }
    }

    @Test("users are found by exact name only, a limited number of times per user")
    func findUser() async throws {
        try await ServerFixture.with { fixture in
            let port = fixture.ports.native
            try await fixture.user("Alice.Chen")
            try await fixture.user("bob")
            try await fixture.user("gone")
            try await fixture.store.removeUser(named: "gone", nowMs: 1)
            let (bob, _) = try await NativeTestClient.login(port: port, "bob")
            func find(_ name: String) async throws -> ServerEnvelope {
                try await bob.request { $0.findUser.name = name }
            }
            #expect(try await find("alice.chen").userCard?.name == "Alice.Chen")
            #expect(try await find("alice").failure?.code == ErrorCodes.unknownUser)
            #expect(try await find("gone").failure?.code == ErrorCodes.unknownUser)
            #expect(try await find("陈").failure?.code == ErrorCodes.unknownUser)
            let limited = try await find("bob")
            #expect(limited.failure?.code == ErrorCodes.rateLimited && (limited.failure?.retryAfterMs ?? 0) > 0)
            // The connection stays.
            #expect(try await bob.sendText("ok", to: .user("bob")).ack != nil)
            await bob.close()
        } configure: {
            $0.accounts.maxLookupsPerUser = 4
        }
    }
}

extension AccountServerTests {
    @Test(
        "a profile change reaches a group member's offline device when it syncs; anyone fetches the pictures; changes are limited"
    )
    func profiles() async throws {
        try await ServerFixture.with { fixture in
            let port = fixture.ports.native
            for name in ["alice", "bob", "carol"] { try await fixture.user(name) }
            try await fixture.store.createGroup(
                name: "team",
                owner: "alice",
                members: ["bob"],
                byOwner: false,
                nowMs: 1
            )
            // bob's phone, then offline.
            let (phone, welcome) = try await NativeTestClient.login(port: port, "bob", device: "phone")
            await phone.close()

            let (alice, _) = try await NativeTestClient.login(port: port, "alice")
            // Bytes that say JPEG, of two sizes.
            let avatar = [0xFF, 0xD8, 0xFF, 0xE0] + [UInt8](repeating: 7, count: 200_000)
            let thumbnail = [0xFF, 0xD8, 0xFF, 0xE0] + [UInt8](repeating: 9, count: 4_000)
            #expect(try await alice.upload(avatar, stream: 1).done != nil)
            #expect(try await alice.upload(thumbnail, stream: 3).done != nil)
            func picture(_ bytes: [UInt8], _ side: UInt32) -> Courier_V1_Media {
                var media = Courier_V1_Media()
                media.kind = .image
                media.sha256 = NativeTestClient.sha256(bytes)
                media.size = UInt64(bytes.count)
                media.mime = "image/jpeg"
                media.width = side
                media.height = side
                return media
            }
            let changed = try await alice.request {
                $0.setProfile.displayName = "爱丽丝 ✨"
                $0.setProfile.avatar = picture(avatar, 512)
                $0.setProfile.thumbnail = picture(thumbnail, 96)
            }
            #expect(changed.isDone, "\(changed)")
            // Bytes that are not the image they are said to be: refused (everyone may fetch a profile's pictures).
            let png = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + [UInt8](repeating: 3, count: 2_000)
            #expect(try await alice.upload(png, stream: 5).done != nil)
            let disguised = try await alice.request {
                $0.setProfile.avatar = picture(avatar, 512)
                $0.setProfile.thumbnail = picture(png, 96)
            }
            #expect(disguised.failure?.code == ErrorCodes.invalidProfile, "\(disguised)")
            // A thumbnail without its avatar is no request.
            let lone = try await alice.request { $0.setProfile.thumbnail = picture(thumbnail, 96) }
            #expect(lone.failure?.code == ErrorCodes.invalidRequest)

            // bob's phone comes back: the change is in its sync.
            let (back, _) = try await NativeTestClient.resume(port: port, token: welcome.token, cursor: welcome.cursor)
            let profile = try await back.expect("the profile event") { envelope -> Courier_V1_Profile? in
                guard case .events(let events)? = envelope.body else { return nil }
                return events.events.compactMap { event -> Courier_V1_Profile? in
                    if case .profile(let profile)? = event.kind { profile } else { nil }
                }.first
            }
            #expect(profile.user == "alice" && profile.displayName == "爱丽丝 ✨")
            #expect(profile.thumbnail.sha256 == NativeTestClient.sha256(thumbnail) && profile.avatar.width == 512)
            // carol, who is in no conversation with alice, fetches the thumbnail as any user may.
            let (carol, _) = try await NativeTestClient.login(port: port, "carol")
            guard case .success(let (ready, bytes)) = try await carol.fetch(profile.thumbnail.sha256, stream: 1) else {
                Issue.record("carol could not fetch the thumbnail")
                return
            }
            #expect(ready.mime == "image/jpeg" && bytes == thumbnail)
            let card = try await carol.request { $0.findUser.name = "ALICE" }
            #expect(card.userCard?.profile.displayName == "爱丽丝 ✨")

            // The limit is three changes: the first, the disguised one (refused, counted), and this one (the lone
            // thumbnail was refused before it counted).
            #expect(try await alice.request { $0.setProfile.displayName = "" }.isDone)
            let limited = try await alice.request { $0.setProfile.displayName = "again" }
            #expect(limited.failure?.code == ErrorCodes.rateLimited, "\(limited)")
            for client in [alice, back, carol] { await client.close() }
        } configure: {
            $0.accounts.maxProfileChangesPerUser = 3
        }
    }
}

extension AccountServerTests {
    @Test("lookups and profile changes are limited per address too: users from one address share its allowance")
    func perAddressLimits() async throws {
        try await ServerFixture.with { fixture in
            let port = fixture.ports.native
            for name in ["alice", "bob", "carol"] { try await fixture.user(name) }
            let (alice, _) = try await NativeTestClient.login(port: port, "alice")
            let (bob, _) = try await NativeTestClient.login(port: port, "bob")
            // Three lookups from 127.0.0.1: two of alice's, one of bob's; bob's second is one too many, though bob
            // is far under his own limit.
            #expect(try await alice.request { $0.findUser.name = "bob" }.userCard?.name == "bob")
            #expect(try await alice.request { $0.findUser.name = "carol" }.userCard?.name == "carol")
            #expect(try await bob.request { $0.findUser.name = "carol" }.userCard?.name == "carol")
            let lookup = try await bob.request { $0.findUser.name = "alice" }
            #expect(lookup.failure?.code == ErrorCodes.rateLimited, "\(lookup)")
            // Two profile changes from the address, then none, whoever asks.
            #expect(try await alice.request { $0.setProfile.displayName = "爱丽丝" }.isDone)
            #expect(try await bob.request { $0.setProfile.displayName = "ボブ" }.isDone)
            let change = try await alice.request { $0.setProfile.displayName = "Алиса" }
            #expect(change.failure?.code == ErrorCodes.rateLimited, "\(change)")
            // A group's title counts with them.
            try await fixture.store.createGroup(
                name: "team",
                owner: "alice",
                members: ["bob"],
                byOwner: false,
                nowMs: 1
            )
            let title = try await alice.request {
                $0.manageGroup.group = "team"
                $0.manageGroup.title.title = "读书会"
            }
            #expect(title.failure?.code == ErrorCodes.rateLimited, "\(title)")
            await alice.close()
            await bob.close()
        } configure: {
            $0.accounts.maxLookupsPerUser = 100
            $0.accounts.maxLookupsPerAddress = 3
            $0.accounts.maxProfileChangesPerUser = 100
            $0.accounts.maxProfileChangesPerAddress = 2
        }
    }
}

extension ServerEnvelope {
    var devicesList: Courier_V1_DeviceList? { if case .devices(let list)? = self.body { list } else { nil } }
    var userCard: Courier_V1_UserCard? { if case .user(let card)? = self.body { card } else { nil } }
    var historyPage: Courier_V1_HistoryPage? { if case .history(let page)? = self.body { page } else { nil } }
    var isDone: Bool { if case .done? = self.body { true } else { false } }
}
