import CourierProtocol
import CourierStore
import Testing

@testable import CourierServer

@Suite("The in-process fan-out (the hub): hints reach the connections they concern, and only those")
struct FanoutTests {
    static let alice = UserID(rawValue: 1)
    static let bob = UserID(rawValue: 2)
    static let carol = UserID(rawValue: 3)

    static func register(_ hub: Hub, _ user: UserID, device: Int64, ephemeral: Bool = true) throws -> ConnectionHandle {
        guard
            case .registered(let handle, _, _) = hub.register(
                user: user,
                device: DeviceID(rawValue: device),
                ephemeral: ephemeral
            )
        else {
            throw TestFailure(description: "not registered")
        }
        return handle
    }

    struct TestFailure: Error, CustomStringConvertible {
        var description: String
    }

    @Test("typing: each recipient sees the conversation named its own way; the sender's connection is skipped")
    func typing() throws {
        let hub = Hub()
        let aliceLaptop = try Self.register(hub, Self.alice, device: 1)
        let alicePhone = try Self.register(hub, Self.alice, device: 2)
        let bob = try Self.register(hub, Self.bob, device: 3)
        let bobQuiet = try Self.register(hub, Self.bob, device: 4, ephemeral: false)
        let carol = try Self.register(hub, Self.carol, device: 5)
        let hint = TypingHint(
            user: Self.alice,
            name: "alice",
            conversation: .user("bob"),
            typing: true,
            fromConnection: aliceLaptop.id
        )
        #expect(hint.notice(for: Self.bob).conversation.user == "alice")
        #expect(hint.notice(for: Self.alice).conversation.user == "bob")
        var group = hint
        group.conversation = .group("team")
        #expect(group.notice(for: Self.bob).conversation.group == "team")
        #expect(group.notice(for: Self.alice).conversation.group == "team")

        hub.typing(hint, to: [Self.alice, Self.bob])
        #expect(Self.noticeCount(aliceLaptop) == 0, "the connection it came from")
        #expect(Self.noticeCount(alicePhone) == 1)
        #expect(Self.noticeCount(bob) == 1)
        #expect(Self.noticeCount(bobQuiet) == 0, "asked for no notices")
        #expect(Self.noticeCount(carol) == 0, "not a member")
    }

    @Test("logs grew: the users' connections are woken up to the cursor, others not; presence goes to peers")
    func logsAndPresence() throws {
        let hub = Hub()
        let alice = try Self.register(hub, Self.alice, device: 1)
        let bob = try Self.register(hub, Self.bob, device: 2)
        hub.logsGrew([Self.alice: 7])
        #expect(alice.pendingCursor == 7 && bob.pendingCursor == 0)
        hub.presence(of: "carol", online: true, lastSeenMs: 99, to: [Self.bob])
        #expect(Self.noticeCount(bob) == 1 && Self.noticeCount(alice) == 0)
        #expect(hub.isOnline(Self.alice) && !hub.isOnline(Self.carol))
    }

    static func noticeCount(_ handle: ConnectionHandle) -> Int {
        handle.pendingNotices
    }
}
