import CourierProtocol
import CourierStore
import Testing

@testable import CourierServer

extension FanoutTests {
    static func joined(_ cursors: ClosedRange<UInt64>) -> [StoredEvent] {
        cursors.map { StoredEvent(cursor: $0, kind: .membership(group: "g", user: "a", change: .joined, seq: $0)) }
    }

    @Test(
        "where a node's read of other nodes' events starts for a user: caught up connections only, the lowest cursor, the least room"
    )
    func freshAfter() throws {
        let hub = Hub()
        // alice logged in caught up at 7: it was never told a cursor, and has sent up to 7.
        let alice = try Self.register(hub, Self.alice, device: 1, maxHanded: 4)
        alice.delivered(upTo: 7)
        #expect(alice.freshAfter.map { [$0.after, UInt64($0.room)] } == [7, 4])
        // Two events handed and not sent yet: it still takes more, after them, with less room.
        hub.logsGrew([Self.alice: 9], fresh: [Self.alice: Self.following(Self.joined(8...9))])
        #expect(alice.freshAfter.map { [$0.after, UInt64($0.room)] } == [9, 2])
        // Full: none.
        hub.logsGrew([Self.alice: 11], fresh: [Self.alice: Self.following(Self.joined(10...11))])
        #expect(alice.freshAfter == nil)
        #expect(hub.freshAfter(of: [Self.alice]).isEmpty)

        // bob is behind (told 5, sent nothing, holding nothing): he reads from the store, so none.
        let bob = try Self.register(hub, Self.bob, device: 2, maxHanded: 4)
        hub.logsGrew([Self.bob: 5], fresh: [:])
        #expect(bob.freshAfter == nil)

        // carol's phone is caught up at 3, her tablet too at 2 with one event held; a connection that takes no
        // events does not count.
        let phone = try Self.register(hub, Self.carol, device: 3, maxHanded: 4)
        phone.delivered(upTo: 3)
        let tablet = try Self.register(hub, Self.carol, device: 4, maxHanded: 4)
        tablet.delivered(upTo: 2)
        tablet.notify(cursor: 3, fresh: Self.following(Self.joined(3...3)))
        _ = try Self.register(hub, Self.carol, device: 5, events: false, maxHanded: 4)
        let found = hub.freshAfter(of: [Self.alice, Self.bob, Self.carol])
        #expect(Set(found.keys) == [Self.carol])
        #expect(found[Self.carol].map { [$0.after, UInt64($0.room)] } == [3, 3])
        // A connection of hers that is behind reads from the store whatever the node reads: the others still count.
        let behind = try Self.register(hub, Self.carol, device: 6, maxHanded: 4)
        behind.notify(cursor: 4)
        #expect(behind.freshAfter == nil)
        #expect(hub.freshAfter(of: [Self.carol])[Self.carol].map { [$0.after, UInt64($0.room)] } == [3, 3])

        // dave holds 4 and 5; 6 and 7 do not fit (read from the store), and the delivery sends 3 to 7 from there:
        // caught up, he takes what comes after 7, though 4 and 5 are still held until his next take.
        let dave = try Self.register(hub, UserID(rawValue: 4), device: 7, maxHanded: 3)
        dave.delivered(upTo: 3)
        dave.notify(cursor: 5, fresh: Self.following(Self.joined(4...5)))
        dave.notify(cursor: 7, fresh: Self.following(Self.joined(6...7)))
        #expect(dave.handedCursors == [4, 5] && dave.freshAfter == nil)
        dave.delivered(upTo: 7)
        #expect(dave.freshAfter.map { [$0.after, UInt64($0.room)] } == [7, 1])
    }
}

extension FanoutTests {
    @Test(
        "cursors that only grow, with gaps: a run is held by the cursor it says it follows, never by arithmetic on cursors"
    )
    func sparseCursors() throws {
        let hub = Hub()
        let handle = try Self.register(hub, Self.alice, device: 1, ephemeral: false, maxHanded: 8)
        handle.delivered(upTo: 100)
        #expect(handle.freshAfter.map { [$0.after, UInt64($0.room)] } == [100, 8])
        // A run after 100 with gaps inside it: held whole, and taken from 100.
        hub.logsGrew(
            [Self.alice: 130],
            fresh: [Self.alice: FreshRun(after: 100, events: Self.events([104, 117, 130]))]
        )
        #expect(handle.handedCursors == [104, 117, 130])
        #expect(handle.freshAfter.map { [$0.after, UInt64($0.room)] } == [130, 5], "it holds all it has not sent")
        // The next run follows the last held (130), whatever the distance: held after it.
        hub.logsGrew([Self.alice: 171], fresh: [Self.alice: FreshRun(after: 130, events: Self.events([150, 171]))])
        #expect(handle.handedCursors == [104, 117, 130, 150, 171])
        #expect(handle.takeHanded(after: 99, limit: 10).isEmpty, "100 not sent yet: the store first")
        #expect(handle.takeHanded(after: 100, limit: 2).map(\.cursor) == [104, 117])
        // Sent up to 117 and 130 taken from the store meanwhile (read already): dropped, the rest follows 130.
        #expect(handle.takeHanded(after: 130, limit: 10).map(\.cursor) == [150, 171])
        handle.delivered(upTo: 171)
        // A run that says it follows 180, which this connection never had: what it holds is let go, the run is
        // held, and it is not taken until the delivery has read up to 180 from the store.
        hub.logsGrew([Self.alice: 175], fresh: [Self.alice: FreshRun(after: 172, events: Self.events([175]))])
        hub.logsGrew([Self.alice: 200], fresh: [Self.alice: FreshRun(after: 180, events: Self.events([190, 200]))])
        #expect(handle.handedCursors == [190, 200])
        #expect(handle.freshAfter == nil, "between 171 and 180 is not held")
        #expect(handle.takeHanded(after: 175, limit: 10).isEmpty)
        #expect(handle.takeHanded(after: 180, limit: 10).map(\.cursor) == [190, 200])
    }
}

extension FanoutTests {
    @Test(
        "a node's reads of other nodes' events: parts of at most so many users, each user's share of the events bounded so that a part reads at most so many"
    )
    func feedReads() {
        func reads(_ rooms: [Int], _ maxUsers: Int, _ maxEvents: Int) -> [String] {
            CourierServer.feedReads(rooms: rooms, maxUsers: maxUsers, maxEvents: maxEvents).map {
                "\($0.range.lowerBound)..<\($0.range.upperBound):\($0.limit)"
            }
        }
        // 256 users and 1,024 events a read by default: 600 users go in three parts by users, the full ones with
        // four events each, the last (88 users) with eleven.
        #expect(reads(Array(repeating: 64, count: 600), 256, 1_024) == ["0..<256:4", "256..<512:4", "512..<600:11"])
        // Few users: each may bring one more than the most room among them, no more.
        #expect(reads([3, 9, 2], 256, 1_024) == ["0..<3:10"])
        #expect(reads([0, 0], 256, 1_024) == ["0..<2:1"])
        // Every part reads at most maxEvents rows, whatever the rooms.
        for (rooms, maxUsers, maxEvents) in [([Int](repeating: 5_000, count: 1_000), 256, 1_024), ([7, 7, 7], 2, 5)] {
            for (range, limit) in CourierServer.feedReads(rooms: rooms, maxUsers: maxUsers, maxEvents: maxEvents) {
                #expect(range.count <= maxUsers && range.count * limit <= maxEvents, "\(range) \(limit)")
            }
        }
        // None is left out; nothing gives no part; limits below one count as one.
        #expect(reads([], 256, 1_024).isEmpty)
        #expect(reads([4, 4], 0, 0) == ["0..<1:1", "1..<2:1"])
    }
}
