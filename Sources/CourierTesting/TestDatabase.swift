public import CourierStorePostgres
import Foundation
public import Logging
public import PostgresNIO

/// A database of its own for a test, in the private PostgreSQL cluster that `scripts/test` starts (in a temporary
/// folder, on a free port, as an unprivileged user) and names in `COURIER_TEST_POSTGRES`; dropped afterwards.
public enum TestDatabase {
    public struct NoCluster: Error, CustomStringConvertible {
        public var description: String {
            "COURIER_TEST_POSTGRES is not set: run scripts/test, which starts a private PostgreSQL cluster for these "
                + "tests (or set it to postgres://USER:PASSWORD@127.0.0.1:PORT/postgres of a cluster of your own)"
        }
    }

    public static let logger = Logger(label: "courier.test-postgres")

    /// The cluster's maintenance database.
    public static func cluster() throws -> PostgresLocation {
        guard let url = ProcessInfo.processInfo.environment["COURIER_TEST_POSTGRES"] else { throw NoCluster() }
        return try PostgresLocation(url: url)
    }

    /// Runs `body` with a new, empty database, and drops it afterwards (its connections too).
    public static func with(_ body: @Sendable (PostgresLocation) async throws -> Void) async throws {
        let cluster = try Self.cluster()
        let name = "courier_test_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        var location = cluster
        location.database = name
        try await Self.admin(cluster) { connection in
            try await connection.run("CREATE DATABASE \(unescaped: name)", logger: Self.logger)
        }
        let result = await Result { try await body(location) }
        let dropped = await Result {
            try await Self.admin(cluster) { connection in
                try await connection.run("DROP DATABASE \(unescaped: name) WITH (FORCE)", logger: Self.logger)
            }
        }
        // The test's own failure first: a failed drop only when the test passed.
        try result.get()
        try dropped.get()
    }

    /// Runs `body` with a connection of its own to a database, for statements the store does not make.
    public static func admin(
        _ location: PostgresLocation,
        _ body: (PostgresConnection) async throws -> Void
    ) async throws {
        let connection = try await PostgresConnection.connect(
            configuration: location.connectionConfiguration,
            id: 1,
            logger: Self.logger
        )
        let result = await Result { try await body(connection) }
        try? await connection.close()
        try result.get()
    }
}

extension Result where Failure == any Error {
    public init(catching body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}
