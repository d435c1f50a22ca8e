import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Requests to URLs that users gave (push endpoints; later webhooks and push gateways), which must never reach
/// the server's own network: the host is resolved here, the address checked (``TargetAddress``), and the
/// connection made to that very address (AsyncHTTPClient's DNS override, the certificate still checked for the
/// host), so a name that resolves to a public address for the check and a private one for the connection gets
/// nowhere. No redirect is followed; the connection and the whole request have deadlines; at most
/// ``Limits/maxResponseBytes`` of an answer are read.
///
/// Unless private targets are allowed (tests, private deployments): then any `http` or `https` URL is requested as
/// it is.
final class OutboundHTTP: Sendable {
    struct Limits: Sendable {
        var connectTimeout: Duration = .seconds(5)
        var requestTimeout: Duration = .seconds(15)
        var maxResponseBytes: Int = 16 << 10
        /// How long a host's checked address is used before it is resolved again.
        var resolvedFor: Duration = .seconds(300)
        /// The most hosts with a client of their own (the least recently used goes first).
        var maxHosts: Int = 64
        var allowPrivateTargets = false
    }

    struct Response: Sendable {
        var status: Int
        var headers: HTTPHeaders
        /// The answer's first ``Limits/maxResponseBytes`` bytes.
        var body: [UInt8]
    }

    /// A URL not requested: what it says is safe to log (no path, no query).
    struct Refusal: Error, CustomStringConvertible {
        var description: String
    }

    /// A request that did not finish within its deadline (resolving, connecting, sending and the answer together).
    struct TimedOut: Error {}

    private struct Pinned {
        var client: HTTPClient
        var address: String
        var resolved: ContinuousClock.Instant
        var used: UInt64
    }

    private struct State {
        var pinned: [String: Pinned] = [:]
        var uses: UInt64 = 0
        var closed = false
    }

    private let limits: Limits
    private let logger: Logger
    /// For URLs whose host is an address already, and for everything when private targets are allowed.
    private let direct: HTTPClient
    private let state = Mutex(State())

    init(limits: Limits, logger: Logger) {
        self.limits = limits
        self.logger = logger
        self.direct = Self.client(limits, override: [:])
    }

    private static func client(_ limits: Limits, override: [String: String]) -> HTTPClient {
        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: .init(limits.connectTimeout), read: .init(limits.requestTimeout)),
            decompression: .disabled
        )
        configuration.dnsOverride = override
        configuration.connectionPool.retryConnectionEstablishment = false
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }

    /// Closes every client; requests in flight fail.
    func shutdown() async {
        let clients = self.state.withLock { state -> [HTTPClient] in
            state.closed = true
            defer { state.pinned = [:] }
            return state.pinned.values.map(\.client)
        }
        for client in clients { try? await client.shutdown() }
        try? await self.direct.shutdown()
    }

    /// Where a URL points, as logs name it: scheme, host and port.
    static func origin(of url: String) -> String {
        guard let parts = URLComponents(string: url), let scheme = parts.scheme, let host = parts.host else {
            return "(not a URL)"
        }
        return "\(scheme)://\(host)" + (parts.port.map { ":\($0)" } ?? "")
    }

    /// POSTs `body` to `url`.
    ///
    /// - Throws: ``Refusal`` for a URL that may not be requested (not http(s), a private address, a host that
    ///   resolves to none allowed); AsyncHTTPClient's errors for a request that failed (connection, deadline).
    func post(_ url: String, headers: [(name: String, value: String)], body: [UInt8]) async throws -> Response {
        // One deadline for all of it: a server that answers a byte at a time, or a name that takes long to
        // resolve, holds a push no longer than a silent one.
        let deadline = self.limits.connectTimeout + self.limits.requestTimeout
        return try await withThrowingTaskGroup(of: Response?.self) { group in
            group.addTask { try await self.request(url, headers: headers, body: body) }
            group.addTask {
                try await Task.sleep(for: deadline)
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let response = first else { throw TimedOut() }
            return response
        }
    }

    private func request(
        _ url: String,
        headers: [(name: String, value: String)],
        body: [UInt8]
    ) async throws
        -> Response
    {
        let (client, url) = try await self.client(for: url)
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        for (name, value) in headers where name.lowercased() != "content-length" {
            request.headers.add(name: name, value: value)
        }
        request.body = .bytes(ByteBuffer(bytes: body))
        let response = try await client.execute(request, timeout: .init(self.limits.requestTimeout))
        var kept: [UInt8] = []
        for try await chunk in response.body {
            let room = self.limits.maxResponseBytes - kept.count
            kept += chunk.readableBytesView.prefix(room)
            if kept.count >= self.limits.maxResponseBytes { break }
        }
        return Response(status: Int(response.status.code), headers: response.headers, body: kept)
    }

    /// The client that requests `url`, and the URL to give it: the direct client, or one whose connections go to
    /// the host's checked address. The URL's host is written in lower case, and must then be what AsyncHTTPClient
    /// reads from it (`URL.host`, which keeps the case it is given): the address it connects to is looked up by
    /// that name, so any other spelling would have it resolve the name again, unchecked.
    func client(for url: String) async throws -> (HTTPClient, String) {
        guard var parts = URLComponents(string: url), let scheme = parts.scheme?.lowercased(),
            var host = parts.host, !host.isEmpty
        else { throw Refusal(description: "not an absolute URL") }
        if self.limits.allowPrivateTargets {
            guard scheme == "https" || scheme == "http" else { throw Refusal(description: "not an http(s) URL") }
            return (self.direct, url)
        }
        guard scheme == "https" else { throw Refusal(description: "not an https URL: \(Self.origin(of: url))") }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if TargetAddress.parse(host) != nil {
            guard TargetAddress.isPublic(host) else {
                throw Refusal(description: "\(Self.origin(of: url)) is not a public address")
            }
            return (self.direct, url)
        }
        let key = host.lowercased()
        parts.host = key
        guard let rewritten = parts.string, URL(string: rewritten)?.host == key else {
            throw Refusal(description: "\(Self.origin(of: url)): a host that cannot be pinned")
        }
        let now = ContinuousClock.now
        let kept = self.state.withLock { state -> HTTPClient? in
            guard let pinned = state.pinned[key], now - pinned.resolved < self.limits.resolvedFor else { return nil }
            state.uses += 1
            state.pinned[key]!.used = state.uses
            return pinned.client
        }
        if let kept { return (kept, rewritten) }
        let addresses = try await Self.resolve(key)
        guard let address = addresses.first(where: TargetAddress.isPublic) else {
            throw Refusal(
                description: addresses.isEmpty
                    ? "\(Self.origin(of: url)) does not resolve"
                    : "\(Self.origin(of: url)) resolves to no public address"
            )
        }
        let text = TargetAddress.text(address)
        let client = Self.client(self.limits, override: [key: text])
        let retired = self.state.withLock { state -> [HTTPClient] in
            guard !state.closed else { return [client] }
            var retired: [HTTPClient] = []
            if let old = state.pinned[key] { retired.append(old.client) }
            state.uses += 1
            state.pinned[key] = Pinned(client: client, address: text, resolved: now, used: state.uses)
            while state.pinned.count > max(1, self.limits.maxHosts),
                let oldest = state.pinned.min(by: { $0.value.used < $1.value.used })
            {
                retired.append(oldest.value.client)
                state.pinned[oldest.key] = nil
            }
            return retired
        }
        // A retired client's requests in flight finish first: it is shut down once they must have.
        if !retired.isEmpty {
            let wait = self.limits.requestTimeout + self.limits.connectTimeout
            Task {
                try? await Task.sleep(for: wait)
                for old in retired { try? await old.shutdown() }
            }
        }
        guard !retired.contains(where: { $0 === client }) else { throw Refusal(description: "shutting down") }
        return (client, rewritten)
    }

    /// A host's addresses, as the system resolves them (off the concurrency pool: `getaddrinfo` blocks).
    static func resolve(_ host: String) async throws -> [[UInt8]] {
        try await NIOThreadPool.singleton.runIfActive {
            var hints = addrinfo()
            hints.ai_family = AF_UNSPEC
            #if canImport(Glibc) || canImport(Musl)
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
            #else
            hints.ai_socktype = SOCK_STREAM
            #endif
            var list: UnsafeMutablePointer<addrinfo>?
            guard getaddrinfo(host, nil, &hints, &list) == 0, let first = list else { return [] }
            defer { freeaddrinfo(first) }
            var found: [[UInt8]] = []
            var next: UnsafeMutablePointer<addrinfo>? = first
            while let entry = next {
                if let address = entry.pointee.ai_addr {
                    switch Int32(address.pointee.sa_family) {
                    case AF_INET:
                        address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                            var raw = v4.pointee.sin_addr
                            found.append(withUnsafeBytes(of: &raw) { Array($0) })
                        }
                    case AF_INET6:
                        address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                            var raw = v6.pointee.sin6_addr
                            found.append(withUnsafeBytes(of: &raw) { Array($0) })
                        }
                    default:
                        break
                    }
                }
                next = entry.pointee.ai_next
            }
            var seen: Set<[UInt8]> = []
            return found.filter { seen.insert($0).inserted }
        }
    }
}
