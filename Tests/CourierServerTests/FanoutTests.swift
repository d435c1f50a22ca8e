import CourierProtocol
import CourierStore
import Testing

@testable import CourierServer

@Suite("The in-process fan-out (the hub): hints reach the connections they concern, and only those")
struct FanoutTests {
    static let alice = UserID(rawValue: 1)
    static let bob = UserID(rawValue: 2)
    static let carol = UserID(rawValue: 3)

    static func register(
        _ hub: Hub,
        _ user: UserID,
        device: Int64,
        ephemeral: Bool = true,
        events: Bool = true,
        maxHanded: Int = 0,
        maxHandedBytes: Int = .max
    ) throws -> ConnectionHandle {
        guard
            case .registered(let handle, _, _) = hub.register(
                user: user,
                device: DeviceID(rawValue: device),
                ephemeral: ephemeral,
                events: events,
                maxHanded: maxHanded,
                maxHandedBytes: maxHandedBytes
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

    static func events(_ cursors: some Sequence<UInt64>) -> [StoredEvent] {
        cursors.map { cursor in
            var event = StoredEvent.placeholder
            event.cursor = cursor
            return event
        }
    }

    /// A run of consecutive cursors, as a store numbering each log on from its head hands it over.
    static func run(_ cursors: ClosedRange<UInt64>) -> FreshRun {
        FreshRun(after: cursors.lowerBound - 1, events: Self.events(cursors))
    }

    /// Events with consecutive cursors, as the run that follows the one before the first.
    static func following(_ events: [StoredEvent]) -> FreshRun {
        FreshRun(after: (events.first?.cursor ?? 1) - 1, events: events)
    }

    @Test("handed events: held while they follow each other and fit, taken only from where the delivery stands")
    func handed() throws {
        let hub = Hub()
        let handle = try Self.register(hub, Self.alice, device: 1, ephemeral: false, maxHanded: 4)
        hub.logsGrew([Self.alice: 2], fresh: [Self.alice: Self.run(1...2)])
        hub.logsGrew([Self.alice: 3], fresh: [Self.alice: Self.run(3...3)])
        #expect(handle.handedCursors == [1, 2, 3] && handle.pendingCursor == 3)
        // Taken from where the delivery stands, a page at a time.
        #expect(handle.takeHanded(after: 0, limit: 2).map(\.cursor) == [1, 2])
        // A gap (an admin command's events, cursor only): the new run replaces what is held; the delivery reads
        // the gap from the store, then takes the run.
        hub.logsGrew([Self.alice: 4])
        hub.logsGrew([Self.alice: 6], fresh: [Self.alice: Self.run(5...6)])
        #expect(handle.handedCursors == [5, 6])
        #expect(handle.takeHanded(after: 2, limit: 10).isEmpty, "4 must come from the store")
        #expect(handle.takeHanded(after: 4, limit: 10).map(\.cursor) == [5, 6])
        // Past the bound: nothing held, everything read from the store, and the cursor still raised.
        hub.logsGrew([Self.alice: 11], fresh: [Self.alice: Self.run(7...11)])
        #expect(handle.handedCursors.isEmpty && handle.pendingCursor == 11)
        // Events the delivery read already are dropped when it takes.
        hub.logsGrew([Self.alice: 13], fresh: [Self.alice: Self.run(12...13)])
        #expect(handle.takeHanded(after: 12, limit: 10).map(\.cursor) == [13])
        // A connection that asked for no events holds nothing.
        let quiet = try Self.register(hub, Self.bob, device: 2, ephemeral: false, events: false, maxHanded: 4)
        hub.logsGrew([Self.bob: 1], fresh: [Self.bob: Self.run(1...1)])
        #expect(quiet.handedCursors.isEmpty && quiet.pendingCursor == 0)
    }
}

extension FanoutTests {
    @Test("a recall of a message still held makes it go out recalled, without its body")
    func recallOfHeld() throws {
        let hub = Hub()
        let handle = try Self.register(hub, Self.alice, device: 1, ephemeral: false, maxHanded: 8)
        let message = StoredMessage(
            id: "m1",
            from: "bob",
            fromDevice: nil,
            conversation: .user("bob"),
            seq: 3,
            timeMs: 1,
            body: Array("secret".utf8),
            recalled: false
        )
        hub.logsGrew(
            [Self.alice: 1],
            fresh: [Self.alice: FreshRun(after: 0, events: [StoredEvent(cursor: 1, kind: .message(message))])]
        )
        hub.logsGrew(
            [Self.alice: 2],
            fresh: [
                Self.alice: FreshRun(
                    after: 1,
                    events: [
                        StoredEvent(cursor: 2, kind: .recall(conversation: .user("bob"), seq: 3, id: "m1", by: "bob"))
                    ]
                )
            ]
        )
        let taken = handle.takeHanded(after: 0, limit: 10)
        guard case .message(let held)? = taken.first?.kind else {
            Issue.record("\(taken)")
            return
        }
        #expect(held.recalled && held.body.isEmpty && taken.count == 2)
    }
}

extension FanoutTests {
    @Test("fresh room: none offline; what is left under maxHanded, for a connection caught up or behind")
    func freshRoom() throws {
        let hub = Hub()
        #expect(hub.freshRoom(for: Self.alice) == 0)
        let handle = try Self.register(hub, Self.alice, device: 1, maxHanded: 8)
        #expect(hub.freshRoom(for: Self.alice) == 8)
        // Three held as committed: room for five more.
        handle.notify(
            cursor: 3,
            fresh: Self.following(
                (1...3).map {
                    StoredEvent(cursor: $0, kind: .membership(group: "g", user: "a", change: .joined, seq: $0))
                }
            )
        )
        #expect(hub.freshRoom(for: Self.alice) == 5)
        // Behind: the log grew by events not handed (read from the store). What was held may be recalled by them,
        // so it is read again too; there is room for what comes after them.
        handle.notify(cursor: 10)
        #expect(handle.handedCursors.isEmpty)
        #expect(hub.freshRoom(for: Self.alice) == 8)
        handle.notify(
            cursor: 12,
            fresh: Self.following(
                (11...12).map {
                    StoredEvent(cursor: $0, kind: .membership(group: "g", user: "a", change: .joined, seq: $0))
                }
            )
        )
        // Held after the gap, which is read from the store first.
        #expect(handle.handedCursors == [11, 12])
        #expect(hub.freshRoom(for: Self.alice) == 6)
        #expect(handle.takeHanded(after: 3, limit: 64).isEmpty)
        #expect(handle.takeHanded(after: 10, limit: 64).map(\.cursor) == [11, 12])
        #expect(hub.freshRoom(for: Self.alice) == 8)
        // A connection that takes no events has no room.
        _ = try Self.register(hub, Self.bob, device: 2, events: false, maxHanded: 8)
        #expect(hub.freshRoom(for: Self.bob) == 0)
    }
}

extension FanoutTests {
    @Test("held events are bounded in bytes: what would pass maxHandedBytes is read from the store after what is held")
    func heldBytes() throws {
        let hub = Hub()
        let handle = try Self.register(hub, Self.alice, device: 1, maxHanded: 8, maxHandedBytes: 1_000)
        func text(_ cursor: UInt64, _ body: String) -> StoredEvent {
            let message = StoredMessage(
                id: "m\(cursor)",
                from: "bob",
                fromDevice: nil,
                conversation: .user("bob"),
                seq: cursor,
                timeMs: 0,
                body: Array(body.utf8),
                recalled: false
            )
            return StoredEvent(cursor: cursor, kind: .message(message))
        }
        // 256 + 90 + 2 + 3 bytes each: two fit in 1,000, a third does not, and is left for the store.
        let long = String(repeating: "长", count: 30)
        #expect(text(1, long).heldBytes == 351)
        handle.notify(cursor: 2, fresh: Self.following([text(1, long), text(2, long)]))
        #expect(handle.handedCursors == [1, 2])
        #expect(hub.freshRoom(for: Self.alice) == 6)
        handle.notify(cursor: 3, fresh: Self.following([text(3, long)]))
        #expect(handle.handedCursors == [1, 2], "the ones held stay, the new one is read after them")
        #expect(handle.takeHanded(after: 0, limit: 64).map(\.cursor) == [1, 2])
        handle.notify(cursor: 6, fresh: Self.following([text(5, long), text(6, long)]))
        #expect(handle.handedCursors == [5, 6])
        // A short one still fits (265 bytes: 967 in all); the next does not.
        handle.notify(cursor: 7, fresh: Self.following([text(7, "🙂")]))
        #expect(handle.handedCursors == [5, 6, 7])
        #expect(hub.freshRoom(for: Self.alice) == 5)
        handle.notify(cursor: 8, fresh: Self.following([text(8, String(repeating: "x", count: 40))]))
        #expect(handle.handedCursors == [5, 6, 7], "past 1,000 bytes: not held")
        // Taking some gives their bytes back: the next fits again.
        #expect(handle.takeHanded(after: 4, limit: 2).map(\.cursor) == [5, 6])
        handle.notify(cursor: 9, fresh: Self.following([text(8, "x"), text(9, "y")]))
        #expect(handle.handedCursors == [7, 8, 9])
        // The log grew by events not handed (no room for them): one may recall a message held, so nothing held
        // is sent from memory; it is read again from the store.
        handle.notify(cursor: 10)
        #expect(handle.handedCursors.isEmpty)
        #expect(hub.freshRoom(for: Self.alice) == 8)
        // Bytes all taken: the store is told there is no room, whatever the count.
        let full = try Self.register(hub, Self.bob, device: 2, maxHanded: 8, maxHandedBytes: 300)
        full.notify(cursor: 1, fresh: Self.following([text(1, String(repeating: "x", count: 39))]))
        #expect(full.handedCursors == [1])
        #expect(hub.freshRoom(for: Self.bob) == 0)
    }
}

extension StoredEvent {
    static let placeholder = StoredEvent(cursor: 0, kind: .recall(conversation: .user("x"), seq: 1, id: "x", by: "x"))
}
