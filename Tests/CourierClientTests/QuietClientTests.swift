import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import Foundation
import Testing

@testable import CourierClient

@Suite("The SDK names groups, mentions members and mutes, over a real server", .serialized)
struct QuietClientTests {
    static func client(
        port: Int,
        _ user: String,
        password: String,
        folder: URL,
        device: String = "one",
        signUp: Bool = true
    ) throws -> CourierClient {
        var configuration = CourierClient.Configuration(
            port: port,
            credentials: signUp
                ? .signUp(user: user, password: password, invite: nil) : .password(user: user, password: password),
            storePath: folder.appendingPathComponent("\(user)-\(device).sqlite").path
        )
        configuration.minBackoff = .milliseconds(20)
        configuration.maxBackoff = .milliseconds(200)
        return try CourierClient(configuration: configuration)
    }

    @Test(
        "a title in any script reaches every member; @name and @all count as mentions; a mute reaches the other device"
    )
    func quiet() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                let port = fixture.ports.native
                let alice = try Self.client(port: port, "alice", password: "correct horse", folder: folder)
                let bob = try Self.client(port: port, "bob", password: "battery staple", folder: folder)
                let (aliceEvents, bobEvents) = (EventReader(alice), EventReader(bob))
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { await alice.run() }
                    group.addTask { await bob.run() }
                    try await SignUpClientTests.connected(aliceEvents)
                    try await SignUpClientTests.connected(bobEvents)
                    try await SignUpClientTests.makeContacts(alice, aliceEvents, bob)
                    try await alice.createGroup("book-club", members: ["bob"])
                    // The title: any script, bidi text kept as it is; a member (not an admin) may not set it.
                    try await alice.setGroupTitle("读书会 · 本の会 · نادي الكتاب", of: "book-club")
                    let title = try await bobEvents.next("the title") { event -> String? in
                        if case .groupTitle("book-club", let title, "alice") = event { title } else { nil }
                    }
                    #expect(title == "读书会 · 本の会 · نادي الكتاب")
                    #expect(try await bob.groupRoster(of: "book-club").title == title)
                    let notAdmin = await #expect(throws: CourierClientError.self) {
                        try await bob.setGroupTitle("bob's club", of: "book-club")
                    }
                    #expect(notAdmin?.code == ErrorCodes.notAdmin)
                    // Mentions: alice names bob, then says @all as the owner; bob may not say @all.
                    _ = try await alice.send("@bob 看这本", to: .group("book-club"))
                    _ = try await alice.send("@all 周五见", to: .group("book-club"))
                    let mentioned = try await bobEvents.next("the @all message") { event -> ChatMessage? in
                        if case .message(let message) = event, message.text.hasPrefix("@all") { message } else { nil }
                    }
                    #expect(mentioned.mentions.mention("bob"))
                    let count = try await bob.unreadCounts().first { $0.conversation == .group("book-club") }
                    #expect(count?.unread == 2 && count?.mentions == 2 && count?.title == title)
                    let refused = try await bob.send("@all hello", to: .group("book-club"))
                    let code = try await bobEvents.next("the refusal") { event -> String? in
                        if case .sendFailed(refused, let code, _) = event { code } else { nil }
                    }
                    #expect(code == ErrorCodes.notAdmin)
                    // A mute on one of bob's devices reaches the other, and the counts say it.
                    let second = try Self.client(
                        port: port,
                        "bob",
                        password: "battery staple",
                        folder: folder,
                        device: "two",
                        signUp: false
                    )
                    let secondEvents = EventReader(second)
                    group.addTask { await second.run() }
                    _ = try await secondEvents.next("caught up") { event -> Bool? in
                        if case .caughtUp = event { true } else { nil }
                    }
                    try await bob.setNotify(.mentions, for: .group("book-club"))
                    let level = try await secondEvents.next("the mute") { event -> NotifyLevel? in
                        if case .notify(.group("book-club"), let level) = event { level } else { nil }
                    }
                    #expect(level == .mentions)
                    let after = try await second.unreadCounts().first { $0.conversation == .group("book-club") }
                    #expect(after?.notify == .mentions)
                    // Muted: a plain message does not alert; one that mentions bob does.
                    let plain = ChatMessage(
                        id: "x",
                        from: "alice",
                        conversation: .group("book-club"),
                        seq: 9,
                        time: Date(),
                        text: "晚安"
                    )
                    var mention = plain
                    mention.text = "晚安 @Bob"
                    #expect(!CourierClient.alerts(plain, user: "bob", level: .mentions))
                    #expect(CourierClient.alerts(mention, user: "bob", level: .mentions))
                    #expect(!CourierClient.alerts(mention, user: "bob", level: NotifyLevel.none))
                    #expect(CourierClient.alerts(plain, user: "bob", level: .all))
                    #expect(!CourierClient.alerts(plain, user: "alice", level: .all), "never one's own")
                    alice.stop()
                    bob.stop()
                    second.stop()
                    try await group.waitForAll()
                }
            } configure: {
                $0.accounts.registration = .open
                $0.accounts.maxSignUpsPerAddress = 50
            }
        }
    }
}
