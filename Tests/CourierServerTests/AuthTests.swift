import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierStoreSQLite
import CourierTesting
import CourierWire
import Foundation
import Logging
import NIOCore
import Testing

@Suite("Authentication and authorization over the native port", .serialized)
struct AuthTests {
    /// Sends a hello with a password and returns what the server sent before closing.
    static func failedLogin(_ fixture: ServerFixture, user: String, password: String) async throws -> Courier_V1_Error {
        let client = try await NativeTestClient.connect(port: fixture.ports.native)
        var hello = ClientEnvelope()
        hello.hello.password.user = user
        hello.hello.password.password = password
        try await client.send(hello)
        let sent = try await client.expectClose()
        return try #require(sent.compactMap(\.failure).first, "\(sent)")
    }

    @Test("passwords and tokens never appear in the server's logs, even at trace level")
    func noSecretsInLogs() async throws {
        let capture = LogCapture()
        let secrets = try await ServerFixture.with(logger: capture.logger(level: .trace)) { fixture -> [String] in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (alice, welcome) = try await NativeTestClient.login(fixture, "alice")
            #expect(
                try await Self.failedLogin(fixture, user: "alice", password: "wrong-secret-1").code
                    == ErrorCodes.authFailed
            )
            let (again, _) = try await NativeTestClient.resume(fixture, token: welcome.token)
            let forged = "ct_" + String(repeating: "f", count: 43)
            let stranger = try await NativeTestClient.connect(port: fixture.ports.native)
            var hello = ClientEnvelope()
            hello.hello.token = forged
            try await stranger.send(hello)
            _ = try await stranger.expectClose()

            let compat = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await compat.write(try CompatTestClient.packet("auth", ["user": "bob", "password": "pw-bob"]))
            let compatToken = try #require(CompatTests.string(try await compat.expect("welcome"), "token"))
            let wrong = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await wrong.write(try CompatTestClient.packet("auth", ["user": "bob", "password": "wrong-secret-2"]))
            _ = try await wrong.expectClose()
            _ = try await again.sendText("hello", to: .user("bob"))
            _ = try await compat.expect("txt")
            await compat.close()
            await again.close()
            await alice.close()
            return ["pw-alice", "pw-bob", "wrong-secret-1", "wrong-secret-2", forged, welcome.token, compatToken]
        }
        let logs = capture.text
        // The capture works: the logins and failures were logged.
        #expect(logs.contains("alice") && logs.contains("auth-failed"), "\(logs.prefix(3000))")
        for secret in secrets {
            #expect(!logs.contains(secret), "a secret in the logs: \(secret)")
            // Nor a long piece of it (a token's random part without its prefix).
            #expect(secret.count < 24 || !logs.contains(String(secret.dropFirst(3).prefix(20))))
        }
    }

    @Test("requests before hello, wrong passwords and unknown tokens are refused and the connection closed")
    func refusedLogins() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            let early = try await NativeTestClient.connect(port: fixture.ports.native)
            var send = ClientEnvelope()
            send.send.to.user = "alice"
            send.send.body.text = "let me in"
            try await early.send(send)
            #expect(try await early.expectClose().compactMap(\.failure).map(\.code) == [ErrorCodes.notAuthenticated])

            #expect(try await Self.failedLogin(fixture, user: "alice", password: "nope").code == ErrorCodes.authFailed)
            #expect(try await Self.failedLogin(fixture, user: "nobody", password: "x").code == ErrorCodes.authFailed)

            let client = try await NativeTestClient.connect(port: fixture.ports.native)
            var hello = ClientEnvelope()
            hello.hello.token = "ct_forged"
            try await client.send(hello)
            #expect(try await client.expectClose().compactMap(\.failure).map(\.code) == [ErrorCodes.authFailed])
        }
    }

    @Test("failed logins are throttled per user name, with a retry time, even for the right password")
    func throttling() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            for _ in 0..<3 {
                #expect(
                    try await Self.failedLogin(fixture, user: "alice", password: "guess").code == ErrorCodes.authFailed
                )
            }
            let throttled = try await Self.failedLogin(fixture, user: "alice", password: "pw-alice")
            #expect(throttled.code == ErrorCodes.throttled)
            #expect(throttled.retryAfterMs > 0 && throttled.retryAfterMs <= 60_000)
            // Another user from the same address is not throttled yet (the address limit is higher).
            let (bob, _) = try await NativeTestClient.login(fixture, "bob")
            await bob.close()
        } configure: {
            $0.limits.maxFailedLoginsPerUser = 3
            $0.limits.maxFailedLoginsPerAddress = 10
        }
    }

    @Test("failed logins are throttled per address across user names")
    func addressThrottling() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            for name in ["u1", "u2", "u3", "u4"] {
                #expect(try await Self.failedLogin(fixture, user: name, password: "x").code == ErrorCodes.authFailed)
            }
            #expect(
                try await Self.failedLogin(fixture, user: "alice", password: "pw-alice").code == ErrorCodes.throttled
            )
        } configure: {
            $0.limits.maxFailedLoginsPerAddress = 4
        }
    }

    @Test("an expired token is refused with token-expired")
    func expiredToken() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            // A device logged in ten seconds ago with a one-second token (through the store, whose clock is given:
            // no waiting, and no session of the server's that the expiry could cut short on a loaded machine).
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let device = try await fixture.store.login(
                user: "alice",
                password: "pw-alice",
                deviceName: "old",
                nowMs: now - 10_000
            )
            let token = try #require(device.token)
            let again = try await NativeTestClient.connect(port: fixture.ports.native)
            var hello = ClientEnvelope()
            hello.hello.token = token
            try await again.send(hello)
            #expect(try await again.expectClose().compactMap(\.failure).map(\.code) == [ErrorCodes.tokenExpired])
        } configure: {
            $0.store.limits.tokenLifetime = .seconds(1)
        }
    }

    @Test("revoking a device from another process closes its connection (the change poll sees it); other devices stay")
    func revocationWhileConnected() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            let (phone, phoneWelcome) = try await NativeTestClient.login(fixture, "alice", device: "phone")
            let (laptop, _) = try await NativeTestClient.login(fixture, "alice", device: "laptop")
            let phoneSession = try await fixture.store.authenticate(token: phoneWelcome.token, nowMs: 0)
            // The admin command's way: a second store on the same file.
            let admin = try SQLiteStore(folder: fixture.folder, logger: Logger(label: "admin"))
            let start = ContinuousClock.now
            try await admin.revokeDevice(phoneSession.device.id, of: "alice", nowMs: 1)
            let sent = try await phone.expectClose()
            let elapsed = ContinuousClock.now - start
            print("revocationWhileConnected: closed \(elapsed) after the revocation")
            #expect(sent.compactMap(\.failure).map(\.code) == [ErrorCodes.tokenRevoked])
            // The laptop still works, and the phone's token no longer does.
            #expect(try await laptop.sendText("still here", to: .user("alice")).ack != nil)
            let retry = try await NativeTestClient.connect(port: fixture.ports.native)
            var hello = ClientEnvelope()
            hello.hello.token = phoneWelcome.token
            try await retry.send(hello)
            #expect(try await retry.expectClose().compactMap(\.failure).map(\.code) == [ErrorCodes.tokenRevoked])
            await laptop.close()
        }
    }

    @Test("non-members cannot send to, read or sync a group; the connection stays usable")
    func nonMembers() async throws {
        try await ServerFixture.with { fixture in
            for name in ["alice", "bob", "carol"] { try await fixture.user(name) }
            try await fixture.store.createGroup(name: "team", owner: "alice", members: ["bob"], nowMs: 0)
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            let (carol, _) = try await NativeTestClient.login(fixture, "carol")
            _ = try await alice.sendText("members only", to: .group("team"))

            #expect(try await carol.sendText("hi team", to: .group("team")).failure?.code == ErrorCodes.notMember)
            var history = ClientEnvelope()
            history.history.conversation.group = "team"
            let requestID = try await carol.send(history)
            let answer = try await carol.expect { $0.requestID == requestID ? $0 : nil }
            #expect(answer.failure?.code == ErrorCodes.notMember)
            #expect(try await carol.sendText("x", to: .group("nope")).failure?.code == ErrorCodes.unknownGroup)
            #expect(try await carol.sendText("x", to: .user("nobody")).failure?.code == ErrorCodes.unknownUser)
            // carol's log holds nothing of the group.
            let carolID = try #require(try await fixture.store.user(named: "carol")).id
            #expect(try await fixture.store.events(for: carolID, after: 0, limit: 100).isEmpty)
            // And carol's connection still works.
            #expect(try await carol.sendText("hi alice", to: .user("alice")).ack?.seq == 1)
            await alice.close()
            await carol.close()
        }
    }

    @Test("garbage, a wrong preface and oversize frames end only their own connection")
    func malformedInput() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")

            // An HTTP request where the preface belongs.
            let http = try await RawConnection.connect(port: fixture.ports.native)
            try await http.write(Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
            #expect(try await http.readUntilClosed().count < 200)

            // A frame announcing 2 MiB of payload (the limit is 1 MiB).
            let oversize = try await NativeTestClient.connect(port: fixture.ports.native)
            try await oversize.send(bytes: [0x00, 0x20, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00])
            let closing = try await oversize.expectClose()
            #expect(closing.compactMap(\.failure).map(\.code) == [ErrorCodes.framingError])

            // A message frame whose payload is not an envelope.
            let junk = try await NativeTestClient.connect(port: fixture.ports.native)
            try await junk.send(frame: NativeFrame(kind: .message, payload: ByteBuffer(bytes: [0xFF, 0xFF, 0xFF])))
            #expect(try await junk.expectClose().compactMap(\.failure).map(\.code) == [ErrorCodes.envelopeInvalid])

            // alice never noticed.
            #expect(try await alice.sendText("unharmed", to: .user("bob")).ack?.seq == 1)
            await alice.close()
        }
    }

    @Test("a text over the limit is refused with text-too-large; the next send works")
    func textLimit() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            let refused = try await alice.sendText(String(repeating: "长", count: 400), to: .user("bob"), id: "big")
            #expect(refused.failure?.code == ErrorCodes.textTooLarge && refused.failure?.id == "big")
            #expect(try await alice.sendText(String(repeating: "长", count: 341), to: .user("bob")).ack?.seq == 1)
            await alice.close()
        } configure: {
            $0.limits.maxTextBytes = 1024
        }
    }
}
