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
    "PostgreSQL: the order in which a group commit takes its locks",
    .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
)
struct LockOrderTests {
    static let cheapHasher = PasswordHasher(logN: 4, blockSize: 8, parallelism: 1, saltBytes: 16, keyBytes: 32)

    /// Waits until a statement whose text contains `statement` waits for a lock.
    static func waitForLockWaiter(on statement: String, _ connection: PostgresConnection) async throws {
        try await waitUntil("a statement on \(statement) waits for a lock") {
            try await connection.run("SELECT pg_stat_clear_snapshot()", logger: TestDatabase.logger)
            let waiting = try await connection.value(
                """
                SELECT count(*)::bigint FROM pg_stat_activity
                WHERE datname = current_database() AND wait_event_type = 'Lock' AND strpos(query, \(statement)) > 0
                """,
                as: Int64.self,
                logger: TestDatabase.logger
            )
            return waiting == 1
        }
    }

    @Test(
        "a conversation made elsewhere after a batch's plan is locked without waiting: held, the batch runs again"
    )
    func unforeseenConversation() async throws {
        try await Self.withStore { location, store, capture in
            let alice = try await store.addUser(name: "alice", password: "x", nowMs: 1).id
            let bob = try await store.addUser(name: "bob", password: "x", nowMs: 1).id
            let (a, b) = (min(alice, bob).rawValue, max(alice, bob).rawValue)
            let logger = TestDatabase.logger
            let (outcome, made) = try await TestDatabase.admin(location) { users in
                try await TestDatabase.admin(location) { other in
                    // Both users' rows held (as far as a batch's FOR UPDATE goes): the batch plans (the pair has
                    // no conversation yet) and waits for them.
                    try await users.run("BEGIN", logger: logger)
                    try await users.run(
                        "SELECT id FROM users WHERE id IN (\(a), \(b)) FOR NO KEY UPDATE",
                        logger: logger
                    )
                    let batch = Task {
                        try await store.apply(
                            [.send(.init(sender: alice, id: "m1", to: .user("bob"), body: Array("hi".utf8)))],
                            nowMs: 2
                        )
                    }
                    try await Self.waitForLockWaiter(on: "FROM users", other)
                    // Meanwhile another node makes the pair's conversation, then holds its row as a batch that
                    // foresaw it does, before that batch asks for the users.
                    let made = try #require(
                        try await other.value(
                            """
                            INSERT INTO conversations (kind, user_a, user_b, created_ms)
                            VALUES (1, \(a), \(b), 1) RETURNING id
                            """,
                            as: Int64.self,
                            logger: logger
                        )
                    )
                    try await other.run(
                        """
                        INSERT INTO members (conversation_id, user_id, joined_seq, read_seq, delivered_seq)
                        VALUES (\(made), \(a), 0, 0, 0), (\(made), \(b), 0, 0, 0)
                        """,
                        logger: logger
                    )
                    try await other.run("BEGIN", logger: logger)
                    try await other.run(
                        "SELECT id FROM conversations WHERE id = \(made) FOR UPDATE",
                        logger: logger
                    )
                    // The users go to the batch, which finds the conversation it did not foresee, held.
                    try await users.run("COMMIT", logger: logger)
                    try await Self.waitForLockWaiter(on: "FROM conversations", users)
                    // The other node's batch asks for the users now. Had the batch waited for the conversation
                    // with the users held, the two would wait for each other until PostgreSQL's
                    // deadlock_timeout (a second) aborted one.
                    try await other.run(
                        "SELECT id FROM users WHERE id IN (\(a), \(b)) ORDER BY id FOR UPDATE",
                        logger: logger
                    )
                    try await other.run("COMMIT", logger: logger)
                    return (try await batch.value.outcomes, made)
                }
            }
            guard case .sent(let receipt) = outcome.first, outcome.count == 1 else {
                Issue.record("the send was not stored: \(outcome)")
                return
            }
            #expect(receipt.seq == 1 && !receipt.duplicate)
            let stored = try await store.history(for: bob, in: .user("alice"), beforeSeq: 0, limit: 10).messages
            #expect(stored.map(\.id) == ["m1"])
            let log = capture.text
            #expect(log.contains("sqlstate=55P03"), "the batch ran again after a lock it would have waited for")
            #expect(!log.contains("sqlstate=40P01"), "no deadlock")
            let conversation = try await TestDatabase.admin(location) { connection in
                try await connection.value(
                    "SELECT conversation_id FROM messages WHERE client_id = 'm1'",
                    as: Int64.self,
                    logger: logger
                )
            }
            #expect(conversation == made, "the message is in the conversation the other node made")
        }
    }

    @Test("a read mark naming a user with no conversation does not lock that user: held elsewhere, the batch goes on")
    func readMarkLocksNoPeer() async throws {
        try await Self.withStore { location, store, capture in
            let alice = try await store.addUser(name: "alice", password: "x", nowMs: 1).id
            _ = try await store.addUser(name: "bob", password: "x", nowMs: 1)
            let carol = try await store.addUser(name: "carol", password: "x", nowMs: 1).id
            // carol's row held by another node's batch for as long as this batch takes.
            let outcomes = try await Self.withoutWaiting(
                for: "SELECT id FROM users WHERE id = \(carol.rawValue) FOR UPDATE",
                location
            ) {
                try await store.apply(
                    [
                        .markRead(user: alice, conversation: .user("carol"), upToSeq: 1),
                        .send(.init(sender: alice, id: "m1", to: .user("bob"), body: Array("hi".utf8))),
                    ],
                    nowMs: 2
                )
            }.outcomes
            #expect(outcomes.map(refusal) == [.notMember, nil], "\(outcomes)")
            #expect(!capture.text.contains("write retried"), "the batch ran once")
        }
    }

    @Test(
        "an acknowledgement does not lock the conversations it delivers into, nor a send to a direct conversation its peer's row"
    )
    func acksAndSendsLockLess() async throws {
        try await Self.withStore { location, store, capture in
            let alice = try await store.addUser(name: "alice", password: "x", nowMs: 1).id
            let bob = try await store.addUser(name: "bob", password: "x", nowMs: 1).id
            let phone = try await store.login(user: "bob", password: "x", deviceName: "phone", nowMs: 1).device.id
            _ = try await store.apply(
                [.send(.init(sender: alice, id: "m1", to: .user("bob"), body: Array("你好 👋".utf8)))],
                nowMs: 2
            )
            let conversation = try #require(
                try await TestDatabase.admin(location) { connection in
                    try await connection.value(
                        "SELECT conversation_id FROM messages WHERE client_id = 'm1'",
                        as: Int64.self,
                        logger: TestDatabase.logger
                    )
                }
            )
            let aliceBefore = try await store.logCursor(of: alice)
            // The conversation's row held, as another node's batch sending into it holds it: bob's phone
            // acknowledges alice's message all the same, and alice hears it was delivered.
            let acked = try await Self.withoutWaiting(
                for: "SELECT id FROM conversations WHERE id = \(conversation) FOR UPDATE",
                location
            ) {
                try await store.apply(
                    [.ack(user: bob, device: phone, cursor: try await store.logCursor(of: bob))],
                    nowMs: 3
                )
            }
            #expect(acked.outcomes == [.done])
            let heard = try await store.events(for: alice, after: aliceBefore, limit: 10).map(\.kind)
            #expect(heard == [.receipt(conversation: .user("bob"), user: "bob", kind: .delivered, upToSeq: 1)])
            let delivered = try await TestDatabase.admin(location) { connection in
                try await connection.value(
                    "SELECT delivered_seq FROM members WHERE conversation_id = \(conversation) AND user_id = \(bob.rawValue)",
                    as: Int64.self,
                    logger: TestDatabase.logger
                )
            }
            #expect(delivered == 1)
            // bob's row held, as another node's batch of bob's own requests holds it: alice's send into their
            // conversation goes on.
            let sent = try await Self.withoutWaiting(
                for: "SELECT id FROM users WHERE id = \(bob.rawValue) FOR UPDATE",
                location
            ) {
                try await store.apply(
                    [.send(.init(sender: alice, id: "m2", to: .user("bob"), body: Array("שלום".utf8)))],
                    nowMs: 4
                )
            }
            guard case .sent(let receipt) = sent.outcomes.first else {
                Issue.record("not sent: \(sent.outcomes)")
                return
            }
            #expect(receipt.seq == 2)
            #expect(!capture.text.contains("write retried"), "every batch ran once")
        }
    }

    @Test(
        "a request that names, after the plan, a conversation the plan read without its lock runs again from a new plan"
    )
    func unlockedConversationNamedLater() async throws {
        try await Self.withStore { location, store, capture in
            let alice = try await store.addUser(name: "alice", password: "x", nowMs: 1).id
            let bob = try await store.addUser(name: "bob", password: "x", nowMs: 1).id
            let phone = try await store.login(user: "bob", password: "x", deviceName: "phone", nowMs: 1).device.id
            try await store.createGroup(name: "tea", owner: "alice", members: ["bob"], nowMs: 1)
            _ = try await store.apply(
                [.send(.init(sender: alice, id: "m1", to: .group("tea"), body: Array("お茶".utf8)))],
                nowMs: 2
            )
            let logger = TestDatabase.logger
            let outcomes = try await TestDatabase.admin(location) { held in
                try await TestDatabase.admin(location) { other in
                    // bob's row held: the batch plans (bob's acknowledgement delivers into tea, read without its
                    // lock; bob's send names books, which is nothing yet) and waits for it.
                    try await held.run("BEGIN", logger: logger)
                    try await held.run("SELECT id FROM users WHERE id = \(bob.rawValue) FOR UPDATE", logger: logger)
                    let batch = Task {
                        try await store.apply(
                            [
                                .ack(user: bob, device: phone, cursor: try await store.logCursor(of: bob)),
                                .send(.init(sender: bob, id: "b1", to: .group("books"), body: Array("好".utf8))),
                            ],
                            nowMs: 3
                        )
                    }
                    try await Self.waitForLockWaiter(on: "FROM users", other)
                    // Meanwhile another node renames tea to books: the send's name, found after the plan, is the
                    // conversation the plan did not lock.
                    try await other.run("UPDATE conversations SET name = 'books' WHERE name = 'tea'", logger: logger)
                    try await held.run("COMMIT", logger: logger)
                    return try await batch.value.outcomes
                }
            }
            #expect(outcomes.count == 2 && outcomes.first == .done, "\(outcomes)")
            guard outcomes.count == 2, case .sent(let receipt) = outcomes[1] else {
                Issue.record("not sent: \(outcomes)")
                return
            }
            #expect(receipt.seq == 2)
            #expect(capture.text.contains("write retried"), "the batch ran again from a new plan")
            let stored = try await store.history(for: alice, in: .group("books"), beforeSeq: 0, limit: 10).messages
            #expect(stored.sorted { $0.seq < $1.seq }.map(\.id) == ["m1", "b1"])
        }
    }

    /// Runs `body` while another connection holds the rows `lock` locks (in a transaction of its own), and
    /// records an issue if `body` waited for a lock meanwhile. The rows are let go once `body` has ended or is
    /// seen waiting, so a regression fails rather than hangs.
    static func withoutWaiting<T: Sendable>(
        for lock: String,
        _ location: PostgresLocation,
        _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let logger = TestDatabase.logger
        return try await TestDatabase.admin(location) { other in
            try await other.run("BEGIN", logger: logger)
            try await other.run(PostgresQuery(unsafeSQL: lock), logger: logger)
            let finished = Finished()
            let task = Task {
                defer { finished.value.store(true, ordering: .releasing) }
                return try await body()
            }
            var waited = false
            try await waitUntil("the batch ends or waits") {
                try await other.run("SELECT pg_stat_clear_snapshot()", logger: logger)
                waited =
                    try await other.value(
                        """
                        SELECT count(*)::bigint FROM pg_stat_activity
                        WHERE datname = current_database() AND wait_event_type = 'Lock'
                        """,
                        as: Int64.self,
                        logger: logger
                    ) != 0
                return waited || finished.value.load(ordering: .acquiring)
            }
            #expect(!waited, "the batch waited for the rows of: \(lock)")
            try await other.run("COMMIT", logger: logger)
            return try await task.value
        }
    }

    /// Runs `body` with a store on a new database whose log is captured at the debug level.
    @Test("removing a user with no group locks its row before its devices, in the order every write takes them")
    func removalLocksUserFirst() async throws {
        try await Self.withStore { location, store, _ in
            let alice = try await store.addUser(name: "alice", password: "x", nowMs: 1).id.rawValue
            _ = try await store.login(user: "alice", password: "x", deviceName: "phone", nowMs: 1)
            let logger = TestDatabase.logger
            try await TestDatabase.admin(location) { devices in
                try await TestDatabase.admin(location) { other in
                    // The device's row held, as a batch acknowledging for it holds it.
                    try await devices.run("BEGIN", logger: logger)
                    try await devices.run(
                        "SELECT id FROM devices WHERE user_id = \(alice) FOR UPDATE",
                        logger: logger
                    )
                    let removal = Task { try await store.removeUser(named: "alice", nowMs: 2) }
                    try await Self.waitForLockWaiter(on: "FROM devices", other)
                    // The removal waits for the device with the user's row held: a batch holding the device cannot
                    // be waiting for that row too (users come before devices), and none can take it meanwhile.
                    await #expect(throws: PSQLError.self) {
                        try await other.run(
                            "SELECT id FROM users WHERE id = \(alice) FOR UPDATE NOWAIT",
                            logger: logger
                        )
                    }
                    try await devices.run("COMMIT", logger: logger)
                    try await removal.value
                }
            }
            #expect(try await store.user(named: "alice")?.removedMs == 2)
        }
    }

    static func withStore(
        _ body: @Sendable (PostgresLocation, PostgresStore, LogCapture) async throws -> Void
    ) async throws {
        try await TestDatabase.with { location in
            let capture = LogCapture()
            var configuration = PostgresStore.Configuration()
            configuration.passwordHasher = Self.cheapHasher
            configuration.maxConnections = 4
            let store = PostgresStore(
                location: location,
                configuration: configuration,
                logger: capture.logger(label: "courier.store", level: .debug)
            )
            try await store.migrate()
            try await store.withRunning { try await body(location, store, capture) }
        }
    }
}

/// Whether a task has ended.
final class Finished: Sendable {
    let value = Atomic<Bool>(false)
}

func refusal(_ outcome: WriteOutcome) -> CourierStoreError.Code? {
    if case .refused(let error) = outcome { return error.code }
    return nil
}
