import Crypto
import Foundation
import Hummingbird
import NIOCore

/// The web chat on the HTTP port: `GET /` is its page, `GET /web/<file>` its scripts, styles and pictures. The page
/// talks to the server over the WebSocket gateway (`/ws`) and fetches media from `/media`, both on this port, so it
/// is the server's own origin.
///
/// The files are Web/ in the repository, built into the binary (``WebAssets``, written by scripts/generate-web), or
/// a folder's named by ``ServerConfiguration/Web/root`` (read once, at start: for working on the page). Every answer
/// carries a strict Content-Security-Policy (scripts, styles and pictures from this origin only, no inline script or
/// style, no framing), `nosniff`, no referrer, and an ETag from the file's SHA-256 with `Cache-Control: no-cache`:
/// a browser keeps each file and asks whether it changed (304) on each visit, so a new server's page is never mixed
/// with an old one's scripts.
struct WebPage: Sendable {
    struct File: Sendable {
        let body: ByteBuffer
        let contentType: String
        let etag: String
    }

    let files: [String: File]
    /// The gateway's allowed origins, whose `/web/` the policy lets scripts come from too.
    var allowedOrigins: [String] = []
    /// Who may sign up (``ServerConfiguration/Accounts/registration``), for the login form.
    var registration = "closed"
    /// Whether the port speaks TLS (the page's origin is `https`).
    var secure = false

    /// The policy every answer carries, for a page asked for under `host` (the request's `Host`). Scripts run only
    /// from `/web/` on that host and on each of `allowedOrigins` (the gateway's, ``ServerConfiguration/WebSocket``:
    /// behind a proxy that rewrites `Host`, the public name the page is read under): the page's own files, never
    /// another same-origin address (`/media` serves what users uploaded). With neither a `Host` that a CSP source can
    /// name (a bracketed IPv6 address, none at all) nor an allowed origin, `'self'`, the page still working: there
    /// `/media`'s strict types (no type a browser runs as script, `nosniff`) stand alone. `connect-src 'self'` takes
    /// the page's own `ws:`/`wss:` origin too (CSP 3).
    static func contentSecurityPolicy(host: String?, allowedOrigins: [String] = []) -> String {
        var sources: [String] = []
        if let own = host.flatMap(Self.scriptSource(host:)) { sources.append(own) }
        for origin in allowedOrigins {
            let normalized = WebSocketOrigins.normalize(origin)
            guard let authority = WebSocketOrigins.authority(ofOrigin: normalized),
                let scheme = normalized.split(separator: ":").first,
                let source = Self.scriptSource(host: authority)
            else { continue }
            let named = "\(scheme)://\(source)"
            if !sources.contains(named) { sources.append(named) }
        }
        let scripts = sources.isEmpty ? "'self'" : sources.joined(separator: " ")
        // The service worker (`/web/sw.js`) comes from where the scripts do, never from elsewhere on the origin.
        return "default-src 'none'; script-src \(scripts); worker-src \(scripts); style-src 'self'; "
            + "img-src 'self' blob: data:; "
            + "media-src 'self' blob:; connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; "
            + "frame-ancestors 'none'"
    }

    /// `host[:port]/web/` as a CSP host source (scheme left off: the page's own, or its upgrade to https), or nil
    /// when `host` is not a DNS name or IPv4 address with an optional port (CSP's host source takes no IPv6 literal).
    static func scriptSource(host: String) -> String? {
        let parts = host.lowercased().split(separator: ":", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), let name = parts.first, !name.isEmpty, !name.hasPrefix("."),
            !name.hasSuffix("."), !name.contains(".."),
            name.utf8.allSatisfy({
                $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") || ($0 >= 0x30 && $0 <= 0x39)
                    || ($0 >= 0x61 && $0 <= 0x7A)
            })
        else { return nil }
        if parts.count == 2 {
            guard let port = Int(parts[1]), (1...65535).contains(port), parts[1].utf8.count <= 5 else { return nil }
            return "\(name):\(port)/web/"
        }
        return "\(name)/web/"
    }

    init(files: [(name: String, text: String)]) {
        var table: [String: File] = [:]
        for (name, text) in files {
            guard let type = Self.contentType(of: name) else { continue }
            let digest = SHA256.hash(data: Data(text.utf8)).prefix(16).map { String(format: "%02x", $0) }.joined()
            table[name] = File(body: ByteBuffer(string: text), contentType: type, etag: "\"\(digest)\"")
        }
        self.files = table
    }

    /// The built-in page, or the one in `root`.
    static func load(root: String?) throws -> WebPage {
        guard let root else { return WebPage(files: WebAssets.files) }
        let folder = URL(fileURLWithPath: root, isDirectory: true)
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        let files = try names.filter { Self.contentType(of: $0) != nil }.map { name in
            (name: name, text: try String(contentsOf: folder.appendingPathComponent(name), encoding: .utf8))
        }
        guard files.contains(where: { $0.name == "index.html" }) else {
            throw CocoaError(
                .fileNoSuchFile,
                userInfo: [NSFilePathErrorKey: folder.appendingPathComponent("index.html").path]
            )
        }
        return WebPage(files: files)
    }

    static func contentType(of name: String) -> String? {
        switch name.split(separator: ".").last {
        case "html": "text/html; charset=utf-8"
        case "css": "text/css; charset=utf-8"
        case "js": "text/javascript; charset=utf-8"
        case "svg": "image/svg+xml"
        case "webmanifest": "application/manifest+json"
        default: nil
        }
    }

    /// The total of every file's bytes: the page with everything it may load.
    var totalBytes: Int { self.files.values.reduce(0) { $0 + $1.body.readableBytes } }

    /// What the page needs to know before it logs in, `GET /api/v1/server?origin=ORIGIN`: who may sign up
    /// (`closed`, `invite`, `open`: the login form offers "Create an account" and the invitation field by it), and
    /// whether a page from ORIGIN (the page's own, `location.origin`) may open the gateway, so that a page read under a
    /// name `--allow-origin` does not list says so, and how to allow it, instead of "cannot be reached".
    func serverInfo(_ request: Request) -> Response {
        let origin = request.uri.queryParameters.get("origin")
        var fields = ["\"registration\":\"\(self.registration)\""]
        if let origin {
            let verdict = WebSocketOrigins.check(
                origin: origin,
                host: request.head.authority,
                secure: self.secure,
                allowed: self.allowedOrigins
            )
            fields.append("\"originAllowed\":\(verdict == .allowed)")
        }
        return Response(
            status: .ok,
            headers: [
                .contentType: "application/json", .cacheControl: "no-store",
                .init("X-Content-Type-Options")!: "nosniff",
            ],
            body: .init(byteBuffer: ByteBuffer(string: "{" + fields.joined(separator: ",") + "}\n"))
        )
    }

    func register(on router: Router<CourierRequestContext>) {
        router.get("/api/v1/server") { request, _ in self.serverInfo(request) }
        router.get("/") { request, _ in self.respond(to: request, name: "index.html", bodyless: false) }
        router.head("/") { request, _ in self.respond(to: request, name: "index.html", bodyless: true) }
        router.get("/web/{file}") { request, context in
            self.respond(to: request, name: context.parameters.get("file") ?? "", bodyless: false)
        }
        router.head("/web/{file}") { request, context in
            self.respond(to: request, name: context.parameters.get("file") ?? "", bodyless: true)
        }
    }

    func respond(to request: Request, name: String, bodyless: Bool) -> Response {
        var headers: HTTPFields = [
            .contentSecurityPolicy: Self.contentSecurityPolicy(
                host: request.head.authority,
                allowedOrigins: self.allowedOrigins
            ),
            .init("X-Content-Type-Options")!: "nosniff",
            .init("Referrer-Policy")!: "no-referrer",
            .init("Cross-Origin-Opener-Policy")!: "same-origin",
            .init("X-Frame-Options")!: "DENY",
        ]
        // index.html is only ever `/`: one address for the page.
        guard name != "index.html" || request.uri.path == "/", let file = self.files[name] else {
            headers[.contentType] = "text/plain; charset=utf-8"
            return Response(
                status: .notFound,
                headers: headers,
                body: .init(byteBuffer: ByteBuffer(string: "no such file\n"))
            )
        }
        headers[.contentType] = file.contentType
        // The service worker's script lives under /web/ and controls the whole origin: its notifications open `/`.
        if name == "sw.js" { headers[.init("Service-Worker-Allowed")!] = "/" }
        headers[.eTag] = file.etag
        headers[.cacheControl] = "no-cache"
        if request.ifNoneMatch(file.etag) {
            return Response(status: .notModified, headers: headers)
        }
        headers[.contentLength] = String(file.body.readableBytes)
        if bodyless { return Response(status: .ok, headers: headers) }
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: file.body))
    }
}
