import ArgumentParser
import CourierServer
import Foundation
import Logging
import MediaCache
import NIOCore
import ServiceLifecycle

/// `courier proxy`: the play-while-caching proxy, and commands that talk to a running one.
struct ProxyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "proxy",
        abstract: "Run the play-while-caching media proxy, or talk to a running one.",
        discussion: """
            A local HTTP proxy a media player points at: http://127.0.0.1:6990/?url=<percent-encoded origin URL>, or \
            the path form `courier proxy url` prints. It serves byte ranges from its cache, fetches only the missing \
            ones from the origin (one fetch however many players ask), and caches them while they stream; HLS \
            playlists are rewritten to come back through it, and their keys are held in memory only. Control: \
            GET /_stats, GET /_cache, DELETE /_cache?url=, POST /_preload?url=&bytes=. See docs/MEDIACACHE.md.
            """,
        subcommands: [ProxyServe.self, ProxyPreload.self, ProxyStats.self, ProxyURLCommand.self],
        defaultSubcommand: ProxyServe.self
    )
}

/// Where a running proxy listens.
struct ProxyAddressOptions: ParsableArguments {
    /// The proxy used when neither `--proxy` nor `COURIER_PROXY` names one.
    static let defaultProxy = "127.0.0.1:6990"

    @Option(
        help: ArgumentHelp(
            "The running proxy (default: $COURIER_PROXY, else \(ProxyAddressOptions.defaultProxy)).",
            valueName: "host:port"
        )
    )
    var proxy: String?

    /// The proxy as given: `--proxy`, else `COURIER_PROXY`, else the default.
    var proxyText: String {
        self.proxy ?? ProcessInfo.processInfo.environment["COURIER_PROXY"] ?? Self.defaultProxy
    }

    func validate() throws {
        _ = try ClientOptions.address(self.proxyText, flag: "--proxy")
    }

    @Option(
        help: ArgumentHelp(
            "The running proxy's cache folder, where it keeps the secret its control endpoints need.",
            valueName: "folder"
        )
    )
    var cacheDir: String = "courier-cache"

    var address: ProxyURL {
        let (host, port) = (try? ClientOptions.address(self.proxyText, flag: "--proxy")) ?? ("127.0.0.1", 6990)
        return ProxyURL(host: host.contains(":") ? "[\(host)]" : host, port: port)
    }

    /// A client of the running proxy's control endpoints, with the secret from its cache folder.
    var control: ProxyControl {
        ProxyControl(
            address: self.address,
            secret: ProxyControl.secret(inCacheDirectory: URL(fileURLWithPath: self.cacheDir, isDirectory: true))
        )
    }
}

struct ProxyServe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the proxy (the default subcommand: `courier proxy --port 6990` runs it).",
        discussion: """
            Listens on 127.0.0.1 (other machines cannot use the cache) until SIGTERM or SIGINT. The cache keeps \
            its bytes in --cache-dir, in blocks of --block-bytes, evicting the least recently used blocks beyond \
            --max-bytes; a resource larger than that streams through uncached. What is cached survives a restart \
            (and a crash: the index lists only bytes that reached the disk).
            """
    )

    @Option(help: "The address to listen on.")
    var host: String = "127.0.0.1"

    @Option(parsing: .unconditional, help: "The port to listen on; 0 picks a free one (printed at start).")
    var port: Int = 6990

    @Option(help: ArgumentHelp("The cache folder (created if missing).", valueName: "folder"))
    var cacheDir: String = "courier-cache"

    @Option(help: ArgumentHelp("The most bytes cached: a number with an optional K, M or G.", valueName: "size"))
    var maxBytes: String = "2G"

    @Option(help: ArgumentHelp("The block size: the unit of eviction (K, M or G).", valueName: "size"))
    var blockBytes: String = "1M"

    @Option(
        name: .customLong("allow-host"),
        help: ArgumentHelp("Fetch only from this origin host (repeatable; default: any host).", valueName: "host")
    )
    var allowedHosts: [String] = []

    @Option(
        help: ArgumentHelp(
            "The least time between two revalidations of a resource whose freshness has run out (250ms, 30s, 2m…).",
            valueName: "duration"
        )
    )
    var revalidateInterval = DurationValue(.seconds(60))

    @Option(
        name: .customLong("host-name"),
        help: ArgumentHelp(
            "Another name players may reach the proxy by, in the Host header (repeatable; default: its own "
                + "address, 127.0.0.1, localhost and [::1]).",
            valueName: "name"
        )
    )
    var hostNames: [String] = []

    @Flag(
        help: """
            Open the control endpoints (/_stats, /_cache, /_preload) to any local client. By default they need \
            the secret the proxy writes to the cache folder's control-secret file (the proxy commands read it).
            """
    )
    var openControl = false

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "info"

    func validate() throws {
        try PortNumber.check(self.port, flag: "--port", allowsZero: true)
        guard self.revalidateInterval.duration > .zero else {
            throw ValidationError("--revalidate-interval \(self.revalidateInterval) must be longer than zero")
        }
    }

    func run() async throws {
        var configuration = MediaCacheConfiguration(
            cacheDirectory: URL(fileURLWithPath: self.cacheDir, isDirectory: true)
        )
        configuration.host = self.host
        configuration.port = self.port
        configuration.maxBytes = try ByteSize.parse(self.maxBytes, option: "--max-bytes")
        configuration.blockBytes = try ByteSize.parse(self.blockBytes, option: "--block-bytes")
        configuration.coalesceBytes = configuration.blockBytes * 2
        configuration.revalidationInterval = self.revalidateInterval.seconds
        if !self.allowedHosts.isEmpty { configuration.allowedHosts = Set(self.allowedHosts) }
        configuration.hostNames = Set(self.hostNames.map { $0.lowercased() })
        if self.openControl { configuration.controlSecret = nil }
        guard let level = Logger.Level(rawValue: self.logLevel) else {
            throw ValidationError("unknown log level \(self.logLevel)")
        }
        ProcessSetup.ignoreBrokenPipes()
        var logger = Logger(label: "courier.proxy")
        logger.logLevel = level
        let proxy: CacheProxy
        do {
            proxy = try CacheProxy(configuration: configuration, logger: logger)
        } catch {
            throw CommandFailure(description: "cannot open the cache in \(self.cacheDir): \(error)")
        }
        let group = ServiceGroup(
            configuration: .init(
                services: [.init(service: proxy)],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask {
                do {
                    try await group.run()
                } catch let error as IOError {
                    throw CommandFailure(
                        description: "cannot listen on port \(self.port) of \(self.host): "
                            + "\(ListenFailed.reason(for: error, host: self.host)); choose another with --port"
                    )
                }
            }
            tasks.addTask {
                guard let port = try? await proxy.listeningPort() else { return }
                // Written at once (not through print's buffer), also when standard output is a pipe or a file: a
                // script waits for this line.
                let host = self.host.contains(":") ? "[\(self.host)]" : self.host
                ProcessSetup.say("courier proxy listening on http://\(host):\(port)/?url=<origin URL>")
            }
            try await tasks.waitForAll()
        }
    }
}

struct ProxyPreload: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "preload",
        abstract: "Have a running proxy cache the start of a resource, or a playlist's first segments and keys."
    )

    @Argument(help: "The origin URL.")
    var url: String

    @Option(help: ArgumentHelp("Bytes of a resource to cache (K, M or G; default: one block).", valueName: "size"))
    var bytes: String?

    @Option(parsing: .unconditional, help: "Segments of a playlist to cache (default: the proxy's, 3).")
    var segments: Int?

    func validate() throws {
        if let segments, segments < 0 { throw ValidationError("--segments \(segments) must not be negative") }
    }

    @OptionGroup var proxy: ProxyAddressOptions

    func run() async throws {
        guard let url = URL(string: self.url), url.scheme != nil else {
            throw ValidationError("\(self.url) is not an absolute URL")
        }
        let bytes = try self.bytes.map { try ByteSize.parse($0, option: "--bytes") }
        do {
            let result = try await self.proxy.control.preload(
                url,
                bytes: bytes,
                segments: self.segments
            )
            var line = "cached \(result.bytes) bytes"
            if result.playlists > 0 {
                line += " of \(result.segments) segments (\(result.playlists) playlists, \(result.keys) keys)"
            }
            print(line)
        } catch let error as MediaCacheError {
            throw CommandFailure(description: error.message)
        } catch {
            throw CommandFailure(description: "\(error)")
        }
    }
}

struct ProxyStats: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats",
        abstract: "Print a running proxy's statistics (GET /_stats) as JSON."
    )

    @OptionGroup var proxy: ProxyAddressOptions

    func run() async throws {
        do {
            let statistics = try await self.proxy.control.statistics()
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try encoder.encode(statistics), as: UTF8.self))
        } catch let error as MediaCacheError {
            throw CommandFailure(description: error.message)
        } catch {
            throw CommandFailure(description: "\(error)")
        }
    }
}

struct ProxyURLCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "url",
        abstract: "Print the proxy URL to give a player for an origin URL."
    )

    @Argument(help: "The origin URL.")
    var url: String

    @Flag(help: "Print the query form (/?url=…) instead of the path form (/r/…/name).")
    var query = false

    @OptionGroup var proxy: ProxyAddressOptions

    func run() async throws {
        guard let url = URL(string: self.url), let scheme = url.scheme?.lowercased(), url.host != nil else {
            throw ValidationError("\(self.url) is not an absolute URL")
        }
        guard scheme == "http" || scheme == "https" else {
            throw ValidationError("\(self.url): the proxy fetches http and https URLs only")
        }
        print(self.query ? self.proxy.address.query(for: url) : self.proxy.address.path(for: url))
    }
}
