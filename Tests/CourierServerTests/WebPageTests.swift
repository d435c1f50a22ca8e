import CourierServerTesting
import CourierTesting
import Foundation
import Testing

@testable import CourierServer

@Suite("The web chat's files", .serialized)
struct WebPageTests {
    static let webFolder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Web")

    @Test("the files built into the server are Web/'s as they are (scripts/generate-web was run)")
    func builtInFilesMatchTheFolder() throws {
        let names = try FileManager.default.contentsOfDirectory(atPath: Self.webFolder.path)
            .filter { WebPage.contentType(of: $0) != nil }.sorted()
        #expect(WebAssets.files.map(\.name) == names, "run scripts/generate-web")
        for (name, text) in WebAssets.files {
            let onDisk = try String(contentsOf: Self.webFolder.appendingPathComponent(name), encoding: .utf8)
            #expect(text == onDisk, "\(name) differs from Web/\(name): run scripts/generate-web")
        }
        // The whole page, with every script, style and picture it may load: under 200 KB.
        #expect(WebPage(files: WebAssets.files).totalBytes < 200 * 1024)
        // Modules of one concern each: none over 500 lines, and every request the chat makes in requests.js.
        for (name, text) in WebAssets.files where name.hasSuffix(".js") {
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false).count
            #expect(lines <= 500, "Web/\(name) has \(lines) lines")
            if !["requests.js", "session.js"].contains(name) {
                #expect(!text.contains("session.ask("), "Web/\(name) asks the server itself: requests.js does")
            }
        }
    }

    @Test(
        "the page and its files: types, a strict policy, ETags and 304, HEAD, 404 for anything else; off with the gateway"
    )
    func served() async throws {
        try await ServerFixture.with { fixture in
            let base = "http://127.0.0.1:\(fixture.ports.http)"
            let head = try await ExternalProgram.curl(["--dump-header", "-", "--output", "/dev/null", "\(base)/"])
            let lower = head.lowercased()
            #expect(head.hasPrefix("HTTP/1.1 200"), "\(head)")
            #expect(lower.contains("content-type: text/html; charset=utf-8"))
            // Scripts only from the page's own files: never /media, which serves what users uploaded.
            #expect(
                lower.contains(
                    "content-security-policy: default-src 'none'; script-src 127.0.0.1:\(fixture.ports.http)/web/;"
                ),
                "\(head)"
            )
            #expect(!lower.contains("unsafe-inline"))
            #expect(lower.contains("frame-ancestors 'none'") && lower.contains("x-frame-options: deny"))
            #expect(lower.contains("x-content-type-options: nosniff"))
            #expect(lower.contains("cache-control: no-cache"))
            let etag = try #require(
                head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("etag:") }?.dropFirst(5)
                    .trimmingCharacters(in: .whitespaces)
            )
            let cached = try await ExternalProgram.curl([
                "--output", "/dev/null", "--write-out", "%{http_code}", "-H", "If-None-Match: \(etag)", "\(base)/",
            ])
            #expect(cached == "304")
            let page = try await ExternalProgram.curl(["\(base)/"])
            #expect(page.contains("<script type=\"module\" src=\"/web/app.js\"></script>"))
            for (path, type) in [
                ("/web/app.js", "text/javascript; charset=utf-8"), ("/web/app.css", "text/css; charset=utf-8"),
                ("/web/icon.svg", "image/svg+xml"),
            ] {
                let type_ = try await ExternalProgram.curl([
                    "--output", "/dev/null", "--write-out", "%{http_code} %{content_type}", "\(base)\(path)",
                ])
                #expect(type_ == "200 \(type)", "\(path)")
            }
            // The service worker: a script from /web/ that may control the whole origin, and only such a script.
            let worker = try await ExternalProgram.curl([
                "--dump-header", "-", "--output", "/dev/null", "\(base)/web/sw.js",
            ])
            .lowercased()
            #expect(worker.contains("service-worker-allowed: /\r\n"), "\(worker)")
            #expect(worker.contains("worker-src 127.0.0.1:\(fixture.ports.http)/web/;"), "\(worker)")
            #expect(!lower.contains("service-worker-allowed"), "only the worker's script says it")
            let headOnly = try await ExternalProgram.curl(["--head", "\(base)/web/session.js"])
            #expect(headOnly.hasPrefix("HTTP/1.1 200") && headOnly.lowercased().contains("content-length: "))
            for missing in ["/web/index.html", "/web/nothing.js", "/web/..%2FPackage.swift", "/index.html"] {
                let status = try await ExternalProgram.curl([
                    "--path-as-is", "--output", "/dev/null", "--write-out", "%{http_code}", "\(base)\(missing)",
                ])
                #expect(status == "404", "\(missing)")
            }
        }
        try await ServerFixture.with(
            { fixture in
                let status = try await ExternalProgram.curl([
                    "--output", "/dev/null", "--write-out", "%{http_code}", "http://127.0.0.1:\(fixture.ports.http)/",
                ])
                #expect(status == "404", "no page without the gateway it talks over")
            },
            configure: { $0.webSocket.enabled = false }
        )
    }

    @Test("/api/v1/server tells the login form who may sign up, and whether the page's origin may open the gateway")
    func serverInfo() async throws {
        try await ServerFixture.with { fixture in
            let base = "http://127.0.0.1:\(fixture.ports.http)"
            var answer = try await ExternalProgram.curl(["\(base)/api/v1/server?origin=\(base)"])
            #expect(answer == "{\"registration\":\"closed\",\"originAllowed\":true}\n", "\(answer)")
            answer = try await ExternalProgram.curl(["\(base)/api/v1/server?origin=http://chat.example:6980"])
            #expect(answer.contains("\"originAllowed\":false"), "\(answer)")
            answer = try await ExternalProgram.curl(["\(base)/api/v1/server"])
            #expect(answer == "{\"registration\":\"closed\"}\n", "\(answer)")
        }
        try await ServerFixture.with(
            { fixture in
                let base = "http://127.0.0.1:\(fixture.ports.http)"
                let answer = try await ExternalProgram.curl(["\(base)/api/v1/server?origin=https://chat.example"])
                #expect(answer == "{\"registration\":\"open\",\"originAllowed\":true}\n", "\(answer)")
            },
            configure: {
                $0.accounts.registration = .open
                $0.webSocket.allowedOrigins = ["https://chat.example"]
            }
        )
    }

    @Test("the policy's script source: the page's Host and /web/, or 'self' for a Host CSP cannot name")
    func scriptSource() {
        #expect(WebPage.scriptSource(host: "127.0.0.1:6980") == "127.0.0.1:6980/web/")
        #expect(WebPage.scriptSource(host: "Chat.Example.COM") == "chat.example.com/web/")
        #expect(WebPage.scriptSource(host: "chat.example.com:443") == "chat.example.com:443/web/")
        for bad in [
            "[::1]:6980", "", ":80", "a:b", "a:70000", "a:1:2", "evil.com; script-src *", "a b", "a/web", ".a", "a..b",
            "a:", "例え.jp", "*.example.com",
        ] {
            #expect(WebPage.scriptSource(host: bad) == nil, "\(bad)")
        }
        #expect(WebPage.contentSecurityPolicy(host: "[::1]:6980").contains("script-src 'self';"))
        #expect(WebPage.contentSecurityPolicy(host: nil).contains("script-src 'self';"))
        #expect(WebPage.contentSecurityPolicy(host: "localhost:6980").contains("script-src localhost:6980/web/;"))
        // Behind a proxy that rewrites Host, the allowed origins (the public name) still serve the page's scripts.
        let proxied = WebPage.contentSecurityPolicy(
            host: "127.0.0.1:6980",
            allowedOrigins: ["https://Chat.Example.com", "http://other.example:8080/", "https://chat.example.com:443"]
        )
        #expect(
            proxied.contains(
                "script-src 127.0.0.1:6980/web/ https://chat.example.com/web/ http://other.example:8080/web/;"
            ),
            "\(proxied)"
        )
        #expect(
            WebPage.contentSecurityPolicy(host: "[::1]:6980", allowedOrigins: ["https://chat.example.com"])
                .contains("script-src https://chat.example.com/web/;")
        )
    }

    @Test("--web-root serves a folder's page instead, read at start; a folder without index.html is refused")
    func webRoot() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("courier-web-\(UUID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        #expect(throws: (any Error).self) { try WebPage.load(root: folder.path) }
        try "<!doctype html><title>本地</title>\n".write(
            to: folder.appendingPathComponent("index.html"),
            atomically: true,
            encoding: .utf8
        )
        try "secret".write(to: folder.appendingPathComponent("notes.txt"), atomically: true, encoding: .utf8)
        let root = folder.path
        try await ServerFixture.with(
            { fixture in
                let base = "http://127.0.0.1:\(fixture.ports.http)"
                #expect(try await ExternalProgram.curl(["\(base)/"]) == "<!doctype html><title>本地</title>\n")
                let other = try await ExternalProgram.curl([
                    "--output", "/dev/null", "--write-out", "%{http_code}", "\(base)/web/notes.txt",
                ])
                #expect(other == "404", "only the page's kinds of file are served")
            },
            configure: { $0.web.root = root }
        )
    }
}
