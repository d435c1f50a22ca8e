import CourierServer
import CourierServerTesting
import CourierStore
import CourierStoreSQLite
import CourierTesting
import Foundation
import Logging
import NIOSSL
import ServiceLifecycle
import Synchronization
import Testing

@testable import CourierClient

/// Reads a client's events until one matches, with a deadline. A task drains the client's stream into an inbox,
/// so a read that times out leaves the stream intact.
final class EventReader: Sendable {
    private let inbox = FrameInbox<ClientEvent>()
    private let seen = Mutex<[ClientEvent]>([])

    init(_ client: CourierClient) {
        let inbox = self.inbox
        Task {
            for await event in client.events { inbox.append(event) }
            inbox.close()
        }
    }

    func next<T: Sendable>(
        _ what: String,
        timeout: Duration = Patience.reply,
        _ match: @Sendable (ClientEvent) -> T?
    ) async throws -> T {
        let deadline = ContinuousClock.now + timeout
        while true {
            let left = deadline - .now
            guard left > .zero, let event = try? await self.inbox.next(timeout: left) else {
                throw TestClientTimeout(
                    description: "no \(what) within \(timeout); saw \(self.seen.withLock { $0.suffix(20) })"
                )
            }
            self.seen.withLock { $0.append(event) }
            if let value = match(event) { return value }
        }
    }
}

@Suite("The client SDK against a real server", .serialized)
struct ClientTests {
    static func client(
        _ fixture: ServerFixture,
        _ user: String,
        folder: URL,
        device: String = "sdk",
        host: String = "127.0.0.1",
        tls: TLSConfiguration? = nil,
        tlsServerName: String? = nil
    ) throws -> CourierClient {
        try CourierClient(
            configuration: Self.configuration(
                fixture,
                user,
                folder: folder,
                device: device,
                host: host,
                tls: tls,
                tlsServerName: tlsServerName
            )
        )
    }

    /// The configuration ``client(_:_:folder:device:host:tls:tlsServerName:)`` makes its client with (a client
    /// keeps no password in the configuration it holds).
    static func configuration(
        _ fixture: ServerFixture,
        _ user: String,
        folder: URL,
        device: String = "sdk",
        host: String = "127.0.0.1",
        tls: TLSConfiguration? = nil,
        tlsServerName: String? = nil
    ) throws -> CourierClient.Configuration {
        var configuration = CourierClient.Configuration(
            host: host,
            port: fixture.ports.native,
            credentials: .password(user: user, password: "pw-" + user),
            storePath: folder.appendingPathComponent("\(user)-\(device).sqlite").path
        )
        configuration.deviceName = device
        configuration.tls = tls
        configuration.tlsServerName = tlsServerName
        configuration.minBackoff = .milliseconds(20)
        configuration.maxBackoff = .milliseconds(500)
        return configuration
    }

    /// Runs clients, each with its event reader, until `body` returns: each has caught up before `body` starts, and
    /// all are stopped after it (clients `body` starts in the group are its own to stop).
    static func running(
        _ clients: [(CourierClient, String)],
        _ body: (inout ThrowingTaskGroup<Void, any Error>, [EventReader]) async throws -> Void
    ) async throws {
        let readers = clients.map { EventReader($0.0) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (client, _) in clients { group.addTask { await client.run() } }
            for (reader, (_, name)) in zip(readers, clients) {
                _ = try await reader.next("\(name) caught up") { $0 == .caughtUp ? true : nil }
            }
            try await body(&group, readers)
            for (client, _) in clients { client.stop() }
            try await group.waitForAll()
        }
    }

    @Test("two clients chat; messages are stored once on each side; unread, read and history work")
    func chat() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                let alice = try Self.client(fixture, "alice", folder: folder)
                let bob = try Self.client(fixture, "bob", folder: folder)
                let aliceEvents = EventReader(alice)
                let bobEvents = EventReader(bob)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { await alice.run() }
                    group.addTask { await bob.run() }
                    _ = try await bobEvents.next("bob caught up") { $0 == .caughtUp ? true : nil }
                    _ = try await aliceEvents.next("alice caught up") { $0 == .caughtUp ? true : nil }

                    let id = try await alice.send("hello bob", to: .user("bob"))
                    let seq = try await aliceEvents.next("the ack") { event -> UInt64? in
                        if case .sent(id, .user("bob"), let seq, _) = event { seq } else { nil }
                    }
                    #expect(seq == 1)
                    let received = try await bobEvents.next("the message") { event -> ChatMessage? in
                        if case .message(let message) = event { message } else { nil }
                    }
                    #expect(
                        received.text == "hello bob" && received.from == "alice"
                            && received.conversation == .user("alice")
                    )
                    #expect(try await bob.storedMessages(in: .user("alice")).map(\.text) == ["hello bob"])
                    #expect(try await alice.storedMessages(in: .user("bob")).map(\.id) == [id])
                    #expect(try await alice.pendingMessageIDs().isEmpty)

                    #expect(try await bob.unreadCounts().map(\.unread) == [1])
                    try await bob.markRead(.user("alice"), upToSeq: 1)
                    _ = try await aliceEvents.next("a read receipt") { event -> Bool? in
                        if case .receipt(.user("bob"), "bob", true, 1) = event { true } else { nil }
                    }
                    #expect(try await bob.unreadCounts().map(\.unread) == [0])
                    // The receipt is the server's to keep: alice, asking afresh, learns bob read it (what a chat
                    // that was closed, or a new local store, shows its marks from).
                    let counts = try await alice.unreadCounts()
                    #expect(counts.map(\.peerReadSeq) == [1] && counts.map(\.peerDeliveredSeq) == [1], "\(counts)")
                    let page = try await bob.history(of: .user("alice"))
                    #expect(page.messages.map(\.text) == ["hello bob"] && !page.more)
                    // History says so too, in a group as in a direct conversation.
                    let alicePage = try await alice.history(of: .user("bob"))
                    #expect(alicePage.receipts == [ReceiptMark(user: "bob", deliveredSeq: 1, readSeq: 1)])

                    let refused = try await alice.send("to nobody", to: .user("nobody"))
                    let failure = try await aliceEvents.next("the refusal") { event -> String? in
                        if case .sendFailed(refused, let code, _) = event { code } else { nil }
                    }
                    #expect(failure == "unknown-user")
                    #expect(try await alice.pendingMessageIDs().isEmpty)
                    alice.stop()
                    bob.stop()
                    try await group.waitForAll()
                }
            }
        }
    }

    @Test("the client is a ServiceLifecycle service: a graceful shutdown of its group stops it")
    func service() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                try await fixture.user("alice")
                let alice = try Self.client(fixture, "alice", folder: folder)
                let events = EventReader(alice)
                let group = ServiceGroup(services: [alice], logger: Logger(label: "test"))
                try await withThrowingTaskGroup(of: Void.self) { tasks in
                    tasks.addTask { try await group.run() }
                    _ = try await events.next("connected") { event -> Bool? in
                        if case .connected = event { true } else { nil }
                    }
                    await group.triggerGracefulShutdown()
                    let last = try await events.next("the stop") { event -> Disconnection? in
                        if case .disconnected(let disconnection) = event, disconnection.cause == .stopped {
                            disconnection
                        } else {
                            nil
                        }
                    }
                    #expect(last.reason == "stopped")
                    try await tasks.waitForAll()
                }
            }
        }
    }

    @Test("over TLS the client checks the server's name; a certificate that does not match is refused")
    func tls() async throws {
        try await withTemporaryDirectory { folder in
            // A certificate for the name localhost only: no IP address entry.
            let certificate = try await TestCertificate.make(in: folder, subjectAltNames: "DNS:localhost")
            try await ServerFixture.with(
                { fixture in
                    try await fixture.user("alice")
                    try await fixture.user("bob")
                    let trusting = certificate.trustingClient
                    // By host name, and by address with the name given.
                    let alice = try Self.client(fixture, "alice", folder: folder, host: "localhost", tls: trusting)
                    let bob = try Self.client(fixture, "bob", folder: folder, tls: trusting, tlsServerName: "localhost")
                    // By address alone (the certificate does not list it), and by another name.
                    let byAddress = try Self.client(fixture, "bob", folder: folder, device: "ip", tls: trusting)
                    let otherName = try Self.client(
                        fixture,
                        "bob",
                        folder: folder,
                        device: "other",
                        tls: trusting,
                        tlsServerName: "courier.example"
                    )
                    let aliceEvents = EventReader(alice)
                    let bobEvents = EventReader(bob)
                    let refused = [EventReader(byAddress), EventReader(otherName)]
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        for client in [alice, bob, byAddress, otherName] { group.addTask { await client.run() } }
                        _ = try await bobEvents.next("bob caught up") { $0 == .caughtUp ? true : nil }
                        _ = try await aliceEvents.next("alice caught up") { $0 == .caughtUp ? true : nil }
                        _ = try await alice.send("sealed", to: .user("bob"))
                        let received = try await bobEvents.next("the message") { event -> String? in
                            if case .message(let message) = event { message.text } else { nil }
                        }
                        #expect(received == "sealed")
                        // The other two fail the handshake, again on each retry.
                        for events in refused {
                            for attempt in 1...2 {
                                let reason = try await events.next("failure \(attempt)") { event -> String? in
                                    switch event {
                                    case .connected: "connected"
                                    case .disconnected(let disconnection): disconnection.reason
                                    default: nil
                                    }
                                }
                                #expect(reason.contains("failedToValidateHostname"), "\(reason)")
                            }
                        }
                        for client in [alice, bob, byAddress, otherName] { client.stop() }
                        try await group.waitForAll()
                    }
                },
                configure: { configuration in
                    configuration.tls = try? ServerConfiguration.tls(
                        certificateChainFile: certificate.certificateFile,
                        privateKeyFile: certificate.keyFile
                    )
                }
            )
        }
    }

    @Test("the outbox survives a restart of the client process and is resent with the same id, stored once")
    func outboxSurvivesRestart() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                // Written while the client is not running: nothing is sent. The object is gone at the end of the
                // block, as with the process that made it.
                var ids: [String] = []
                do {
                    let offline = try Self.client(fixture, "alice", folder: folder)
                    for number in 1...5 { ids.append(try await offline.send("queued \(number)", to: .user("bob"))) }
                    #expect(try await offline.pendingMessageIDs() == ids)
                }

                // A new client object on the same file, as after a restart of the app.
                let restarted = try Self.client(fixture, "alice", folder: folder)
                #expect(try await restarted.pendingMessageIDs() == ids)
                let events = EventReader(restarted)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { await restarted.run() }
                    // Written by a client that is gone, they come back as messages of alice's once acknowledged,
                    // with what they hold.
                    var acked: [ChatMessage] = []
                    while acked.count < 5 {
                        acked.append(
                            try await events.next("acks") { event -> ChatMessage? in
                                if case .message(let message) = event { message } else { nil }
                            }
                        )
                    }
                    #expect(acked.map(\.id) == ids && acked.map(\.from) == Array(repeating: "alice", count: 5))
                    #expect(acked.map(\.text) == (1...5).map { "queued \($0)" } && acked.map(\.seq) == [1, 2, 3, 4, 5])
                    restarted.stop()
                    try await group.waitForAll()
                }
                #expect(try await restarted.pendingMessageIDs().isEmpty)
                let bob = try #require(try await fixture.store.user(named: "bob")).id
                let page = try await fixture.store.history(for: bob, in: .user("alice"), beforeSeq: 0, limit: 50)
                #expect(page.messages.map(\.id) == ids.reversed())
            }
        }
    }

    @Test("a client reconnects after the server restarts and syncs what it missed")
    func reconnectsAndResyncs() async throws {
        try await withTemporaryDirectory { folder in
            let data = folder.appendingPathComponent("server-data")
            let port = try await FreePort.pick()
            var configuration = CourierClient.Configuration(
                port: port,
                credentials: .password(user: "bob", password: "pw-bob"),
                storePath: folder.appendingPathComponent("bob.sqlite").path
            )
            configuration.minBackoff = .milliseconds(20)
            configuration.maxBackoff = .milliseconds(200)
            let bob = try CourierClient(configuration: configuration)
            let events = EventReader(bob)
            // The accounts exist before any server runs (a login refused for an unknown user would end run()).
            var accounts = SQLiteStore.Configuration()
            accounts.passwordHasher = ServerFixture.cheapHasher
            let setup = try SQLiteStore(folder: data, configuration: accounts, logger: .init(label: "test"))
            for name in ["alice", "bob"] { _ = try await setup.addUser(name: name, password: "pw-" + name, nowMs: 0) }
            try setup.close()
            try await withThrowingTaskGroup(of: Void.self) { group in
                // The client retries until a server answers.
                group.addTask { await bob.run() }
                // The first life of the server: bob's client catches up.
                try await ServerFixture.with(folder: data) { _ in
                    _ = try await events.next("caught up") { $0 == .caughtUp ? true : nil }
                } configure: {
                    $0.nativePort = port
                }
                _ = try await events.next("the disconnect") { event -> Bool? in
                    if case .disconnected = event { true } else { nil }
                }
                // While the server is down, a message reaches the data folder (as another server would write it).
                let store = try SQLiteStore(folder: data, logger: .init(label: "test"))
                let alice = try #require(try await store.user(named: "alice")).id
                // The body is a serialized courier.v1.Body with text "hi".
                let body: [UInt8] = [0x0A, 0x02, 0x68, 0x69]
                _ = try await store.apply(
                    [.send(.init(sender: alice, id: "while-down", to: .user("bob"), body: body))],
                    nowMs: 1
                )
                try store.close()
                // The second life on the same data and port: the client reconnects by itself and syncs.
                try await ServerFixture.with(folder: data) { _ in
                    let message = try await events.next("the missed message") { event -> ChatMessage? in
                        if case .message(let message) = event { message } else { nil }
                    }
                    #expect(message.id == "while-down" && message.text == "hi" && message.from == "alice")
                    bob.stop()
                } configure: {
                    $0.nativePort = port
                }
                try await group.waitForAll()
            }
        }
    }

    @Test(
        "refused credentials end run() with loginRefused; a revoked device signs the client out: no password kept, no new device"
    )
    func refusedLogins() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                try await fixture.user("alice")
                // A wrong password: one refusal, then run() returns by itself (no retries to be throttled).
                var wrong = CourierClient.Configuration(
                    port: fixture.ports.native,
                    credentials: .password(user: "alice", password: "not-hers"),
                    storePath: folder.appendingPathComponent("wrong.sqlite").path
                )
                wrong.minBackoff = .milliseconds(20)
                let refused = try CourierClient(configuration: wrong)
                let refusedEvents = EventReader(refused)
                await refused.run()
                let code = try await refusedEvents.next("the refusal") { event -> String? in
                    if case .loginRefused(let code, _) = event { code } else { nil }
                }
                #expect(code == "auth-failed")
                #expect(try await refused.deviceToken() == nil)

                // A good login stores a token, and the client keeps no password after it. Revoked, the token is
                // forgotten and run() ends signed out: the device stays out, and no new one is made.
                let alice = try Self.client(fixture, "alice", folder: folder)
                if case .password(_, let kept) = alice.configuration.credentials { #expect(kept.isEmpty) }
                let events = EventReader(alice)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { await alice.run() }
                    _ = try await events.next("connected") { event -> Bool? in
                        if case .connected = event { true } else { nil }
                    }
                    let first = try #require(try await alice.deviceToken())
                    let session = try await fixture.store.authenticate(token: first, nowMs: 0)
                    try await fixture.store.revokeDevice(session.device.id, of: "alice", nowMs: 1)
                    let signedOut = try await events.next("signed out") { event -> String? in
                        if case .loginRefused(let code, _) = event { code } else { nil }
                    }
                    #expect(signedOut == "token-revoked")
                    try await group.waitForAll()
                    #expect(try await alice.deviceToken() == nil)
                    let devices = try await fixture.store.devices(of: "alice")
                    #expect(devices.count == 1 && devices[0].revokedMs != nil, "\(devices)")
                }
            }
        }
    }
}
