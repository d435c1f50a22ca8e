import CourierPostgresTesting
import CourierProtocol
import CourierStorePostgres
import CourierTesting
import Foundation
import NIOSSL
import PostgresNIO
import Testing

@testable import courier

/// The `courier` command: `courier bench` in each of its patterns.
extension CommandLineTests {
    @Test(
        "courier bench: what is sent is acknowledged and delivered, in pairs, groups, open loop and over the WebSocket gateway",
        arguments: [
            ["--pattern", "pairs", "--connections", "6", "--messages", "50"],
            ["--pattern", "group", "--group-size", "3", "--connections", "6", "--messages", "20"],
            ["--pattern", "pairs", "--connections", "4", "--messages", "40", "--rate", "400"],
            ["--pattern", "pairs", "--connections", "6", "--messages", "30", "--transport", "websocket"],
        ]
    )
    func benchCountsAddUp(_ arguments: [String]) async throws {
        let result = try await CourierExecutable.run(["bench", "--json", "--no-ceilings"] + arguments)
        #expect(result.status == 0, "\(result.output)")
        let line = try #require(result.output.split(separator: "\n").last { $0.hasPrefix("{") }, "\(result.output)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        let connections = try #require(report["connections"] as? Int)
        let messages = Int(arguments[arguments.firstIndex(of: "--messages")! + 1])!
        let recipients = arguments.contains("group") ? 2 : 1
        #expect(report["connected"] as? Int == connections)
        #expect(report["sent"] as? Int == connections * messages)
        #expect(report["acknowledged"] as? Int == connections * messages)
        #expect(report["delivered"] as? Int == connections * messages * recipients)
        #expect(report["failures"] as? Int == 0)
        // One latency a message acknowledged, and one a delivery.
        let ack = try #require(report["ack_latency"] as? [String: Double])
        let endToEnd = try #require(report["end_to_end_latency"] as? [String: Double])
        #expect(ack["count"] == Double(connections * messages))
        #expect(endToEnd["count"] == Double(connections * messages * recipients))
        #expect((ack["p50_ms"] ?? 0) > 0 && (ack["p50_ms"] ?? 0) <= (ack["p99_ms"] ?? 0))
        #expect((report["server_cpu_seconds"] as? Double ?? 0) > 0)
        #expect((report["server_peak_rss_bytes"] as? Int ?? 0) > 1_000_000)
        if arguments.contains("websocket") {
            // Over the gateway, beside the same load on the native port.
            #expect(report["transport"] as? String == "websocket")
            let peer = try #require(report["native_peer"] as? [String: Any], "\(report)")
            #expect(peer["acknowledged"] as? Int == connections * messages && peer["connected"] as? Int == connections)
        } else {
            #expect(report["transport"] as? String == "native")
        }
        if arguments.contains("--rate") {
            // 160 messages at 400/s take about 0.4 s: open loop keeps the pace rather than rushing.
            #expect((report["seconds"] as? Double ?? 0) >= 0.3, "\(report)")
        }
    }

    @Test(
        "bench --database --nodes 2: pairs split over two nodes on PostgreSQL, every message acknowledged and delivered; the password stays out of the arguments",
        .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
    )
    func benchOnPostgres() async throws {
        try await TestDatabase.with { location in
            var bare = location
            bare.password = nil
            let result = try await CourierExecutable.run(
                [
                    "bench", "--json", "--database", TestDatabase.url(of: bare), "--nodes", "2", "--connections", "6",
                    "--messages", "30",
                ],
                environment: ["PGPASSWORD": location.password ?? ""]
            )
            #expect(result.status == 0, "\(result.output)")
            let line = try #require(result.output.split(separator: "\n").last { $0.hasPrefix("{") }, "\(result.output)")
            let report = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            #expect(report["acknowledged"] as? Int == 180)
            #expect(report["delivered"] as? Int == 180)
            #expect(report["failures"] as? Int == 0)
            // Both nodes' processes counted, the ceiling measured by pgbench in the same database.
            #expect((report["server_cpu_seconds"] as? Double ?? 0) > 0)
            #expect((report["ceiling_insert_messages_per_second"] as? Double ?? 0) > 0)
            // Every pair's partners are on different nodes: each delivery crossed, and its hops were timed.
            let hops = try #require(report["cluster_hops"] as? [[String: Any]], "\(line)")
            #expect(hops.compactMap { $0["hop"] as? String }.sorted() == ["notify", "publish", "wake"])
            for hop in hops {
                #expect((hop["count"] as? Int ?? 0) > 0, "\(hop)")
                #expect((hop["mean_ms"] as? Double ?? 0) > 0, "\(hop)")
            }
            if let password = location.password { #expect(!result.output.contains(password)) }
            // The users went into the database the nodes shared.
            var users: Int64 = 0
            try await TestDatabase.admin(location) { connection in
                for try await count in try await connection.query(
                    "SELECT count(*)::bigint FROM users",
                    logger: TestDatabase.logger
                ).decode(Int64.self) {
                    users = count
                }
            }
            #expect(users == 6)
        }
    }

    @Test("bench --pattern media uploads and downloads one file through a fresh server and reports both directions")
    func benchMedia() async throws {
        let result = try await CourierExecutable.run(["bench", "--pattern", "media", "--size", "3000000", "--json"])
        #expect(result.status == 0, "\(result.output)")
        let line = try #require(result.output.split(separator: "\n").last.map(String.init))
        let report = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
        #expect(report["bytes"] as? Int == 3_000_000)
        for key in ["upload_seconds", "download_seconds", "ceiling_write_seconds", "ceiling_sha256_seconds"] {
            #expect((report[key] as? Double ?? 0) > 0, "\(key) in \(line)")
        }
        let before = try #require(report["server_rss_before_bytes"] as? Int)
        let peak = try #require(report["server_rss_peak_bytes"] as? Int)
        #expect(peak >= before && before > 0)
        #expect((report["http_seconds"] as? Double ?? 0) > 0, "curl downloaded the same file")
    }

    @Test("courier bench --storm runs the load again during a login storm; the storm is throttled, nothing is lost")
    func benchStorm() async throws {
        let result = try await CourierExecutable.run([
            "bench", "--json", "--no-ceilings", "--pattern", "pairs", "--connections", "4", "--messages", "20",
            "--rate", "100", "--storm", "30",
        ])
        #expect(result.status == 0, "\(result.output)")
        let line = try #require(result.output.split(separator: "\n").last { $0.hasPrefix("{") }, "\(result.output)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        let storm = try #require(report["storm"] as? [String: Any], "\(report)")
        let attempts = try #require(storm["attempts"] as? Int)
        // The address's limit: 20 failed logins a minute are checked, whatever the storm sends.
        #expect(attempts > 20 && (storm["password_checks"] as? Int ?? 99) <= 20, "\(storm)")
        #expect((storm["throttled"] as? Int ?? 0) > 0)
        #expect(
            storm["acknowledged"] as? Int == 80 && storm["delivered"] as? Int == 80 && storm["failures"] as? Int == 0
        )
    }

    @Test("courier bench --pattern idle holds its connections and reports the server's memory before and after")
    func benchIdle() async throws {
        let result = try await CourierExecutable.run([
            "bench", "--json", "--pattern", "idle", "--connections", "50", "--settle", "500ms",
        ])
        #expect(result.status == 0, "\(result.output)")
        let line = try #require(result.output.split(separator: "\n").last { $0.hasPrefix("{") }, "\(result.output)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(report["connected"] as? Int == 50)
        #expect(report["sent"] as? Int == 0)
        let before = try #require(report["server_rss_before_bytes"] as? Int)
        let after = try #require(report["server_rss_after_bytes"] as? Int)
        #expect(before > 0 && after > before, "\(report)")
    }

    @Test("courier bench --server loads a server started apart, adding its users to that server's data folder")
    func benchAgainstARunningServer() async throws {
        try await withTemporaryDirectory(prefix: "courier-bench") { folder in
            let data = folder.appendingPathComponent("data")
            let (server, native, _) = try await Self.serve(folder, data: data)
            for _ in 0..<2 {
                // Twice on the same folder: each run's users are its own.
                let result = try await CourierExecutable.run([
                    "bench", "--json", "--no-ceilings", "--connections", "4", "--messages", "10", "--server",
                    "127.0.0.1:\(native)", "--data", data.path, "--server-pid",
                    String(server.process.processIdentifier),
                ])
                #expect(result.status == 0, "\(result.output)")
                let line = try #require(result.output.split(separator: "\n").last { $0.hasPrefix("{") })
                let report = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                #expect(report["acknowledged"] as? Int == 40 && report["delivered"] as? Int == 40, "\(report)")
                #expect((report["server_cpu_seconds"] as? Double ?? 0) > 0)
            }
            #expect(await server.terminate() == 0)
            let mismatched = try await Self.courier("bench", "--data", data.path)
            #expect(mismatched.status != 0 && mismatched.output.contains("go with --server"), "\(mismatched)")
            let missing = try await Self.courier("bench", "--server", "127.0.0.1:\(native)")
            #expect(missing.status != 0 && missing.output.contains("needs --data"), "\(missing)")
        }
    }
}
