import CourierTesting
import Foundation
import MediaCache
import Testing

@Suite("MediaCache proxy: freshness, revalidation, the cache-key hook and origin faults, against nginx", .serialized)
struct FreshnessProxyTests {
    @Test("bytes fresh by the origin's max-age are served without asking it, even once the file changed")
    func freshIsServedUnasked() async throws {
        let old = randomData(100_000, seed: 101)
        let extra = "location /fresh/ { alias {root}/; add_header Cache-Control max-age=3600; }"
        try await ProxyFixture.with(
            files: ["f.bin": old],
            nginxExtra: extra,
            settings: .init(revalidationInterval: 0)
        ) { fixture in
            let url = fixture.url("f.bin", location: "fresh")
            #expect(try await Curl.get(url, in: fixture.folder).body == old)
            try randomData(100_000, seed: 102).write(to: fixture.media.appendingPathComponent("f.bin"))
            let before = fixture.nginx.log().count
            for _ in 0..<3 {
                #expect(try await Curl.get(url, range: "0-999", in: fixture.folder).body == old[0..<1000])
            }
            #expect(fixture.nginx.log().count == before, "the origin was not asked")
        }
    }

    @Test("a response that varies on the Referer, fetched for one player, is not served to another")
    func varyIsNotShared() async throws {
        let data = randomData(20_000, seed: 104)
        let extra = """
                    location /vary/ {
                        alias {root}/;
                        add_header Vary Referer always;
                        add_header Cache-Control max-age=3600 always;
                        if ($http_referer = "https://evil.example/") { return 200 "poisoned"; }
                    }
            """
        try await ProxyFixture.with(files: ["v.bin": data], nginxExtra: extra) { fixture in
            let url = fixture.url("v.bin", location: "vary")
            let primed = try await Curl.get(url, headers: ["Referer: https://evil.example/"], in: fixture.folder)
            #expect(String(decoding: primed.body, as: UTF8.self) == "poisoned")
            let honest = try await Curl.get(url, headers: ["Referer: https://app.example/"], in: fixture.folder)
            #expect(honest.status == 200 && honest.body == data, "\(honest.status), \(honest.body.count) bytes")
        }
    }

    @Test("without freshness, a resource is revalidated at most once per interval, with a conditional request")
    func revalidationInterval() async throws {
        let data = randomData(50_000, seed: 103)
        let interval = 1.0
        let settings = ProxyFixture.Settings(revalidationInterval: interval)
        try await ProxyFixture.with(files: ["r.bin": data], settings: settings) {
            (fixture: ProxyFixture) async throws in
            let url = fixture.url("r.bin")
            #expect(try await Curl.get(url, in: fixture.folder).body == data)
            let before = fixture.nginx.log().count
            // Requests one after another for 3.5 s, however fast this machine answers them, and at least ten (a
            // machine loaded by other tests may take seconds for one: then the checks come as often as they may).
            let started = ContinuousClock.now
            var requests = 0
            while ContinuousClock.now - started < .milliseconds(3500) || requests < 10 {
                #expect(try await Curl.get(url, range: "10-19", in: fixture.folder).body == data[10..<20])
                requests += 1
            }
            let elapsed = ContinuousClock.now - started
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let asked = Array(fixture.nginx.log().dropFirst(before))
            // The first check comes once the interval after the first fetch has passed, then at most one per interval.
            #expect(asked.count >= 1, "revalidated once the interval passed")
            let most = Int(seconds / interval) + 1
            #expect(asked.count <= most, "\(asked.count) checks in \(seconds) s, \(requests) requests")
            #expect(asked.allSatisfy { $0.status == 304 }, "conditional requests, answered 304: \(asked)")
        }
        // Within the interval nothing is asked, however long the requests take (an hour, here).
        try await ProxyFixture.with(files: ["r.bin": data], settings: .init(revalidationInterval: 3600)) {
            (fixture: ProxyFixture) async throws in
            let url = fixture.url("r.bin")
            #expect(try await Curl.get(url, in: fixture.folder).body == data)
            let before = fixture.nginx.log().count
            for _ in 0..<5 {
                #expect(try await Curl.get(url, range: "10-19", in: fixture.folder).body == data[10..<20])
            }
            #expect(fixture.nginx.log().count == before, "answered without asking: \(fixture.nginx.log())")
        }
    }

    @Test(
        "a 206 without a usable Content-Range is no answer: a fetch of it fails, a revalidation by it confirms nothing"
    )
    func partialWithoutContentRange() async throws {
        let data = randomData(80_000, seed: 111)
        // nginx answers every range of /garbled/ with a bare 206 ("x", no Content-Range); /private/ answers files
        // as someone's, except a revalidation's `Range: bytes=0-0`, which gets the bare 206.
        let extra = """
                location /garbled/ { return 206 "x"; }
                location /private/ {
                    alias {root}/;
                    if ($http_range = "bytes=0-0") { return 206 "x"; }
                    add_header Cache-Control private;
                }
                location /public/ {
                    alias {root}/;
                    if ($http_range = "bytes=0-0") { return 206 "x"; }
                }
            """
        try await ProxyFixture.with(
            files: ["g.bin": data],
            nginxExtra: extra,
            settings: .init(revalidationInterval: 0)
        ) { fixture in
            // A fetch: nothing can be placed, so the player gets an error, not the bytes "x".
            let garbled = try await Curl.get(fixture.url("g.bin", location: "garbled"), in: fixture.folder)
            #expect(garbled.status == 502 && garbled.body != Data("x".utf8), "\(garbled.status)")

            // Someone's bytes are served only once the origin confirmed them for the request: a bare 206 did not.
            let privateURL = fixture.url("g.bin", location: "private")
            #expect(try await Curl.get(privateURL, in: fixture.folder).body == data)
            let unconfirmed = try await Curl.get(privateURL, in: fixture.folder)
            #expect(unconfirmed.status == 502, "\(unconfirmed.status)")

            // Public bytes are served as they are, as when the origin cannot be reached.
            let publicURL = fixture.url("g.bin", location: "public")
            #expect(try await Curl.get(publicURL, in: fixture.folder).body == data)
            let asIs = try await Curl.get(publicURL, range: "0-999", in: fixture.folder)
            #expect(asIs.status == 206 && asIs.body == data[0..<1000])
            // (nginx logs a request as its response ends.)
            func checks() -> [Int] {
                fixture.nginx.log().filter { $0.uri.hasPrefix("/public/") && $0.range == "bytes=0-0" }.map(\.status)
            }
            try await waitUntil("the revalidation is logged") { !checks().isEmpty }
            #expect(checks() == [206], "the revalidation was asked and got the bare 206")
            // …and nothing was dropped and fetched again.
            let fetches = fixture.nginx.log().filter { $0.uri.hasPrefix("/public/") && $0.range != "bytes=0-0" }
            #expect(fetches.count == 1, "\(fetches)")
        }
    }

    @Test("a change caught by a fetch's If-Range between revalidations cuts the old response off; then all is new")
    func ifRangeCatchesAChange() async throws {
        let old = randomData(600_000, seed: 104)
        let new = randomData(600_000, seed: 105)
        try await ProxyFixture.with(files: ["c.bin": old], settings: .init(revalidationInterval: 3600)) { fixture in
            let url = fixture.url("c.bin")
            #expect(try await Curl.get(url, range: "0-99999", in: fixture.folder).body == old[0..<100_000])
            // Same size, a later modification time: a new ETag.
            try fixture.replace("c.bin", with: new)
            // Cached bytes first, then a fetch for the rest with If-Range: the origin answers with the new file.
            let cut = try await Curl.get(url, in: fixture.folder)
            #expect(cut.body.count < 600_000 && cut.exitStatus != 0, "cut off, not mixed")
            #expect(cut.body == old.prefix(cut.body.count))
            let whole = try await Curl.get(url, in: fixture.folder)
            #expect(whole.status == 200 && whole.body == new)
            let range = try await Curl.get(url, range: "0-99999", in: fixture.folder)
            #expect(range.body == new[0..<100_000])
        }
    }

    @Test("the cache-key hook: URLs that differ only in their signature share one cached resource")
    func cacheKeyHook() async throws {
        let data = randomData(200_000, seed: 106)
        let dropQuery: @Sendable (URL) -> String = { url in
            var components = URLComponents(url: url, resolvingAgainstBaseURL: false)!
            components.query = nil
            return components.string!
        }
        try await ProxyFixture.with(files: ["s.bin": data], settings: .init(cacheKey: dropQuery)) { fixture in
            let origin = fixture.nginx.url("s.bin")
            for signature in ["a1", "b2", "c3"] {
                let signed = URL(string: origin.absoluteString + "?sig=\(signature)&exp=9")!
                let url = ProxyURL(port: fixture.port).query(for: signed).absoluteString
                #expect(try await Curl.get(url, in: fixture.folder).body == data)
            }
            let sent = fixture.nginx.log().filter { $0.uri.hasPrefix("/files/s.bin?sig=") }.map(\.bodyBytes)
            #expect(sent == [200_000], "fetched once")
            let resources = try await fixture.resources()
            #expect(resources.map(\.key) == [origin.absoluteString])
            // DELETE uses the hook too.
            let delete = ProxyURL(port: fixture.port).query(for: URL(string: origin.absoluteString + "?sig=zz")!)
            let deleted = try await Curl.get(
                delete.absoluteString.replacingOccurrences(of: "/?url=", with: "/_cache?url="),
                method: "DELETE",
                headers: ["Authorization: Bearer \(fixture.proxy.configuration.controlSecret ?? "")"],
                in: fixture.folder
            )
            #expect(deleted.status == 204 && deleted.headers["content-length"] == nil)
            #expect(try await fixture.resources().isEmpty)
        }
    }

    @Test("an origin silent mid-response past the read timeout, or failing a later piece, cuts the response off")
    func originFaultsMidResponse() async throws {
        let data = randomData(400_000, seed: 107)
        let extra = """
                    location /stall/ { alias {root}/; limit_rate_after 150k; limit_rate 1; }
                    location /flaky/ { alias {root}/; if (-f {root}/broken) { return 500; } }
            """
        try await ProxyFixture.with(
            files: ["t.bin": data],
            nginxExtra: extra,
            // After 150k the stalled origin holds back its next piece for many minutes (a byte a second, and nginx
            // sends no less than a packet's worth): well past the timeout, however loaded the machine. (Were the
            // timeout not kept, curl's own limit would fail the test.)
            settings: .init(originReadTimeout: .seconds(3))
        ) { fixture in
            let stalled = try await Curl.get(fixture.url("t.bin", location: "stall"), in: fixture.folder)
            #expect(stalled.status == 200 && stalled.headers["content-length"] == "400000")
            #expect(stalled.body.count < 400_000 && stalled.exitStatus == 18)
            #expect(stalled.body == data.prefix(stalled.body.count))

            let flaky = fixture.url("t.bin", location: "flaky")
            #expect(try await Curl.get(flaky, range: "0-99999", in: fixture.folder).body == data[0..<100_000])
            try Data().write(to: fixture.media.appendingPathComponent("broken"))
            let failed = try await Curl.get(flaky, in: fixture.folder)
            #expect(failed.status == 200 && failed.exitStatus == 18)
            #expect(failed.body.count >= 100_000 && failed.body.count < 400_000)
            #expect(failed.body == data.prefix(failed.body.count))
            // Nothing cached and the origin failing from the start: its status, relayed.
            let fresh = try await Curl.get(fixture.url("other", location: "flaky"), in: fixture.folder)
            #expect(fresh.status == 500)
        }
    }

    @Test("a playlist reached through a redirect is rewritten against its final URL")
    func playlistAfterRedirect() async throws {
        let playlist = "#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4,\nseg/a.ts\n#EXT-X-ENDLIST\n"
        try await ProxyFixture.with(files: ["p.m3u8": Data(playlist.utf8)]) { fixture in
            let response = try await Curl.get(fixture.pathURL("p.m3u8", location: "moved"), in: fixture.folder)
            let text = String(decoding: response.body, as: UTF8.self)
            let line = try #require(text.split(separator: "\n").first { $0.hasPrefix("http://") })
            let proxied = try #require(URL(string: String(line)))
            let origin = try #require(ProxyURL.origin(path: proxied.path, query: proxied.query))
            #expect(origin.absoluteString == "http://127.0.0.1:\(fixture.nginx.port)/files/seg/a.ts")
        }
    }
}
