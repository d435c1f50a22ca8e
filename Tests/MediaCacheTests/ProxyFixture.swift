import CourierTesting
import Foundation
import Logging
import MediaCache
import Testing

/// A proxy in this process in front of a real nginx, over temporary folders; stopped after `body`.
struct ProxyFixture {
    let folder: URL
    /// The folder nginx serves.
    let media: URL
    let nginx: NginxOrigin
    let proxy: CacheProxy
    let port: Int

    var cacheDirectory: URL { self.proxy.configuration.cacheDirectory }

    /// What a test changes in the proxy's configuration.
    struct Settings {
        var blockBytes: Int64 = 64 << 10
        var coalesceBytes: Int64 = 128 << 10
        var maxBytes: Int64?
        var revalidationInterval: TimeInterval?
        var allowedHosts: Set<String>?
        var keyProvider: (@Sendable (URL) async throws -> [UInt8]?)?
        var cacheKey: (@Sendable (URL) -> String)?
        var originReadTimeout: Duration?
        var maxPlaylistBytes: Int?
        var maxKeyBytes: Int?
        var maxConnections: Int?
        var idleConnectionTimeout: Duration?
        var heldFetchTimeout: Duration?
        var readAheadBytes: Int64?
        var requestHeadTimeout: Duration?
    }

    /// Runs `body` with an nginx serving `files` (name → bytes) and a proxy with `settings`.
    static func with(
        files: [String: Data] = [:],
        limitRate: String = "2m",
        nginxExtra: String = "",
        settings: Settings = Settings(),
        _ body: (ProxyFixture) async throws -> Void
    ) async throws {
        try await withTemporaryDirectory(prefix: "courier-proxy") { folder in
            let media = folder.appendingPathComponent("media", isDirectory: true)
            try FileManager.default.createDirectory(at: media, withIntermediateDirectories: true)
            for (name, data) in files { try data.write(to: media.appendingPathComponent(name)) }
            let nginx = try await NginxOrigin.start(
                root: media,
                folder: folder.appendingPathComponent("nginx", isDirectory: true),
                limitRate: limitRate,
                extra: nginxExtra
            )
            var configuration = MediaCacheConfiguration(
                cacheDirectory: folder.appendingPathComponent("cache", isDirectory: true)
            )
            configuration.port = 0
            configuration.blockBytes = settings.blockBytes
            configuration.coalesceBytes = settings.coalesceBytes
            configuration.maxBytes = settings.maxBytes ?? configuration.maxBytes
            configuration.revalidationInterval = settings.revalidationInterval ?? configuration.revalidationInterval
            configuration.allowedHosts = settings.allowedHosts
            configuration.keyProvider = settings.keyProvider
            if let cacheKey = settings.cacheKey { configuration.cacheKey = cacheKey }
            if let timeout = settings.originReadTimeout {
                configuration.originReadTimeout = .milliseconds(Int64(timeout / .milliseconds(1)))
            }
            if let timeout = settings.idleConnectionTimeout {
                configuration.idleConnectionTimeout = .milliseconds(Int64(timeout / .milliseconds(1)))
            }
            configuration.maxPlaylistBytes = settings.maxPlaylistBytes ?? configuration.maxPlaylistBytes
            configuration.maxKeyBytes = settings.maxKeyBytes ?? configuration.maxKeyBytes
            configuration.maxConnections = settings.maxConnections ?? configuration.maxConnections
            configuration.readAheadBytes = settings.readAheadBytes ?? configuration.readAheadBytes
            if let timeout = settings.heldFetchTimeout {
                configuration.heldFetchTimeout = .milliseconds(Int64(timeout / .milliseconds(1)))
            }
            if let timeout = settings.requestHeadTimeout {
                configuration.requestHeadTimeout = .milliseconds(Int64(timeout / .milliseconds(1)))
            }
            do {
                try await Self.running(configuration) { proxy, port in
                    try await body(ProxyFixture(folder: folder, media: media, nginx: nginx, proxy: proxy, port: port))
                }
            } catch {
                await nginx.stop()
                throw error
            }
            await nginx.stop()
        }
    }

    /// Runs a proxy with `configuration` for the duration of `body`.
    static func running(
        _ configuration: MediaCacheConfiguration,
        _ body: (CacheProxy, Int) async throws -> Void
    ) async throws {
        var logger = Logger(label: "courier.proxy.test")
        logger.logLevel = .warning
        let proxy = try CacheProxy(configuration: configuration, logger: logger)
        let running = Task { try await proxy.run() }
        do {
            let port = try await proxy.listeningPort()
            try await body(proxy, port)
        } catch {
            running.cancel()
            _ = await running.result
            throw error
        }
        running.cancel()
        _ = await running.result
    }

    /// Replaces a file of the origin with other bytes and a modification time `later` seconds after its present one:
    /// nginx's ETag (the time and the size) changes without waiting for the clock's next second.
    func replace(_ name: String, with data: Data, later: TimeInterval = 10) throws {
        let path = self.media.appendingPathComponent(name).path
        let modified = try FileManager.default.attributesOfItem(atPath: path)[.modificationDate] as? Date ?? Date()
        try data.write(to: URL(fileURLWithPath: path))
        try FileManager.default.setAttributes(
            [.modificationDate: modified.addingTimeInterval(later)],
            ofItemAtPath: path
        )
    }

    /// The proxy URL (query form) of a file of the origin under a location.
    func url(_ name: String, location: String = "files") -> String {
        ProxyURL(port: self.port).query(for: self.nginx.url(name, location: location)).absoluteString
    }

    /// The proxy URL (path form).
    func pathURL(_ name: String, location: String = "files") -> String {
        ProxyURL(port: self.port).path(for: self.nginx.url(name, location: location)).absoluteString
    }

    /// The origin's bytes for a file.
    func file(_ name: String) throws -> Data {
        try Data(contentsOf: self.media.appendingPathComponent(name))
    }

    func statistics() async throws -> CacheStatistics {
        try await ProxyControl(address: ProxyURL(port: self.port), secret: self.proxy.configuration.controlSecret)
            .statistics()
    }

    func resources() async throws -> [CachedResource] {
        try await ProxyControl(address: ProxyURL(port: self.port), secret: self.proxy.configuration.controlSecret)
            .resources()
    }

    /// Body bytes nginx logged as sent for a location's file.
    func originBytes(_ name: String, location: String = "files") -> Int64 {
        self.nginx.log().filter { $0.uri == "/\(location)/\(name)" }.reduce(0) { $0 + $1.bodyBytes }
    }
}

/// curl, run to completion.
enum Curl {
    struct Response {
        var status: Int
        /// Header names lowercased; the last response's headers (after redirects, if followed).
        var headers: [String: String]
        var body: Data
        /// curl's exit status: 0, or 18 for a body shorter than its Content-Length, and so on.
        var exitStatus: Int32
    }

    static func get(
        _ url: String,
        range: String? = nil,
        head: Bool = false,
        method: String? = nil,
        headers extra: [String] = [],
        options: [String] = [],
        in folder: URL
    ) async throws -> Response {
        let name = UUID().uuidString
        let bodyFile = folder.appendingPathComponent("\(name).body")
        let headerFile = folder.appendingPathComponent("\(name).headers")
        defer {
            try? FileManager.default.removeItem(at: bodyFile)
            try? FileManager.default.removeItem(at: headerFile)
        }
        // The time limit only keeps a hung test from hanging the run: a loaded machine (the whole suite at once on two
        // cores) may take a minute over a transfer a quiet one makes in a second, and curl giving up is an error
        // here, never a short body.
        var arguments = ["-s", "-D", headerFile.path, "-o", bodyFile.path, "--max-time", "900"]
        if let range { arguments += ["-H", "Range: bytes=\(range)"] }
        if head { arguments.append("-I") }
        if let method { arguments += ["-X", method] }
        for header in extra { arguments += ["-H", header] }
        arguments += options
        arguments.append(url)
        let result = try await ExternalProgram.run("/usr/bin/curl", arguments)
        if result.status == 28 { throw CurlTimedOut(url: url) }
        let headerText = (try? String(contentsOf: headerFile, encoding: .utf8)) ?? ""
        var status = 0
        var headers: [String: String] = [:]
        for line in headerText.split(separator: "\r\n") {
            if line.hasPrefix("HTTP/") {
                status = Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
                headers = [:]
            } else if let colon = line.firstIndex(of: ":") {
                headers[line[..<colon].lowercased()] = line[line.index(after: colon)...]
                    .trimmingCharacters(in: .whitespaces)
            }
        }
        let body = (try? Data(contentsOf: bodyFile)) ?? Data()
        return Response(status: status, headers: headers, body: body, exitStatus: result.status)
    }
}

/// curl gave up on a transfer after its time limit.
struct CurlTimedOut: Error, CustomStringConvertible {
    var url: String
    var description: String { "curl gave up on \(self.url) after its time limit" }
}

/// Random bytes from a seed.
func randomData(_ count: Int, seed: UInt64) -> Data {
    var random = SeededRandom(seed: seed)
    var bytes: [UInt8] = []
    bytes.reserveCapacity(count)
    random.appendBytes(count, to: &bytes)
    return Data(bytes)
}
