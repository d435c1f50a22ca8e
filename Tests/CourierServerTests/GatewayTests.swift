import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import CourierWire
import Foundation
import NIOCore
import NIOWebSocket
import Testing

/// The WebSocket gateway at `/ws` on the HTTP port: the native session over JSON envelopes, for browsers.
@Suite("The WebSocket gateway", .serialized)
struct GatewayTests {
    static func origin(_ fixture: ServerFixture) -> String { "http://127.0.0.1:\(fixture.ports.http)" }

    static func login(
        _ fixture: ServerFixture,
        _ user: String,
        ephemeral: Bool = false
    ) async throws -> (WebSocketTestClient, Courier_V1_Welcome) {
        try await WebSocketTestClient.login(
            port: fixture.ports.http,
            user,
            ephemeral: ephemeral,
            origin: Self.origin(fixture)
        )
    }

    @Test("a page's session and a native one chat both ways: acks, a repeated client id, receipts, typing, presence")
    func chat() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            // A page asks for typing and presence notices.
            let (web, welcome) = try await Self.login(fixture, "bob", ephemeral: true)
            #expect(await web.deflate, "permessage-deflate is accepted")
            #expect(welcome.user == "bob" && !welcome.token.isEmpty)
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")

            // Native to the page: long enough to go compressed.
            let text = "你好 👋 こんにちは مرحبا " + String(repeating: "— 长消息 long message ", count: 40)
            #expect(try await alice.sendText(text, to: .user("bob"), id: "n1").ack != nil)
            let received = try await web.messages(1)
            #expect(received.map(\.body.text) == [text] && received.first?.from == "alice")

            // The page to native, with a client id; the same id again is the same message, not a second one.
            let first = try #require(try await web.sendText("回信 ✓", to: .user("alice"), id: "w-1").ack)
            let again = try #require(try await web.sendText("回信 ✓", to: .user("alice"), id: "w-1").ack)
            #expect(again.duplicate && again.seq == first.seq && first.id == "w-1")
            #expect(try await alice.messages(1).map(\.body.text) == ["回信 ✓"])

            // A read mark from the page reaches the sender; typing from the sender reaches the page.
            let read = try await web.request {
                $0.markRead.conversation.user = "alice"
                $0.markRead.upToSeq = 1
            }
            #expect(read.failure == nil, "\(read)")
            let typed = try await alice.request {
                $0.typing.conversation.user = "bob"
                $0.typing.typing = true
            }
            #expect(typed.failure == nil)
            let typing = try await web.expect("typing") { envelope -> Courier_V1_TypingNotice? in
                if case .typing(let notice)? = envelope.body { notice } else { nil }
            }
            #expect(typing.user == "alice" && typing.typing)

            // `{}` is the page's ping; a WebSocket ping is answered with a pong.
            try await web.send(.text("{}"))
            let keepAlive = try await web.expectMessage("the keep-alive's answer") { $0 == .text("{}") }
            #expect(keepAlive == .text("{}"))
            try await web.send(.ping(ByteBuffer(string: "p1")))
            _ = try await web.expectMessage("the pong") { $0 == .pong(ByteBuffer(string: "p1")) }
            await alice.close()
            await web.close()
        }
    }

    @Test("a page's device token logs in again, resuming from its cursor; a logout ends the device and closes (1000)")
    func tokenAndLogout() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (web, welcome) = try await Self.login(fixture, "bob")
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            _ = try await alice.sendText("first", to: .user("bob"))
            let first = try await web.messages(1)
            #expect(first.map(\.body.text) == ["first"])
            await web.close()
            _ = try await alice.sendText("while away", to: .user("bob"))

            let again = try await WebSocketTestClient.connect(port: fixture.ports.http, origin: Self.origin(fixture))
            var hello = ClientEnvelope()
            hello.hello.token = welcome.token
            try await again.send(hello)
            _ = try await again.expect("a welcome") { $0.welcome }
            #expect(try await again.messages(1).map(\.body.text) == ["while away"])

            let loggedOut = try await again.send(
                {
                    var envelope = ClientEnvelope()
                    envelope.logout = .init()
                    return envelope
                }()
            )
            let closed = try await again.expectClose()
            #expect(closed.code == WebSocketMessage.CloseCode.normal, "\(closed)")
            // The logout was answered before the close.
            #expect(
                closed.envelopes.contains { envelope in
                    guard envelope.requestID == loggedOut, case .done? = envelope.body else { return false }
                    return true
                },
                "\(closed.envelopes)"
            )
            // The token is revoked: it logs in no more.
            let refused = try await WebSocketTestClient.connect(port: fixture.ports.http)
            try await refused.send(hello)
            let failure = try await refused.expect("a refusal") { $0.failure }
            #expect([ErrorCodes.authFailed, ErrorCodes.tokenRevoked].contains(failure.code), "\(failure)")
            await alice.close()
        }
    }

    @Test("only the server's own origin, configured origins, and clients without an Origin may open /ws")
    func origins() async throws {
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                let port = fixture.ports.http
                // Allowed: the page's own origin (the Host it asked), a configured one, and a program (no Origin).
                for origin in [Self.origin(fixture), "https://chat.example.com", nil] {
                    let client = try await WebSocketTestClient.connect(port: port, origin: origin)
                    try await client.send(.text("{}"))
                    _ = try await client.expectMessage("the keep-alive's answer") { $0 == .text("{}") }
                    await client.close()
                }
                // Refused: another site's page, a look-alike of the server's own with another port, and `null`.
                for origin in ["https://evil.example", "http://127.0.0.1:1", "null", "http://127.0.0.1.evil.example"] {
                    await #expect(throws: WebSocketNotUpgraded.self, "\(origin)") {
                        _ = try await WebSocketTestClient.connect(port: port, origin: origin)
                    }
                }
                // What a browser sees of another origin's upgrade, through curl: 403, before any session.
                let upgrade = [
                    "--silent", "--max-time", "5", "--output", "/dev/null", "--write-out", "%{http_code}",
                    "-H", "Connection: Upgrade", "-H", "Upgrade: websocket", "-H", "Sec-WebSocket-Version: 13",
                    "-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                ]
                let evil = try await ExternalProgram.run(
                    "/usr/bin/curl",
                    upgrade + ["-H", "Origin: https://evil.example", "http://127.0.0.1:\(port)/ws"]
                )
                #expect(evil.output == "403", "\(evil)")
                // An upgrade the server does not make is answered as plain HTTP: h2c to /health (what curl --http2
                // asks), and a WebSocket handshake of another version to /ws, told which it speaks (426).
                let h2c = try await ExternalProgram.run(
                    "/usr/bin/curl",
                    ["--silent", "--max-time", "30", "--http2", "http://127.0.0.1:\(port)/health"]
                )
                #expect(h2c.output.contains("\"status\":\"ok\""), "\(h2c)")
                let version = try await ExternalProgram.run(
                    "/usr/bin/curl",
                    [
                        "--silent", "--max-time", "30", "--dump-header", "-", "--output", "/dev/null",
                        "-H", "Connection: Upgrade", "-H", "Upgrade: websocket", "-H", "Sec-WebSocket-Version: 8",
                        "-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "http://127.0.0.1:\(port)/ws",
                    ]
                )
                #expect(version.output.hasPrefix("HTTP/1.1 426"), "\(version)")
                #expect(version.output.lowercased().contains("sec-websocket-version: 13"), "\(version)")
                // A plain GET of /ws is told to upgrade.
                let plain = try await ExternalProgram.run(
                    "/usr/bin/curl",
                    ["--silent", "--output", "/dev/null", "--write-out", "%{http_code}", "http://127.0.0.1:\(port)/ws"]
                )
                #expect(plain.output == "426", "\(plain)")
            },
            configure: { $0.webSocket.allowedOrigins = ["https://chat.example.com"] }
        )
    }

    @Test(
        "malformed input closes with an error envelope and the close code RFC 6455 gives it",
        arguments: [
            "not JSON", "JSON, not an envelope", "a binary message that is not a frame", "a native message frame",
            "an unmasked frame", "a continuation first", "too large", "deflate that does not inflate",
        ]
    )
    func malformed(what: String) async throws {
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                let (web, _) = try await Self.login(fixture, "alice")
                let expected: (code: UInt16, error: String)
                switch what {
                case "not JSON":
                    try await web.send(.text("{\"send\": {\"to\": "))
                    expected = (WebSocketMessage.CloseCode.policyViolation, ErrorCodes.envelopeInvalid)
                case "JSON, not an envelope":
                    try await web.send(.text("[1, 2, 3]"))
                    expected = (WebSocketMessage.CloseCode.policyViolation, ErrorCodes.envelopeInvalid)
                case "a binary message that is not a frame":
                    try await web.send(.binary(ByteBuffer(bytes: [1, 2, 3])))
                    expected = (WebSocketMessage.CloseCode.policyViolation, ErrorCodes.envelopeInvalid)
                case "a native message frame":
                    var envelope = ClientEnvelope()
                    envelope.unread = .init()
                    try await web.send(frame: try NativeFrame(envelope: envelope))
                    expected = (WebSocketMessage.CloseCode.policyViolation, ErrorCodes.envelopeInvalid)
                case "an unmasked frame":
                    try await web.send(
                        rawFrame: WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(string: "{}"))
                    )
                    expected = (WebSocketMessage.CloseCode.protocolError, ErrorCodes.framingError)
                case "a continuation first":
                    try await web.send(
                        rawFrame: WebSocketFrame(
                            fin: true,
                            opcode: .continuation,
                            maskKey: .random(),
                            data: ByteBuffer(string: "{}")
                        )
                    )
                    expected = (WebSocketMessage.CloseCode.protocolError, ErrorCodes.framingError)
                case "too large":
                    // Over the limit in fragments none of which is over it.
                    for index in 0..<3 {
                        try await web.send(
                            rawFrame: WebSocketFrame(
                                fin: index == 2,
                                opcode: index == 0 ? .text : .continuation,
                                maskKey: .random(),
                                data: ByteBuffer(repeating: UInt8(ascii: " "), count: 3000)
                            )
                        )
                    }
                    expected = (WebSocketMessage.CloseCode.messageTooBig, ErrorCodes.framingError)
                default:
                    try await web.send(
                        rawFrame: WebSocketFrame(
                            fin: true,
                            rsv1: true,
                            opcode: .text,
                            maskKey: .random(),
                            data: ByteBuffer(bytes: [0xFF, 0xFF, 0xFF, 0xFF])
                        )
                    )
                    expected = (WebSocketMessage.CloseCode.invalidPayload, ErrorCodes.framingError)
                }
                let closed = try await web.expectClose()
                #expect(closed.code == expected.code, "\(what): \(closed)")
                #expect(closed.envelopes.last?.failure?.code == expected.error, "\(what): \(closed)")
                // The server goes on for others.
                let (other, _) = try await Self.login(fixture, "alice")
                try await other.send(.text("{}"))
                _ = try await other.expectMessage("the keep-alive's answer") { $0 == .text("{}") }
                await other.close()
            },
            configure: { $0.webSocket.maxMessageBytes = 8000 }
        )
    }

    @Test("an envelope with fields this server does not know is taken (a newer page's)")
    func unknownFields() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (web, _) = try await Self.login(fixture, "alice")
            try await web.send(
                .text(
                    #"{"requestId":"77","send":{"id":"x1","to":{"user":"bob"},"body":{"text":"hi"},"futureField":1}}"#
                )
            )
            let ack = try await web.expect("the ack") { $0.requestID == 77 ? $0.ack : nil }
            #expect(ack.id == "x1")
            await web.close()
        }
    }

    @Test("media over the gateway: an upload and a fetch in binary native frames, within their windows")
    func media() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let seed = TestSeed.make(for: "gatewayMedia")
            var random = SeededRandom(seed: seed)
            let bytes = (0..<300_000).map { _ in UInt8.random(in: 0...255, using: &random) }
            let (web, _) = try await Self.login(fixture, "alice")
            // A new device starts at the end of its user's log: bob's page is open before the message is sent.
            let (bob, _) = try await Self.login(fixture, "bob")
            let uploaded = try #require(try await web.upload(bytes, stream: 1).done, "seed \(seed)")
            #expect(uploaded.size == UInt64(bytes.count))
            let sent = try await web.sendMedia(.of(bytes), to: .user("bob"))
            #expect(sent.ack != nil, "\(sent)")
            let message = try #require(try await bob.messages(1).first)
            #expect(message.body.media.sha256 == NativeTestClient.sha256(bytes))
            let fetched = try await bob.fetch(message.body.media.sha256, stream: 3, window: 65_536).get().1
            #expect(fetched == bytes, "seed \(seed)")
            await web.close()
            await bob.close()
        }
    }

    @Test("a WebSocket takes no place of the HTTP port's; the session limits count it")
    func connectionCounts() async throws {
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                var open: [WebSocketTestClient] = []
                for _ in 0..<4 {
                    let (web, _) = try await Self.login(fixture, "alice")
                    open.append(web)
                }
                // Two HTTP connections per address, and four WebSockets from it: /health still answers.
                let health = try await HTTPTests.curl(["http://127.0.0.1:\(fixture.ports.http)/health"])
                #expect(health.contains("\"connections\":4"), "\(health)")
                // The fifth of a user with four is past the session limit, whichever port it comes by.
                let (fifth, _) = try await Self.login(fixture, "alice")
                let closed = try await open[0].expectClose()
                #expect(closed.envelopes.contains { $0.failure != nil } || closed.code != nil, "\(closed)")
                await fifth.close()
                for web in open { await web.close() }
            },
            configure: {
                $0.http.maxConnectionsPerAddress = 2
                $0.limits.maxConnectionsPerUser = 4
            }
        )
    }

    @Test(
        "a page that stops reading holds up no one: its sender's acks all come, it is closed (slow-consumer), and it syncs after"
    )
    func stoppedReader() async throws {
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                // Uncompressed: the texts below would deflate to nearly nothing.
                let (bob, welcome) = try await WebSocketTestClient.login(
                    port: fixture.ports.http,
                    "bob",
                    deflate: false
                )
                try await bob.stopReading()
                let (alice, _) = try await NativeTestClient.login(fixture, "alice")
                // 8 MiB of texts, more than the socket buffers and the server's write buffer hold, sent without
                // waiting for each ack (the connection's flow control holds them back, and nothing is refused).
                let text = String(repeating: "字", count: 16 * 1024 / 3)
                let count = 512
                for index in 0..<count {
                    var envelope = ClientEnvelope()
                    envelope.requestID = UInt64(index + 1)
                    envelope.send.to.user = "bob"
                    envelope.send.body.text = text
                    try await alice.send(envelope)
                }
                var acked = 0
                while acked < count {
                    _ = try await alice.expect(timeout: Patience.reply, "acks") { $0.ack }
                    acked += 1
                }
                // Reading again, bob finds his connection closed after what the buffers held: the server gave up on
                // him (quietly: nothing more could reach him) rather than keep the rest for him.
                try await bob.resumeReading()
                let closed = try await bob.expectClose()
                let delivered = closed.envelopes.reduce(0) { sum, envelope in
                    if case .events(let events)? = envelope.body { sum + events.events.count } else { sum }
                }
                #expect(delivered < count, "\(delivered) of \(count) messages reached a reader that read nothing")
                var hello = ClientEnvelope()
                hello.hello.token = welcome.token
                let again = try await WebSocketTestClient.connect(port: fixture.ports.http)
                try await again.send(hello)
                _ = try await again.expect("a welcome") { $0.welcome }
                let synced = try await again.messages(count)
                #expect(synced.count == count && synced.allSatisfy { $0.body.text == text })
                await alice.close()
                await again.close()
            },
            configure: {
                $0.limits.slowConsumerTimeout = .milliseconds(300)
                $0.limits.outboundBufferBytes = 64 * 1024
            }
        )
    }

    @Test("a page whose connection ends its sending half (FIN) is closed, as on the native port")
    func halfClose() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            let (web, _) = try await Self.login(fixture, "alice")
            try await web.channel.close(mode: .output).get()
            let closed = try await web.expectClose()
            #expect(closed.code == nil, "\(closed)")
        }
    }
}
