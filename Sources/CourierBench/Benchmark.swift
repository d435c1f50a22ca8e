import CourierProcess
public import Foundation
import Logging

/// Everything a bench is asked to do: the load, and where and how it runs.
public struct BenchPlan: Sendable {
    public enum Scenario: Sendable {
        /// Messages (pairs, groups) or idle connections, as ``BenchConfiguration`` says.
        case messages
        /// One file of `fileBytes` uploaded by one client and downloaded by another.
        case media
        /// `courier proxy` against nginx, direct and caching, on one file of `fileBytes`: `runs` rounds of cold and
        /// warm GETs, then `readers` concurrent cold readers.
        case proxy(runs: Int, readers: Int)
        /// The search index on the store itself: `stored` messages loaded without it and with it, then `queries`
        /// first pages of each kind of query, and a LIKE scan of the same data (``SearchBench``).
        case search(stored: Int, queries: Int)
        /// Pushes to `recipients` devices away, for `messages` messages to their group (``PushBench``).
        case push(recipients: Int, messages: Int)
    }

    /// A server started apart (under a profiler, say): the bench adds its users to its data folder while it runs.
    public struct ExternalServer: Sendable {
        public var host: String
        public var port: Int
        public var dataFolder: URL
        /// Its process, for its CPU time and memory.
        public var pid: Int32?

        public init(host: String, port: Int, dataFolder: URL, pid: Int32?) {
            self.host = host
            self.port = port
            self.dataFolder = dataFolder
            self.pid = pid
        }
    }

    public var configuration: BenchConfiguration
    public var scenario: Scenario = .messages
    /// The file's size, for the media and proxy scenarios.
    public var fileBytes: Int64 = 256 << 20
    /// The `courier` program the servers and proxies are started from.
    public var executable: URL
    public var externalServer: ExternalServer?
    /// Connections of a login storm during a second run of the load (0: none), and their logins per second.
    public var storm = 0
    public var stormRate: Double?
    /// `--limit NAME=VALUE`s for a server the bench starts.
    public var serverLimits: [String] = []
    /// Whether to measure the machine's ceilings (fsync, a bare insert of the same rows) after the load.
    public var measureCeilings = true
    /// Whether to keep the bench's folder (data, logs) instead of removing it.
    public var keepData = false
    /// A PostgreSQL database (URL) the servers share, instead of SQLite in the bench's folder; the run's users stay
    /// in it afterwards.
    public var database: String?
    /// With `database`: how many `courier serve` nodes share it (user `i` connects to node `i % nodes`: with two or
    /// more, each pair's partners are on different nodes, unless `BenchConfiguration.partnersOnOneNode`).
    public var nodes = 1

    public init(configuration: BenchConfiguration, executable: URL) {
        self.configuration = configuration
        self.executable = executable
    }
}

/// What a bench found: its report as text and as JSON, and what went wrong, if anything did (a run with failures
/// or missing messages is not a measurement).
public struct BenchOutcome: Sendable {
    public var text: String
    public var json: String
    public var problem: String?
}

/// The load generator behind `courier bench`: provisions users, starts the server (or uses one started apart),
/// runs the load, measures the ceilings, and reports.
public enum Benchmark {
    /// The worker behind `courier bench --pattern idle --processes K` (`courier bench --idle-worker FILE`).
    public static func idleWorker(
        tokensFile: URL,
        host: String,
        port: Int,
        source: String,
        timeout: Duration
    )
        async throws
    {
        try await IdleFill.worker(tokensFile: tokensFile, host: host, port: port, source: source, timeout: timeout)
    }

    /// Runs a plan in a fresh folder in `$TMPDIR`.
    ///
    /// - Parameter say: Progress, a line at a time.
    public static func run(_ plan: BenchPlan, say: @escaping @Sendable (String) -> Void) async throws -> BenchOutcome {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("courier-bench-\(UUID().uuidString)")
        let data = folder.appendingPathComponent("data")
        try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
        defer {
            if plan.keepData {
                say("kept \(folder.path)")
            } else {
                try? FileManager.default.removeItem(at: folder)
            }
        }
        switch plan.scenario {
        case .push(let recipients, let messages):
            let bench = PushBench(
                recipients: recipients,
                messages: messages,
                executable: plan.executable,
                folder: folder,
                say: say
            )
            let result = try await bench.run(limits: plan.serverLimits)
            return BenchOutcome(text: PushBench.text(result), json: try PushBench.json(result))
        case .media:
            let bench = MediaBench(
                bytes: plan.fileBytes,
                executable: plan.executable,
                folder: folder,
                database: plan.database,
                say: say
            )
            let result = try await bench.run(limits: plan.serverLimits)
            return BenchOutcome(text: MediaBench.text(result), json: try MediaBench.json(result))
        case .proxy(let runs, let readers):
            let bench = ProxyBench(
                bytes: plan.fileBytes,
                runs: runs,
                readers: readers,
                executable: plan.executable,
                folder: folder,
                say: say
            )
            let result = try await bench.run()
            return BenchOutcome(text: ProxyBench.text(result), json: try ProxyBench.json(result))
        case .search(let stored, let queries):
            let bench = SearchBench(
                messages: stored,
                users: plan.configuration.connections,
                queries: queries,
                likeQueries: max(1, queries / 10),
                database: plan.database,
                folder: folder,
                say: say
            )
            let result = try await bench.run()
            return BenchOutcome(text: SearchBench.text(result), json: try SearchBench.json(result))
        case .messages:
            return try await Self.messages(plan, folder: folder, data: data, say: say)
        }
    }

    private static func messages(
        _ plan: BenchPlan,
        folder: URL,
        data: URL,
        say: @escaping @Sendable (String) -> Void
    ) async throws -> BenchOutcome {
        let configuration = plan.configuration
        var logger = Logger(label: "courier.bench")
        logger.logLevel = .warning
        let result: BenchResult
        var stormResult: StormResult?
        /// With the WebSocket transport: the same load on the native port.
        var peer: BenchResult?
        if let external = plan.externalServer {
            say("provisioning \(configuration.connections) users in \(external.dataFolder.path)")
            let users = try await BenchProvisioning.provision(
                configuration,
                dataFolder: external.dataFolder,
                logger: logger
            )
            say("server at \(external.host):\(external.port); connecting")
            result = try await BenchRun(
                configuration: configuration,
                host: external.host,
                port: external.port,
                serverProcess: external.pid
            )
            .run(users: users, progress: say)
        } else if let database = plan.database {
            let (users, servers, ports, httpPorts) = try await Self.provisionAndServeNodes(
                plan,
                database: database,
                folder: folder,
                say: say
            )
            defer { for server in servers { server.stop() } }
            var run = try await BenchRun(
                configuration: configuration,
                host: "127.0.0.1",
                ports: ports,
                serverProcesses: servers.map(\.process.processIdentifier)
            )
            .run(users: users, progress: say)
            if plan.nodes > 1 { run.clusterHops = await ClusterHops.fetch(httpPorts: httpPorts) }
            result = run
        } else if configuration.pattern == .idle, configuration.processes > 1 {
            let (users, server, port, _) = try await Self.provisionAndServe(plan, folder: folder, data: data, say: say)
            defer { server.stop() }
            let fill = try await IdleFill.run(
                users: users,
                processes: configuration.processes,
                host: "127.0.0.1",
                port: port,
                serverProcess: server.process.processIdentifier,
                executable: plan.executable,
                folder: folder,
                settle: configuration.settle,
                timeout: configuration.timeout,
                say: say
            )
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            return BenchOutcome(
                text: IdleFill.text(fill),
                json: String(decoding: try encoder.encode(fill), as: UTF8.self),
                problem: fill.answeredPing < fill.connected
                    ? "\(fill.connected - fill.answeredPing) connections did not answer a ping" : nil
            )
        } else {
            if configuration.transport == .websocket {
                peer = try await Self.nativePeer(plan, folder: folder, say: say)
                say("the load over the WebSocket gateway")
            }
            let (users, server, native, http) = try await Self.provisionAndServe(
                plan,
                folder: folder,
                data: data,
                say: say
            )
            defer { server.stop() }
            let run = BenchRun(
                configuration: configuration,
                host: "127.0.0.1",
                port: configuration.transport == .websocket ? http : native,
                serverProcess: server.process.processIdentifier
            )
            result = try await run.run(users: users, progress: say)
            if plan.storm > 0 {
                say("the same load again, with new users, during a login storm of \(plan.storm) connections")
                let others = try await BenchProvisioning.provision(configuration, dataFolder: data, logger: logger)
                let storm = LoginStorm(host: "127.0.0.1", port: native, workers: plan.storm, rate: plan.stormRate)
                let started = ContinuousClock.now
                // The storm runs until the load is done; its time is the load's (not the storm's winding down).
                let (during, elapsed) = try await withThrowingTaskGroup(
                    of: (BenchResult, Duration)?.self
                ) { group in
                    group.addTask {
                        await storm.run()
                        return nil
                    }
                    group.addTask { (try await run.run(users: others, progress: say), ContinuousClock.now - started) }
                    defer { group.cancelAll() }
                    while let finished = try await group.next() {
                        if let finished { return finished }
                    }
                    throw BenchError("the load during the storm did not finish")
                }
                stormResult = StormResult(
                    workers: plan.storm,
                    tally: storm.counts,
                    seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18,
                    during: during
                )
            }
        }
        var ceilings: Ceilings?
        if plan.measureCeilings, configuration.pattern != .idle {
            say("measuring the ceilings")
            if let database = plan.database {
                ceilings = try await Ceilings.measurePostgres(
                    database,
                    in: folder,
                    clients: plan.nodes,
                    messages: min(max(result.acknowledged, 10_000), 200_000),
                    batchMessages: min(4096, configuration.connections * configuration.window / plan.nodes),
                    members: configuration.recipientsPerMessage + 1,
                    messageBytes: configuration.messageBytes
                )
            } else {
                ceilings = try Ceilings.measure(
                    in: folder,
                    messages: min(max(result.acknowledged, 10_000), 200_000),
                    batchMessages: min(4096, configuration.connections * configuration.window),
                    members: configuration.recipientsPerMessage + 1,
                    messageBytes: configuration.messageBytes
                )
            }
        }
        return BenchOutcome(
            text: BenchReport.text(result, ceilings: ceilings, storm: stormResult, nativePeer: peer),
            json: try BenchReport.json(result, ceilings: ceilings, storm: stormResult, nativePeer: peer),
            problem: Self.problem(result, storm: stormResult) ?? peer.flatMap { Self.problem($0, storm: nil) }
        )
    }

    /// The peer of a run over the WebSocket gateway: the same load on the native port, first, on a server of its own
    /// (fresh, so that neither run finds the other's memory in use, or freed).
    private static func nativePeer(
        _ plan: BenchPlan,
        folder: URL,
        say: @escaping @Sendable (String) -> Void
    ) async throws -> BenchResult {
        say("the peer: the same load on the native port, on a server of its own")
        var native = plan
        native.configuration.transport = .native
        let peerFolder = folder.appendingPathComponent("native-peer")
        let peerData = peerFolder.appendingPathComponent("data")
        try FileManager.default.createDirectory(at: peerData, withIntermediateDirectories: true)
        let (users, server, port, _) = try await Self.provisionAndServe(
            native,
            folder: peerFolder,
            data: peerData,
            say: say
        )
        defer { server.stop() }
        return try await BenchRun(
            configuration: native.configuration,
            host: "127.0.0.1",
            port: port,
            serverProcess: server.process.processIdentifier
        )
        .run(users: users, progress: say)
    }

    /// Makes the run's users in `data`, then starts `courier serve` on it (with room for every connection).
    private static func provisionAndServe(
        _ plan: BenchPlan,
        folder: URL,
        data: URL,
        say: @Sendable (String) -> Void
    ) async throws -> (users: [BenchUser], server: ServerProcess, port: Int, http: Int) {
        let configuration = plan.configuration
        var logger = Logger(label: "courier.bench")
        logger.logLevel = .warning
        say("provisioning \(configuration.connections) users in \(folder.path)")
        let users = try await BenchProvisioning.provision(configuration, dataFolder: data, logger: logger)
        let (server, port, http) = try await BenchServers.serve(
            executable: plan.executable,
            data: data,
            folder: folder,
            limits: ["max-connections=\(configuration.connections + 100)"] + plan.serverLimits
        )
        say("server \(server.process.processIdentifier) on 127.0.0.1:\(port) (HTTP \(http)); connecting")
        return (users, server, port, http)
    }

    /// Makes the run's users in a PostgreSQL database (migrating it first), then starts `plan.nodes` servers on it,
    /// each with a data folder of its own.
    private static func provisionAndServeNodes(
        _ plan: BenchPlan,
        database: String,
        folder: URL,
        say: @Sendable (String) -> Void
    ) async throws -> (users: [BenchUser], servers: [ServerProcess], ports: [Int], httpPorts: [Int]) {
        let configuration = plan.configuration
        var logger = Logger(label: "courier.bench")
        logger.logLevel = .warning
        let users = try await BenchProvisioning.provision(configuration, database: database, logger: logger, say: say)
        var servers: [ServerProcess] = []
        var ports: [Int] = []
        var httpPorts: [Int] = []
        do {
            for node in 0..<plan.nodes {
                let nodeFolder = folder.appendingPathComponent("node\(node)")
                let data = nodeFolder.appendingPathComponent("data")
                try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
                let (server, port, http) = try await BenchServers.serve(
                    executable: plan.executable,
                    data: data,
                    folder: nodeFolder,
                    limits: ["max-connections=\(configuration.connections + 100)"] + plan.serverLimits,
                    database: database,
                    node: "bench\(node)"
                )
                servers.append(server)
                ports.append(port)
                httpPorts.append(http)
                say("node \(node): server \(server.process.processIdentifier) on 127.0.0.1:\(port)")
            }
        } catch {
            for server in servers { server.stop() }
            throw error
        }
        say("connecting")
        return (users, servers, ports, httpPorts)
    }

    /// What makes a run not a measurement: failures, or messages missing.
    static func problem(_ result: BenchResult, storm: StormResult?) -> String? {
        let configuration = result.configuration
        if result.failures > 0 {
            return "\(result.failures) failures; the first: \(result.firstFailure ?? "unknown")"
        }
        guard result.acknowledged == configuration.expectedSends,
            result.delivered == configuration.expectedDeliveries
        else {
            return "incomplete after \(configuration.timeout): \(result.acknowledged) of "
                + "\(configuration.expectedSends) acknowledged, \(result.delivered) of "
                + "\(configuration.expectedDeliveries) delivered"
        }
        if let during = storm?.during,
            during.failures > 0 || during.acknowledged != configuration.expectedSends
                || during.delivered != configuration.expectedDeliveries
        {
            return "the load during the storm was incomplete: \(during.acknowledged) of "
                + "\(configuration.expectedSends) acknowledged, \(during.delivered) of "
                + "\(configuration.expectedDeliveries) delivered, \(during.failures) failures"
        }
        return nil
    }
}
