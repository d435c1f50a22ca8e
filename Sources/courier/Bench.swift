import ArgumentParser
import CourierBench
import Foundation

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
            server's fsync and digest check), the server's peak RSS growth, the same download over HTTP with curl \
            (into /dev/null, and into a file on the download's disk: the native download's peer), and the \
            ceilings of this machine for as many bytes: a write with one fsync, and SHA-256. With --database the \
            server keeps the file in that PostgreSQL database instead of its data folder.

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

            With --database postgres://… (pairs or group) the servers run on that PostgreSQL database instead: the \
            bench migrates it, adds the run's users to it (they stay; use a database of its own), and starts \
            --nodes servers on it, each with a data folder of its own; user i connects to node i mod --nodes, so \
            with two nodes or more every pair's partners are on different nodes and every end-to-end latency is \
            across nodes; the report then adds the hops of those deliveries from the nodes' /metrics (the news of \
            a commit published, received by the other node, its events read and handed to its connections). The \
            insert ceiling is then pgbench (PostgreSQL's own) inserting the same rows into tables \
            of their own in that database, from as many clients as nodes. A password may be left out of the URL \
            and given in $PGPASSWORD, out of sight of other users' process listings.

            With --pattern push the bench stands in for a push service on loopback (every push answered 201 at \
            once), makes --connections users each with a device that never connects and a Web Push subscription \
            there, in groups of at most 1,000 with a sender, starts a server that may push to loopback, sends \
            --messages texts to each group, and times the pushes (each sealed and POSTed) until the last is taken: \
            pushes a second, and the server's CPU a push.

            With --pattern search the bench measures the search index on the store itself (no server, no network): \
            it stores --stored messages (default 1,000,000; mixed Chinese and English, always the same ones) among \
            --connections users (each in two direct conversations and one group of 8) through the group commit, in \
            batches of 2,000, closed loop, three times: without the index, with it written in each message's own \
            transaction, and with it written beside the group commit as a server does (timed until the last message \
            is indexed), for the index's cost in throughput and in bytes per message. Then it times --queries first pages (20 hits) of each kind of query (one and \
            two Chinese characters, three or more, English words, mixed), each for a random user, one at a time, \
            and a LIKE '%…%' scan of the same data for a tenth as many of the same queries, the peer. On SQLite by \
            default (in $TMPDIR); with --database on PostgreSQL, in three databases it creates beside the one named \
            and drops after (the user needs CREATEDB).

            With --server HOST:PORT --data FOLDER the bench loads a server started apart (under perf or valgrind, \
            with other flags), adding its users to that server's data folder while it runs; --server-pid gives its \
            CPU and memory.

            With --transport websocket (pairs, group or idle) the connections go through the WebSocket gateway (/ws \
            on the HTTP port) with JSON envelopes, as the web chat's do; the same load runs first on the native \
            port, on a fresh server of its own, and the report adds its figures and the ratio (acknowledged msg/s, \
            or memory per idle connection).
            """
    )

    enum Pattern: String, ExpressibleByArgument, CaseIterable {
        case pairs, group, idle, media, proxy, search, push
    }

    @Option(help: "Connections, one user each.")
    var connections = 100

    @Option(
        help: """
            pairs (each sends to its partner), group (groups of --group-size), idle (only logged in), media (one \
            file of --size bytes uploaded by one client and downloaded by another), proxy (courier proxy against \
            nginx, direct and caching, on one file of --size bytes), search (the search index, on the store itself), \
            push (Web Push to --connections devices away, --messages messages to each of their groups).
            """
    )
    var pattern = Pattern.pairs

    @Option(
        help: ArgumentHelp(
            "How the connections reach the server: native (the native port) or websocket (the gateway /ws on the "
                + "HTTP port, JSON envelopes as the web chat sends them). With websocket, the same load runs first on "
                + "the native port, on a server of its own, and the report gives the ratio.",
            valueName: "native|websocket"
        )
    )
    var transport = "native"

    @Option(help: "Members per group, with --pattern group.")
    var groupSize = 100

    @Option(help: "Messages each connection sends.")
    var messages = 1_000

    @Option(
        help: "Each message's size in bytes (default 100); with --pattern media or proxy, the file's (proxy: 256 MiB)."
    )
    var size: Int?

    @Option(help: "With --pattern search: the messages stored.")
    var stored = 1_000_000

    @Option(
        help: "With --pattern search: first pages timed for each kind of query (a LIKE scan takes a tenth as many)."
    )
    var queries = 200

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

    @Option(
        help: ArgumentHelp(
            "How long idle connections are held before the server's memory is read (250ms, 5s, 1m…).",
            valueName: "duration"
        )
    )
    var settle = DurationValue(.seconds(5))

    @Option(
        help: ArgumentHelp("How long the load may take before the run gives up (30s, 5m…).", valueName: "duration")
    )
    var timeout = DurationValue(.seconds(300))

    @Flag(
        help: """
            With --pattern pairs and --nodes: each pair's partners on the same node, so no message crosses between \
            nodes and no two nodes write one conversation (by default every pair is split between two nodes).
            """
    )
    var partnersOnOneNode = false

    @Flag(
        help: """
            With --pattern pairs or group: every user also has a Web Push subscription (never pushed: the users are \
            online), so that every message writes, takes and drops a row of the push outbox: what the push path \
            costs the messages themselves.
            """
    )
    var pushSubscribers = false

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
        help: """
            With --pattern idle: the processes the connections come from, each from its own loopback address \
            (127.0.0.2, 127.0.0.3, …) and with its own open-file limit, to fill a server up to its connection \
            limit; the report adds how many were refused and how many answered a ping after --settle.
            """
    )
    var processes = 1

    @Option(
        help: ArgumentHelp(
            "Run the servers on this PostgreSQL database (the run's users stay in it); the password may be in $PGPASSWORD.",
            valueName: "postgres-url"
        )
    )
    var database: String?

    @Option(help: "With --database: how many servers (nodes) share it.")
    var nodes = 1

    @Option(help: .hidden)
    var idleWorker: String?

    @Option(help: .hidden)
    var source: String?

    @Option(
        name: .customLong("limit"),
        help: ArgumentHelp("A server limit, NAME=VALUE, passed to courier serve (repeatable).", valueName: "name=value")
    )
    var limits: [String] = []

    func validate() throws {
        if self.idleWorker != nil {
            guard let server, self.source != nil else {
                throw ValidationError("--idle-worker needs --server and --source")
            }
            _ = try ClientOptions.address(server)
            return
        }
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
        if self.partnersOnOneNode {
            guard self.pattern == .pairs, self.nodes > 1, self.connections.isMultiple(of: 2 * self.nodes) else {
                throw ValidationError(
                    "--partners-on-one-node goes with --pattern pairs, --nodes 2 or more, and --connections a "
                        + "multiple of twice the nodes"
                )
            }
        }
        guard self.processes >= 1, self.processes <= 250 else {
            throw ValidationError("--processes must be between 1 and 250")
        }
        if self.processes > 1, self.pattern != .idle || self.server != nil {
            throw ValidationError("--processes goes with --pattern idle, on a server the bench starts")
        }
        guard let transport = BenchTransport(rawValue: self.transport) else {
            throw ValidationError("--transport is native or websocket, not \(self.transport)")
        }
        if transport == .websocket {
            guard [.pairs, .group, .idle].contains(self.pattern), self.server == nil, self.database == nil,
                self.storm == 0, self.processes == 1
            else {
                throw ValidationError(
                    "--transport websocket goes with --pattern pairs, group or idle, on one server the bench starts "
                        + "(without --server, --database, --storm or --processes)"
                )
            }
        }
        if self.storm < 0 { throw ValidationError("--storm must not be negative") }
        if let stormRate, stormRate <= 0 || self.storm == 0 {
            throw ValidationError("--storm-rate must be positive, with --storm")
        }
        if self.storm > 0, self.pattern != .pairs && self.pattern != .group || self.server != nil {
            throw ValidationError("--storm goes with --pattern pairs or group, on a server the bench starts")
        }
        if [.media, .proxy, .search, .push].contains(self.pattern), self.server != nil {
            throw ValidationError("--pattern \(self.pattern.rawValue) starts its own server")
        }
        if self.pattern == .search {
            guard self.stored > 0, self.queries > 0, self.connections >= 16 else {
                throw ValidationError(
                    "--pattern search needs --stored and --queries positive, and 16 --connections or more"
                )
            }
        }
        guard (1...16).contains(self.nodes) else { throw ValidationError("--nodes must be between 1 and 16") }
        if self.nodes > 1, self.database == nil { throw ValidationError("--nodes goes with --database") }
        if self.database != nil {
            guard [.pairs, .group, .search, .media].contains(self.pattern), self.server == nil, self.storm == 0,
                self.pattern != .media || self.nodes == 1
            else {
                throw ValidationError(
                    "--database goes with --pattern pairs, group, search or media (one node), without --server or "
                        + "--storm"
                )
            }
            _ = try self.databaseURL()
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
        configuration.transport = BenchTransport(rawValue: self.transport) ?? .native
        configuration.pattern =
            switch self.pattern {
            case .pairs: .pairs
            case .group: .groups(size: self.groupSize)
            case .idle, .media, .proxy, .search, .push: .idle
            }
        configuration.messagesPerConnection = self.messages
        configuration.messageBytes = self.bytes
        configuration.rate = self.rate
        configuration.window = self.window
        configuration.settle = self.settle.duration
        configuration.processes = self.processes
        configuration.timeout = self.timeout.duration
        configuration.nodes = self.nodes
        configuration.partnersOnOneNode = self.partnersOnOneNode
        configuration.pushSubscribers = self.pushSubscribers
        return configuration
    }

    func run() async throws {
        ProcessSetup.raiseOpenFileLimit()
        if let idleWorker, let server, let source {
            let (host, port) = try ClientOptions.address(server)
            try await Benchmark.idleWorker(
                tokensFile: URL(fileURLWithPath: idleWorker),
                host: host,
                port: port,
                source: source,
                timeout: self.timeout.duration
            )
            return
        }
        var plan = BenchPlan(
            configuration: self.benchConfiguration,
            executable: URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        )
        plan.scenario =
            switch self.pattern {
            case .media: .media
            case .proxy: .proxy(runs: self.runs, readers: self.readers)
            case .search: .search(stored: self.stored, queries: self.queries)
            case .push: .push(recipients: self.connections, messages: self.messages)
            case .pairs, .group, .idle: .messages
            }
        plan.fileBytes = Int64(self.bytes)
        if let server = self.server, let data = self.data {
            let (host, port) = try ClientOptions.address(server)
            plan.externalServer = .init(
                host: host,
                port: port,
                dataFolder: URL(fileURLWithPath: data),
                pid: self.serverPid
            )
        }
        plan.storm = self.storm
        plan.stormRate = self.stormRate
        plan.serverLimits = self.limits
        plan.measureCeilings = !self.noCeilings
        plan.keepData = self.keepData
        plan.database = try self.databaseURL()
        plan.nodes = self.nodes
        let outcome = try await Benchmark.run(plan) { line in
            FileHandle.standardError.write(Data("bench: \(line)\n".utf8))
        }
        print(self.json ? outcome.json : outcome.text)
        if let problem = outcome.problem { throw CommandFailure(description: problem) }
    }

    /// --database, with the password from `PGPASSWORD` when the URL has none.
    func databaseURL() throws -> String? {
        guard let database else { return nil }
        guard var components = URLComponents(string: database),
            components.scheme == "postgres" || components.scheme == "postgresql", components.host != nil
        else {
            throw ValidationError("--database must be a URL: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE")
        }
        if components.password == nil, let password = ProcessInfo.processInfo.environment["PGPASSWORD"] {
            components.password = password
        }
        return components.string ?? database
    }
}
