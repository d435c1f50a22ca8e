import CourierProtocol
import CourierStore
import CourierStoreSQLite
import CourierTesting
import CourierWire
import NIOCore
import NIOEmbedded
import Testing

@testable import CourierServer

/// Every deadline of a session, on a testing channel whose event loop's time the test moves: the session's clock
/// follows that time, so a deadline of an hour takes no time and cannot race a loaded machine. The store is real
/// (a SQLite file), and so is the login.
@Suite("A session's deadlines on a fake clock (a testing channel, no sockets, no sleeps)", .timeLimit(.minutes(1)))
struct SessionDeadlineTests {
    /// One connection's session on a testing channel, over a real store.
    struct Connection {
        let channel: NIOAsyncTestingChannel
        let loop: NIOAsyncTestingEventLoop
        let store: SQLiteStore

        func advance(by duration: Duration) async {
            await self.loop.advanceTime(by: TimeAmount(duration))
        }

        func send(_ envelope: ClientEnvelope) async throws {
            try await self.channel.writeInbound(try NativeFrame(envelope: envelope))
        }

        /// The next frame the session wrote; waits for one (a login's work runs as a task).
        func nextFrame() async throws -> NativeFrame {
            try await self.channel.waitForOutboundWrite(as: NativeFrame.self)
        }

        /// The next envelope the session wrote, frames that carry none skipped.
        func nextEnvelope() async throws -> ServerEnvelope {
            while true {
                let frame = try await self.nextFrame()
                if frame.kind == .message { return try frame.envelope(as: ServerEnvelope.self) }
            }
        }

        /// What the session wrote so far, without waiting.
        func written() async throws -> [NativeFrame] {
            var frames: [NativeFrame] = []
            while let frame = try await self.channel.readOutbound(as: NativeFrame.self) { frames.append(frame) }
            return frames
        }

        /// Logs alice in with her password; returns the welcome, once the session is active and has told the client
        /// it is caught up.
        func login() async throws -> Courier_V1_Welcome {
            var hello = ClientEnvelope()
            hello.requestID = 1
            hello.hello.password.user = "alice"
            hello.hello.password.password = "secret"
            try await self.send(hello)
            let answer = try await self.nextEnvelope()
            guard case .welcome(let welcome)? = answer.body else {
                Issue.record("no welcome: \(answer)")
                throw CancellationError()
            }
            // The login's end reaches the loop after the welcome is written: the session is active once it has, and
            // its delivery starts by saying the client is caught up.
            let caughtUp = try await self.nextEnvelope()
            #expect(caughtUp.events.caughtUp, "\(caughtUp)")
            let active = try await self.loop.executeInContext { [channel = self.channel] in
                try channel.pipeline.syncOperations.handler(type: SessionHandler<NativeTransport>.self)
                    .machine.session != nil
            }
            #expect(active)
            return welcome
        }
    }

    /// Where the tests' wall clock starts, in milliseconds since 1970.
    static let wallOrigin: Int64 = 1_795_824_000_000

    /// A configuration with the defaults, changed by `configure`.
    static func configured(_ configure: (inout ServerConfiguration) -> Void) -> ServerConfiguration {
        var configuration = ServerConfiguration()
        configure(&configuration)
        return configuration
    }

    static func with(
        _ configuration: ServerConfiguration,
        _ body: (Connection) async throws -> Void
    ) async throws {
        let folder = try TemporaryDirectory(prefix: "courier-deadlines")
        defer { folder.remove() }
        let loop = NIOAsyncTestingEventLoop()
        let origin = ContinuousClock.now
        // The session's clocks are the loop's time, which only the test moves: the monotonic one from now, the wall
        // clock from a fixed moment (2026-11-28 00:00 UTC).
        let clock = SessionClock(
            { origin + .nanoseconds(Int64(loop.now.uptimeNanoseconds)) },
            wallMs: { Self.wallOrigin + Int64(loop.now.uptimeNanoseconds / 1_000_000) }
        )
        let (context, store) = try SessionHandlerTests.context(in: folder, configuration: configuration, clock: clock)
        defer { try? store.close() }
        _ = try await store.addUser(name: "alice", password: "secret", nowMs: SessionClock.systemWallMs())
        _ = try await store.addUser(name: "bob", password: "secret", nowMs: SessionClock.systemWallMs())
        let commits = Task { await context.commits.run() }
        defer { commits.cancel() }
        let channel = NIOAsyncTestingChannel(loop: loop)
        try await loop.executeInContext {
            try channel.pipeline.syncOperations.addHandler(
                SessionHandler(
                    requests: SessionRequests(
                        context: context,
                        transport: NativeTransport(),
                        remoteAddress: "127.0.0.1:1",
                        clientIP: "127.0.0.1"
                    )
                )
            )
        }
        try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1))
        try await body(Connection(channel: channel, loop: loop, store: store))
        _ = try? await channel.finish(acceptAlreadyClosed: true)
        // The end's bookkeeping runs in a task: the store is closed after it.
        await context.sessionsEnded()
        context.commits.finish()
        await commits.value
        await loop.shutdownGracefully()
    }

    static func expectClosed(_ connection: Connection, code: String?) async throws {
        let frames = try await connection.written()
        let errors = try frames.filter { $0.kind == .message }.map { try $0.envelope(as: ServerEnvelope.self) }
        if let code {
            #expect(errors.last?.error.code == code, "\(errors)")
        } else {
            #expect(errors.isEmpty, "closed quietly, yet wrote \(errors)")
        }
        #expect(!connection.channel.isActive)
    }

    @Test("no hello within authTimeout: closed with auth-timeout at the deadline, not before")
    func authenticationDeadline() async throws {
        try await Self.with(Self.configured { $0.limits.authTimeout = .seconds(10) }) { connection in
            await connection.advance(by: .milliseconds(9_900))
            #expect(connection.channel.isActive)
            #expect(try await connection.written().isEmpty)
            // The wheel's resolution is 100 ms: the close comes at most one slot after the deadline.
            await connection.advance(by: .milliseconds(200))
            try await Self.expectClosed(connection, code: ErrorCodes.authTimeout)
        }
    }

    @Test("silence past idleTimeout closes with idle-timeout, not before; a ping moves the deadline")
    func idleDeadline() async throws {
        try await Self.with(Self.configured { $0.limits.idleTimeout = .seconds(60) }) { connection in
            _ = try await connection.login()
            await connection.advance(by: .seconds(40))
            try await connection.channel.writeInbound(NativeFrame.ping(7))
            #expect(try await connection.nextFrame().kind == .pong)
            // 80 s after the login, 40 s after the ping: open.
            await connection.advance(by: .seconds(40))
            #expect(connection.channel.isActive)
            #expect(try await connection.written().isEmpty)
            await connection.advance(by: .milliseconds(20_200))
            try await Self.expectClosed(connection, code: ErrorCodes.idleTimeout)
        }
    }

    @Test(
        "a send over the rate is held on the loop's timer, with the requests after it, and answered once the time passed"
    )
    func heldSend() async throws {
        try await Self.with(
            Self.configured {
                $0.limits.sendsPerSecond = 1
                $0.limits.sendBurst = 1
            }
        ) { connection in
            _ = try await connection.login()
            func send(_ id: String, _ requestID: UInt64) async throws {
                var envelope = ClientEnvelope()
                envelope.requestID = requestID
                envelope.send.id = id
                envelope.send.to.user = "bob"
                envelope.send.body.text = "你好 \(id)"
                try await connection.send(envelope)
            }
            try await send("m1", 2)
            #expect(try await connection.nextEnvelope().sendAck.id == "m1")
            try await send("m2", 3)
            // A ping behind the held send waits with it.
            try await connection.channel.writeInbound(NativeFrame.ping(9))
            await connection.advance(by: .milliseconds(900))
            #expect(try await connection.written().isEmpty)
            // Handed in at last: the send goes to the group commit, and the ping after it is answered at once.
            await connection.advance(by: .milliseconds(100))
            #expect(try await connection.nextFrame().kind == .pong)
            let answer = try await connection.nextEnvelope()
            #expect(answer.requestID == 3 && answer.sendAck.id == "m2", "\(answer)")
        }
    }

    @Test("a token that expires while connected closes the session with token-expired at its expiry")
    func tokenExpiry() async throws {
        try await Self.with(
            Self.configured {
                $0.store.limits.tokenLifetime = .seconds(3_600)
                $0.limits.idleTimeout = .seconds(7_200)
            }
        ) { connection in
            let welcome = try await connection.login()
            // The token was made on the session's wall clock, which stands still until the test moves it: it expires
            // exactly an hour after the login.
            #expect(welcome.tokenExpiresMs == Self.wallOrigin + 3_600_000)
            await connection.advance(by: .milliseconds(3_599_900))
            #expect(connection.channel.isActive)
            #expect(try await connection.written().isEmpty)
            // The wheel's resolution is 100 ms: the close comes at most one slot after the expiry.
            await connection.advance(by: .milliseconds(200))
            try await Self.expectClosed(connection, code: ErrorCodes.tokenExpired)
        }
    }

    @Test(
        "a client that leaves its buffer full for slowConsumerTimeout is closed without a word; one that reads is not"
    )
    func slowConsumerDeadline() async throws {
        try await Self.with(
            Self.configured {
                $0.limits.slowConsumerTimeout = .seconds(30)
                $0.limits.idleTimeout = .seconds(3_600)
            }
        ) { connection in
            _ = try await connection.login()
            let channel = connection.channel
            try await connection.loop.executeInContext {
                channel.isWritable = false
                channel.pipeline.fireChannelWritabilityChanged()
            }
            await connection.advance(by: .seconds(20))
            // It reads again, then stops again: the grace starts over.
            try await connection.loop.executeInContext {
                channel.isWritable = true
                channel.pipeline.fireChannelWritabilityChanged()
                channel.isWritable = false
                channel.pipeline.fireChannelWritabilityChanged()
            }
            await connection.advance(by: .seconds(20))
            #expect(channel.isActive)
            await connection.advance(by: .milliseconds(10_200))
            try await Self.expectClosed(connection, code: nil)
        }
    }
}
