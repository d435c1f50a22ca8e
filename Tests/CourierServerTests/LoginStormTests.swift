import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import CourierWire
import Foundation
import Testing

/// Logins under attack: many at once for one user, storms of unknown names, idle sockets from one address, strings
/// that SQLite would cut short, tokens that expire while connected.
@Suite("Logins under attack", .serialized)
struct LoginStormTests {
    /// Connects `count` compat clients, then writes every `auth` packet at once, and returns what each got first:
    /// `welcome`, or the error's code.
    /// The storms connect every socket, then send every login: on a loaded machine the first sockets may wait
    /// longer than the default 10 s for their login, which is not what these tests are about.
    static let stormAuthTimeout: Duration = .seconds(300)

    static func compatStorm(
        _ fixture: ServerFixture,
        count: Int,
        login: @Sendable (Int) -> (user: String, password: String)
    ) async throws -> [String] {
        var clients: [CompatTestClient] = []
        for _ in 0..<count { clients.append(try await CompatTestClient.connect(port: fixture.ports.compat)) }
        let packets = try (0..<count).map { index -> [UInt8] in
            let (user, password) = login(index)
            return try CompatTestClient.packet("auth", ["user": .string(user), "password": .string(password)])
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (client, packet) in zip(clients, packets) { group.addTask { try await client.write(packet) } }
            try await group.waitForAll()
        }
        var outcomes: [String] = []
        for client in clients {
            let first = try await client.next(timeout: .seconds(60))
            switch first?.header.type {
            case "welcome"?: outcomes.append("welcome")
            case "error"?: outcomes.append(first.flatMap { CompatTests.string($0, "code") } ?? "?")
            default: outcomes.append("\(String(describing: first))")
            }
            await client.close()
        }
        return outcomes
    }

    @Test("100 logins for one user at once, the right password among them: no more checks run than the limit")
    func oneUserRace() async throws {
        var random = SeededRandom(seed: TestSeed.make(for: "oneUserRace"))
        let right = Int.random(in: 0..<100, using: &random)
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            let outcomes = try await Self.compatStorm(fixture, count: 100) { index in
                ("alice", index == right ? "pw-alice" : "guess-\(index)")
            }
            let welcomed = outcomes.filter { $0 == "welcome" }.count
            let failed = outcomes.filter { $0 == ErrorCodes.authFailed }.count
            let checked = welcomed + failed
            print("oneUserRace: \(checked) checked, \(outcomes.filter { $0 == ErrorCodes.throttled }.count) throttled")
            let expected: Set = [ErrorCodes.authFailed, ErrorCodes.throttled, "welcome"]
            #expect(Set(outcomes).isSubset(of: expected), "\(Set(outcomes))")
            // At most five wrong passwords are ever checked; the right one gets in only if it is checked among them
            // (a success gives its place back, which may let one more attempt be checked).
            #expect(failed <= 5 && welcomed <= 1, "\(outcomes)")
            #expect(try await fixture.metric("courier_password_checks_total") == checked)
            #expect(try await fixture.metric("courier_logins_throttled_total") == 100 - checked)
        } configure: {
            $0.limits.maxFailedLoginsPerUser = 5
            $0.limits.maxFailedLoginsPerAddress = 1_000
            $0.limits.authTimeout = Self.stormAuthTimeout
        }
    }

    @Test("a storm of unknown names from one address is cut at the address limit before any hashing")
    func addressStorm() async throws {
        try await ServerFixture.with { fixture in
            let outcomes = try await Self.compatStorm(fixture, count: 100) { index in ("ghost\(index)", "x") }
            #expect(outcomes.filter { $0 == ErrorCodes.authFailed }.count <= 20, "\(outcomes)")
            #expect(outcomes.filter { $0 == ErrorCodes.throttled }.count >= 80, "\(outcomes)")
            #expect(try await fixture.metric("courier_password_checks_total") <= 20)
        } configure: {
            $0.limits.authTimeout = Self.stormAuthTimeout
        }
    }

    @Test("password checks beyond the pool's queue are refused at once; other users' messages keep flowing")
    func hashingQueue() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            let (bob, _) = try await NativeTestClient.login(fixture, "bob")
            // The storm, and a conversation while it runs.
            async let storm = Self.compatStorm(fixture, count: 150) { index in ("ghost\(index)", "x") }
            for index in 0..<20 {
                #expect(try await alice.sendText("during the storm \(index)", to: .user("bob")).ack != nil)
            }
            let received = try await bob.messages(20)
            #expect(received.map(\.body.text) == (0..<20).map { "during the storm \($0)" })
            let outcomes = try await storm
            let throttled = outcomes.filter { $0 == ErrorCodes.throttled }.count
            let checked = outcomes.filter { $0 == ErrorCodes.authFailed }.count
            print("hashingQueue: \(checked) checked, \(throttled) throttled")
            #expect(throttled + checked == 150, "\(outcomes)")
            // One thread and four waiting: most of 150 at once are turned away without a hash.
            #expect(throttled >= 100)
            await alice.close()
            await bob.close()
        } configure: {
            // A real cost (16 MiB, tens of milliseconds each), one thread, a queue of four.
            $0.store.passwordHasher = PasswordHasher(
                logN: 14,
                blockSize: 8,
                parallelism: 1,
                saltBytes: 16,
                keyBytes: 32
            )
            $0.store.passwordThreads = 1
            $0.store.maxQueuedPasswordChecks = 4
            $0.limits.maxFailedLoginsPerAddress = 10_000
            $0.limits.maxFailedLoginsPerUser = 10_000
            $0.limits.maxUnauthenticatedPerAddress = 1_000
            $0.limits.authTimeout = Self.stormAuthTimeout
        }
    }

    @Test("idle unauthenticated sockets from one address get server-full past their share; logged-in ones don't count")
    func unauthenticatedShare() async throws {
        try await ServerFixture.with { fixture in
            for name in ["alice", "bob", "carol"] { try await fixture.user(name) }
            // Logged-in connections are not in the share.
            var logged: [NativeTestClient] = []
            for name in ["alice", "bob", "carol"] { logged.append(try await NativeTestClient.login(fixture, name).0) }
            var idle: [RawConnection] = []
            for _ in 0..<4 { idle.append(try await RawConnection.connect(port: fixture.ports.native)) }
            // A connect returns once the kernel has the socket, before the server has taken it: the fifth must come
            // after the four are counted, or it may be counted among them and one of them refused instead.
            try await waitUntil("the server counts the four idle sockets") {
                try await ExternalProgram.curl(["http://127.0.0.1:\(fixture.ports.http)/health"])
                    .contains("\"connections\":7,")
            }
            // The share is taken: a fifth socket is closed with server-full, even to log in.
            let refused = try await NativeTestClient.connect(port: fixture.ports.native)
            #expect(try await refused.expectClose().last?.failure?.code == ErrorCodes.serverFull)
            let compat = try await CompatTestClient.connect(port: fixture.ports.compat)
            #expect(try await compat.expectClose().last.flatMap { CompatTests.string($0, "code") } == "server-full")
            // The logged-in users are served meanwhile.
            #expect(try await logged[0].sendText("hello", to: .user("bob")).ack != nil)
            // One idle socket leaves: a login fits again (the server notices the close a moment later: retry).
            await idle.removeFirst().close()
            #expect(try await NativeTestClient.loginOnceThereIsRoom(fixture, "alice"))
            for connection in idle { await connection.close() }
            for client in logged { await client.close() }
        } configure: {
            $0.limits.maxUnauthenticatedPerAddress = 4
        }
    }

    @Test(
        "sockets that send nothing, from many addresses, cannot keep logins out: those of the addresses holding the most are closed for room"
    )
    func strangersMakeRoom() async throws {
        try await ServerFixture.with { fixture in
            for name in ["alice", "bob"] { try await fixture.user(name) }
            // Eight addresses, four silent sockets each (their share): 32, where the server takes 20 connections
            // and 16 not logged in. Each new one closes a silent one of an address holding the most: 16 stay open,
            // spread over the addresses (oldest first would have left the last four addresses all theirs).
            var silent: [RawConnection] = []
            for host in 2...9 {
                for _ in 0..<4 {
                    silent.append(try await RawConnection.connect(port: fixture.ports.native, from: "127.0.0.\(host)"))
                }
            }
            try await waitUntil("16 are closed") { silent.filter { !$0.channel.isActive }.count == 16 }
            let held = (0..<8).map { host in silent[(host * 4)..<(host * 4 + 4)].filter { $0.channel.isActive }.count }
            #expect(held.reduce(0, +) == 16 && held.allSatisfy { $0 >= 1 }, "\(held)")
            // Each closed one was told why.
            let told = try await silent.first { !$0.channel.isActive }!.readUntilClosed()
            #expect(String(decoding: told, as: UTF8.self).contains("server-full"))
            // Logins from another address (native and compat) get in, every one, each taking a silent one's place.
            var logged: [NativeTestClient] = []
            for _ in 0..<6 { logged.append(try await NativeTestClient.login(fixture, "alice").0) }
            let compat = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await compat.write(try CompatTestClient.packet("auth", ["user": "bob", "password": "pw-bob"]))
            _ = try await compat.expect("welcome")
            #expect(try await logged[0].sendText("in", to: .user("bob")).ack != nil)
            // More silent sockets still cannot take a logged-in connection's place.
            for _ in 0..<4 {
                silent.append(try await RawConnection.connect(port: fixture.ports.native, from: "127.0.0.10"))
            }
            #expect(try await logged[1].sendText("still in", to: .user("bob")).ack != nil)
            let metrics = try await ExternalProgram.output(
                "/usr/bin/curl",
                ["--silent", "--max-time", "60", "http://127.0.0.1:\(fixture.ports.http)/metrics"]
            )
            #expect(metrics.contains("courier_connections_closed_for_room_total"))
            for client in logged { await client.close() }
            await compat.close()
            for connection in silent { await connection.close() }
        } configure: {
            $0.limits.maxConnections = 20
            $0.limits.maxUnauthenticated = 16
            $0.limits.maxUnauthenticatedPerAddress = 4
        }
    }

    @Test(
        "past maxConnectionsPerUser a token gets server-full; a password login gets in and the oldest yields; others are not affected"
    )
    func connectionsPerUser() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (first, welcome) = try await NativeTestClient.login(fixture, "alice", device: "one")
            let compat = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await compat.write(try CompatTestClient.packet("auth", ["user": "alice", "password": "pw-alice"]))
            _ = try await compat.expect("welcome")
            // A third connection of alice's with a token (a thief's, say): refused, closed, nothing revoked.
            let thief = try await NativeTestClient.connect(port: fixture.ports.native)
            var hello = ClientEnvelope()
            hello.hello.token = welcome.token
            try await thief.send(hello)
            let refused = try await thief.expectClose()
            #expect(refused.last?.failure?.code == ErrorCodes.serverFull, "\(refused)")
            #expect(try await fixture.store.devices(of: "alice").allSatisfy { $0.revokedMs == nil })
            // A password login is the user's own: it gets in, and alice's oldest connection yields its place.
            let (third, _) = try await NativeTestClient.login(fixture, "alice", device: "three")
            let yielded = try await first.expectClose()
            #expect(yielded.last?.failure?.code == ErrorCodes.serverFull, "\(yielded)")
            // Bob is not affected, and alice's two connections left are served.
            let (bob, _) = try await NativeTestClient.login(fixture, "bob")
            #expect(try await third.sendText("still here", to: .user("bob")).ack != nil)
            #expect(try await bob.messages(1).map(\.body.text) == ["still here"])
            try await compat.write(try CompatTestClient.packet("ping"))
            _ = try await compat.expect("pong")
            // A renewal of the device a thief's token holds (a password login with that token) gets in too.
            var renewal = ClientEnvelope()
            renewal.hello.password.user = "alice"
            renewal.hello.password.password = "pw-alice"
            renewal.hello.renewToken = welcome.token
            let renewing = try await NativeTestClient.connect(port: fixture.ports.native)
            try await renewing.send(renewal)
            _ = try await renewing.expect("a welcome") { $0.welcome }
            // One of alice's leaves: a token fits again (the server notices the close a moment later: retry).
            await third.close()
            #expect(try await Self.resumeOnceThereIsRoom(port: fixture.ports.native, token: welcome.token) == nil)
            await renewing.close()
            await compat.close()
            await bob.close()
        } configure: {
            $0.limits.maxConnectionsPerUser = 2
        }
    }

    /// Logs in with a token until there is room (retrying `server-full`); nil on success, else the last refusal.
    static func resumeOnceThereIsRoom(port: Int, token: String) async throws -> String? {
        let deadline = ContinuousClock.now + Patience.reply
        var refusal = try await Self.tokenLogin(port: port, token: token)
        while refusal != nil, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            refusal = try await Self.tokenLogin(port: port, token: token)
        }
        return refusal
    }

    /// A token login that closes at once if let in: nil when welcomed, else the error code.
    static func tokenLogin(port: Int, token: String) async throws -> String? {
        let client = try await NativeTestClient.connect(port: port)
        var hello = ClientEnvelope()
        hello.hello.token = token
        try await client.send(hello)
        let answer = try await client.expect("an answer") { $0 }
        await client.close()
        if case .welcome? = answer.body { return nil }
        return answer.failure?.code ?? "\(answer)"
    }

    @Test("the HTTP port closes a client that sends its request head a byte at a time")
    func httpSlowHead() async throws {
        try await ServerFixture.with { fixture in
            let drip = try await RawConnection.connect(port: fixture.ports.http)
            let head =
                Array("GET /health HTTP/1.1\r\nHost: x\r\nX-Padding: ".utf8) + Array(repeating: 0x61, count: 10_000)
            let dripping = Task {
                for byte in head {
                    guard (try? await drip.write([byte])) != nil else { return }
                    try? await Task.sleep(for: .milliseconds(100))
                }
            }
            // Closed without an answer while the bytes still come (10,000 of them would take over 15 minutes).
            #expect(try await drip.readUntilClosed(timeout: .seconds(120)).isEmpty)
            dripping.cancel()
        } configure: {
            $0.http.idleTimeout = .seconds(1)
        }
    }

    @Test(
        "the HTTP port closes a connection past its address's share; other addresses are served; a freed one is reused"
    )
    func httpPerAddress() async throws {
        try await ServerFixture.with { fixture in
            var idle: [RawConnection] = []
            for _ in 0..<2 { idle.append(try await RawConnection.connect(port: fixture.ports.http)) }
            // A third from 127.0.0.1 is closed at once, before any request.
            let third = try await RawConnection.connect(port: fixture.ports.http)
            #expect(try await third.readUntilClosed(timeout: .seconds(10)).isEmpty)
            let health = "http://127.0.0.1:\(fixture.ports.http)/health"
            // Another address is served.
            let other = try await ExternalProgram.output(
                "/usr/bin/curl",
                ["--silent", "--fail", "--max-time", "60", "--interface", "127.0.0.2", health]
            )
            #expect(other.contains("\"status\":\"ok\""))
            // One leaves: 127.0.0.1 is served again (the server notices the close a moment later: retry).
            await idle.removeFirst().close()
            let deadline = ContinuousClock.now + Patience.reply
            var served = false
            while !served, ContinuousClock.now < deadline {
                let answer = try? await ExternalProgram.output(
                    "/usr/bin/curl",
                    ["--silent", "--fail", "--max-time", "60", health]
                )
                served = answer?.contains("\"status\":\"ok\"") == true
                if !served { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(served)
            for connection in idle { await connection.close() }
        } configure: {
            $0.http.maxConnectionsPerAddress = 2
        }
    }

    @Test(
        "the HTTP port at its cap: partial request heads from many addresses make room for new requests; the native port is not affected"
    )
    func httpCap() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            // Eleven addresses, two connections each, every one a request head that never ends (the idle timeout
            // is far away): 22 where the port takes 4. Only the newest stay open.
            var partial: [RawConnection] = []
            for host in 2...12 {
                for _ in 0..<2 {
                    let connection = try await RawConnection.connect(port: fixture.ports.http, from: "127.0.0.\(host)")
                    try await connection.write(Array("GET /health HTTP/1.1\r\nHost: x\r\nX-Wait: ".utf8))
                    partial.append(connection)
                }
            }
            try await waitUntil("at most four are open") { partial.filter { $0.channel.isActive }.count <= 4 }
            // Twenty requests after them are all answered, each making room for itself.
            let health = "http://127.0.0.1:\(fixture.ports.http)/health"
            for _ in 0..<20 {
                let answer = try await ExternalProgram.output(
                    "/usr/bin/curl",
                    ["--silent", "--fail", "--max-time", "60", health]
                )
                #expect(answer.contains("\"status\":\"ok\""))
            }
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            await alice.close()
            for connection in partial { await connection.close() }
        } configure: {
            $0.http.maxConnections = 4
            $0.http.idleTimeout = .seconds(600)
        }
    }

    @Test("strings with NUL or other control characters never match a shorter one; bidirectional controls are refused")
    func controlCharacters() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            // A user name with a NUL is not alice, even with alice's password.
            let failed = try await AuthTests.failedLogin(fixture, user: "alice\u{0}x", password: "pw-alice")
            #expect(failed.code == ErrorCodes.authFailed)
            // A device name with a control character is refused.
            let device = try await NativeTestClient.connect(port: fixture.ports.native)
            var hello = ClientEnvelope()
            hello.hello.password.user = "alice"
            hello.hello.password.password = "pw-alice"
            hello.hello.deviceName = "phone\u{1B}]0;owned\u{7}"
            try await device.send(hello)
            #expect(try await device.expectClose().compactMap(\.failure).map(\.code) == [ErrorCodes.invalidRequest])
            // …and so is one whose bidirectional override would show others "phone" written backwards; a name in
            // a right-to-left script is not.
            let spoofed = try await NativeTestClient.connect(port: fixture.ports.native)
            hello.hello.deviceName = "\u{202E}enohp"
            try await spoofed.send(hello)
            #expect(try await spoofed.expectClose().compactMap(\.failure).map(\.code) == [ErrorCodes.invalidRequest])
            let arabic = try await NativeTestClient.connect(port: fixture.ports.native)
            hello.hello.deviceName = "هاتف علي"
            try await arabic.send(hello)
            let answer = try await arabic.expect("an answer to hello") { envelope -> ServerEnvelope? in
                switch envelope.body {
                case .welcome?, .error?: envelope
                default: nil
                }
            }
            #expect(answer.welcome.user == "alice", "\(answer)")
            await arabic.close()

            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            // Two ids that differ after a NUL: both refused, neither stored as "m".
            #expect(
                try await alice.sendText("one", to: .user("bob"), id: "m\u{0}one").failure?.code == "invalid-request"
            )
            #expect(
                try await alice.sendText("two", to: .user("bob"), id: "m\u{0}two").failure?.code == "invalid-request"
            )
            // A recipient with a NUL is nobody, not bob; a group likewise.
            #expect(try await alice.sendText("x", to: .user("bob\u{0}x")).failure?.code == ErrorCodes.unknownUser)
            try await fixture.store.createGroup(name: "team", owner: "alice", members: ["bob"], nowMs: 0)
            #expect(try await alice.sendText("x", to: .group("team\u{0}x")).failure?.code == ErrorCodes.unknownGroup)
            #expect(try await alice.sendText("fine", to: .user("bob"), id: "m").ack?.duplicate == false)
            await alice.close()
        }
    }
}
