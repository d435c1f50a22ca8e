import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import NIOSSL
import Testing

/// Helpers that speak the session protocol to a fixture's server through a bare native client.
extension NativeTestClient {
    /// Connects and logs in with the fixture's password for `user`.
    static func login(
        _ fixture: ServerFixture,
        _ user: String,
        device: String = "test",
        ephemeral: Bool = false,
        tls: TLSConfiguration? = nil
    ) async throws -> (NativeTestClient, Courier_V1_Welcome) {
        try await Self.login(port: fixture.ports.native, user, device: device, ephemeral: ephemeral, tls: tls)
    }

    /// Logs `user` in as soon as the server has a place again (it notices a close a moment after it happens),
    /// trying for up to ten seconds; closes the connection at once. Whether a login got in.
    static func loginOnceThereIsRoom(_ fixture: ServerFixture, _ user: String) async throws -> Bool {
        let deadline = ContinuousClock.now + Patience.reply
        while ContinuousClock.now < deadline {
            if let (client, _) = try? await NativeTestClient.login(fixture, user) {
                await client.close()
                return true
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    /// Connects with a token, resuming from a cursor.
    static func resume(
        _ fixture: ServerFixture,
        token: String,
        cursor: UInt64? = nil
    ) async throws -> (
        NativeTestClient, Courier_V1_Welcome
    ) {
        try await Self.resume(port: fixture.ports.native, token: token, cursor: cursor)
    }
}

extension Optional where Wrapped == ServerEnvelope.OneOf_Body {
    var welcome: Courier_V1_Welcome? { if case .welcome(let welcome)? = self { welcome } else { nil } }
}

@Suite("Chat over the native port", .serialized)
struct ChatTests {
    @Test("two users chat: acks after commit, delivery, delivered receipts")
    func twoUsersChat() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (alice, aliceWelcome) = try await NativeTestClient.login(fixture, "alice")
            let (bob, _) = try await NativeTestClient.login(fixture, "bob")
            #expect(aliceWelcome.user == "alice" && aliceWelcome.token.hasPrefix("ct_"))

            let answer = try await alice.sendText("hello bob", to: .user("bob"), id: "m1")
            let ack = try #require(answer.ack, "\(answer)")
            #expect(ack.id == "m1" && ack.seq == 1 && ack.conversation.user == "bob" && !ack.duplicate)
            // The ack came after the commit: the message is in the database now.
            let bobID = try #require(try await fixture.store.user(named: "bob")).id
            #expect(
                try await fixture.store.history(for: bobID, in: .user("alice"), beforeSeq: 0, limit: 5).messages.count
                    == 1
            )

            let received = try await bob.messages(1)
            #expect(received.map(\.body.text) == ["hello bob"])
            #expect(received[0].from == "alice" && received[0].conversation.user == "alice" && received[0].seq == 1)

            // bob's ack turns into a delivered receipt for alice.
            let receipt = try await alice.expect("a delivered receipt") { envelope -> Courier_V1_Receipt? in
                guard case .events(let events)? = envelope.body else { return nil }
                return events.events.compactMap { if case .receipt(let receipt)? = $0.kind { receipt } else { nil } }
                    .first
            }
            #expect(receipt.user == "bob" && receipt.kind == .delivered && receipt.upToSeq == 1)

            let reply = try await bob.sendText("hi alice", to: .user("alice"))
            #expect(reply.ack?.seq == 2 && reply.ack?.id.hasPrefix("s-") == true)
            await alice.close()
            await bob.close()
        }
    }

    @Test("an offline device syncs what it missed, once, from its acknowledged cursor")
    func offlineSync() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            let (bob, bobWelcome) = try await NativeTestClient.login(fixture, "bob")
            _ = try await alice.sendText("before", to: .user("bob"))
            #expect(try await bob.messages(1).map(\.body.text) == ["before"])
            await bob.close()

            for index in 1...5 { _ = try await alice.sendText("while away \(index)", to: .user("bob")) }
            let (back, welcome) = try await NativeTestClient.resume(fixture, token: bobWelcome.token)
            #expect(welcome.latestCursor > welcome.cursor)
            let synced = try await back.messages(5)
            #expect(synced.map(\.body.text) == (1...5).map { "while away \($0)" })
            #expect(synced.map(\.seq) == [2, 3, 4, 5, 6])
            // Acks are committed asynchronously (no answer): wait until the last one is durable before leaving,
            // since a reconnect that overtakes it is served from the older cursor (at-least-once).
            let session = try await fixture.store.authenticate(token: bobWelcome.token, nowMs: 0)
            let device = session.device.id
            let latest = try await fixture.store.logCursor(of: session.user.id)
            let deadline = ContinuousClock.now + Patience.reply
            while try await fixture.store.ackedCursor(of: device) < latest, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(try await fixture.store.ackedCursor(of: device) == latest)
            await back.close()

            // Everything was acked: a second reconnect gets nothing old, only a caught-up marker.
            let (again, _) = try await NativeTestClient.resume(fixture, token: bobWelcome.token)
            let first = try await again.expect("events") { envelope -> Courier_V1_Events? in
                if case .events(let events)? = envelope.body { events } else { nil }
            }
            #expect(first.caughtUp)
            #expect(first.events.allSatisfy { if case .message? = $0.kind { false } else { true } })
            await again.close()
            await alice.close()
        }
    }

    @Test("a resend of the same id after a lost ack returns the original ack; the peer gets one copy")
    func resendAfterLostAck() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (alice, welcome) = try await NativeTestClient.login(fixture, "alice")
            var envelope = ClientEnvelope()
            envelope.send.id = "lost-ack"
            envelope.send.to.user = "bob"
            envelope.send.body.text = "exactly once"
            // Send and cut the connection without reading the ack.
            try await alice.send(envelope)
            await alice.close()
            // Resend on a new connection until the server answers.
            let (again, _) = try await NativeTestClient.resume(fixture, token: welcome.token)
            let answer = try await again.sendText("exactly once", to: .user("bob"), id: "lost-ack")
            let ack = try #require(answer.ack)
            #expect(ack.seq == 1)
            let (bob, _) = try await NativeTestClient.login(fixture, "bob")
            _ = bob
            let bobID = try #require(try await fixture.store.user(named: "bob")).id
            let page = try await fixture.store.history(for: bobID, in: .user("alice"), beforeSeq: 0, limit: 10)
            #expect(page.messages.map(\.id) == ["lost-ack"])
            await again.close()
            await bob.close()
        }
    }
}
