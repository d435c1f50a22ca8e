import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierTesting
import CourierWire
import Testing

/// The server's limits end to end, each set low through its configuration field: what the client sees at the limit,
/// and that the server goes on serving others.
@Suite("Limits, end to end", .serialized)
struct LimitsTests {
    @Test("past maxConnections (both ports together) a connection gets server-full; a freed slot is reused")
    func maxConnections() async throws {
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                let (alice, _) = try await NativeTestClient.login(fixture, "alice")
                let compat = try await CompatTestClient.connect(port: fixture.ports.compat)
                try await compat.write(try CompatTestClient.packet("auth", ["user": "bob", "password": "pw-bob"]))
                _ = try await compat.expect("welcome")

                let third = try await NativeTestClient.connect(port: fixture.ports.native)
                let refused = try await third.expectClose()
                #expect(refused.last?.failure?.code == ErrorCodes.serverFull, "\(refused)")
                let fourth = try await CompatTestClient.connect(port: fixture.ports.compat)
                let compatRefused = try await fourth.expectClose()
                #expect(compatRefused.last.map { CompatTests.string($0, "code") } == ErrorCodes.serverFull)

                // The two admitted connections are untouched.
                _ = try await alice.sendText("still served", to: .user("bob"))
                #expect(String(buffer: try await compat.expect("txt").payload) == "still served")

                // When one leaves, its slot is free again (the server notices the close a moment later: retry).
                await alice.close()
                #expect(try await NativeTestClient.loginOnceThereIsRoom(fixture, "alice"))
                await compat.close()
            },
            configure: { $0.limits.maxConnections = 2 }
        )
    }

    @Test("acknowledgements sent back to back are merged, and the last of them is what the device resumes from")
    func mergedAcks() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            let (bob, welcome) = try await NativeTestClient.login(fixture, "bob")
            for index in 0..<40 { _ = try await alice.sendText("m\(index)", to: .user("bob")) }
            let messages = try await bob.messages(40, ack: false)
            #expect(messages.count == 40)
            // One acknowledgement per event, back to back: one goes to the group commit, the others wait merged.
            let bobID = try #require(try await fixture.store.user(named: "bob")).id
            let latest = try await fixture.store.logCursor(of: bobID)
            for cursor in (latest - 39)...latest {
                var envelope = ClientEnvelope()
                envelope.ack.cursor = cursor
                _ = try await bob.send(envelope)
            }
            // A goaway: the server closes once every write is committed, merged ones included.
            try await bob.send(frame: .goaway(lastStreamID: 0, code: .noError, message: "bye"))
            _ = try await bob.expectClose()
            // Back without a cursor of its own: nothing acknowledged comes again.
            let (again, resumed) = try await NativeTestClient.resume(port: fixture.ports.native, token: welcome.token)
            #expect(resumed.cursor == latest, "resumed from \(resumed.cursor), acknowledged \(latest)")
            await again.close()
            await alice.close()
        }
    }

    @Test("a goaway right after sends: every send is answered before the server closes")
    func goawayKeepsAnswers() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            var ids: [UInt64] = []
            for index in 0..<20 {
                var envelope = ClientEnvelope()
                envelope.send.to.user = "bob"
                envelope.send.body.text = "before goodbye \(index)"
                ids.append(try await alice.send(envelope))
            }
            try await alice.send(frame: .goaway(lastStreamID: 0, code: .noError, message: "bye"))
            let answered = try await alice.expectClose()
            #expect(Set(answered.filter { $0.sendAck.seq > 0 }.map(\.requestID)) == Set(ids), "\(answered)")
        }
    }

    @Test(
        "a deadline resolution of zero and read buffers out of range are taken within bounds: logins, sends, deadlines"
    )
    func resolutionAndReadBufferBounds() async throws {
        for initialReadBytes in [0, Int.max] {
            func bounded(_ configuration: inout ServerConfiguration) {
                configuration.limits.deadlineResolution = .zero
                configuration.limits.initialReadBytes = initialReadBytes
            }
            // Logins and sends, on a server whose timers are far away (a login on a loaded machine is slow)…
            try await ServerFixture.with(
                { fixture in
                    try await fixture.user("alice")
                    let (alice, _) = try await NativeTestClient.login(fixture, "alice")
                    #expect(try await alice.sendText("within bounds", to: .user("alice")).ack != nil)
                    await alice.close()
                },
                configure: bounded
            )
            // …and a deadline, on one whose authentication deadline is short, for a connection that says nothing.
            try await ServerFixture.with(
                { fixture in
                    let silent = try await NativeTestClient.connect(port: fixture.ports.native)
                    let closing = try await silent.expectClose()
                    #expect(closing.last?.failure?.code == ErrorCodes.authTimeout, "\(closing)")
                },
                configure: {
                    bounded(&$0)
                    $0.limits.authTimeout = .seconds(1)
                }
            )
        }
    }

    @Test("limits as large as an Int holds do not crash the server: it starts, and a login and a send go through")
    func largestLimits() async throws {
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                let (alice, _) = try await NativeTestClient.login(fixture, "alice")
                #expect(try await alice.sendText("within bounds", to: .user("alice")).ack != nil)
                await alice.close()
            },
            configure: {
                $0.limits.maxConnections = .max
                $0.http.maxConnections = .max
                $0.limits.maxUnackedSends = .max
            }
        )
    }

    @Test("a sync of large texts is split into envelopes of at most maxEventsBytes; a larger text goes alone")
    func eventsSplitBySize() async throws {
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                let (bob, bobWelcome) = try await NativeTestClient.login(fixture, "bob")
                await bob.close()
                let (alice, _) = try await NativeTestClient.login(fixture, "alice")
                let texts = (1...10).map { String(repeating: Character(String($0 % 10)), count: 1500) }
                for text in texts { _ = try await alice.sendText(text, to: .user("bob")) }
                let big = String(repeating: "B", count: 5000)
                _ = try await alice.sendText(big, to: .user("bob"))

                let (back, _) = try await NativeTestClient.resume(fixture, token: bobWelcome.token)
                var pages: [[Courier_V1_Message]] = []
                while pages.joined().count < 11 {
                    let events = try await back.expect("events") { envelope -> [Courier_V1_Event]? in
                        guard case .events(let events)? = envelope.body, !events.events.isEmpty else { return nil }
                        return events.events
                    }
                    pages.append(
                        events.compactMap { if case .message(let message)? = $0.kind { message } else { nil } }
                    )
                }
                #expect(pages.joined().map(\.body.text) == texts + [big])
                // 4 KiB envelopes hold two 1,500-byte texts (with per-event overhead), never three.
                #expect(pages.dropLast().allSatisfy { $0.count <= 2 && !$0.isEmpty }, "\(pages.map(\.count))")
                #expect(pages.count >= 6, "\(pages.map(\.count))")
                #expect(pages.last.map { $0.map(\.body.text) } == [big], "the oversize text travels alone")
                await back.close()
                await alice.close()
            },
            configure: { $0.limits.maxEventsBytes = 4096 }
        )
    }

    @Test(
        "a full disk: the send is refused with storage-failed and never acknowledged, the connection closes (nothing may overtake the send), the peer gets only the others"
    )
    func fullDisk() async throws {
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                let (bob, _) = try await NativeTestClient.login(fixture, "bob")
                let (alice, _) = try await NativeTestClient.login(fixture, "alice")
                let text = String(repeating: "d", count: 8 * 1024)
                var acknowledged: [String] = []
                var refusal: Courier_V1_Error?
                for index in 0..<200 {
                    let answer = try await alice.sendText(text, to: .user("bob"), id: "d\(index)")
                    if answer.ack != nil {
                        acknowledged.append("d\(index)")
                    } else {
                        refusal = answer.failure
                        break
                    }
                }
                let error = try #require(refusal, "the database limit was never reached")
                #expect(error.code == ErrorCodes.storageFailed && error.id == "d\(acknowledged.count)", "\(error)")
                #expect(!acknowledged.isEmpty)
                // The connection closes with the same code: the client sends again, in order, what it did not get
                // acknowledged, on a new one. A later send on this one could have been stored ahead of the refused.
                let last = try await alice.expectClose()
                #expect(last.last?.failure?.code == ErrorCodes.storageFailed, "\(last)")
                // bob gets exactly the acknowledged messages; the server still answers alice.
                let received = try await bob.messages(acknowledged.count)
                #expect(received.map(\.id) == acknowledged)
                #expect(received.map(\.seq) == Array(1...UInt64(acknowledged.count)))
                let (again, _) = try await NativeTestClient.login(fixture, "alice")
                let unread = try await again.request { $0.unread = .init() }
                #expect(unread.failure == nil, "\(unread)")
                await again.close()
                await bob.close()
            },
            sqlite: { $0.maxDatabaseBytes = 512 * 1024 }
        )
    }
}
