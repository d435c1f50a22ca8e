import CourierTesting
import Foundation
import MediaCache
import Testing

/// What a hostile caller of the proxy may try: read someone's cached private media, find their credentials in the
/// listing or the cache's files, drive the proxy from a web page, hold connections with a request that never ends.
@Suite("MediaCache proxy: credentials, private media, web pages, slow clients", .serialized)
struct ProxySecurityTests {
    /// An origin location like Courier's /media: the `token` query parameter must be "good" or "other" and not
    /// revoked (a file named after it in `revoked/`), and the answer is `Cache-Control: private`.
    static let privateLocation = """
            location /private/ {
                alias {root}/;
                if ($arg_token !~ "^(good|other)$") { return 401; }
                if (-f {root}/revoked/$arg_token) { return 401; }
                add_header Cache-Control "private, max-age=31536000, immutable";
            }
        """

    @Test("a token never reaches the listing or the cache's files; others' requests and revoked tokens get nothing")
    func privateMedia() async throws {
        let data = randomData(200_000, seed: 11)
        try await ProxyFixture.with(files: ["p.bin": data], nginxExtra: Self.privateLocation) { fixture in
            try FileManager.default.createDirectory(
                at: fixture.nginx.root.appendingPathComponent("revoked"),
                withIntermediateDirectories: true
            )
            func get(_ token: String?) async throws -> Curl.Response {
                var origin = fixture.nginx.url("p.bin", location: "private").absoluteString
                if let token { origin += "?token=\(token)" }
                let url = ProxyURL(port: fixture.port).query(for: URL(string: origin)!).absoluteString
                return try await Curl.get(url, in: fixture.folder)
            }
            let first = try await get("good")
            #expect(first.status == 200 && first.body == data)
            // Again: served from the cache once the origin confirmed the token (a conditional request).
            let again = try await get("good")
            #expect(again.status == 200 && again.body == data)
            #expect(fixture.nginx.log().filter { $0.uri.hasPrefix("/private/p.bin") }.map(\.status).contains(304))

            // No token, a wrong one, or another user's: nothing of the cached copy.
            #expect(try await get(nil).status == 401)
            #expect(try await get("bad").status == 401)
            let other = try await get("other")
            #expect(other.status == 200 && other.body == data, "another valid credential fetches for itself")

            // The listing and every cache file are free of the tokens, and readable by their owner only.
            let listing = try await fixture.resources()
            #expect(!listing.isEmpty)
            let listed = String(decoding: try JSONEncoder().encode(listing), as: UTF8.self)
            #expect(!listed.contains("good") && !listed.contains("other"), "\(listed)")
            let files =
                FileManager.default.enumerator(atPath: fixture.cacheDirectory.path)?.allObjects as? [String] ?? []
            for file in files {
                let path = fixture.cacheDirectory.appendingPathComponent(file).path
                // (A file being replaced may be gone by now.)
                guard let attributes = try? FileManager.default.attributesOfItem(atPath: path) else { continue }
                let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue ?? 0
                #expect(mode & 0o077 == 0, "\(file) is \(String(mode, radix: 8))")
                let contents = (try? Data(contentsOf: URL(fileURLWithPath: path))) ?? Data()
                #expect(contents.range(of: Data("token=good".utf8)) == nil, "\(file) holds the token")
                #expect(contents.range(of: Data("token=other".utf8)) == nil, "\(file) holds the token")
            }

            // The token is revoked at the origin: the cached copy is no longer served with it.
            try Data().write(to: fixture.nginx.root.appendingPathComponent("revoked/good"))
            #expect(try await get("good").status == 401)
        }
    }

    @Test("a foreign Host is refused (DNS rebinding); control requests need the secret and no foreign Origin")
    func webPages() async throws {
        let data = randomData(10_000, seed: 12)
        let page = Data("<html><script>fetch('/_cache')</script></html>".utf8)
        try await ProxyFixture.with(
            files: ["f.bin": data, "page.html": page],
            nginxExtra: "location /pages/ { alias {root}/; default_type text/html; }"
        ) { fixture in
            // An origin's HTML page, cached or not, is never a script-running page of the proxy's own origin.
            let pageURL = ProxyURL(port: fixture.port).query(for: fixture.nginx.url("page.html", location: "pages"))
            for attempt in ["fetched", "cached"] {
                let shown = try await Curl.get(pageURL.absoluteString, in: fixture.folder)
                #expect(shown.status == 200 && shown.body == page, "\(attempt)")
                #expect(shown.headers["content-type"]?.hasPrefix("text/html") == true, "\(attempt)")
                #expect(shown.headers["content-security-policy"] == "sandbox", "\(attempt): \(shown.headers)")
                #expect(shown.headers["x-content-type-options"] == "nosniff", "\(attempt)")
            }

            let resource = ProxyURL(port: fixture.port).query(for: fixture.nginx.url("f.bin")).absoluteString
            let rebound = try await Curl.get(resource, headers: ["Host: evil.example"], in: fixture.folder)
            #expect(rebound.status == 403 && rebound.body != data)
            let named = try await Curl.get(
                resource,
                headers: ["Host: localhost:\(fixture.port)"],
                in: fixture.folder
            )
            #expect(named.status == 200 && named.body == data)
            // Media is sandboxed too, but not marked nosniff (a browser would refuse it cross-origin if mistyped).
            #expect(named.headers["content-security-policy"] == "sandbox")
            #expect(named.headers["x-content-type-options"] == nil)

            let secret = try #require(fixture.proxy.configuration.controlSecret)
            let preload = ProxyURL(port: fixture.port).query(for: fixture.nginx.url("f.bin")).absoluteString
                .replacingOccurrences(of: "/?url=", with: "/_preload?url=")
            // A page's simple cross-origin POST carries no secret; with one, a foreign Origin is still refused.
            let fromPage = try await Curl.get(
                preload,
                method: "POST",
                headers: ["Origin: http://evil.example", "Content-Type: text/plain"],
                in: fixture.folder
            )
            #expect(fromPage.status == 403)
            // The proxy's own name on another port (a default one left out) is another origin; so is a sandboxed
            // page's `null`. The proxy's own origin, [::1] included, passes the Origin check (then needs the secret).
            for foreign in ["http://localhost", "http://127.0.0.1:1", "null"] {
                let refused = try await Curl.get(
                    preload,
                    method: "POST",
                    headers: ["Origin: \(foreign)"],
                    in: fixture.folder
                )
                #expect(refused.status == 403, "\(foreign)")
            }
            for own in ["http://localhost:\(fixture.port)", "http://[::1]:\(fixture.port)"] {
                let passed = try await Curl.get(
                    preload,
                    method: "POST",
                    headers: ["Origin: \(own)"],
                    in: fixture.folder
                )
                #expect(passed.status == 401, "\(own): no secret, but not refused as a web page")
            }
            let noSecret = try await Curl.get(preload, method: "POST", in: fixture.folder)
            #expect(noSecret.status == 401)
            let stats = try await Curl.get("http://127.0.0.1:\(fixture.port)/_stats", in: fixture.folder)
            #expect(stats.status == 401)
            let withSecret = try await Curl.get(
                preload,
                method: "POST",
                headers: ["Authorization: Bearer \(secret)", "Origin: http://127.0.0.1:\(fixture.port)"],
                in: fixture.folder
            )
            #expect(withSecret.status == 200, "\(String(decoding: withSecret.body, as: UTF8.self))")
            // The running proxy left its secret, private, in the cache folder for the commands of its user.
            let file = fixture.cacheDirectory.appendingPathComponent(MediaCacheConfiguration.controlSecretFileName)
            #expect(ProxyControl.secret(inCacheDirectory: fixture.cacheDirectory) == secret)
            let mode = (try FileManager.default.attributesOfItem(atPath: file.path)[.posixPermissions] as? NSNumber)?
                .intValue
            #expect(mode == 0o600)
        }
    }

    @Test("a request head sent a byte at a time is cut off after the head timeout, though bytes keep coming")
    func slowHead() async throws {
        try await ProxyFixture.with(settings: .init(requestHeadTimeout: .seconds(1))) { fixture in
            let connection = try await RawConnection.connect(port: fixture.port)
            let head =
                Array("GET /_stats HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: ".utf8)
                + Array(repeating: UInt8(ascii: "a"), count: 10_000)
            let dripping = Task {
                for byte in head {
                    guard (try? await connection.write([byte])) != nil else { return }
                    try? await Task.sleep(for: .milliseconds(100))
                }
            }
            // Closed without an answer (10,000 bytes would take over 15 minutes; the idle timeout is 60 s).
            #expect(try await connection.readUntilClosed(timeout: .seconds(120)).isEmpty)
            dripping.cancel()
        }
    }
}
