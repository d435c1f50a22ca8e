import CourierProtocol
import CourierServerTesting
import CourierTesting
import Foundation
import Testing

@Suite("Fresh events handed over at commit, and the store for whoever is behind")
struct HandOffTests {
    /// Reads events until `count` messages have come, checking that cursors follow each other from the first.
    static func messages(
        _ client: NativeTestClient,
        _ count: Int,
        after cursor: UInt64
    ) async throws -> [Courier_V1_Message] {
        var messages: [Courier_V1_Message] = []
        var last = cursor
        while messages.count < count {
            let events = try await client.expect(timeout: .seconds(60), "events") { envelope -> [Courier_V1_Event]? in
                guard case .events(let events)? = envelope.body, !events.events.isEmpty else { return nil }
                return events.events
            }
            for event in events {
                #expect(event.cursor == last + 1, "cursor \(event.cursor) after \(last): a gap or a duplicate")
                last = event.cursor
                if case .message(let message)? = event.kind { messages.append(message) }
            }
        }
        return messages
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
                let received = try await Self.messages(bob, count, after: welcome.cursor)
                #expect(received.map(\.id) == (0..<count).map { "m\($0)" })
                let handedAfter = try await fixture.metric("courier_events_handed_total")
                #expect(handedAfter < handedBefore + count, "some of them came from the store")

                // Phase 2: bob keeps up; each new message is handed to him as committed, none read back.
                let last = received.count
                for index in 0..<5 {
                    _ = try await alice.sendText("one \(index)", to: .user("bob"), id: "one-\(index)")
                    let one = try await Self.messages(bob, 1, after: welcome.cursor + UInt64(last + index))
                    #expect(one.map(\.id) == ["one-\(index)"])
                }
                #expect(try await fixture.metric("courier_events_handed_total") >= handedAfter + 5)
            },
            configure: { $0.limits.maxHandedEvents = 4 }
        )
    }
}
