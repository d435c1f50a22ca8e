import ArgumentParser
import CourierBench
import Foundation
import Glibc
import Histogram
import Logging

/// `courier bench`: a load generator in its own process, against a fresh server it starts.
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Measure a fresh server under load: throughput, latency percentiles, CPU and memory.",
        discussion: """
            The bench makes a data folder in $TMPDIR, creates the users (and groups) with device tokens, starts \
            `courier serve` on it (this same executable) on free ports, and connects one native connection per \
            user with its token. On a start signal each sends its messages: as fast as acknowledgements allow \
            (--window sends waiting each), or open loop at --rate messages/s in total, each send stamped with its \
            intended time so a stall shows in the latencies. Each message's text carries its send time, so the \
            receivers measure end-to-end latency on the same clock. Receivers acknowledge what they get, as the \
            SDK does (which makes the server write delivery receipts too).

            It reports sent, acknowledged and delivered messages/s; acknowledgement and end-to-end latency \
            (HdrHistogram, p50/p99/p99.9); the server's CPU (cores busy over the run) and peak RSS. Then, in the \
            same folder, the ceilings: 4 KiB write + fsync latency, and a bare GRDB insert of the same rows with the \
            server's durability (WAL, synchronous=FULL). With --pattern idle the connections only log in and stay; \
            the report gives the server's memory per connection after --settle.

            With --pattern media the bench writes one file of --size bytes, uploads it with the client SDK as one \
            user and downloads it as another, and reports each direction's throughput (the upload includes the \
            server's fsync and digest check), the server's peak RSS growth, the same download over HTTP with curl, \
            and the ceilings of this machine for as many bytes: a write with one fsync, and SHA-256.

            With --pattern proxy the bench writes one file of --size bytes (default 256 MiB) and starts nginx \
            (Debian's package) twice over, serving it directly and as a caching proxy (proxy_cache with slice 1m \
            and proxy_cache_lock, what one would otherwise deploy), and `courier proxy` (this executable) in front \
            of the direct one. Each of --runs rounds GETs the whole file on a new connection from nginx direct, \
            then from each cache cold (a new URL: an empty cache) and warm (the same URL again), timing the first \
            byte and the throughput; medians and ratios to nginx direct are reported. Then --readers concurrent \
            cold readers go through each cache, and the bytes nginx logged as sent by the origin tell how many \
            copies each cache fetched.

            With --storm N (pairs or group) the load runs a second time, with new users, while N connections from \
            127.0.0.2 send password logins for names that do not exist (at --storm-rate logins/s in total, or as \
            fast as they are answered); the report gives both runs' latencies, their ratio, and how the storm was \
            answered (throttled before any hash, password checks, refused connections).

            With --server HOST:PORT --data FOLDER the bench loads a server started apart (under perf or valgrind, \
            with other flags), adding its users to that server's data folder while it runs; --server-pid gives its \
            CPU and memory.
            """
    )

    enum Pattern: String, ExpressibleByArgument, CaseIterable {
        case pairs, group, idle, media, proxy
    }

    @Option(help: "Connections, one user each.")
    var connections = 100

    @Option(
        help: """
            pairs (each sends to its partner), group (groups of --group-size), idle (only logged in), media (one \
            file of --size bytes uploaded by one client and downloaded by another), proxy (courier proxy against \
            nginx, direct and caching, on one file of --size bytes).
            """
    )
    var pattern = Pattern.pairs

    @Option(help: "Members per group, with --pattern group.")
    var groupSize = 100

    @Option(help: "Messages each connection sends.")
    var messages = 1_000

    @Option(
        help: "Each message's size in bytes (default 100); with --pattern media or proxy, the file's (proxy: 256 MiB)."
    )
    var size: Int?

    @Option(help: "With --pattern proxy: rounds of cold and warm GETs.")
    var runs = 5

    @Option(help: "With --pattern proxy: concurrent cold readers through each cache (0: none).")
    var readers = 100

    /// --size, or its default for the pattern.
    var bytes: Int {
        self.size ?? (self.pattern == .proxy ? 256 << 20 : 100)
    }

    @Option(help: "Total send rate in messages/s (open loop); without it, as fast as acknowledgements allow.")
    var rate: Double?

    @Option(help: "Sends each connection keeps waiting for acknowledgement in closed loop.")
    var window = 16

    @Option(
        help: """
            With --pattern pairs or group: after the load, run it again with new users while this many connections \
            at once send password logins for names that do not exist (a login storm from one address), and report \
            the latencies of both runs and what the storm got.
            """
    )
    var storm = 0

    @Option(
        help:
            "With --storm: the storm's logins per second, all its connections together (default: as fast as answered)."
    )
    var stormRate: Double?

    @Option(help: "Seconds idle connections are held before the server's memory is read.")
    var settle = 5.0

    @Option(help: "Seconds the load may take before the run gives up.")
    var timeout = 300.0

    @Flag(help: "Skip measuring the fsync and bare-insert ceilings.")
    var noCeilings = false

    @Flag(help: "Print one JSON object instead of the report.")
    var json = false

    @Flag(help: "Keep the data folder and the server's log (their path is printed).")
    var keepData = false

    @Option(
        help: ArgumentHelp(
            "Load a server started apart (under a profiler, say) instead of starting one; needs --data.",
            valueName: "host:port"
        )
    )
    var server: String?

    @Option(
        help: ArgumentHelp(
            "With --server: that server's data folder, where the bench adds its users.",
            valueName: "folder"
        )
    )
    var data: String?

    @Option(help: ArgumentHelp("With --server: its process id, for its CPU time and memory.", valueName: "pid"))
    var serverPid: Int32?

    @Option(
        name: .customLong("limit"),
        help: ArgumentHelp("A server limit, NAME=VALUE, passed to courier serve (repeatable).", valueName: "name=value")
    )
    var limits: [String] = []

    func validate() throws {
        guard self.connections > 0 else { throw ValidationError("--connections must be positive") }
        guard self.messages >= 0, self.bytes > 0, self.window > 0, self.runs > 0, self.readers >= 0 else {
            throw ValidationError("--messages, --size, --window and --runs must be positive")
        }
        if self.pattern == .pairs, !self.connections.isMultiple(of: 2) {
            throw ValidationError("--pattern pairs needs an even number of connections")
        }
        if self.pattern == .group {
            guard self.groupSize >= 2, self.connections.isMultiple(of: self.groupSize) else {
                throw ValidationError("--pattern group needs --connections a multiple of --group-size (at least 2)")
            }
        }
        if let rate, rate <= 0 { throw ValidationError("--rate must be positive") }
        if self.storm < 0 { throw ValidationError("--storm must not be negative") }
        if let stormRate, stormRate <= 0 || self.storm == 0 {
            throw ValidationError("--storm-rate must be positive, with --storm")
        }
        if self.storm > 0, self.pattern != .pairs && self.pattern != .group || self.server != nil {
            throw ValidationError("--storm goes with --pattern pairs or group, on a server the bench starts")
        }
        if self.pattern == .media || self.pattern == .proxy, self.server != nil {
            throw ValidationError("--pattern \(self.pattern.rawValue) starts its own server")
        }
        if let server {
            _ = try ClientOptions.address(server)
            guard self.data != nil else { throw ValidationError("--server needs --data, the server's data folder") }
            guard self.limits.isEmpty else { throw ValidationError("--limit applies to a server the bench starts") }
        } else if self.data != nil || self.serverPid != nil {
            throw ValidationError("--data and --server-pid go with --server")
        }
    }

    var benchConfiguration: BenchConfiguration {
        var configuration = BenchConfiguration()
        configuration.connections = self.connections
        configuration.pattern =
            switch self.pattern {
            case .pairs: .pairs
            case .group: .groups(size: self.groupSize)
            case .idle, .media, .proxy: .idle
            }
        configuration.messagesPerConnection = self.messages
        configuration.messageBytes = self.bytes
        configuration.rate = self.rate
        configuration.window = self.window
        configuration.settle = .milliseconds(Int(self.settle * 1000))
        configuration.timeout = .milliseconds(Int(self.timeout * 1000))
        return configuration
    }

    func run() async throws {
        let configuration = self.benchConfiguration
        Self.raiseOpenFileLimit()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("courier-bench-\(UUID().uuidString)")
        let data = folder.appendingPathComponent("data")
        try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
        defer {
            if !self.keepData { try? FileManager.default.removeItem(at: folder) }
        }
        let say: @Sendable (String) -> Void = { line in
            FileHandle.standardError.write(Data("bench: \(line)\n".utf8))
        }
        if self.pattern == .media {
            let result = try await MediaBench(bytes: Int64(self.bytes), folder: folder, say: say).run(
                limits: self.limits
            )
            if self.keepData { say("kept \(folder.path)") }
            print(self.json ? try MediaBench.json(result) : MediaBench.text(result))
            return
        }
        if self.pattern == .proxy {
            let bench = ProxyBench(
                bytes: Int64(self.bytes),
                runs: self.runs,
                readers: self.readers,
                folder: folder,
                say: say
            )
            let result = try await bench.run()
            if self.keepData { say("kept \(folder.path)") }
            print(self.json ? try ProxyBench.json(result) : ProxyBench.text(result))
            return
        }
        var logger = Logger(label: "courier.bench")
        logger.logLevel = .warning
        let result: BenchResult
        var stormResult: StormResult?
        if let address = self.server, let serverData = self.data {
            // A server started apart: users go into its data folder while it runs.
            let (host, port) = try ClientOptions.address(address)
            say("provisioning \(configuration.connections) users in \(serverData)")
            let users = try await BenchProvisioning.provision(
                configuration,
                dataFolder: URL(fileURLWithPath: serverData),
                logger: logger
            )
            say("server at \(address); connecting")
            result = try await BenchRun(
                configuration: configuration,
                host: host,
                port: port,
                serverProcess: self.serverPid
            )
            .run(users: users, progress: say)
        } else {
            say("provisioning \(configuration.connections) users in \(folder.path)")
            let users = try await BenchProvisioning.provision(configuration, dataFolder: data, logger: logger)
            let server = try await BenchServer.start(
                data: data,
                log: folder.appendingPathComponent("server.log"),
                limits: ["max-connections=\(configuration.connections + 100)"] + self.limits
            )
            do {
                say("server \(server.process.processIdentifier) on 127.0.0.1:\(server.port); connecting")
                let run = BenchRun(
                    configuration: configuration,
                    host: "127.0.0.1",
                    port: server.port,
                    serverProcess: server.process.processIdentifier
                )
                result = try await run.run(users: users, progress: say)
                if self.storm > 0 {
                    say("the same load again, with new users, during a login storm of \(self.storm) connections")
                    let others = try await BenchProvisioning.provision(configuration, dataFolder: data, logger: logger)
                    let storm = LoginStorm(
                        host: "127.0.0.1",
                        port: server.port,
                        workers: self.storm,
                        rate: self.stormRate
                    )
                    let started = ContinuousClock.now
                    let storming = Task { await storm.run() }
                    let during = try await run.run(users: others, progress: say)
                    let elapsed = ContinuousClock.now - started
                    storming.cancel()
                    await storming.value
                    stormResult = StormResult(
                        workers: self.storm,
                        tally: storm.counts,
                        seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18,
                        during: during
                    )
                }
            } catch {
                server.stop()
                throw error
            }
            server.stop()
        }
        var ceilings: Ceilings?
        if !self.noCeilings, configuration.pattern != .idle {
            say("measuring the ceilings")
            ceilings = try Ceilings.measure(
                in: folder,
                messages: min(max(result.acknowledged, 10_000), 200_000),
                batchMessages: min(4096, configuration.connections * configuration.window),
                members: configuration.recipientsPerMessage + 1,
                messageBytes: configuration.messageBytes
            )
        }
        if self.keepData { say("kept \(folder.path)") }
        if self.json {
            print(try BenchReport.json(result, ceilings: ceilings, storm: stormResult))
        } else {
            print(BenchReport.text(result, ceilings: ceilings, storm: stormResult))
        }
        if result.failures > 0 {
            throw CommandFailure(
                description: "\(result.failures) failures; the first: \(result.firstFailure ?? "unknown")"
            )
        }
        guard result.acknowledged == configuration.expectedSends,
            result.delivered == configuration.expectedDeliveries
        else {
            throw CommandFailure(
                description: "incomplete after \(self.timeout) s: \(result.acknowledged) of "
                    + "\(configuration.expectedSends) acknowledged, \(result.delivered) of "
                    + "\(configuration.expectedDeliveries) delivered"
            )
        }
        if let during = stormResult?.during,
            during.failures > 0 || during.acknowledged != configuration.expectedSends
                || during.delivered != configuration.expectedDeliveries
        {
            throw CommandFailure(
                description: "the load during the storm was incomplete: \(during.acknowledged) of "
                    + "\(configuration.expectedSends) acknowledged, \(during.delivered) of "
                    + "\(configuration.expectedDeliveries) delivered, \(during.failures) failures"
            )
        }
    }

    /// Raises this process's open-file limit to its hard limit (the server, started from here, inherits it).
    static func raiseOpenFileLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }
}

/// The load run again during a login storm (`--storm`), and what the storm got.
struct StormResult {
    var workers: Int
    var tally: LoginStorm.Tally
    var seconds: Double
    var during: BenchResult
}

/// The `courier serve` a bench runs against: this executable, on free ports, logging to a file.
struct BenchServer {
    let process: Process
    let port: Int
    let httpPort: Int

    static func start(data: URL, log: URL, limits: [String]) async throws -> BenchServer {
        // A free port can be taken by another process between the kernel naming it and the server binding it: a
        // server that exits at once is started again on other ports.
        for _ in 1...3 {
            if let server = try await Self.attempt(data: data, log: log, limits: limits) {
                return server
            }
        }
        throw CommandFailure(description: "the server did not start; see \(log.path)")
    }

    /// One start; nil when the server exited before listening (its ports taken meanwhile).
    private static func attempt(data: URL, log: URL, limits: [String]) async throws -> BenchServer? {
        let ports = try (0..<3).map { _ in try Self.freePort() }
        let process = try Self.launch(
            [
                "serve", "--data", data.path, "--port", String(ports[0]), "--compat-port", String(ports[1]),
                "--http-port", String(ports[2]), "--log-level", "warning",
            ] + limits.flatMap { ["--limit", $0] },
            log: log
        )
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if Self.accepts(port: ports[0]) { return BenchServer(process: process, port: ports[0], httpPort: ports[2]) }
            guard process.isRunning else { return nil }
            try await Task.sleep(for: .milliseconds(20))
        }
        process.terminate()
        throw CommandFailure(description: "the server did not start within 30 s; see \(log.path)")
    }

    func stop() {
        self.process.terminate()
        self.process.waitUntilExit()
    }

    /// Runs this executable with `arguments`, its output going to `log`.
    static func launch(_ arguments: [String], log: URL) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        process.arguments = arguments
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let handle = try FileHandle(forWritingTo: log)
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        try process.run()
        return process
    }

    /// A port nothing listens on now, from the kernel.
    static func freePort() throws -> Int {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw CommandFailure(description: "cannot open a socket") }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0
            }
        }
        guard bound else { throw CommandFailure(description: "cannot find a free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    static func accepts(port: Int) -> Bool {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { return false }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }
}

/// The bench's report: text for people, JSON for scripts and tests.
enum BenchReport {
    static func milliseconds(_ microseconds: UInt64) -> String {
        String(format: "%.2f", Double(microseconds) / 1000)
    }

    static func percentiles(_ histogram: LatencyHistogram) -> String {
        guard histogram.totalCount > 0 else { return "none" }
        return "p50 \(Self.milliseconds(histogram.valueAtPercentile(50))) ms, "
            + "p99 \(Self.milliseconds(histogram.valueAtPercentile(99))) ms, "
            + "p99.9 \(Self.milliseconds(histogram.valueAtPercentile(99.9))) ms, "
            + "max \(Self.milliseconds(histogram.max)) ms"
    }

    static func mebibytes(_ bytes: Int?) -> String {
        bytes.map { String(format: "%.1f MiB", Double($0) / 1_048_576) } ?? "unknown"
    }

    static func text(_ result: BenchResult, ceilings: Ceilings?, storm: StormResult? = nil) -> String {
        let configuration = result.configuration
        let seconds = max(result.seconds, 1e-9)
        var lines = [
            "courier bench: \(configuration.connections) connections, \(configuration.pattern), "
                + (configuration.pattern == .idle
                    ? "held \(configuration.settle)"
                    : "\(configuration.messagesPerConnection) messages of \(configuration.messageBytes) B each, "
                        + (configuration.rate.map { "open loop at \(Int($0)) msg/s" }
                            ?? "closed loop, window \(configuration.window)"))
        ]
        lines.append("connected:     \(result.connected)")
        if configuration.pattern == .idle {
            if let before = result.serverRSSBefore, let after = result.serverRSSAfter {
                let perConnection = Double(after - before) / Double(max(1, result.connected))
                lines.append(
                    "server RSS:    \(Self.mebibytes(before)) before, \(Self.mebibytes(after)) after settling: "
                        + String(format: "%.1f KiB per connection", perConnection / 1024)
                )
            }
        } else {
            lines += [
                "sent:          \(result.sent) (\(Int(Double(result.sent) / seconds)) msg/s)",
                "acknowledged:  \(result.acknowledged) (\(Int(Double(result.acknowledged) / seconds)) msg/s)",
                "delivered:     \(result.delivered) of \(configuration.expectedDeliveries) "
                    + "(\(Int(Double(result.delivered) / seconds)) msg/s)",
                "duration:      \(String(format: "%.2f", result.seconds)) s",
                "ack latency:   \(Self.percentiles(result.acknowledgement))",
                "end to end:    \(Self.percentiles(result.endToEnd))",
            ]
        }
        if let cpu = result.serverCPUSeconds {
            lines.append(
                "server CPU:    \(String(format: "%.1f", cpu)) s (\(String(format: "%.2f", cpu / seconds)) cores busy)"
            )
        }
        lines.append("server peak RSS: \(Self.mebibytes(result.serverPeakRSS))")
        if let ceilings {
            let ratio = Double(result.acknowledged) / seconds / ceilings.insertMessagesPerSecond
            lines += [
                "ceiling fsync: \(Self.percentiles(ceilings.fsync)) (4 KiB write + fsync)",
                "ceiling insert: \(Int(ceilings.insertMessagesPerSecond)) msg/s (bare GRDB, WAL, synchronous=FULL, "
                    + "\(ceilings.batchMessages) messages a transaction); acknowledged/ceiling = "
                    + String(format: "%.2f", ratio),
            ]
        }
        if result.failures > 0 {
            lines.append("failures:      \(result.failures); the first: \(result.firstFailure ?? "")")
        }
        if let storm {
            let tally = storm.tally
            let quiet = Double(result.endToEnd.valueAtPercentile(99))
            let stormy = Double(storm.during.endToEnd.valueAtPercentile(99))
            lines += [
                "login storm:   \(storm.workers) connections at once, \(tally.attempts) logins "
                    + "(\(Int(Double(tally.attempts) / max(storm.seconds, 1e-9)))/s): \(tally.throttled) throttled "
                    + "before any hash, \(tally.authFailed) password checks, \(tally.other) other",
                "during it:     acknowledged \(storm.during.acknowledged), delivered \(storm.during.delivered); "
                    + "end to end \(Self.percentiles(storm.during.endToEnd)); server CPU "
                    + String(format: "%.2f", (storm.during.serverCPUSeconds ?? 0) / max(storm.during.seconds, 1e-9))
                    + " cores busy",
                "p99 end to end, storm/quiet = " + String(format: "%.2f", stormy / max(quiet, 1)),
            ]
        }
        return lines.joined(separator: "\n")
    }

    static func json(_ result: BenchResult, ceilings: Ceilings?, storm: StormResult? = nil) throws -> String {
        func latency(_ histogram: LatencyHistogram) -> [String: Double] {
            [
                "p50_ms": Double(histogram.valueAtPercentile(50)) / 1000,
                "p99_ms": Double(histogram.valueAtPercentile(99)) / 1000,
                "p999_ms": Double(histogram.valueAtPercentile(99.9)) / 1000,
                "max_ms": Double(histogram.max) / 1000,
                "count": Double(histogram.totalCount),
            ]
        }
        var object: [String: Any] = [
            "connections": result.configuration.connections,
            "pattern": "\(result.configuration.pattern)",
            "connected": result.connected,
            "sent": result.sent,
            "acknowledged": result.acknowledged,
            "delivered": result.delivered,
            "expected_deliveries": result.configuration.expectedDeliveries,
            "failures": result.failures,
            "seconds": result.seconds,
            "ack_latency": latency(result.acknowledgement),
            "end_to_end_latency": latency(result.endToEnd),
        ]
        object["server_cpu_seconds"] = result.serverCPUSeconds
        object["server_peak_rss_bytes"] = result.serverPeakRSS
        object["server_rss_before_bytes"] = result.serverRSSBefore
        object["server_rss_after_bytes"] = result.serverRSSAfter
        object["first_failure"] = result.firstFailure
        if let ceilings {
            object["ceiling_fsync"] = latency(ceilings.fsync)
            object["ceiling_insert_messages_per_second"] = ceilings.insertMessagesPerSecond
        }
        if let storm {
            object["storm"] =
                [
                    "workers": storm.workers,
                    "seconds": storm.seconds,
                    "attempts": storm.tally.attempts,
                    "throttled": storm.tally.throttled,
                    "password_checks": storm.tally.authFailed,
                    "other": storm.tally.other,
                    "acknowledged": storm.during.acknowledged,
                    "delivered": storm.during.delivered,
                    "failures": storm.during.failures,
                    "end_to_end_latency": latency(storm.during.endToEnd),
                    "server_cpu_seconds": storm.during.serverCPUSeconds ?? 0,
                ] as [String: Any]
        }
        let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }
}
