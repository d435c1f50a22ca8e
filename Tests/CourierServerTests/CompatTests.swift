import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import CourierWire
import Foundation
import Testing

@Suite("The compat port", .serialized)
struct CompatTests {
    /// Random cut points for a packet, from a seeded generator.
    static func cuts(_ count: Int, using random: inout SeededRandom) -> [Int] {
        (0..<Int.random(in: 1...6, using: &random)).map { _ in Int.random(in: 1...max(1, count / 2), using: &random) }
    }

    static func string(_ frame: CompatFrame, _ key: String) -> String? {
        if case .string(let value)? = frame.header[key] { value } else { nil }
    }

    static func integer(_ frame: CompatFrame, _ key: String) -> Int64? {
        if case .integer(let value)? = frame.header[key] { value } else { nil }
    }

    @Test("the notes' packets (pretty-printed, string sizes) cut at random points reach native clients and back")
    func compatAndNativeBothWays() async throws {
        let seed = TestSeed.make(for: "compatAndNativeBothWays")
        try await ServerFixture.with { fixture in
            var local = SeededRandom(seed: seed)
            try await fixture.user("alice")
            try await fixture.user("bob")
            let compat = try await CompatTestClient.connect(port: fixture.ports.compat)
            let auth = CompatTestClient.notesPacket([("type", "auth"), ("user", "alice"), ("password", "pw-alice")])
            try await compat.write(auth, cuts: Self.cuts(auth.count, using: &local))
            let welcome = try await compat.expect("welcome")
            #expect(Self.string(welcome, "user") == "alice" && Self.string(welcome, "token")?.hasPrefix("ct_") == true)

            let (bob, _) = try await NativeTestClient.login(fixture, "bob")
            let texts = (1...20).map { "第\($0)条 message \(String(repeating: "x", count: $0 * 7))" }
            // All twenty packets glued into one stream, then cut at random points.
            var stream: [UInt8] = []
            for (index, text) in texts.enumerated() {
                stream += CompatTestClient.notesPacket(
                    [("type", "txt"), ("to", "bob"), ("id", "c\(index)")],
                    payload: Array(text.utf8)
                )
            }
            try await compat.write(stream, cuts: Self.cuts(stream.count, using: &local))
            for index in 0..<20 {
                let ack = try await compat.expect("ack")
                #expect(Self.string(ack, "id") == "c\(index)" && Self.integer(ack, "seq") == Int64(index + 1))
                let time = try #require(Self.string(ack, "time"))
                #expect(time.hasSuffix("Z") && time.count == 24, "RFC 3339 with milliseconds: \(time)")
            }
            let received = try await bob.messages(20)
            #expect(received.map(\.body.text) == texts)
            #expect(received.allSatisfy { $0.from == "alice" && $0.conversation.user == "alice" })

            // Native to compat.
            _ = try await bob.sendText("回信 from native", to: .user("alice"), id: "n1")
            let delivery = try await compat.expect("txt")
            #expect(String(buffer: delivery.payload) == "回信 from native")
            #expect(Self.string(delivery, "from") == "bob" && Self.string(delivery, "to") == "alice")
            #expect(Self.integer(delivery, "seq") == 21 && Self.string(delivery, "id") == "n1")
            #expect(Self.string(delivery, "time")?.hasSuffix("Z") == true)
            await compat.close()
            await bob.close()
        }
    }

    @Test("a client that never acks gets each message once; reconnecting does not replay it")
    func nonAckingClient() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let compat = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await compat.write(try CompatTestClient.packet("auth", ["user": "bob", "password": "pw-bob"]))
            let token = try #require(Self.string(try await compat.expect("welcome"), "token"))
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            _ = try await alice.sendText("once", to: .user("bob"))
            #expect(String(buffer: try await compat.expect("txt").payload) == "once")
            await compat.close()
            // Without acks, what is written to the connection counts as received: a message sent before the server
            // has seen the close would be written to the closed socket and count as delivered (at most once, as
            // PROTOCOL.md says). The server must have seen it before the next message is sent.
            try await waitUntil("the server saw the compat connection close") {
                try await fixture.metric("courier_connections_open") == 1
            }
            _ = try await alice.sendText("twice?", to: .user("bob"))

            let again = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await again.write(try CompatTestClient.packet("auth", ["token": .string(token)]))
            _ = try await again.expect("welcome")
            // Only the message sent while away; "once" is not replayed.
            #expect(String(buffer: try await again.expect("txt").payload) == "twice?")
            _ = try await alice.sendText("thrice", to: .user("bob"))
            #expect(String(buffer: try await again.expect("txt").payload) == "thrice")
            await again.close()
            await alice.close()
        }
    }

    @Test("a client that acks gets at-least-once delivery: unacked messages come again after a reconnect")
    func ackingClient() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            let compat = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await compat.write(
                try CompatTestClient.packet("auth", ["user": "bob", "password": "pw-bob", "ack": true])
            )
            let token = try #require(Self.string(try await compat.expect("welcome"), "token"))
            _ = try await compat.expect("synced")
            _ = try await alice.sendText("first", to: .user("bob"))
            let first = try await compat.expect("txt")
            #expect(String(buffer: first.payload) == "first")
            // Disconnect without acknowledging: it comes again.
            await compat.close()

            let again = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await again.write(try CompatTestClient.packet("auth", ["token": .string(token), "ack": true]))
            _ = try await again.expect("welcome")
            let replay = try await again.expect("txt")
            #expect(String(buffer: replay.payload) == "first" && Self.integer(replay, "seq") == 1)
            let cursor = try #require(Self.integer(replay, "cursor"))
            try await again.write(try CompatTestClient.packet("received", ["cursor": .integer(cursor)]))
            // The ack is durable: bob's device cursor moves (and alice gets a delivered receipt).
            _ = try await alice.expect("a delivered receipt") { envelope -> Bool? in
                guard case .events(let events)? = envelope.body else { return nil }
                return events.events.contains { if case .receipt? = $0.kind { true } else { false } } ? true : nil
            }
            await again.close()

            let third = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await third.write(try CompatTestClient.packet("auth", ["token": .string(token), "ack": true]))
            _ = try await third.expect("welcome")
            let synced = try await third.expect("synced")
            _ = synced
            let rest = try await Self.drain(third)
            #expect(!rest.contains { $0.header.type == "txt" }, "acked message replayed: \(rest)")
            await alice.close()
        }
    }

    @Test("receipts, typing and presence reach a compat client only if it asked at auth")
    func noticesOnRequest() async throws {
        try await ServerFixture.with { fixture in
            for name in ["alice", "bob", "carol"] { try await fixture.user(name) }
            try await fixture.store.createGroup(name: "trio", owner: "alice", members: ["bob", "carol"], nowMs: 0)
            let bob = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await bob.write(
                try CompatTestClient.packet("auth", ["user": "bob", "password": "pw-bob", "ephemeral": true])
            )
            _ = try await bob.expect("welcome")
            let carol = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await carol.write(try CompatTestClient.packet("auth", ["user": "carol", "password": "pw-carol"]))
            _ = try await carol.expect("welcome")

            /// The next presence packet about alice (bob also hears of carol, who shares the group).
            func aliceBeing(online: Bool) async throws {
                while true {
                    let notice = try await bob.expect("presence")
                    if Self.string(notice, "user") == "alice", notice.header["online"] == .bool(online) { return }
                }
            }
            let (alice, _) = try await NativeTestClient.login(fixture, "alice", ephemeral: true)
            try await aliceBeing(online: true)
            let typed = try await alice.request {
                $0.typing.conversation.group = "trio"
                $0.typing.typing = true
            }
            #expect(typed.body.isDone)
            let typing = try await bob.expect("typing")
            #expect(Self.string(typing, "from") == "alice" && Self.string(typing, "group") == "trio")

            _ = try await alice.sendText("hi all", to: .group("trio"))
            #expect(String(buffer: try await bob.expect("txt").payload) == "hi all")
            #expect(String(buffer: try await carol.expect("txt").payload) == "hi all")
            try await carol.write(try CompatTestClient.packet("read", ["group": "trio", "seq": 1]))
            _ = try await carol.expect("done")
            var carolRead = false
            while !carolRead {
                let receipt = try await bob.expect("receipt")
                carolRead = Self.string(receipt, "user") == "carol" && Self.string(receipt, "kind") == "read"
            }
            try await bob.write(try CompatTestClient.packet("read", ["group": "trio", "seq": 1]))
            _ = try await bob.expect("done")
            _ = try await alice.expect("bob's read receipt") { envelope -> Bool? in
                guard case .events(let events)? = envelope.body else { return nil }
                let read = events.events.contains {
                    if case .receipt(let receipt)? = $0.kind {
                        receipt.user == "bob" && receipt.kind == .read
                    } else {
                        false
                    }
                }
                return read ? true : nil
            }
            await alice.close()
            try await aliceBeing(online: false)

            // carol did not ask: she heard none of it, not even bob's read receipt.
            let heard = try await Self.drain(carol)
            #expect(!heard.contains { ["typing", "presence", "receipt"].contains($0.header.type) }, "\(heard)")
            await bob.close()
        }
    }

    /// Closes and returns what arrived meanwhile.
    static func drain(_ client: CompatTestClient) async throws -> [CompatFrame] {
        await client.close()
        return try await client.expectClose()
    }

    @Test("errors: sends before auth close; unknown types and bad fields are refused; garbage closes")
    func errors() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            let early = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await early.write(try CompatTestClient.packet("txt", ["to": "alice"], payload: Array("hi".utf8)))
            let closing = try await early.expectClose()
            #expect(closing.map { Self.string($0, "code") } == [ErrorCodes.notAuthenticated])

            let client = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await client.write(try CompatTestClient.packet("auth", ["user": "alice", "password": "pw-alice"]))
            _ = try await client.expect("welcome")
            try await client.write(try CompatTestClient.packet("sticker", ["to": "alice"], payload: [1, 2, 3]))
            #expect(Self.string(try await client.expect("error"), "code") == ErrorCodes.unsupported)
            try await client.write(try CompatTestClient.packet("txt", ["id": "x"], payload: Array("no peer".utf8)))
            let noPeer = try await client.expect("error")
            #expect(Self.string(noPeer, "code") == ErrorCodes.invalidRequest && Self.string(noPeer, "id") == "x")
            try await client.write(try CompatTestClient.packet("txt", ["to": "alice"], payload: [0xFF, 0xFE]))
            #expect(Self.string(try await client.expect("error"), "code") == ErrorCodes.invalidRequest)
            try await client.write(try CompatTestClient.packet("ping"))
            _ = try await client.expect("pong")
            // Still usable.
            try await client.write(
                try CompatTestClient.packet("txt", ["to": "alice", "id": "ok"], payload: Array("note".utf8))
            )
            #expect(Self.string(try await client.expect("ack"), "id") == "ok")
            // A header that is not JSON ends the connection with framing-error.
            try await client.write(Array("{not json}\r\n".utf8))
            let end = try await client.expectClose()
            #expect(end.last.map { Self.string($0, "code") } == ErrorCodes.framingError)
        }
    }

    @Test("with the end marker on, a corrupt packet is skipped with packet-skipped and the next one goes through")
    func endMarker() async throws {
        let marker = Array("\r\n--END--\r\n".utf8)
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            let client = try await CompatTestClient.connect(port: fixture.ports.compat, endMarker: marker)
            func packet(_ type: String, _ fields: [String: JSONValue], _ payload: String = "") throws -> [UInt8] {
                try CompatTestClient.packet(type, fields, payload: Array(payload.utf8)) + marker
            }
            try await client.write(try packet("auth", ["user": "alice", "password": "pw-alice"]))
            _ = try await client.expect("welcome")
            try await client.write(Array("{\"type\":\"txt\",\"size\":\"lots\"}\r\ngarbage".utf8) + marker)
            #expect(Self.string(try await client.expect("error"), "code") == ErrorCodes.packetSkipped)
            try await client.write(try packet("txt", ["to": "alice", "id": "after"], "survived"))
            #expect(Self.string(try await client.expect("ack"), "id") == "after")
            await client.close()
        } configure: {
            $0.compat.endMarker = marker
        }
    }
}

extension CompatTests {
    @Test("a compat client hears of its group's roles, its title in any script, and its own mute, as packets")
    func groupPackets() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            let bob = try await fixture.user("bob")
            try await fixture.store.createGroup(
                name: "team",
                owner: "alice",
                members: ["bob"],
                byOwner: false,
                nowMs: 1
            )
            let compat = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await compat.write(try CompatTestClient.packet("auth", ["user": "bob", "password": "pw-bob"]))
            _ = try await compat.expect("welcome")
            try await fixture.store.setRole(in: "team", of: "bob", to: .admin, by: nil, nowMs: 2)
            let role = try await compat.expect("role")
            #expect(Self.string(role, "group") == "team" && Self.string(role, "user") == "bob")
            #expect(Self.string(role, "role") == "admin")
            try await fixture.store.setGroupTitle("读书会 📚 نادي", of: "team", by: nil, nowMs: 3)
            let title = try await compat.expect("title")
            #expect(Self.string(title, "title") == "读书会 📚 نادي" && Self.string(title, "by") == "")
            try await fixture.store.setNotify(.mentions, in: .group("team"), for: bob.id, nowMs: 4)
            let notify = try await compat.expect("notify")
            #expect(Self.string(notify, "group") == "team" && Self.string(notify, "level") == "mentions")
            await compat.close()
        }
    }
}
