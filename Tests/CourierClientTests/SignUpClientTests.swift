import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import Foundation
import Testing

@testable import CourierClient

@Suite("The SDK signs up", .serialized)
struct SignUpClientTests {
    static func client(port: Int, _ user: String, password: String, folder: URL) throws -> CourierClient {
        var configuration = CourierClient.Configuration(
            port: port,
            credentials: .signUp(user: user, password: password, invite: nil),
            storePath: folder.appendingPathComponent("\(user).sqlite").path
        )
        configuration.minBackoff = .milliseconds(20)
        configuration.maxBackoff = .milliseconds(200)
        return try CourierClient(configuration: configuration)
    }

    static func refusal(_ events: EventReader) async throws -> String {
        try await events.next("the refusal") { event -> String? in
            if case .loginRefused(let code, _) = event { code } else { nil }
        }
    }

    /// alice and bob become contacts: both write (hers committed, then his reaches her).
    static func makeContacts(_ alice: CourierClient, _ aliceEvents: EventReader, _ bob: CourierClient) async throws {
        let hers = try await alice.send("你好", to: .user("bob"))
        _ = try await aliceEvents.next("her message committed") { event -> Bool? in
            if case .sent(hers, _, _, _) = event { true } else { nil }
        }
        try await bob.send("こんにちは", to: .user("alice"))
        _ = try await aliceEvents.next("bob's answer") { event -> Bool? in
            if case .message(let message) = event, message.from == "bob" { true } else { nil }
        }
    }

    static func connected(_ events: EventReader) async throws {
        _ = try await events.next("connected") { event -> Bool? in if case .connected = event { true } else { nil } }
    }

    @Test("a sign-up makes the account and goes on on its token, with the account's requests; a taken name ends run()")
    func signUp() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                let port = fixture.ports.native
                try await fixture.user("bob")
                let taken = try Self.client(port: port, "BOB", password: "correct horse", folder: folder)
                let takenEvents = EventReader(taken)
                await taken.run()
                #expect(try await Self.refusal(takenEvents) == ErrorCodes.nameTaken)
                #expect(try await taken.deviceToken() == nil)

                let misaki = try Self.client(port: port, "misaki", password: "パスワードは秘密です", folder: folder)
                // No password kept in the configuration.
                if case .signUp(_, let kept, _) = misaki.configuration.credentials { #expect(kept.isEmpty) }
                let events = EventReader(misaki)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { await misaki.run() }
                    try await Self.connected(events)
                    let token = try #require(try await misaki.deviceToken())
                    #expect(try await fixture.store.authenticate(token: token, nowMs: 0).user.name == "misaki")
                    _ = try await fixture.store.login(
                        user: "misaki",
                        password: "パスワードは秘密です",
                        deviceName: "tablet",
                        renewing: nil,
                        nowMs: 0
                    )
                    #expect(try await misaki.findUser("Bob")?.user == "bob")
                    #expect(try await misaki.findUser("nobody") == nil)
                    let devices = try await misaki.devices()
                    #expect(devices.map(\.name) == ["courier-client", "tablet"])
                    #expect(devices.map(\.current) == [true, false])
                    try await misaki.revokeDevice(devices[1].id)
                    #expect(try await misaki.devices().map(\.name) == ["courier-client"])
                    await #expect(throws: CourierClientError.self) {
                        try await misaki.changePassword(from: "wrong one", to: "a new password")
                    }
                    try await misaki.changePassword(from: "パスワードは秘密です", to: "新しいパスワード")
                    // Her profile: a display name, then an avatar; each change comes back to her as an event.
                    try await misaki.setDisplayName(" 美咲 🌸 ")
                    let named = try await events.next("her profile") { event -> ProfileInfo? in
                        if case .profile(let profile) = event { profile } else { nil }
                    }
                    #expect(named.user == "misaki" && named.displayName == "美咲 🌸" && named.avatar == nil)
                    let avatar = folder.appendingPathComponent("avatar.jpg")
                    let thumbnail = folder.appendingPathComponent("thumbnail.jpg")
                    try Data([0xFF, 0xD8, 0xFF, 0xE0] + [UInt8](repeating: 1, count: 90_000)).write(to: avatar)
                    try Data([0xFF, 0xD8, 0xFF, 0xE0] + [UInt8](repeating: 2, count: 3_000)).write(to: thumbnail)
                    try await misaki.setAvatar(file: avatar, thumbnail: thumbnail, thumbnailSize: (96, 96))
                    let pictured = try await events.next("her avatar") { event -> ProfileInfo? in
                        if case .profile(let profile) = event, profile.avatar != nil { profile } else { nil }
                    }
                    #expect(pictured.displayName == "美咲 🌸" && pictured.thumbnail?.size == 3_004)
                    #expect(pictured.thumbnail?.width == 96 && pictured.avatar?.mime == "image/jpeg")
                    // Profiles are read of those one shares a conversation with (and one's own): not bob's yet.
                    #expect(try await misaki.profiles(of: ["BOB", "misaki", "nobody"]).map(\.user) == ["misaki"])
                    #expect(try await misaki.findUser("MISAKI")?.displayName == "美咲 🌸")
                    // The thumbnail's bytes, as anyone would fetch them.
                    var fetched: Data?
                    for try await progress in misaki.download(try #require(pictured.thumbnail)) {
                        if case .finished(let file) = progress { fetched = try Data(contentsOf: file) }
                    }
                    #expect(fetched == (try Data(contentsOf: thumbnail)))
                    misaki.stop()
                    try await group.waitForAll()
                }
                // Started again on the same store: the token, not another sign-up (which would be refused).
                let again = try Self.client(port: port, "misaki", password: "", folder: folder)
                let againEvents = EventReader(again)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { await again.run() }
                    try await Self.connected(againEvents)
                    #expect(try await fixture.store.devices(of: "misaki").filter { $0.revokedMs == nil }.count == 1)
                    again.stop()
                    try await group.waitForAll()
                }
            } configure: {
                $0.accounts.registration = .open
                $0.accounts.maxSignUpsPerAddress = 50
            }
        }
    }

    @Test(
        "a sign-up retried after a failed attempt finds the name taken: it logs in with the password when the account is its own, and is refused when not"
    )
    func retriedSignUp() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                let relay = try await TCPRelay.start(to: fixture.ports.native)
                defer { Task { await relay.stop() } }
                for (user, own) in [("yuki", true), ("kenji", false)] {
                    relay.cut()
                    let client = try Self.client(port: relay.port, user, password: "雪の日の長い合言葉", folder: folder)
                    let events = EventReader(client)
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask { await client.run() }
                        // An attempt failed (the relay ends it)...
                        _ = try await events.next("a failed attempt") { event -> Bool? in
                            if case .disconnected = event { true } else { nil }
                        }
                        // ...as if its sign-up had made the account and its answer been lost; or someone else
                        // took the name meanwhile.
                        let now = Int64(Date().timeIntervalSince1970 * 1000)
                        if own {
                            _ = try await fixture.store.signUp(
                                user: user,
                                password: "雪の日の長い合言葉",
                                invite: nil,
                                requiresInvite: false,
                                deviceName: "lost",
                                nowMs: now
                            )
                        } else {
                            _ = try await fixture.store.addUser(name: user, password: "someone else's", nowMs: now)
                        }
                        relay.mend()
                        if own {
                            try await Self.connected(events)
                            let token = try #require(try await client.deviceToken())
                            #expect(try await fixture.store.authenticate(token: token, nowMs: now).user.name == user)
                            #expect(try await fixture.store.devices(of: user).count == 2)
                            client.stop()
                        } else {
                            #expect(try await Self.refusal(events) == ErrorCodes.nameTaken)
                            #expect(try await client.deviceToken() == nil)
                        }
                        try await group.waitForAll()
                    }
                }
            } configure: {
                $0.accounts.registration = .open
                $0.accounts.maxSignUpsPerAddress = 50
            }
        }
    }

    @Test("the SDK runs a group: create with contacts, promote, list with roles, transfer; each role change an event")
    func groups() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                let port = fixture.ports.native
                let alice = try Self.client(port: port, "alice", password: "correct horse", folder: folder)
                let bob = try Self.client(port: port, "bob", password: "battery staple", folder: folder)
                let (aliceEvents, bobEvents) = (EventReader(alice), EventReader(bob))
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { await alice.run() }
                    group.addTask { await bob.run() }
                    try await Self.connected(aliceEvents)
                    try await Self.connected(bobEvents)
                    try await SignUpClientTests.makeContacts(alice, aliceEvents, bob)
                    try await alice.createGroup("book-club", members: ["bob"])
                    try await alice.setAdmins(["bob"], in: "book-club")
                    let promoted = try await bobEvents.next("bob's promotion") { event -> GroupRoleInfo? in
                        if case .role("book-club", "bob", let role) = event { role } else { nil }
                    }
                    #expect(promoted == .admin)
                    #expect(
                        try await bob.groupMembers(of: "book-club").map { "\($0.user) \($0.role)" }
                            == ["alice owner", "bob admin"]
                    )
                    try await alice.transferGroup("book-club", to: "bob")
                    let owner = try await aliceEvents.next("the transfer") { event -> String? in
                        if case .role("book-club", let user, .owner) = event { user } else { nil }
                    }
                    #expect(owner == "bob")
                    await #expect(throws: CourierClientError.self) {
                        try await alice.setAdmins(["bob"], in: "book-club", admin: false)
                    }
                    try await alice.leaveGroup("book-club")
                    #expect(try await bob.groupMembers(of: "book-club").map(\.user) == ["bob"])
                    alice.stop()
                    bob.stop()
                    try await group.waitForAll()
                }
            } configure: {
                $0.accounts.registration = .open
                $0.accounts.maxSignUpsPerAddress = 50
            }
        }
    }
}
