public import CourierServer
public import CourierStore
public import CourierStoreSQLite
import CourierTesting
public import Foundation
public import Logging
import ServiceLifecycle

/// A real server for a test: its own data folder, ports chosen by the system, cheap password hashes, stopped
/// gracefully when the test's body returns.
public struct ServerFixture: Sendable {
    /// Password hashes cheap enough for tests that log in many times; the hashing tests use the standard cost.
    public static let cheapHasher = PasswordHasher(logN: 4, blockSize: 8, parallelism: 1, saltBytes: 16, keyBytes: 32)

    public let server: CourierServer
    public let ports: CourierServer.Ports
    public let folder: URL

    public var store: any CourierDatabase { self.server.store }

    /// Runs `body` against a running server on a fresh data folder (or `folder`, to restart on the same data), its
    /// store on SQLite (`courier serve`'s settings, then `sqlite`'s).
    /// The server logs to `logger`, else (at the level `COURIER_TEST_LOG` names, default critical) to the console.
    public static func with<T: Sendable>(
        folder: URL? = nil,
        logger: Logger? = nil,
        _ body: @Sendable (ServerFixture) async throws -> T,
        configure: (inout ServerConfiguration) -> Void = { _ in },
        sqlite: (inout SQLiteStore.Configuration) -> Void = { _ in }
    ) async throws -> T {
        let temporary = folder == nil ? try TemporaryDirectory(prefix: "courier-server") : nil
        defer { temporary?.remove() }
        var configuration = ServerConfiguration()
        configuration.host = "127.0.0.1"
        configuration.nativePort = 0
        configuration.compatPort = 0
        configuration.httpPort = 0
        configuration.dataFolder = folder ?? temporary!.url
        configuration.store.passwordHasher = Self.cheapHasher
        // A device that only reads says nothing until the test's end, a login can wait behind other tests' work, and a
        // reader a test holds back can stay full while the test does more: on a loaded machine each can pass a minute.
        // The timers are far away here; the tests of each timer set their own.
        configuration.limits.idleTimeout = .seconds(600)
        configuration.limits.authTimeout = .seconds(600)
        configuration.limits.slowConsumerTimeout = .seconds(3600)
        configure(&configuration)
        let logger = logger ?? Self.testLogger(label: "courier.test-server")
        var storeConfiguration = SQLiteStore.Configuration(serving: configuration.store)
        sqlite(&storeConfiguration)
        let server = try CourierServer(configuration: configuration, logger: logger) { [storeConfiguration] in
            try SQLiteStore(folder: $0, configuration: storeConfiguration, logger: logger)
        }
        let group = ServiceGroup(services: [server], logger: logger)
        return try await withThrowingTaskGroup(of: T?.self) { tasks in
            tasks.addTask {
                try await group.run()
                return nil
            }
            guard let ports = await server.ports() else {
                // The server stopped before it listened: its error ends the group.
                try await tasks.waitForAll()
                throw CourierStoreError(.storageFailed, "the test server stopped before it listened")
            }
            let fixture = ServerFixture(server: server, ports: ports, folder: configuration.dataFolder)
            do {
                let result = try await body(fixture)
                await group.triggerGracefulShutdown()
                try await tasks.waitForAll()
                return result
            } catch {
                await group.triggerGracefulShutdown()
                try? await tasks.waitForAll()
                throw error
            }
        }
    }

    /// A logger for test servers: to the console, at the level `COURIER_TEST_LOG` names (default critical).
    public static func testLogger(label: String) -> Logger {
        var logger = Logger(label: label)
        logger.logLevel =
            ProcessInfo.processInfo.environment["COURIER_TEST_LOG"].flatMap { Logger.Level(rawValue: $0) } ?? .critical
        return logger
    }

    /// Creates a user with the password "pw-" + name.
    @discardableResult
    public func user(_ name: String) async throws -> User {
        try await self.store.addUser(name: name, password: "pw-" + name, nowMs: 0)
    }

    /// Makes two users contacts (each writes to the other in their direct conversation), as a user must be before
    /// another puts it in a group. Devices that log in afterwards do not receive these messages.
    public func contacts(_ first: String, _ second: String) async throws {
        guard let a = try await self.store.user(named: first), let b = try await self.store.user(named: second) else {
            throw CourierStoreError(.unknownUser, "no \(first) or \(second)")
        }
        _ = try await self.store.apply(
            [
                .send(.init(sender: a.id, id: "", to: .user(second), body: [])),
                .send(.init(sender: b.id, id: "", to: .user(first), body: [])),
            ],
            nowMs: 0
        )
    }
}

extension ServerFixture {
    /// A counter or gauge from the server's `/metrics`, read with curl (0 when the series has no sample yet).
    public func metric(_ name: String) async throws -> Int {
        let metrics = try await ExternalProgram.output(
            "/usr/bin/curl",
            ["--silent", "--show-error", "--max-time", "60", "http://127.0.0.1:\(self.ports.http)/metrics"]
        )
        let line = metrics.split(separator: "\n").first { $0.hasPrefix(name + " ") }
        // Gauges print as decimals ("2.0"), counters as integers.
        return line.flatMap { Double($0.split(separator: " ").last ?? "") }.map { Int($0) } ?? 0
    }
}
