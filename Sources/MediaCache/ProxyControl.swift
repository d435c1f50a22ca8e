import AsyncHTTPClient
public import Foundation
import NIOCore
import NIOHTTP1

/// Talks to a running ``CacheProxy``'s control endpoints (what `courier proxy preload` and `stats` use).
public struct ProxyControl: Sendable {
    public var address: ProxyURL
    /// The proxy's control secret (``MediaCacheConfiguration/controlSecret``), or nil for a proxy without one.
    public var secret: String?

    public init(address: ProxyURL, secret: String?) {
        self.address = address
        self.secret = secret
    }

    /// The control secret a proxy running on a cache folder wrote there, or nil when there is none.
    public static func secret(inCacheDirectory folder: URL) -> String? {
        let file = folder.appendingPathComponent(MediaCacheConfiguration.controlSecretFileName)
        guard let data = try? Data(contentsOf: file) else { return nil }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// `POST /_preload`.
    public func preload(_ url: URL, bytes: Int64? = nil, segments: Int? = nil) async throws -> PreloadResult {
        var query = "url=" + ProxyURL.percentEncode(url.absoluteString)
        if let bytes { query += "&bytes=\(bytes)" }
        if let segments { query += "&segments=\(segments)" }
        return try await self.call(.POST, "/_preload?" + query)
    }

    /// `GET /_stats`.
    public func statistics() async throws -> CacheStatistics {
        try await self.call(.GET, "/_stats")
    }

    /// `GET /_cache`.
    public func resources() async throws -> [CachedResource] {
        try await self.call(.GET, "/_cache")
    }

    /// `DELETE /_cache?url=`; false when nothing was cached.
    public func remove(_ url: URL) async throws -> Bool {
        let (status, _) = try await self.send(.DELETE, "/_cache?url=" + ProxyURL.percentEncode(url.absoluteString))
        return status == 204
    }

    private func call<Result: Decodable>(_ method: HTTPMethod, _ path: String) async throws -> Result {
        let (status, body) = try await self.send(method, path)
        guard status == 200 else {
            throw MediaCacheError(.upstream, "the proxy answered \(status): \(String(decoding: body, as: UTF8.self))")
        }
        return try JSONDecoder().decode(Result.self, from: body)
    }

    private func send(_ method: HTTPMethod, _ path: String) async throws -> (Int, Data) {
        var request = HTTPClientRequest(url: "http://\(self.address.host):\(self.address.port)\(path)")
        request.method = method
        if let secret { request.headers.add(name: "Authorization", value: "Bearer \(secret)") }
        // A client of its own, which fails at once when nothing listens (the shared one retries until a timeout).
        var configuration = HTTPClient.Configuration(timeout: .init(connect: .seconds(5)))
        configuration.connectionPool.retryConnectionEstablishment = false
        let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
        do {
            let response: HTTPClientResponse
            do {
                // A preload takes as long as the origin takes.
                response = try await client.execute(request, timeout: .hours(1))
            } catch {
                throw MediaCacheError(
                    .upstream,
                    "cannot reach the proxy at \(self.address.host):\(self.address.port): "
                        + "\(OriginClient.plainWords(error)) (is courier proxy running there?)"
                )
            }
            let body = try await response.body.collect(upTo: 64 << 20)
            try? await client.shutdown()
            return (Int(response.status.code), Data(body.readableBytesView))
        } catch {
            try? await client.shutdown()
            throw error
        }
    }
}
