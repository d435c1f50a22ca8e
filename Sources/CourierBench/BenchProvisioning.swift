public import CourierStore
import CourierStorePostgres
import CourierStoreSQLite
import Crypto
public import Foundation
public import Logging

/// One bench connection's user: its device token and where it sends.
public struct BenchUser: Sendable, Hashable {
    public enum Target: Sendable, Hashable {
        case user(String)
        case group(String)
        case none
    }

    public var name: String
    public var token: String
    public var target: Target
}

/// Makes the users, groups and device tokens of a run in a data folder (before the server starts on it, or while it
/// runs, as the admin commands do), so the connections log in with tokens rather than paying a password hash each.
public enum BenchProvisioning {
    /// A cheap password hash for the bench users (their passwords are never used after provisioning).
    static let hasher = PasswordHasher(logN: 1, blockSize: 1, parallelism: 1, saltBytes: 16, keyBytes: 16)

    public static func provision(
        _ configuration: BenchConfiguration,
        dataFolder: URL,
        logger: Logger
    ) async throws -> [BenchUser] {
        var storeConfiguration = SQLiteStore.Configuration()
        storeConfiguration.passwordHasher = Self.hasher
        let store = try SQLiteStore(folder: dataFolder, configuration: storeConfiguration, logger: logger)
        defer { try? store.close() }
        return try await Self.provision(configuration, store: store)
    }

    /// Makes the run's users in the PostgreSQL database at `database` (a URL), migrating it first.
    ///
    /// - Throws: ``BenchError`` for a URL that is not one.
    static func provision(
        _ configuration: BenchConfiguration,
        database: String,
        logger: Logger,
        say: (String) -> Void
    ) async throws -> [BenchUser] {
        let location: PostgresLocation
        do { location = try PostgresLocation(url: database) } catch { throw BenchError("--database: \(error)") }
        var storeConfiguration = PostgresStore.Configuration()
        storeConfiguration.passwordHasher = Self.hasher
        storeConfiguration.maxConnections = 4
        storeConfiguration.node = "bench-provisioning"
        let store = PostgresStore(location: location, configuration: storeConfiguration, logger: logger)
        try await store.migrate()
        say("provisioning \(configuration.connections) users in \(location)")
        return try await store.withRunning { try await Self.provision(configuration, store: store) }
    }

    /// The partner of user `index` of `count` in the pairs pattern: `index ^ 1` (`span` 1: on different nodes when
    /// there are several, user `i` being on node `i % nodes`); or, with `span` the number of nodes, the user `span`
    /// places away in its block of `2 × span`, which is on the same node. Nil when that user does not exist.
    public static func partner(of index: Int, count: Int, span: Int) -> Int? {
        let block = index / (2 * span) * (2 * span)
        let partner = block + (index - block + span) % (2 * span)
        return partner < count ? partner : nil
    }

    /// Makes the users, groups and tokens of a run in a store (a PostgreSQL database the nodes share).
    public static func provision(
        _ configuration: BenchConfiguration,
        store: any CourierDatabase
    ) async throws
        -> [BenchUser]
    {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        // A prefix of its own per run, so runs can share a data folder (a server started apart from the bench).
        let run = UUID().uuidString.prefix(6).lowercased()
        let names = (0..<configuration.connections).map { "bench-\(run)-\($0)" }
        for name in names {
            _ = try await store.addUser(name: name, password: name, nowMs: now)
        }
        var targets: [BenchUser.Target] = Array(repeating: .none, count: names.count)
        switch configuration.pattern {
        case .pairs:
            let span = configuration.partnersOnOneNode ? configuration.nodes : 1
            for index in names.indices {
                if let partner = Self.partner(of: index, count: names.count, span: span) {
                    targets[index] = .user(names[partner])
                }
            }
        case .groups(let size):
            for start in stride(from: 0, to: names.count, by: size) {
                let members = Array(names[start..<min(names.count, start + size)])
                let group = "bench-\(run)-g\(start / size)"
                _ = try await store.createGroup(name: group, owner: members[0], members: members, nowMs: now)
                for index in start..<(start + members.count) { targets[index] = .group(group) }
            }
        case .idle:
            break
        }
        var users: [BenchUser] = []
        let pushKey = Array(P256.KeyAgreement.PrivateKey().publicKey.x963Representation)
        for (index, name) in names.enumerated() {
            let session = try await store.login(user: name, password: name, deviceName: "bench", nowMs: now)
            if configuration.pushSubscribers {
                try await store.addPushSubscription(
                    endpoint: "https://push.invalid/bench/\(name)",
                    p256dh: pushKey,
                    auth: (0..<16).map { _ in UInt8.random(in: 0...255) },
                    for: session,
                    nowMs: now
                )
            }
            users.append(BenchUser(name: name, token: session.token ?? "", target: targets[index]))
        }
        return users
    }
}
