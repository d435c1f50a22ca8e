import CourierPostgresTesting
import CourierStore
import CourierTesting
import Foundation
import Testing

@testable import CourierStorePostgres

@Suite(
    "PostgreSQL: the limits that hold across nodes (password attempts, connections per user)",
    .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
)
struct AdmissionTests {
    static let limits = LoginLimits(
        perUser: 5,
        perAddress: 8,
        window: .seconds(60),
        inFlightLifetime: .seconds(30),
        inFlightRetry: .seconds(1)
    )
    static let t0: Int64 = 1_800_000_000_000

    @Test(
        "a user name's failures count on every node; the limit frees as the window passes, and a success counts nothing"
    )
    func attemptsAcrossNodes() async throws {
        try await Self.withNodes(2) { nodes in
            // Five failures for alice, from two nodes and two addresses: a sixth from either is refused, told to
            // wait until the oldest leaves the window.
            for index in 0..<5 {
                let node = nodes[index % 2]
                let attempt = try #require(
                    try await node.admitPasswordAttempt(
                        user: "alice",
                        address: "10.0.0.\(index % 2)",
                        limits: Self.limits,
                        nowMs: Self.t0 + Int64(index) * 1000
                    ).attempt
                )
                try await node.finishPasswordAttempt(attempt, failed: true, nowMs: Self.t0 + Int64(index) * 1000)
            }
            for node in nodes {
                let refused = try await node.admitPasswordAttempt(
                    user: "alice",
                    address: "10.0.0.9",
                    limits: Self.limits,
                    nowMs: Self.t0 + 10_000
                )
                #expect(refused == .throttled(retryAfter: .seconds(50)))
            }
            // Another name is not affected.
            let bob = try await nodes[1].admitPasswordAttempt(
                user: "bob",
                address: "10.0.0.9",
                limits: Self.limits,
                nowMs: Self.t0 + 10_000
            )
            #expect(bob.attempt != nil)
            // Once the first failure has left the window, one more fits; its success counts nothing after it.
            let later = Self.t0 + 60_001
            let again = try #require(
                try await nodes[0].admitPasswordAttempt(
                    user: "alice",
                    address: "10.0.0.9",
                    limits: Self.limits,
                    nowMs: later
                )
                .attempt
            )
            #expect(
                try await nodes[1].admitPasswordAttempt(
                    user: "alice",
                    address: "10.0.0.9",
                    limits: Self.limits,
                    nowMs: later
                )
                    == .throttled(retryAfter: .seconds(1)),
                "the one in flight fills the place"
            )
            try await nodes[0].finishPasswordAttempt(again, failed: false, nowMs: later)
            #expect(
                try await nodes[1].admitPasswordAttempt(
                    user: "alice",
                    address: "10.0.0.9",
                    limits: Self.limits,
                    nowMs: later
                )
                .attempt != nil
            )
        }
    }

    @Test("a burst of attempts for one user over three nodes at once: only the limit is admitted")
    func burstAcrossNodes() async throws {
        try await Self.withNodes(3) { nodes in
            let admitted = try await withThrowingTaskGroup(of: Bool.self) { group in
                for index in 0..<30 {
                    let node = nodes[index % 3]
                    group.addTask {
                        try await node.admitPasswordAttempt(
                            user: "Alice",
                            address: "10.0.\(index).1",
                            limits: Self.limits,
                            nowMs: Self.t0
                        ).attempt != nil
                    }
                }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            #expect(admitted == Self.limits.perUser)
            // An address's limit counts every name tried from it, on every node.
            var fromOne = 0
            for index in 0..<12 {
                let outcome = try await nodes[index % 3].admitPasswordAttempt(
                    user: "name\(index)",
                    address: "10.9.9.9",
                    limits: Self.limits,
                    nowMs: Self.t0
                )
                if let attempt = outcome.attempt {
                    fromOne += 1
                    try await nodes[0].finishPasswordAttempt(attempt, failed: true, nowMs: Self.t0)
                }
            }
            #expect(fromOne == Self.limits.perAddress)
        }
    }

    @Test("sign-ups count apart from password attempts: per address and in all, on two nodes together")
    func signUpsAcrossNodes() async throws {
        try await Self.withNodes(2) { nodes in
            var limits = Self.limits
            limits.perAddress = 2
            limits.perUser = 3
            // The address's failed password attempts do not hold its sign-ups back.
            for index in 0..<Self.limits.perAddress {
                let attempt = try await nodes[0].admitPasswordAttempt(
                    user: "x\(index)",
                    address: "a",
                    limits: Self.limits,
                    nowMs: Self.t0
                )
                try await nodes[0].finishPasswordAttempt(try #require(attempt.attempt), failed: true, nowMs: Self.t0)
            }
            var admitted: [String] = []
            for (index, address) in ["a", "a", "a", "b", "c", "d"].enumerated() {
                let outcome = try await nodes[index % 2].admitSignUp(address: address, limits: limits, nowMs: Self.t0)
                guard let attempt = outcome.attempt else { continue }
                admitted.append(address)
                try await nodes[index % 2].finishPasswordAttempt(attempt, failed: true, nowMs: Self.t0)
            }
            // Two from "a" (its limit), then one from "b": three in all, whichever node.
            #expect(admitted == ["a", "a", "b"])
        }
    }

    @Test("an attempt whose node never says how it ended stops counting after its lifetime; prune drops old rows")
    func abandonedAttempts() async throws {
        try await Self.withNodes(1) { nodes in
            let node = nodes[0]
            for _ in 0..<5 {
                #expect(
                    try await node.admitPasswordAttempt(
                        user: "carol",
                        address: "a",
                        limits: Self.limits,
                        nowMs: Self.t0
                    )
                    .attempt != nil
                )
            }
            #expect(
                try await node.admitPasswordAttempt(user: "carol", address: "a", limits: Self.limits, nowMs: Self.t0)
                    .attempt == nil
            )
            let after = Self.t0 + Self.limits.inFlightLifetime.wholeMilliseconds + 1
            #expect(
                try await node.admitPasswordAttempt(user: "carol", address: "b", limits: Self.limits, nowMs: after)
                    .attempt != nil
            )
            // A sign-up from before, on keys of its own with a longer window.
            let signUp = try await node.admitSignUp(address: "a", limits: Self.limits, nowMs: after - 1)
            try await node.finishPasswordAttempt(try #require(signUp.attempt), failed: true, nowMs: after - 1)
            func rows() async throws -> Int64? {
                try await node.read(doing: "count") { connection in
                    try await connection.value(
                        "SELECT count(*) FROM login_attempts",
                        as: Int64.self,
                        logger: node.logger
                    )
                }
            }
            try await node.prune(
                attemptsBeforeMs: after,
                signUpsBeforeMs: Self.t0,
                yieldedBeforeMs: after,
                nowMs: after
            )
            #expect(try await rows() == 4, "the last attempt's two keys, and the sign-up's two")
            try await node.prune(attemptsBeforeMs: after, signUpsBeforeMs: after, yieldedBeforeMs: after, nowMs: after)
            #expect(try await rows() == 2, "the last attempt's two keys")
        }
    }

    @Test(
        "connections per user over two nodes: a token past the limit is refused, a password login makes the oldest yield, a dead node's stop counting"
    )
    func connectionsAcrossNodes() async throws {
        try await Self.withNodes(2) { nodes in
            let (a, b) = (nodes[0], nodes[1])
            let alice = try await a.addUser(name: "alice", password: "x", nowMs: 1).id
            for node in nodes { try await node.heartbeat(nowMs: Self.t0, aliveUntilMs: Self.t0 + 20_000) }
            let first = try #require(
                try await a.openConnection(user: alice, maxPerUser: 2, yielding: false, nowMs: Self.t0).lease
            )
            let second = try #require(
                try await b.openConnection(user: alice, maxPerUser: 2, yielding: false, nowMs: Self.t0).lease
            )
            #expect(try await a.openConnection(user: alice, maxPerUser: 2, yielding: false, nowMs: Self.t0) == .full)
            // A password login on b: a's connection, the oldest, yields; a learns it, b has nothing to close.
            let third = try await b.openConnection(user: alice, maxPerUser: 2, yielding: true, nowMs: Self.t0)
            #expect(third.yielded == [first])
            #expect(try await b.takeYieldedConnections() == [])
            #expect(try await a.takeYieldedConnections() == [first])
            #expect(try await a.takeYieldedConnections() == [])
            // A closed connection frees its place.
            try await b.closeConnections([second])
            let fourth = try #require(
                try await a.openConnection(user: alice, maxPerUser: 2, yielding: false, nowMs: Self.t0).lease
            )
            #expect(try await a.openConnection(user: alice, maxPerUser: 2, yielding: false, nowMs: Self.t0) == .full)
            // b stops saying it is alive: once its last word has run out, its connection no longer counts.
            let later = Self.t0 + 20_001
            try await a.heartbeat(nowMs: later, aliveUntilMs: later + 20_000)
            #expect(try await a.openConnection(user: alice, maxPerUser: 2, yielding: false, nowMs: later).lease != nil)
            // A node that starts again forgets what it counted before.
            try await a.forgetNode()
            try await a.heartbeat(nowMs: later, aliveUntilMs: later + 20_000)
            #expect(try await a.openConnection(user: alice, maxPerUser: 2, yielding: false, nowMs: later).lease != nil)
            _ = fourth
        }
    }

    /// Runs `body` with `count` stores on one new database, as nodes named node0, node1, ….
    static func withNodes(_ count: Int, _ body: @Sendable ([PostgresStore]) async throws -> Void) async throws {
        try await TestDatabase.with { location in
            var stores: [PostgresStore] = []
            for index in 0..<count {
                var configuration = PostgresStore.Configuration()
                configuration.passwordHasher = LockOrderTests.cheapHasher
                configuration.maxConnections = 12
                configuration.node = "node\(index)"
                let store = PostgresStore(location: location, configuration: configuration, logger: TestDatabase.logger)
                try await store.migrate()
                stores.append(store)
            }
            let all = stores
            try await Self.running(all[...]) { try await body(all) }
        }
    }

    private static func running(
        _ stores: ArraySlice<PostgresStore>,
        _ body: @Sendable () async throws -> Void
    ) async throws {
        guard let first = stores.first else { return try await body() }
        try await first.withRunning { try await Self.running(stores.dropFirst(), body) }
    }
}

extension PasswordAdmission {
    var attempt: PasswordAttempt? {
        if case .admitted(let attempt) = self { attempt } else { nil }
    }
}

extension ConnectionAdmission {
    var lease: Int64? {
        if case .opened(let lease, _) = self { lease } else { nil }
    }

    var yielded: [Int64]? {
        if case .opened(_, let yielded) = self { yielded } else { nil }
    }
}
