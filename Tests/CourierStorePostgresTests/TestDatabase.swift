import Foundation
import Logging
import PostgresNIO

@testable import CourierStorePostgres

/// A database of its own for a test, in the private PostgreSQL cluster that `scripts/test` starts (in a temporary
/// folder, on a free port, as an unprivileged user) and names in `COURIER_TEST_POSTGRES`; dropped afterwards.
enum TestDatabase {
    struct NoCluster: Error, CustomStringConvertible {
        var description: String {
            "COURIER_TEST_POSTGRES is not set: run scripts/test, which starts a private PostgreSQL cluster for these "
                + "tests (or set it to postgres://USER:PASSWORD@127.0.0.1:PORT/postgres of a cluster of your own)"
        }
    }

    static let logger = Logger(label: "courier.test-postgres")

    /// The cluster's maintenance database.
    static func cluster() throws -> PostgresLocation {
        guard let url = ProcessInfo.processInfo.environment["COURIER_TEST_POSTGRES"] else { throw NoCluster() }
        return try PostgresLocation(url: url)
    }

    /// Runs `body` with a new, empty database, and drops it afterwards (its connections too).
    static func with(_ body: @Sendable (PostgresLocation) async throws -> Void) async throws {
        let cluster = try Self.cluster()
        let name = "courier_test_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        var location = cluster
        location.database = name
        try await Self.admin(cluster) { client in
            try await client.query("CREATE DATABASE \(unescaped: name)", logger: Self.logger)
        }
        let result = await Result { try await body(location) }
        let dropped = await Result {
            try await Self.admin(cluster) { client in
                try await client.query("DROP DATABASE \(unescaped: name) WITH (FORCE)", logger: Self.logger)
            }
        }
        // The test's own failure first: a failed drop only when the test passed.
        try result.get()
        try dropped.get()
    }

    /// Runs `body` with a client of a database, for statements the store does not make.
    static func admin(
        _ location: PostgresLocation,
        _ body: @Sendable (PostgresClient) async throws -> Void
    ) async throws {
        let client = PostgresClient(configuration: location.clientConfiguration, backgroundLogger: Self.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            try await body(client)
        }
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}
