import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// A response from an origin, after redirects.
struct OriginResponse: Sendable {
    var status: Int
    var headers: HTTPHeaders
    var body: HTTPClientResponse.Body
    /// The URL that answered: relative URIs in a playlist resolve against it.
    var url: URL
}

/// Requests to origins: only http and https, only allowed hosts, redirects followed here (so each hop is checked)
/// up to the configured limit, identity encoding asked for.
struct OriginClient: Sendable {
    let client: HTTPClient
    let configuration: MediaCacheConfiguration

    /// The player's headers an origin sees (a signed-in player's cookies and credentials, its identity).
    static let forwardedHeaders = ["Cookie", "Authorization", "Referer", "User-Agent"]
    /// The ones dropped when a redirect leaves the origin (its scheme, host or port changes).
    static let credentialHeaders = ["Cookie", "Authorization"]

    init(configuration: MediaCacheConfiguration) {
        self.configuration = configuration
        var client = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: configuration.originConnectTimeout, read: configuration.originReadTimeout),
            decompression: .disabled
        )
        // A refused connection fails the request at once (the cached bytes are then served as they are), instead of
        // being retried until the connect timeout.
        client.connectionPool.retryConnectionEstablishment = false
        client.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = configuration.maxOriginConnectionsPerHost
        self.client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: client)
    }

    func shutdown() async {
        try? await self.client.shutdown()
    }

    /// An origin as logs and answers name it: scheme, host and port, never a path or credentials.
    static func origin(of url: URL) -> String {
        let host = url.host.map { $0.contains(":") ? "[\($0)]" : $0 } ?? "?"
        return "\(url.scheme ?? "http")://\(host)" + (url.port.map { ":\($0)" } ?? "")
    }

    /// Why a request to an origin failed, as people say it.
    static func plainWords(_ error: any Error) -> String {
        if let error = error as? HTTPClientError {
            switch error {
            case .connectTimeout: return "no answer (the connection timed out)"
            case .readTimeout: return "it stopped sending (read timeout)"
            case .remoteConnectionClosed: return "it closed the connection"
            default: return "\(error)"
            }
        }
        if let error = error as? NIOConnectionError {
            if error.dnsAError != nil || error.dnsAAAAError != nil, error.connectionErrors.isEmpty {
                return "no such host (the name does not resolve)"
            }
            return error.connectionErrors.first.map { Self.plainWords($0.error) } ?? "no address to connect to"
        }
        if let error = error as? IOError {
            switch error.errnoCode {
            case POSIXErrorCode.ECONNREFUSED.rawValue: return "connection refused"
            case POSIXErrorCode.ECONNRESET.rawValue: return "the connection was reset"
            case POSIXErrorCode.ETIMEDOUT.rawValue: return "no answer (timed out)"
            case POSIXErrorCode.ENETUNREACH.rawValue, POSIXErrorCode.EHOSTUNREACH.rawValue: return "no route to it"
            default: return "\(error)"
            }
        }
        if let error = error as? SocketAddressError, case .unknown = error {
            return "no such host (the name does not resolve)"
        }
        let text = "\(error)"
        if text.contains("UnknownHost") || text.contains("Name or service not known") {
            return "no such host (the name does not resolve)"
        }
        if text.contains("SSL") || text.contains("TLS") || text.contains("certificate") {
            return "the TLS handshake failed (\(text))"
        }
        return text
    }

    /// Throws ``MediaCacheError/Code/notAllowed`` unless the URL may be fetched.
    func check(_ url: URL) throws {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw MediaCacheError(.notAllowed, "only http and https origins are fetched, not \(url.scheme ?? "none")")
        }
        guard let host = url.host?.lowercased(), !host.isEmpty else {
            throw MediaCacheError(.badOrigin, "the origin URL has no host")
        }
        if let allowed = self.configuration.allowedHosts, !allowed.contains(where: { $0.lowercased() == host }) {
            throw MediaCacheError(.notAllowed, "the origin host \(host) is not in the allow-list")
        }
    }

    /// The headers a redirect from `url` to `next` goes on with: the player's credentials (`Cookie`,
    /// `Authorization`) only while the origin (scheme, host and port) stays the same, as a browser keeps them.
    ///
    /// - Throws: `upstream` for a redirect from https to http: the request would travel in the clear, and what the
    ///   player asked for privately would be answered by whoever sits on the way.
    static func headers(forRedirectFrom url: URL, to next: URL, _ headers: HTTPHeaders) throws -> HTTPHeaders {
        if url.scheme?.lowercased() == "https", next.scheme?.lowercased() == "http" {
            throw MediaCacheError(
                .upstream,
                "the origin \(Self.origin(of: url)) redirected from https to http (\(Self.origin(of: next))): refused"
            )
        }
        guard Self.originKey(of: next) != Self.originKey(of: url) else { return headers }
        var headers = headers
        for name in Self.credentialHeaders { headers.remove(name: name) }
        return headers
    }

    /// What makes an origin: the scheme, the host (without regard to case) and the port (the scheme's own if
    /// none is written).
    static func originKey(of url: URL) -> String {
        let scheme = url.scheme?.lowercased() ?? ""
        let port = url.port ?? (scheme == "https" ? 443 : 80)
        return "\(scheme)://\(url.host?.lowercased() ?? ""):\(port)"
    }

    /// Sends a request, following redirects.
    /// - Parameters:
    ///   - headers: the request's headers besides `Accept-Encoding` (always `identity`, so offsets mean bytes of the
    ///     resource itself).
    func request(_ url: URL, method: HTTPMethod = .GET, headers: HTTPHeaders) async throws -> OriginResponse {
        var url = url
        var headers = headers
        headers.replaceOrAdd(name: "Accept-Encoding", value: "identity")
        for _ in 0...self.configuration.maxRedirects {
            try self.check(url)
            var request = HTTPClientRequest(url: url.absoluteString)
            request.method = method
            request.headers = headers
            let response: HTTPClientResponse
            do {
                // No overall deadline: a long film takes long; a silent origin is cut off by the read timeout.
                response = try await self.client.execute(request, deadline: .distantFuture)
            } catch {
                throw MediaCacheError(
                    .upstream,
                    "the origin \(Self.origin(of: url)) could not be reached: \(Self.plainWords(error))"
                )
            }
            let status = Int(response.status.code)
            guard [301, 302, 303, 307, 308].contains(status), let location = response.headers.first(name: "Location")
            else {
                return OriginResponse(status: status, headers: response.headers, body: response.body, url: url)
            }
            _ = try? await response.body.collect(upTo: 64 << 10)
            guard let next = URL(string: location, relativeTo: url)?.absoluteURL else {
                throw MediaCacheError(.upstream, "the origin redirected to an unusable location: \(location)")
            }
            headers = try Self.headers(forRedirectFrom: url, to: next, headers)
            url = next
        }
        throw MediaCacheError(
            .tooManyRedirects,
            "more than \(self.configuration.maxRedirects) redirects from \(url.absoluteString)"
        )
    }
}
