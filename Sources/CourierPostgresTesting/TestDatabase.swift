public import CourierStorePostgres
import CourierTesting
import Foundation
public import Logging
public import PostgresNIO

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

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

    /// Whether this run has the PostgreSQL tests: a cluster is named (`COURIER_TEST_POSTGRES`), or one must be
    /// (`COURIER_TEST_POSTGRES_REQUIRED=1`, as `scripts/test` sets: a missing cluster then fails those tests rather
    /// than skipping them). A plain `swift test` skips them.
    public static var isEnabled: Bool {
        let environment = ProcessInfo.processInfo.environment
        return environment["COURIER_TEST_POSTGRES"] != nil || environment["COURIER_TEST_POSTGRES_REQUIRED"] == "1"
    }

    /// What a skipped PostgreSQL test says.
    public static let skipReason =
        "PostgreSQL tests skipped: COURIER_TEST_POSTGRES is not set (scripts/test starts a private cluster and runs them)"

    /// The cluster's maintenance database.
    public static func cluster() throws -> PostgresLocation {
        guard let url = ProcessInfo.processInfo.environment["COURIER_TEST_POSTGRES"] else { throw NoCluster() }
        return try PostgresLocation(url: url)
    }

    /// How many test databases exist at once, all tests together (`COURIER_TEST_POSTGRES_DATABASES`, default 8): a
    /// test past it waits for one to be dropped. Made all at once, dozens of databases (each a copy of the template
    /// written through the log, then its migrations, each commit flushed) kept the one private cluster on two cores
    /// from answering any of them within the stores' 5 s.
    static let slots = DatabaseSlots(
        limit: ProcessInfo.processInfo.environment["COURIER_TEST_POSTGRES_DATABASES"].flatMap(Int.init) ?? 8
    )

    /// Runs `body` with a new, empty database, and drops it afterwards (its connections too).
    @discardableResult
    public static func with<T: Sendable>(_ body: (PostgresLocation) async throws -> T) async throws -> T {
        await Self.slots.take()
        defer { Task { await Self.slots.give() } }
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
        let value = try result.get()
        try dropped.get()
        return value
    }

    /// A location as a `postgres://` URL, password included: for a `courier` process's `COURIER_DATABASE` (an
    /// environment variable, not an argument that `ps` would show).
    public static func url(of location: PostgresLocation) -> String {
        let allowed = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))
        let user = location.user.addingPercentEncoding(withAllowedCharacters: allowed) ?? location.user
        let password = location.password.map { ":" + ($0.addingPercentEncoding(withAllowedCharacters: allowed) ?? $0) }
        return "postgres://\(user)\(password ?? "")@\(location.host):\(location.port)/\(location.database)"
    }

    /// Restarts the private cluster (`pg_ctl restart`, `fast`: every connection is ended, transactions in flight
    /// roll back), for the tests that run alone and check that nothing acknowledged is lost across it.
    /// `scripts/test` names the cluster's data folder in `COURIER_TEST_POSTGRES_DATA`, its programs' folder in
    /// `COURIER_TEST_POSTGRES_BIN`, and the user it runs as in `COURIER_TEST_POSTGRES_USER` (when the tests run as
    /// root), whose parent folder holds its log, `server.log`; it waits until the server accepts connections again.
    public static func restartCluster() async throws {
        let environment = ProcessInfo.processInfo.environment
        guard let data = environment["COURIER_TEST_POSTGRES_DATA"], let bin = environment["COURIER_TEST_POSTGRES_BIN"]
        else {
            throw ExternalProgram.Failure(
                description: "COURIER_TEST_POSTGRES_DATA and COURIER_TEST_POSTGRES_BIN are not set: run scripts/test"
            )
        }
        // Its log goes on into the cluster's file (without -l the server would write to, and hold open, this
        // process's pipe, and the run would never end).
        let log = URL(fileURLWithPath: data).deletingLastPathComponent().appendingPathComponent("server.log").path
        let pgctl = [bin + "/pg_ctl", "-D", data, "-l", log, "-m", "fast", "-w", "restart"]
        let command =
            environment["COURIER_TEST_POSTGRES_USER"].map { ["runuser", "-u", $0, "--"] + pgctl } ?? pgctl
        // pg_ctl's own output to a file, not a pipe: the server it starts would hold a pipe open after pg_ctl ends.
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("pg_ctl-\(UUID().uuidString).log")
        defer { try? FileManager.default.removeItem(at: output) }
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        let handle = try FileHandle(forWritingTo: output)
        let process: ChildProcess
        do {
            defer { try? handle.close() }
            process = try ChildProcess(
                executable: "/usr/bin/env",
                arguments: command,
                standardOutput: .descriptor(handle.fileDescriptor),
                standardError: .descriptor(handle.fileDescriptor)
            )
        }
        let status = await process.exited()
        guard status == 0 else {
            let said = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
            throw ExternalProgram.Failure(description: "pg_ctl restart failed (\(status)): \(said)")
        }
    }

    /// Runs `body` with a connection of its own to a database, for statements the store does not make.
    @discardableResult
    public static func admin<T>(
        _ location: PostgresLocation,
        _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        let connection = try await PostgresConnection.connect(
            configuration: location.connectionConfiguration,
            id: 1,
            logger: Self.logger
        )
        let result: Result<T, any Error>
        do {
            result = .success(try await body(connection))
        } catch {
            result = .failure(error)
        }
        try? await connection.close()
        return try result.get()
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

/// A counting semaphore for ``TestDatabase/with(_:)``: at most `limit` holders, the others waiting in turn.
actor DatabaseSlots {
    let limit: Int
    private var taken = 0
    private var waiting: [CheckedContinuation<Void, Never>] = []

    init(limit: Int) {
        self.limit = max(1, limit)
    }

    func take() async {
        if self.taken < self.limit {
            self.taken += 1
            return
        }
        await withCheckedContinuation { self.waiting.append($0) }
    }

    /// A slot given back goes to the first waiting, else is free again.
    func give() {
        if self.waiting.isEmpty {
            self.taken -= 1
        } else {
            self.waiting.removeFirst().resume()
        }
    }
}
