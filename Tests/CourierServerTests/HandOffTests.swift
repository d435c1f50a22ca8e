import CourierProtocol
import CourierServerTesting
import CourierStore
import CourierTesting
import Foundation
import Testing

@Suite("Fresh events handed over at commit, and the store for whoever is behind")
struct HandOffTests {
    /// Reads events until `count` messages have come, checking that they are the user's log after `cursor` as the
    /// store has it, each event once, in order, none left out (the logs share one stream of positions: the
    /// cursors grow with gaps where other users' entries are).
    ///
    /// - Returns: The messages, and the cursor of the last event read.
    static func messages(
        _ client: NativeTestClient,
        _ count: Int,
        after cursor: UInt64,
        of user: String,
        in store: any CourierDatabase
    ) async throws -> (messages: [Courier_V1_Message], last: UInt64) {
        var messages: [Courier_V1_Message] = []
        var cursors: [UInt64] = []
        while messages.count < count {
            let events = try await client.expect(timeout: .seconds(60), "events") { envelope -> [Courier_V1_Event]? in
                guard case .events(let events)? = envelope.body, !events.events.isEmpty else { return nil }
                return events.events
            }
            for event in events {
                #expect(event.cursor > cursors.last ?? cursor, "cursor \(event.cursor) after \(cursors.last ?? cursor)")
                cursors.append(event.cursor)
                if case .message(let message)? = event.kind { messages.append(message) }
            }
        }
        let id = try #require(try await store.user(named: user)).id
        var stored: [UInt64] = []
        while stored.last ?? cursor < cursors.last! {
            let page = try await store.events(for: id, after: stored.last ?? cursor, limit: 512)
            if page.isEmpty { break }
            stored += page.map(\.cursor).filter { $0 <= cursors.last! }
        }
        #expect(cursors == stored, "the events read are not the log's: a gap or a duplicate")
        return (messages, cursors.last!)
    }

    @Test("a recipient pushed past the bound catches up from the store, in order, no gaps, no duplicates")
    func pastTheBound() async throws {
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                try await fixture.contacts("alice", "bob")
                let (bob, welcome) = try await NativeTestClient.login(port: fixture.ports.native, "bob")
                let (alice, _) = try await NativeTestClient.login(port: fixture.ports.native, "alice")
                _ = try await bob.expect("caught up") { $0.events.caughtUp ? true : nil }

                // Phase 1: bob reads nothing while alice sends 8 MB, more than the socket buffers hold (4 MiB to
                // send, 128 KiB to receive when nothing is read, the server's 256 KiB): his delivery stalls, the
                // commits go on, and what is handed to him overflows the bound of 4.
                try await bob.stopReading()
                let text = String(repeating: "h", count: 32 * 1024)
                let count = 256
                let writer = Task {
                    for index in 0..<count {
                        var envelope = ClientEnvelope()
                        envelope.send.id = "m\(index)"
                        envelope.send.to.user = "bob"
                        envelope.send.body.text = text
                        try await alice.send(envelope)
                    }
                }
                var acked = 0
                while acked < count {
                    _ = try await alice.expect(timeout: .seconds(60), "acks") { $0.ack }
                    acked += 1
                }
                try await writer.value
                let handedBefore = try await fixture.metric("courier_events_handed_total")
                try await bob.resumeReading()
                let (received, caughtUp) = try await Self.messages(
                    bob,
                    count,
                    after: welcome.cursor,
                    of: "bob",
                    in: fixture.store
                )
                #expect(received.map(\.id) == (0..<count).map { "m\($0)" })
                let handedAfter = try await fixture.metric("courier_events_handed_total")
                #expect(handedAfter < handedBefore + count, "some of them came from the store")

                // Phase 2: bob keeps up; each new message is handed to him as committed, none read back.
                var last = caughtUp
                for index in 0..<5 {
                    _ = try await alice.sendText("one \(index)", to: .user("bob"), id: "one-\(index)")
                    let one = try await Self.messages(bob, 1, after: last, of: "bob", in: fixture.store)
                    #expect(one.messages.map(\.id) == ["one-\(index)"])
                    last = one.last
                }
                #expect(try await fixture.metric("courier_events_handed_total") >= handedAfter + 5)
            },
            configure: { $0.limits.maxHandedEvents = 4 }
        )
    }
}

extension HandOffTests {
    @Test(
        "a group's member that falls behind gets every message once, in order, and one recalled meanwhile recalled; the caught-up member gets them as they come"
    )
    func groupBehind() async throws {
        try await ServerFixture.with { fixture in
            for name in ["alice", "bob", "carol"] { try await fixture.user(name) }
            try await fixture.store.createGroup(name: "tea-party", owner: "alice", members: ["bob", "carol"], nowMs: 0)
            var group = Courier_V1_Conversation()
            group.group = "tea-party"
            let (bob, bobWelcome) = try await NativeTestClient.login(port: fixture.ports.native, "bob")
            let (carol, carolWelcome) = try await NativeTestClient.login(port: fixture.ports.native, "carol")
            let (alice, _) = try await NativeTestClient.login(port: fixture.ports.native, "alice")
            for member in [bob, carol] { _ = try await member.expect("caught up") { $0.events.caughtUp ? true : nil } }

            // bob reads nothing while alice sends 8 MB to the group, more than the sockets buffer: his delivery
            // stalls, the commits go on, and he holds what his bounds allow. carol reads as they come.
            try await bob.stopReading()
            let count = 256
            let texts = ["你好", "こんにちは", "🙂👍🏽", "مرحبا", "שלום"]
            let store = fixture.store
            let carolReads = Task {
                try await Self.messages(carol, count, after: carolWelcome.cursor, of: "carol", in: store).messages
            }
            for index in 0..<count {
                let text = texts[index % texts.count] + String(repeating: "h", count: 32 * 1024)
                _ = try await alice.sendText(text, to: group, id: "g\(index)")
            }
            // The last one recalled while bob is behind: it reaches him recalled, never with its text.
            var recall = ClientEnvelope()
            recall.recall.conversation = group
            recall.recall.id = "g\(count - 1)"
            let requestID = try await alice.send(recall)
            _ = try await alice.expect("the recall's answer") { $0.requestID == requestID ? true : nil }
            let carolGot = try await carolReads.value
            #expect(carolGot.map(\.id) == (0..<count).map { "g\($0)" })

            try await bob.resumeReading()
            let bobGot = try await Self.messages(bob, count, after: bobWelcome.cursor, of: "bob", in: store).messages
            #expect(bobGot.map(\.id) == (0..<count).map { "g\($0)" })
            #expect(bobGot.dropLast().allSatisfy { $0.body.text.hasSuffix("hhhh") && !$0.recalled })
            let last = try #require(bobGot.last)
            #expect(last.recalled)
            #expect(last.body.text.isEmpty)
        }
    }
}
