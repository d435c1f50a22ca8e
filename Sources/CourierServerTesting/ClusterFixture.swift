import CourierPostgresTesting
public import CourierServer
public import CourierStore
public import CourierStorePostgres
import CourierTesting
public import Foundation
public import Logging
import ServiceLifecycle

/// Several real servers in the test's process, as nodes on one new PostgreSQL database (in the private cluster
/// `scripts/test` starts), each with its own data folder, ports chosen by the system, cheap password hashes; all
/// stopped gracefully when the test's body returns, and the database dropped.
public struct ClusterFixture: Sendable {
    /// One node: its server, ports and data folder.
    public struct Node: Sendable {
        public let server: CourierServer
        public let ports: CourierServer.Ports
        public let folder: URL
        public let feed: PostgresFeed
        public var store: any CourierDatabase { self.server.store }
    }

    public let nodes: [Node]
    public let location: PostgresLocation

    /// The first node's store: the database all share.
    public var store: any CourierDatabase { self.nodes[0].store }

    /// Runs `body` against `count` nodes on a new database. `route` says where each node (by index) reaches the
    /// database (through a ``TCPRelay`` a test can cut, say); `store` sets the nodes' store settings.
    public static func with<T: Sendable>(
        nodes count: Int,
        fanout: PostgresFeed.Mode = .notify,
        feed: PostgresFeed.Configuration = .init(),
        logger: Logger? = nil,
        route: @Sendable (Int, PostgresLocation) -> PostgresLocation = { $1 },
        store storeSettings: (inout PostgresStore.Configuration) -> Void = { _ in },
        _ body: @Sendable (ClusterFixture) async throws -> T,
        configure: (inout ServerConfiguration) -> Void = { _ in }
    ) async throws -> T {
        let logger = logger ?? ServerFixture.testLogger(label: "courier.test-cluster")
        return try await TestDatabase.with { location in
            var folders: [TemporaryDirectory] = []
            defer { for folder in folders { folder.remove() } }
            var nodes: [(server: CourierServer, feed: PostgresFeed, folder: URL, group: ServiceGroup)] = []
            for index in 0..<count {
                let folder = try TemporaryDirectory(prefix: "courier-node\(index)")
                folders.append(folder)
                var configuration = ServerConfiguration()
                configuration.host = "127.0.0.1"
                configuration.nativePort = 0
                configuration.compatPort = 0
                configuration.httpPort = 0
                configuration.dataFolder = folder.url
                configuration.store.passwordHasher = ServerFixture.cheapHasher
                // A device that only reads says nothing until the test's end, a login can wait behind other tests' work, and a
                // reader a test holds back can stay full while the test does more: on a loaded machine each can pass a minute.
                // The timers are far away here; the tests of each timer set their own.
                configuration.limits.idleTimeout = .seconds(600)
                configuration.limits.authTimeout = .seconds(600)
                configuration.limits.slowConsumerTimeout = .seconds(3600)
                configure(&configuration)
                var storeConfiguration = PostgresStore.Configuration(serving: configuration.store, node: "node\(index)")
                storeConfiguration.maxConnections = 8
                storeSettings(&storeConfiguration)
                let store = PostgresStore(
                    location: route(index, location),
                    configuration: storeConfiguration,
                    logger: logger
                )
                try await store.migrate()
                var feedConfiguration = feed
                feedConfiguration.mode = fanout
                let feed = PostgresFeed(store: store, configuration: feedConfiguration, logger: logger)
                let server = try CourierServer(configuration: configuration, store: store, feed: feed, logger: logger)
                let group = ServiceGroup(services: [store, feed, server], logger: logger)
                nodes.append((server, feed, folder.url, group))
            }
            let groups = nodes.map(\.group)
            return try await withThrowingTaskGroup(of: T?.self, returning: T.self) { tasks in
                for group in groups {
                    tasks.addTask {
                        try await group.run()
                        return nil
                    }
                }
                var running: [Node] = []
                for node in nodes {
                    guard let ports = await node.server.ports() else {
                        for group in groups { await group.triggerGracefulShutdown() }
                        try await tasks.waitForAll()
                        throw CourierStoreError(.storageFailed, "a test node stopped before it listened")
                    }
                    running.append(Node(server: node.server, ports: ports, folder: node.folder, feed: node.feed))
                }
                let fixture = ClusterFixture(nodes: running, location: location)
                do {
                    let result = try await body(fixture)
                    for group in groups { await group.triggerGracefulShutdown() }
                    try await tasks.waitForAll()
                    return result
                } catch {
                    for group in groups { await group.triggerGracefulShutdown() }
                    try? await tasks.waitForAll()
                    throw error
                }
            }
        }
    }

    /// The `/health` of a node, read with curl.
    public func health(of node: Int) async throws -> String {
        try await ExternalProgram.output(
            "/usr/bin/curl",
            ["--silent", "--show-error", "--max-time", "60", "http://127.0.0.1:\(self.nodes[node].ports.http)/health"]
        )
    }

    /// A figure of a node's `/metrics`, read with curl: the value on the line that starts with `name` and a space (0
    /// when there is none).
    public func metric(_ name: String, of node: Int) async throws -> Int {
        let metrics = try await ExternalProgram.output(
            "/usr/bin/curl",
            ["--silent", "--show-error", "--max-time", "60", "http://127.0.0.1:\(self.nodes[node].ports.http)/metrics"]
        )
        let line = metrics.split(separator: "\n").first { $0.hasPrefix(name + " ") }
        return line.flatMap { Double($0.split(separator: " ").last ?? "") }.map { Int($0) } ?? 0
    }

    /// Creates a user with the password "pw-" + name.
    @discardableResult
    public func user(_ name: String) async throws -> User {
        try await self.store.addUser(name: name, password: "pw-" + name, nowMs: 0)
    }
}
