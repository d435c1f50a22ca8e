import CourierProcess
import CourierStorePostgres
import Foundation
import Histogram
import Logging
import PostgresNIO

extension Ceilings {
    /// The ceilings of a run on PostgreSQL: the fsync of the bench's folder, and pgbench (PostgreSQL's own load
    /// program) inserting the rows the server writes per message (the message, and one event-log row for each
    /// member, sender included) into tables of their own in the same database, from `clients` connections at once
    /// (one per node), `batchMessages` messages a transaction. The tables are dropped afterwards.
    static func measurePostgres(
        _ url: String,
        in folder: URL,
        clients: Int,
        messages: Int,
        batchMessages: Int,
        members: Int,
        messageBytes: Int
    ) async throws -> Ceilings {
        let location = try PostgresLocation(url: url)
        let batch = max(1, batchMessages)
        let transactions = max(1, messages / batch / max(1, clients))
        let tables = [
            """
            CREATE TABLE courier_ceiling_messages (
                conversation BIGINT NOT NULL, seq BIGINT NOT NULL, id TEXT NOT NULL, sender BIGINT NOT NULL,
                time_ms BIGINT NOT NULL, body BYTEA NOT NULL, PRIMARY KEY (conversation, seq))
            """,
            """
            CREATE TABLE courier_ceiling_log (
                user_id BIGINT NOT NULL, cursor BIGINT NOT NULL, conversation BIGINT NOT NULL, seq BIGINT NOT NULL,
                PRIMARY KEY (user_id, cursor))
            """,
            "CREATE SEQUENCE courier_ceiling_seq",
            "CREATE SEQUENCE courier_ceiling_cursor",
        ]
        let drop =
            "DROP TABLE IF EXISTS courier_ceiling_messages, courier_ceiling_log; "
            + "DROP SEQUENCE IF EXISTS courier_ceiling_seq, courier_ceiling_cursor"
        try await Self.run(location, [drop] + tables)
        let result: Result<(Double, LatencyHistogram), any Error>
        do {
            let tps = try Self.pgbench(
                location,
                script: folder.appendingPathComponent("ceiling.pgbench"),
                clients: clients,
                transactions: transactions,
                batch: batch,
                members: members,
                messageBytes: messageBytes
            )
            result = .success((tps, try Self.fsyncLatency(in: folder, count: 200)))
        } catch {
            result = .failure(error)
        }
        try? await Self.run(location, [drop])
        let (tps, fsync) = try result.get()
        return Ceilings(
            fsync: fsync,
            insertMessagesPerSecond: tps * Double(batch),
            batchMessages: batch,
            insertedMessages: transactions * clients * batch,
            insertDescription: "pgbench, bare INSERTs of the same rows into PostgreSQL, \(batch) messages a "
                + "transaction, \(clients) client\(clients == 1 ? "" : "s")"
        )
    }

    /// Runs pgbench on a script inserting a batch's rows; returns its transactions per second.
    private static func pgbench(
        _ location: PostgresLocation,
        script: URL,
        clients: Int,
        transactions: Int,
        batch: Int,
        members: Int,
        messageBytes: Int
    ) throws -> Double {
        try Data(
            """
            BEGIN;
            INSERT INTO courier_ceiling_messages (conversation, seq, id, sender, time_ms, body)
                SELECT :client_id, nextval('courier_ceiling_seq'), 'm' || g, g % \(members), 0,
                    convert_to(repeat('x', \(messageBytes)), 'UTF8')
                FROM generate_series(1, \(batch)) g;
            INSERT INTO courier_ceiling_log (user_id, cursor, conversation, seq)
                SELECT g % \(members), nextval('courier_ceiling_cursor'), :client_id, g
                FROM generate_series(1, \(batch * members)) g;
            COMMIT;

            """.utf8
        ).write(to: script)
        // The password in the environment, never in the arguments.
        var environment = ProcessInfo.processInfo.environment
        environment["PGPASSWORD"] = location.password
        let output = Pipe()
        let process = try ChildProcess(
            executable: try Self.pgbenchProgram().path,
            arguments: [
                "--no-vacuum", "--client", String(clients), "--jobs", String(clients), "--transactions",
                String(transactions), "--file", script.path, "--host", location.host, "--port", String(location.port),
                "--username", location.user, location.database,
            ],
            environment: environment,
            standardOutput: .pipe(output),
            standardError: .descriptor(output.fileHandleForWriting.fileDescriptor)
        )
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let status = process.waitUntilExit()
        guard status == 0,
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix("tps = ") }),
            let tps = Double(line.dropFirst("tps = ".count).prefix(while: { $0 != " " }))
        else {
            throw BenchError("pgbench failed with \(status): \(text)")
        }
        return tps
    }

    /// pgbench: on the PATH, else the newest of Debian's PostgreSQL packages.
    static func pgbenchProgram() throws -> URL {
        let paths = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map {
            "\($0)/pgbench"
        }
        let debian = ((try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? [])
            .compactMap(Int.init).sorted(by: >).map { "/usr/lib/postgresql/\($0)/bin/pgbench" }
        guard let found = (paths + debian).first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw BenchError("pgbench not found (Debian: apt-get install postgresql)")
        }
        return URL(fileURLWithPath: found)
    }

    private static func run(_ location: PostgresLocation, _ statements: [String]) async throws {
        let logger = Logger(label: "courier.bench")
        let connection = try await PostgresConnection.connect(
            configuration: location.connectionConfiguration,
            id: 1,
            logger: logger
        )
        do {
            for statement in statements {
                for piece in statement.split(separator: ";") {
                    try await connection.run(PostgresQuery(unsafeSQL: String(piece)), logger: logger)
                }
            }
        } catch {
            try? await connection.close()
            throw error
        }
        try? await connection.close()
    }
}
