import ArgumentParser
import CourierServer
import CourierStore
import CourierStorePostgres
import CourierStoreSQLite
import Foundation
import Logging
import ServiceLifecycle

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the Courier server: on an embedded SQLite database, or as one node of several on PostgreSQL.",
        discussion: """
            Listens on 127.0.0.1 by default: the native port (6970, Courier's binary framing), the compat port \
            (6969, the source notes' JSON-header framing) and the HTTP port (6980: the web chat at /, /health, /metrics, \
            /media, the HTTP API /api/v1 for bots (docs/BOTS.md), and the WebSocket gateway /ws, the native \
            session's envelopes as JSON for browsers). Data goes to \
            ./courier-data (courier.sqlite, in WAL mode with synchronous=FULL: an acknowledged message survives a \
            crash of the process or the machine). The address, port, TLS and data flags have environment variables \
            (named in each flag's help); the flag wins. Every flag and limit can also be set in a TOML file given \
            with --config (or $COURIER_CONFIG), in the form --print-config prints; flags and variables win over it, \
            and an unknown key in it is an error (contrib/courier.toml, docs/DEPLOY.md). Once it listens it prints "courier serve listening on \
            native HOST:PORT, compat HOST:PORT, http HOST:PORT" on standard output (ports picked with 0 included), \
            whatever the log level, then "web chat: URL", the page to open in a browser. SIGTERM or SIGINT stops \
            the server gracefully: no new connections, writes in flight are committed and \
            acknowledged, then the connections close. Started by systemd with Type=notify ($NOTIFY_SOCKET; \
            contrib/courier.service, docs/DEPLOY.md), it says READY=1 once it listens, STOPPING=1 when it drains, \
            and WATCHDOG=1 every half of WatchdogSec while its event loops answer. At start the server raises its \
            open-file limit to the hard limit, and a crash leaves its backtrace in <data>/crashes/ (unless \
            SWIFT_BACKTRACE is already set). One server per data folder: it holds <data>/server.lock, and a second \
            one on the folder exits with an error (the admin commands run beside it).

            Limits a user meets first (each a --limit, all in docs/PROTOCOL.md): a file is at most 2 GiB \
            (max-media-bytes), a user's stored files at most 20 GiB (media-quota-bytes), and a message can be \
            recalled for 2 minutes after it was sent (recall-window).

            With --database postgres://… (or $COURIER_DATABASE) the server is a node: any number of nodes share the \
            database, each with a data folder of its own (media, lock, crash reports), and clients may connect to \
            any of them. The node creates or migrates the schema at start (nodes starting together do not race). \
            After each commit it tells the other nodes which users' logs grew (PostgreSQL's NOTIFY), and it reads \
            its online users' cursors every cluster-poll-interval (--limit) and whenever its listener reconnects, \
            so that a lost notification costs latency, never a message. /health says which database it uses and \
            whether the listener is connected.
            """
    )

    @Option(help: "The address to bind (default: $COURIER_HOST, else 127.0.0.1).")
    var host: String?

    @Option(
        parsing: .unconditional,
        help: "The native port; 0 picks a free one (default: $COURIER_PORT, else 6970)."
    )
    var port: Int?

    @Option(
        name: .customLong("compat-port"),
        parsing: .unconditional,
        help: "The compat port (default: $COURIER_COMPAT_PORT, else 6969)."
    )
    var compatPort: Int?

    @Option(
        name: .customLong("http-port"),
        parsing: .unconditional,
        help: "The HTTP port (default: $COURIER_HTTP_PORT, else 6980)."
    )
    var httpPort: Int?

    @Option(
        name: .customLong("tls-cert"),
        help: ArgumentHelp(
            "A PEM certificate chain, leaf first: all three ports then speak TLS only (default: $COURIER_TLS_CERT).",
            valueName: "file"
        )
    )
    var tlsCertificate: String?

    @Option(
        name: .customLong("tls-key"),
        help: ArgumentHelp("The certificate's PEM private key (default: $COURIER_TLS_KEY).", valueName: "file")
    )
    var tlsKey: String?

    @OptionGroup var data: DataOptions

    @Option(
        help: ArgumentHelp(
            "With --database: how nodes learn of each other's messages: notify (PostgreSQL's NOTIFY, and polling to "
                + "catch what it misses; the default) or poll (polling alone, every cluster-poll-interval).",
            valueName: "notify|poll"
        )
    )
    var fanout: String?

    @Option(
        help: ArgumentHelp(
            "With --database: this node's name, unique among the nodes and the same at each start (default: "
                + "$COURIER_NODE, else HOSTNAME:PORT).",
            valueName: "name"
        )
    )
    var node: String?

    @Option(
        name: .customLong("forward-host"),
        help: ArgumentHelp(
            "With --database and --limit forward-writes=1: the address this node's forward port listens on, where the "
                + "other nodes send it the writes of the conversations it owns (default: 127.0.0.1, for nodes on one "
                + "machine). Keep it on a network only the nodes share.",
            valueName: "address"
        )
    )
    var forwardHost: String?

    @Option(
        name: .customLong("forward-advertise-host"),
        help: ArgumentHelp(
            "The host the other nodes dial this node's forward port at, when it is not --forward-host (behind NAT, "
                + "or a --forward-host of 0.0.0.0).",
            valueName: "host"
        )
    )
    var forwardAdvertiseHost: String?

    @Flag(
        name: .customLong("allow-private-targets"),
        help: ArgumentHelp(
            "Let Web Push endpoints be plain http:// and reach loopback and private addresses (for tests and private "
                + "networks; off, a subscription's endpoint must be https)."
        )
    )
    var allowPrivateTargets = false

    @Option(
        help: ArgumentHelp(
            "Who runs this server, for the Web Push services (a mailto: or https: URL, sent in every push's VAPID "
                + "token; default mailto:postmaster@localhost, which some services refuse).",
            valueName: "url"
        )
    )
    var pushContact: String?

    @Option(
        help: ArgumentHelp(
            "Who may make an account: closed (only `courier user add`; the default), invite (whoever holds a "
                + "`courier invite create` token) or open (anyone; sign-ups are throttled per address and in all).",
            valueName: "closed|invite|open"
        )
    )
    var registration: String?

    @Option(
        name: .customLong("allow-origin"),
        help: ArgumentHelp(
            "An origin (scheme://host[:port]) whose pages may open the WebSocket gateway /ws, besides the server's own "
                + "when reached by IP address or localhost; a server reached by name lists it here "
                + "(https://chat.example.com). Repeat for several. Browsers from other origins get 403.",
            valueName: "origin"
        )
    )
    var allowedOrigins: [String] = []

    @Option(
        name: .customLong("trusted-proxy"),
        help: ArgumentHelp(
            "A proxy in front of the server (nginx), by address or network (127.0.0.1, 10.0.0.0/8, ::1). Its "
                + "connections to the native and compat ports must start with a PROXY protocol header (nginx's stream "
                + "module: proxy_protocol on), and its HTTP requests' X-Forwarded-For names the client: the "
                + "per-address limits count the client, not the proxy. Repeat for several; docs/DEPLOY.md.",
            valueName: "address[/bits]"
        )
    )
    var trustedProxies: [String] = []

    @Flag(help: "Turn the WebSocket gateway (/ws on the HTTP port, which the web chat uses) off.")
    var noWebSocket = false

    @Flag(help: "Turn the web chat (the page at / on the HTTP port) off; --no-web-socket turns it off too.")
    var noWebChat = false

    @Option(
        help: ArgumentHelp(
            "Serve the web chat's files from this folder (read at start) instead of those built in: for working on "
                + "the page (Web/ in the repository).",
            valueName: "folder"
        )
    )
    var webRoot: String?

    @Option(
        name: .customLong("otlp-endpoint"),
        help: ArgumentHelp(
            "Trace messages (a span for each send, its commit, and each delivery) and send the spans over OTLP/HTTP "
                + "to this OpenTelemetry collector (http://HOST:4318; its /v1/traces unless the URL has a path). Off "
                + "without it. Every trace kept nearly doubles the CPU a message costs: on a busy server keep a share "
                + "(OTEL_TRACES_SAMPLER=traceidratio, OTEL_TRACES_SAMPLER_ARG=0.01). The OTEL_* variables apply over "
                + "this flag and the file (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, …); docs/DEPLOY.md.",
            valueName: "url"
        )
    )
    var otlpEndpoint: String?

    @Option(name: .customLong("limit"), help: ArgumentHelp(LimitOption.help, valueName: "name=value"))
    var limits: [String] = []

    @Option(help: "Log level: trace, debug, info (the default), notice, warning, error, critical.")
    var logLevel: String?

    @Flag(
        name: .customLong("print-config"),
        help: ArgumentHelp(
            "Print the configuration these flags, environment variables and --config file give, as a configuration "
                + "file (every limit included; the database's password hidden), and exit without opening the store "
                + "or any port."
        )
    )
    var printConfig = false

    mutating func validate() throws {
        let environment = ProcessInfo.processInfo.environment
        if let path = ConfigFile.path(flag: self.data.config, environment: environment) {
            self.take(try ConfigFile.read(path: path), environment: environment)
        }
        for (flag, port) in [("--port", self.port), ("--compat-port", self.compatPort), ("--http-port", self.httpPort)]
        {
            if let port { try PortNumber.check(port, flag: flag, allowsZero: true) }
        }
        if let contact = self.pushContact {
            let lower = contact.lowercased()
            guard (lower.hasPrefix("mailto:") && contact.count > 7) || lower.hasPrefix("https://"),
                contact.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F })
            else {
                throw ValidationError("--push-contact takes a mailto: or https: URL, not \(contact.debugDescription)")
            }
        }
        if let registration = self.registration,
            ServerConfiguration.Accounts.Registration(rawValue: registration) == nil
        {
            throw ValidationError("--registration is closed, invite or open, not \(registration)")
        }
        do {
            _ = try TrustedProxies(self.trustedProxies)
        } catch {
            throw ValidationError("--trusted-proxy: \(error)")
        }
        for origin in self.allowedOrigins where !ServerConfiguration.WebSocket.isOrigin(origin) {
            throw ValidationError("--allow-origin takes scheme://host[:port] (http or https, no path), not \(origin)")
        }
        try self.validateTracing(environment: environment)
        if let fanout = self.fanout, PostgresFeed.Mode(rawValue: fanout) == nil {
            throw ValidationError("--fanout is notify or poll, not \(fanout)")
        }
        // Checked here, so that a wrong one is said with this command's usage.
        var limits = ServerConfiguration()
        try LimitOption.apply(self.limits, to: &limits)
    }

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        func port(_ flag: Int?, _ variable: String) throws -> Int? {
            if let flag { return flag }
            guard let value = environment[variable] else { return nil }
            guard let port = Int(value), (0...65535).contains(port) else {
                throw ValidationError("\(variable)=\(value) is not a port number")
            }
            return port
        }
        var configuration = ServerConfiguration()
        configuration.host = self.host ?? environment["COURIER_HOST"] ?? configuration.host
        configuration.nativePort = try port(self.port, "COURIER_PORT") ?? configuration.nativePort
        configuration.compatPort = try port(self.compatPort, "COURIER_COMPAT_PORT") ?? configuration.compatPort
        configuration.httpPort = try port(self.httpPort, "COURIER_HTTP_PORT") ?? configuration.httpPort
        configuration.dataFolder = self.data.folder
        configuration.accounts.registration = self.registration.flatMap { .init(rawValue: $0) } ?? .closed
        configuration.webSocket.enabled = !self.noWebSocket
        configuration.webSocket.allowedOrigins = self.allowedOrigins
        configuration.trustedProxies = try TrustedProxies(self.trustedProxies)
        configuration.web.enabled = !self.noWebChat
        configuration.web.root = self.webRoot
        if let host = self.forwardHost { configuration.cluster.forwardHost = host }
        configuration.cluster.forwardAdvertisedHost = self.forwardAdvertiseHost
        configuration.push.allowPrivateTargets = self.allowPrivateTargets
        if let contact = self.pushContact { configuration.push.subject = contact }
        try LimitOption.apply(self.limits, to: &configuration)
        switch (self.tlsCertificate ?? environment["COURIER_TLS_CERT"], self.tlsKey ?? environment["COURIER_TLS_KEY"]) {
        case (nil, nil):
            break
        case (let certificate?, let key?):
            do {
                configuration.tls = try ServerConfiguration.tls(certificateChainFile: certificate, privateKeyFile: key)
            } catch {
                throw CommandFailure(description: "\(error)")
            }
        default:
            throw ValidationError("--tls-cert and --tls-key go together")
        }

        guard let level = Logger.Level(rawValue: self.logLevel ?? "info") else {
            throw ValidationError("unknown log level \(self.logLevel ?? "")")
        }
        if self.printConfig {
            print(try self.configurationText(configuration, environment: environment))
            return
        }
        // Whether this run makes the data folder: a start that fails (a port in use) then leaves nothing behind.
        // Said to the process the crash reports' set-up starts again, which finds the folder made.
        let folder = configuration.dataFolder.standardizedFileURL.path
        let reexecuted = environment[ProcessSetup.backtraceVariable] != nil
        let madeHere =
            !FileManager.default.fileExists(atPath: folder)
            || (reexecuted && environment[Self.madeFolderVariable] == folder)
        if madeHere, !reexecuted {
            setenv(Self.madeFolderVariable, folder, 1)
        } else {
            // Read once, by the process the crash-report set-up started: its children never see it.
            unsetenv(Self.madeFolderVariable)
        }
        // A data folder without Courier's database gets a new one: said once listening (a mistyped --data shows).
        let newData = try self.data.postgres() == nil && !self.data.holdsData
        // A crash leaves its backtrace in <data>/crashes/ (this re-executes the program once to set that up).
        ProcessSetup.enableCrashReports(in: configuration.dataFolder.appendingPathComponent("crashes"))
        let files = ProcessSetup.raiseOpenFileLimit()
        ProcessSetup.ignoreBrokenPipes()
        var logger = Logger(label: "courier")
        logger.logLevel = level
        if let files {
            logger.info("open-file limit", metadata: ["before": "\(files.before)", "now": "\(files.after)"])
        }
        // Traces, when asked for: the tracer before the server is made (it is part of its configuration).
        let tracing = try self.tracing(&configuration, environment: environment, logger: logger)
        let server: CourierServer
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = []
        if let location = try self.data.postgres() {
            let node =
                self.node ?? environment["COURIER_NODE"]
                ?? "\(ProcessInfo.processInfo.hostName):\(configuration.nativePort)"
            let store = PostgresStore(
                location: location,
                configuration: PostgresStore.Configuration(serving: configuration.store, node: node),
                logger: logger
            )
            var feedConfiguration = PostgresFeed.Configuration()
            feedConfiguration.mode = self.fanout.flatMap { PostgresFeed.Mode(rawValue: $0) } ?? .notify
            let feed = PostgresFeed(store: store, configuration: feedConfiguration, logger: logger)
            do {
                let applied = try await store.migrate()
                logger.info(
                    "database",
                    metadata: ["location": "\(location)", "node": "\(node)", "migrated": "\(applied)"]
                )
                server = try CourierServer(
                    configuration: configuration,
                    store: store,
                    feed: feed,
                    version: CourierVersion.current,
                    logger: logger
                )
            } catch {
                throw CommandFailure(description: "\(error)")
            }
            // Shut down in the reverse order: the server (its last commits), then the feed, then the pool.
            services = [.init(service: store), .init(service: feed), .init(service: server)]
        } else {
            do {
                server = try CourierServer(
                    configuration: configuration,
                    version: CourierVersion.current,
                    logger: logger
                ) {
                    try SQLiteStore(folder: $0, configuration: .init(serving: configuration.store), logger: logger)
                }
            } catch {
                throw CommandFailure(description: "\(error)")
            }
            services = [.init(service: server)]
        }
        // First, so it stops last (the drain's spans go out too).
        if let tracing { services.insert(tracing, at: 0) }
        // Started by systemd with Type=notify: readiness below, the watchdog and the drain's start as a service, shut
        // down first (the last of the group).
        let systemd = SystemdNotifier()
        if let systemd {
            services.append(
                .init(
                    service: SystemdService(notifier: systemd, watchdogInterval: SystemdNotifier.watchdogInterval()),
                    successTerminationBehavior: .ignore
                )
            )
        }
        let group = ServiceGroup(
            configuration: .init(
                services: services,
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        do {
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await group.run() }
                // Said at once on standard output (not through print's buffer), whatever the log level: a script
                // waits for this line, and learns the ports it asked to be picked (0).
                if let ports = await server.ports() {
                    let host = configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host
                    let listening =
                        "native \(host):\(ports.native), compat \(host):\(ports.compat), http \(host):\(ports.http)"
                    ProcessSetup.say("courier serve listening on \(listening)")
                    let scheme = configuration.tls == nil ? "http" : "https"
                    ProcessSetup.say("web chat: \(scheme)://\(Self.browsable(configuration.host)):\(ports.http)/")
                    if newData { self.data.sayMade() }
                    systemd?.send("READY=1\nSTATUS=listening on \(listening)\nMAINPID=\(getpid())")
                }
                try await tasks.waitForAll()
            }
        } catch let error as ListenFailed {
            if madeHere { Self.removeUnused(folder: folder) }
            let flag =
                ["native": "--port", "compat": "--compat-port", "http": "--http-port"][error.port.rawValue] ?? ""
            throw CommandFailure(description: "\(error); choose another with \(flag)")
        }
    }

    /// The host a browser on this machine reaches a server bound to `host` at: loopback for the wildcard addresses.
    static func browsable(_ host: String) -> String {
        switch host {
        case "0.0.0.0", "": "127.0.0.1"
        case "::", "[::]": "[::1]"
        default: host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        }
    }

    /// Names the data folder a `serve` made, across the re-execution that sets up crash reports.
    static let madeFolderVariable = "COURIER_SERVE_MADE_FOLDER"

    /// What a start that never served leaves in a folder it made: removed only if nothing else is there (an admin
    /// command's work, another server's) and no message, file or crash was stored.
    ///
    /// Under the folder's server lock (taken again; if another server holds it, nothing is touched), and one known
    /// name at a time, folders only once empty: a file that another process puts there meanwhile stays, and so does
    /// the folder.
    static func removeUnused(folder: String) {
        let manager = FileManager.default
        let lockPath = folder + "/server.lock"
        let lock = open(lockPath, O_RDWR | O_CLOEXEC)
        guard lock >= 0 else { return }
        defer { close(lock) }
        guard flock(lock, LOCK_EX | LOCK_NB) == 0 else { return }
        guard let entries = manager.subpaths(atPath: folder) else { return }
        let database = SQLiteStore.databaseFileName
        let made: Set<String> = [database, database + "-wal", database + "-shm", "server.lock", "crashes", "media"]
        var folders: [String] = []
        var files: [String] = []
        for entry in entries {
            let top = String(entry.split(separator: "/").first ?? "")
            var isFolder: ObjCBool = false
            _ = manager.fileExists(atPath: folder + "/" + entry, isDirectory: &isFolder)
            // Folders under media/ and crashes/ are made empty at the start; any file in them is someone's.
            guard made.contains(top), entry == top || isFolder.boolValue else { return }
            if isFolder.boolValue { folders.append(entry) } else { files.append(entry) }
        }
        for file in files where file != "server.lock" { unlink(folder + "/" + file) }
        // The deepest first; rmdir fails on a folder something was put in since.
        for sub in folders.sorted(by: { $0.count > $1.count }) { rmdir(folder + "/" + sub) }
        unlink(lockPath)
        rmdir(folder)
    }
}

struct StandardError: TextOutputStream {
    mutating func write(_ string: String) {
        FileHandle.standardError.write(Data(string.utf8))
    }
}
