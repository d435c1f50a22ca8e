import CourierPostgresTesting
import CourierStore
import CourierTesting
import Foundation
import Logging
import PostgresNIO
import Synchronization
import Testing

@testable import CourierStorePostgres

@Suite(
    "PostgreSQL: the news between nodes, and what each node owns",
    .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
)
struct FeedTests {
    @Test("a batch of cursors is cut into payloads under PostgreSQL's limit and read back whole; a node skips its own")
    func payloads() throws {
        var logs: [UserID: UInt64] = [:]
        for user in 1...3_000 { logs[UserID(rawValue: Int64(user) * 7_919)] = UInt64(user) * 1_000_003 }
        let notice: [UInt8] = Array("{\"typing\":true}".utf8)
        let payloads = PostgresFeed.payloads(origin: "abc", logs: logs, notices: [notice])
        #expect(payloads.count > 2, "3,000 cursors take several payloads")
        #expect(payloads.allSatisfy { $0.utf8.count <= PostgresFeed.maxPayloadBytes })
        var read: [UserID: UInt64] = [:]
        var notices: [[UInt8]] = []
        for payload in payloads {
            #expect(PostgresFeed.news(from: payload, skipping: "abc") == nil, "its own payload")
            switch PostgresFeed.news(from: payload, skipping: "other") {
            case .logs(let cursors)?:
                read.merge(cursors) { _, _ in
                    Issue.record("a user twice")
                    return 0
                }
            case .notice(let bytes)?: notices.append(bytes)
            default: Issue.record("unreadable: \(payload.prefix(40))")
            }
        }
        #expect(read == logs && notices == [notice])
        for junk in ["", "abc", "x L", "x L 1:a", "x L 1:2:3", "x Z 1:2", "x N %%%", "x L -:1"] {
            #expect(PostgresFeed.news(from: junk, skipping: "other") == nil, "\(junk)")
        }
    }

    @Test("a payload's first word carries its send time; a node skips its own stamped payloads, an older one reads it")
    func stampedPayloads() throws {
        let stamp = PostgresFeed.stamp("abc", wallMicroseconds: 1_795_824_000_123_456)
        #expect(PostgresFeed.sender(of: stamp[...]) == ("abc", 1_795_824_000_123_456))
        #expect(PostgresFeed.sender(of: "abc") == ("abc", nil))
        #expect(PostgresFeed.sender(of: "abc@x").sentMicroseconds == nil)
        let payload = PostgresFeed.payloads(origin: stamp, logs: [UserID(rawValue: 7): 42], notices: [])[0]
        #expect(PostgresFeed.news(from: payload, skipping: "abc") == nil, "its own")
        #expect(PostgresFeed.news(from: payload, skipping: "other") == .logs([UserID(rawValue: 7): 42]))
        // A node from before the stamp compared the whole first word with its origin, and read the rest as before:
        // the stamped word is not its origin, and the rest is what an unstamped payload carries.
        let unstamped = PostgresFeed.payloads(origin: "abc", logs: [UserID(rawValue: 7): 42], notices: [])[0]
        let firstWord = payload.split(separator: " ", maxSplits: 1)[0]
        #expect(firstWord != "abc" && firstWord == stamp[...])
        #expect(payload.dropFirst(stamp.count) == unstamped.dropFirst("abc".count))
    }

    @Test("two feeds on one database: news published on one reaches the other, and both time their hop of it")
    func hopsTimed() async throws {
        try await TestDatabase.with { location in
            func feed(_ node: String) -> PostgresFeed {
                var configuration = PostgresStore.Configuration()
                configuration.node = node
                let store = PostgresStore(location: location, configuration: configuration, logger: TestDatabase.logger)
                return PostgresFeed(store: store, logger: TestDatabase.logger)
            }
            let (one, two) = (feed("one"), feed("two"))
            try await one.store.migrate()
            let seen = Mutex<[String: [FeedHop]]>([:])
            one.observe { hop, _ in seen.withLock { $0["one", default: []].append(hop) } }
            two.observe { hop, duration in
                #expect(duration >= .zero && duration < .seconds(60), "\(duration)")
                seen.withLock { $0["two", default: []].append(hop) }
            }
            let heard = Finished()
            try await one.store.withRunning {
                try await two.store.withRunning {
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask { try await one.run() }
                        group.addTask { try await two.run() }
                        group.addTask {
                            for await news in two.news where news == .logs([UserID(rawValue: 5): 9]) {
                                heard.value.store(true, ordering: .relaxed)
                            }
                        }
                        defer { group.cancelAll() }
                        // A notification is a hint, lost when the listener is not listening yet (or the database
                        // refuses a connection under load): published again until one arrives.
                        try await waitUntil("two hears one's news") {
                            one.publish(logs: [UserID(rawValue: 5): 9])
                            return heard.value.load(ordering: .relaxed)
                        }
                        // Each hop is recorded once it ended: only the hops of news of logs, on each side its own.
                        try await waitUntil("one timed its publishing") { seen.withLock { $0["one"] } != nil }
                        let hops = seen.withLock { $0 }
                        #expect(hops["one"]?.allSatisfy { $0 == .publish } == true, "\(hops)")
                        #expect(hops["two"]?.isEmpty == false && hops["two"]!.allSatisfy { $0 == .notify }, "\(hops)")
                    }
                }
            }
        }
    }

    @Test("a stamp not from a node's clock (hostile, or from a clock far off) times no hop and never traps")
    func hostileStamps() {
        let now: Int64 = 1_795_824_000_000_000
        #expect(PostgresFeed.notifyHop(sentMicroseconds: now - 2_500, nowMicroseconds: now) == .microseconds(2_500))
        // A clock a little ahead of this one's: nothing negative.
        #expect(PostgresFeed.notifyHop(sentMicroseconds: now + 400, nowMicroseconds: now) == .zero)
        for sent in [Int64.min, Int64.max, 0, -1, now - 7_200_000_000, now + 7_200_000_000] {
            #expect(PostgresFeed.notifyHop(sentMicroseconds: sent, nowMicroseconds: now) == nil, "\(sent)")
        }
        for sent in [Int64.min, Int64.max, 0] {
            #expect(PostgresFeed.notifyHop(sentMicroseconds: now, nowMicroseconds: sent) == nil, "\(sent)")
        }
    }

    @Test("a node starting clears the devices it left connected, and no other node's; nor does a late disconnect")
    func connectedDevicesPerNode() async throws {
        try await TestDatabase.with { location in
            func store(_ node: String) -> PostgresStore {
                var configuration = PostgresStore.Configuration()
                configuration.node = node
                configuration.passwordHasher = PasswordHasher(
                    logN: 4,
                    blockSize: 8,
                    parallelism: 1,
                    saltBytes: 16,
                    keyBytes: 32
                )
                return PostgresStore(location: location, configuration: configuration, logger: TestDatabase.logger)
            }
            let one = store("one")
            let two = store("two")
            try await one.migrate()
            try await one.withRunning {
                try await two.withRunning {
                    _ = try await one.addUser(name: "alice", password: "pw", nowMs: 1)
                    let phone = try await one.login(user: "alice", password: "pw", deviceName: "phone", nowMs: 1)
                    let laptop = try await two.login(user: "alice", password: "pw", deviceName: "laptop", nowMs: 1)
                    try await one.recordDeviceActivity([.init(device: phone.device.id, connected: true, ms: 10)])
                    try await two.recordDeviceActivity([.init(device: laptop.device.id, connected: true, ms: 20)])
                    // Node one starts again after a crash.
                    try await one.clearConnectedDevices()
                    let devices = try await two.devices(of: "alice")
                    #expect(devices.map(\.connectedSinceMs) == [nil, 20])
                    #expect(devices.map(\.lastSeenMs) == [10, nil])
                    // The laptop's old connection through node one ends late: it stays connected through two.
                    try await one.recordDeviceActivity([.init(device: laptop.device.id, connected: false, ms: 30)])
                    let after = try await two.devices(of: "alice")
                    #expect(after.map(\.connectedSinceMs) == [nil, 20] && after.map(\.lastSeenMs) == [10, 30])
                }
            }
        }
    }

    @Test("work on a connection that closes under it ends with ConnectionLost, instead of waiting for ever")
    func connectionClosedUnderWork() async throws {
        try await TestDatabase.with { location in
            let connection = try await PostgresConnection.connect(
                configuration: location.connectionConfiguration,
                id: 7,
                logger: TestDatabase.logger
            )
            var backend: Int32 = 0
            for try await pid in try await connection.query("SELECT pg_backend_pid()", logger: TestDatabase.logger)
                .decode(Int32.self)
            {
                backend = pid
            }
            let started = Mutex(false)
            async let outcome: Result<Void, any Error> = Result {
                try await PostgresStore.untilClosed(connection) {
                    started.withLock { $0 = true }
                    // An answer that never comes, as for a statement postgres-nio dropped.
                    try await Task.sleep(for: .seconds(3600))
                }
            }
            try await waitUntil("the work started") { started.withLock { $0 } }
            try await TestDatabase.admin(location) { admin in
                try await admin.run("SELECT pg_terminate_backend(\(backend))", logger: TestDatabase.logger)
            }
            switch await outcome {
            case .failure(let error): #expect(error is PostgresStore.ConnectionLost, "\(error)")
            case .success: Issue.record("the work cannot have finished")
            }
            #expect(connection.isClosed)
        }
    }
}
