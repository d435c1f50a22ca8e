import CourierClient
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import Foundation
import Synchronization
import Testing

/// Several clients on one local store, as several processes of one app on one machine (a chat window and commands
/// run beside it): one device of the user, a connection each.
@Suite("Clients sharing one local store", .serialized)
struct SharedStoreTests {
    /// A client of alice's shared store (or of another store), logging in with the store's token once it has one.
    static func client(
        _ fixture: ServerFixture,
        _ user: String,
        store: URL,
        events: Bool = true,
        takeover: Duration = .milliseconds(200)
    ) throws -> CourierClient {
        var configuration = CourierClient.Configuration(
            port: fixture.ports.native,
            credentials: .password(user: user, password: "pw-" + user),
            storePath: store.path
        )
        configuration.receivesEvents = events
        configuration.takeoverInterval = takeover
        configuration.minBackoff = .milliseconds(20)
        configuration.maxBackoff = .milliseconds(500)
        return try CourierClient(configuration: configuration)
    }

    /// Collects a client's events: the messages reported, the acknowledgements, and the failures.
    final class Tally: Sendable {
        /// By text.
        let messages = Mutex<[String: Int]>([:])
        /// By id.
        let messageIDs = Mutex<[String: Int]>([:])
        let sent = Mutex<[String: Int]>([:])
        let failed = Mutex<[String]>([])
        let connected = Mutex(0)

        func count(_ event: ClientEvent) {
            switch event {
            case .message(let message):
                self.messages.withLock { $0[message.text, default: 0] += 1 }
                self.messageIDs.withLock { $0[message.id, default: 0] += 1 }
            case .sent(let id, _, _, _): self.sent.withLock { $0[id, default: 0] += 1 }
            case .sendFailed(let id, _, _): self.failed.withLock { $0.append(id) }
            case .connected: self.connected.withLock { $0 += 1 }
            default: break
            }
        }
    }

    @Test("two clients of one store each report every message once, the other's sends included, not their own")
    func twoWindows() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                let shared = folder.appendingPathComponent("alice.sqlite")
                let first = try Self.client(fixture, "alice", store: shared)
                let bob = try Self.client(fixture, "bob", store: folder.appendingPathComponent("bob.sqlite"))
                let tallies = (Tally(), Tally(), Tally())
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { for await event in first.events { tallies.0.count(event) } }
                    group.addTask { for await event in bob.events { tallies.2.count(event) } }
                    group.addTask { await first.run() }
                    group.addTask { await bob.run() }
                    // The second window opens once the first has logged in: it uses the store's token.
                    try await waitUntil("the first logged in") { try await first.deviceToken() != nil }
                    let second = try Self.client(fixture, "alice", store: shared)
                    group.addTask { for await event in second.events { tallies.1.count(event) } }
                    group.addTask { await second.run() }
                    try await waitUntil("both connected") {
                        tallies.0.connected.withLock { $0 } > 0 && tallies.1.connected.withLock { $0 } > 0
                            && tallies.2.connected.withLock { $0 } > 0
                    }

                    let fromBob = (1...20).map { ("bob \($0)", Conversation.user("alice")) }
                    _ = try await bob.send(contentsOf: fromBob)
                    var fromFirst: [String] = []
                    var fromSecond: [String] = []
                    for index in 1...10 {
                        fromFirst.append(try await first.send("first \(index)", to: .user("bob")))
                        fromSecond.append(try await second.send("second \(index)", to: .user("bob")))
                    }
                    try await waitUntil("every message reported") {
                        tallies.0.messages.withLock { $0.count } == 30 && tallies.1.messages.withLock { $0.count } == 30
                            && tallies.0.sent.withLock { $0.count } == 10 && tallies.1.sent.withLock { $0.count } == 10
                    }
                    // Each window: bob's twenty and the other window's ten, once each; its own only as acks.
                    let bobTexts = Set(fromBob.map(\.0))
                    let firstSaw = tallies.0.messages.withLock { $0 }
                    let secondSaw = tallies.1.messages.withLock { $0 }
                    #expect(Set(firstSaw.keys) == bobTexts.union((1...10).map { "second \($0)" }))
                    #expect(Set(secondSaw.keys) == bobTexts.union((1...10).map { "first \($0)" }))
                    #expect(firstSaw.values.allSatisfy { $0 == 1 } && secondSaw.values.allSatisfy { $0 == 1 })
                    #expect(Set(tallies.0.sent.withLock { Array($0.keys) }) == Set(fromFirst))
                    #expect(Set(tallies.1.sent.withLock { Array($0.keys) }) == Set(fromSecond))
                    #expect(tallies.0.sent.withLock { $0.values.allSatisfy { $0 == 1 } })
                    // One device for both windows; the store holds everything once.
                    #expect(try await fixture.store.devices(of: "alice").count == 1)
                    #expect(try await first.storedMessages(in: .user("bob")).count == 40)
                    #expect(try await second.pendingMessageIDs().isEmpty)
                    for client in [first, second, bob] { client.stop() }
                    try await group.waitForAll()
                }
                let bobID = try #require(try await fixture.store.user(named: "bob")).id
                let page = try await fixture.store.history(for: bobID, in: .user("alice"), beforeSeq: 0, limit: 100)
                #expect(page.messages.count == 40 && Set(page.messages.map(\.seq)).count == 40)
            }
        }
    }

    @Test("a client sends the outbox of a client of its store that is gone, not of one that lives")
    func takeover() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                let shared = folder.appendingPathComponent("alice.sqlite")
                let chat = try Self.client(fixture, "alice", store: shared)
                let tally = Tally()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { for await event in chat.events { tally.count(event) } }
                    group.addTask { await chat.run() }
                    try await waitUntil("connected") { tally.connected.withLock { $0 } > 0 }
                    // A client that lives but never connects (a command still starting), and one that wrote and
                    // went (a command killed before it connected).
                    let living = try Self.client(fixture, "alice", store: shared)
                    let alive = try await living.send("from the living", to: .user("bob"))
                    var goneIDs: [String] = []
                    do {
                        let gone = try Self.client(fixture, "alice", store: shared)
                        for index in 1...3 {
                            goneIDs.append(try await gone.send("from the gone \(index)", to: .user("bob")))
                        }
                    }
                    // The chat's next look takes over the gone one's messages (and its look covers the living one's,
                    // written before): they are sent, once, in order, and reported as messages of alice's (the
                    // chat did not write them), not as its own acknowledgements.
                    try await waitUntil("the gone client's messages sent") {
                        tally.messageIDs.withLock { Set($0.keys) } == Set(goneIDs)
                    }
                    #expect(tally.sent.withLock { $0.isEmpty })
                    #expect(
                        tally.messages.withLock { $0 } == [
                            "from the gone 1": 1, "from the gone 2": 1, "from the gone 3": 1,
                        ]
                    )
                    #expect(try await chat.sendingMessageIDs().isEmpty)
                    #expect(try await living.sendingMessageIDs() == [alive])
                    #expect(try await chat.pendingMessageIDs() == [alive])
                    // Once the living one is gone too, its message follows.
                    _ = consume living
                    try await waitUntil("the last message sent") {
                        tally.messageIDs.withLock { $0[alive] } == 1
                    }
                    chat.stop()
                    try await group.waitForAll()
                    let bobID = try #require(try await fixture.store.user(named: "bob")).id
                    let page = try await fixture.store.history(for: bobID, in: .user("alice"), beforeSeq: 0, limit: 10)
                    #expect(page.messages.reversed().map(\.id) == goneIDs + [alive])
                }
            }
        }
    }

    @Test("a client reports every event after where the store stood when it was made, though another stored it")
    func cursorFromCreation() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                let shared = folder.appendingPathComponent("alice.sqlite")
                let first = try Self.client(fixture, "alice", store: shared)
                let bob = try Self.client(fixture, "bob", store: folder.appendingPathComponent("bob.sqlite"))
                let tallies = (Tally(), Tally(), Tally())
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { for await event in first.events { tallies.0.count(event) } }
                    group.addTask { for await event in bob.events { tallies.2.count(event) } }
                    group.addTask { await first.run() }
                    group.addTask { await bob.run() }
                    try await waitUntil("connected") {
                        tallies.0.connected.withLock { $0 } > 0 && tallies.2.connected.withLock { $0 } > 0
                    }
                    // Made now, connecting later: meanwhile the first stores bob's message.
                    let late = try Self.client(fixture, "alice", store: shared)
                    try await bob.send("before the late one connects", to: .user("alice"))
                    try await waitUntil("the first stored it") {
                        tallies.0.messages.withLock { $0["before the late one connects"] } == 1
                    }
                    group.addTask { for await event in late.events { tallies.1.count(event) } }
                    group.addTask { await late.run() }
                    try await bob.send("after", to: .user("alice"))
                    try await waitUntil("the late one reported both") {
                        tallies.1.messages.withLock { $0.count } == 2
                    }
                    #expect(
                        tallies.1.messages.withLock { $0 } == ["before the late one connects": 1, "after": 1]
                    )
                    for client in [first, late, bob] { client.stop() }
                    try await group.waitForAll()
                }
            }
        }
    }

    @Test("withdraw takes back a message not sent yet, and refuses one that was sent")
    func withdraw() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                let client = try Self.client(fixture, "alice", store: folder.appendingPathComponent("alice.sqlite"))
                let tally = Tally()
                let unsent = try await client.send("never mind", to: .user("bob"))
                #expect(try await client.withdraw(id: unsent))
                #expect(try await client.pendingMessageIDs().isEmpty)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { for await event in client.events { tally.count(event) } }
                    group.addTask { await client.run() }
                    let sent = try await client.send("this one goes", to: .user("bob"))
                    try await waitUntil("acknowledged") { tally.sent.withLock { $0[sent] } == 1 }
                    #expect(try await !client.withdraw(id: sent))
                    client.stop()
                    try await group.waitForAll()
                }
                let bobID = try #require(try await fixture.store.user(named: "bob")).id
                let page = try await fixture.store.history(for: bobID, in: .user("alice"), beforeSeq: 0, limit: 10)
                #expect(page.messages.count == 1)
            }
        }
    }

    @Test("twenty clients of one store write and send at once: no busy error, each message stored once, all reported")
    func manyWriters() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                let shared = folder.appendingPathComponent("alice.sqlite")
                // One logs in first (and makes the device); the others use the store's token, as commands do.
                let reader = try Self.client(fixture, "alice", store: shared)
                let readerTally = Tally()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { for await event in reader.events { readerTally.count(event) } }
                    group.addTask { await reader.run() }
                    try await waitUntil("connected") { readerTally.connected.withLock { $0 } > 0 }
                    let writers = try (0..<20).map { _ in
                        try Self.client(fixture, "alice", store: shared, events: false)
                    }
                    let tallies = writers.map { _ in Tally() }
                    for (writer, tally) in zip(writers, tallies) {
                        group.addTask { for await event in writer.events { tally.count(event) } }
                        group.addTask { await writer.run() }
                        group.addTask {
                            for index in 0..<25 {
                                try await writer.send("w \(UUID().uuidString.prefix(8)) \(index)", to: .user("bob"))
                            }
                        }
                    }
                    try await waitUntil("500 acknowledged and reported") {
                        tallies.map { $0.sent.withLock { $0.count } }.reduce(0, +) == 500
                            && readerTally.messages.withLock { $0.count } == 500
                    }
                    #expect(tallies.allSatisfy { $0.sent.withLock { $0.count } == 25 && $0.failed.withLock(\.isEmpty) })
                    #expect(readerTally.messages.withLock { $0.values.allSatisfy { $0 == 1 } })
                    #expect(try await reader.pendingMessageIDs().isEmpty)
                    for client in writers + [reader] { client.stop() }
                    try await group.waitForAll()
                }
                let bobID = try #require(try await fixture.store.user(named: "bob")).id
                var seqs: [UInt64] = []
                var before: UInt64 = 0
                repeat {
                    let page = try await fixture.store.history(
                        for: bobID,
                        in: .user("alice"),
                        beforeSeq: before,
                        limit: 200
                    )
                    seqs += page.messages.map(\.seq)
                    guard page.more, let last = page.messages.last else { break }
                    before = last.seq
                } while true
                #expect(seqs.sorted() == Array(1...500))
            }
        }
    }
}
