import CourierProcess
import CourierTesting
import Foundation
import MediaCache
import Testing

@Suite("MediaCache proxy: ranges, coalescing, freshness and faults against nginx", .serialized)
struct ProxyTests {
    @Test("random ranges, HEAD, the 0-1 probe, suffix and open ranges match the origin byte for byte")
    func rangesMatchTheOrigin() async throws {
        let seed = TestSeed.make(for: "rangesMatchTheOrigin")
        let size = 3 * (64 << 10) * 5 + 12_345
        let data = randomData(size, seed: seed)
        try await ProxyFixture.with(files: ["clip.bin": data]) { fixture in
            let url = fixture.url("clip.bin")
            let origin = try await Curl.get(
                fixture.nginx.url("clip.bin").absoluteString,
                head: true,
                in: fixture.folder
            )

            let head = try await Curl.get(url, head: true, in: fixture.folder)
            #expect(head.status == 200)
            #expect(head.headers["content-length"] == String(size))
            #expect(head.headers["accept-ranges"] == "bytes")
            #expect(head.headers["etag"] == origin.headers["etag"])
            #expect(head.headers["last-modified"] == origin.headers["last-modified"])
            // HEAD on a raw socket: the headers, then nothing.
            let raw = try await RawConnection.connect(port: fixture.port)
            let path = String(url.dropFirst("http://127.0.0.1:\(fixture.port)".count))
            try await raw.write(Array("HEAD \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8))
            let answer = String(decoding: try await raw.readUntilClosed(), as: UTF8.self)
            #expect(answer.hasPrefix("HTTP/1.1 200 OK\r\n"))
            #expect(answer.contains("\r\nContent-Length: \(size)\r\n"))
            #expect(answer.hasSuffix("\r\n\r\n"), "nothing after the headers")

            let probe = try await Curl.get(url, range: "0-1", in: fixture.folder)
            #expect(probe.status == 206)
            #expect(probe.headers["content-range"] == "bytes 0-1/\(size)")
            #expect(probe.body == data[0..<2])

            var random = SeededRandom(seed: seed)
            for _ in 0..<16 {
                let first = Int(random.next() % UInt64(size))
                let last = min(size - 1, first + Int(random.next() % 300_000))
                let response = try await Curl.get(url, range: "\(first)-\(last)", in: fixture.folder)
                #expect(response.status == 206, "bytes \(first)-\(last)")
                #expect(response.headers["content-range"] == "bytes \(first)-\(last)/\(size)")
                #expect(response.headers["content-length"] == String(last - first + 1))
                #expect(response.headers["content-type"] == "application/octet-stream")
                #expect(response.headers["etag"] == origin.headers["etag"])
                #expect(response.body == data[first...last], "bytes \(first)-\(last)")
            }
            let suffix = try await Curl.get(url, range: "-1000", in: fixture.folder)
            #expect(suffix.headers["content-range"] == "bytes \(size - 1000)-\(size - 1)/\(size)")
            #expect(suffix.body == data[(size - 1000)...])
            let open = try await Curl.get(url, range: "100000-", in: fixture.folder)
            #expect(open.headers["content-range"] == "bytes 100000-\(size - 1)/\(size)")
            #expect(open.body == data[100_000...])
            let whole = try await Curl.get(url, in: fixture.folder)
            #expect(whole.status == 200 && whole.body == data)
            // Whatever was fetched, the origin sent each byte once.
            #expect(fixture.originBytes("clip.bin") <= Int64(size) + 3 * (64 << 10))
        }
    }

    @Test("an unsatisfiable range is a 416 naming the total; several ranges get the whole resource (a 200)")
    func unsatisfiableAndMultipleRanges() async throws {
        let data = randomData(200_000, seed: 7)
        try await ProxyFixture.with(files: ["a.bin": data]) { fixture in
            let url = fixture.url("a.bin")
            let beyond = try await Curl.get(url, range: "200000-", in: fixture.folder)
            #expect(beyond.status == 416)
            #expect(beyond.headers["content-range"] == "bytes */200000")
            #expect(beyond.body.isEmpty)
            let several = try await Curl.get(url, range: "0-9,100-199", in: fixture.folder)
            #expect(several.status == 200)
            #expect(several.body == data)
            let malformed = try await Curl.get(url, range: "x-y", in: fixture.folder)
            #expect(malformed.status == 200 && malformed.body == data)
            // Numbers past any length, even past Int64, on a resource not yet cached: answered, not a hang or a
            // crash.
            let huge = fixture.url("b.bin")
            try data.write(to: fixture.media.appendingPathComponent("b.bin"))
            let farStart = try await Curl.get(huge, range: "9223372036854775807-", in: fixture.folder)
            #expect(farStart.status == 416)
            let pastInt64 = try await Curl.get(huge, range: "99999999999999999999-", in: fixture.folder)
            #expect(pastInt64.status == 416)
            let farEnd = try await Curl.get(huge, range: "5-9223372036854775807", in: fixture.folder)
            #expect(farEnd.status == 206 && farEnd.body == data[5...])
            // A weak validator in If-Range never matches: the whole resource.
            let weak = try await Curl.get(url, range: "0-9", headers: ["If-Range: W/\"x\""], in: fixture.folder)
            #expect(weak.status == 200 && weak.body == data)
        }
    }

    @Test("the notes' example: 0-100 with 10-20 and 50-60 cached is served as five pieces, three from the origin")
    func fivePieces() async throws {
        let data = randomData(1000, seed: 11)
        try await ProxyFixture.with(
            files: ["five.bin": data],
            settings: .init(blockBytes: 1, coalesceBytes: 0)
        ) { fixture in
            let url = fixture.url("five.bin")
            #expect(try await Curl.get(url, range: "10-20", in: fixture.folder).body == data[10...20])
            #expect(try await Curl.get(url, range: "50-60", in: fixture.folder).body == data[50...60])
            let before = fixture.nginx.log().count
            let statisticsBefore = try await fixture.statistics()
            let response = try await Curl.get(url, range: "0-100", in: fixture.folder)
            #expect(response.status == 206)
            #expect(response.headers["content-range"] == "bytes 0-100/1000")
            #expect(response.body == data[0...100])
            let fetched = fixture.nginx.log().dropFirst(before).map(\.range)
            #expect(fetched == ["bytes=0-9", "bytes=21-49", "bytes=61-100"])
            let statistics = try await fixture.statistics()
            #expect(statistics.partialHits == statisticsBefore.partialHits + 1)
            #expect(statistics.bytesFromCache - statisticsBefore.bytesFromCache == 22)
        }
    }

    @Test("ten concurrent cold readers of a slowed origin cost it one copy (plus at most a block each)")
    func concurrentReadersShareOneFetch() async throws {
        let size = 3 << 20
        let data = randomData(size, seed: 23)
        try await ProxyFixture.with(files: ["shared.bin": data], limitRate: "2m") { fixture in
            let url = fixture.url("shared.bin", location: "slow")
            let responses = try await withThrowingTaskGroup(of: Curl.Response.self) { group in
                for index in 0..<10 {
                    group.addTask {
                        try await Task.sleep(for: .milliseconds(40 * index))
                        return try await Curl.get(url, in: fixture.folder)
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            for response in responses {
                #expect(response.status == 200)
                #expect(response.body == data)
            }
            let sent = fixture.originBytes("shared.bin", location: "slow")
            #expect(sent >= Int64(size))
            #expect(sent <= Int64(size) + 10 * fixture.proxy.configuration.blockBytes, "nginx sent \(sent)")
            let statistics = try await fixture.statistics()
            #expect(statistics.bytesFromOrigin <= Int64(size) + 10 * fixture.proxy.configuration.blockBytes)
        }
    }

    @Test("a seek far ahead caches from there and keeps what was cached before it")
    func seekAheadKeepsBoth() async throws {
        let size = 2 << 20
        let data = randomData(size, seed: 31)
        try await ProxyFixture.with(files: ["seek.bin": data]) { fixture in
            let url = fixture.url("seek.bin")
            _ = try await Curl.get(url, range: "0-199999", in: fixture.folder)
            _ = try await Curl.get(url, range: "1500000-1699999", in: fixture.folder)
            let ranges = try #require(try await fixture.resources().first?.ranges)
            #expect(ranges.count == 2, "\(ranges)")
            #expect(ranges.first?.first == 0 && (ranges.first?[1] ?? 0) >= 200_000)
            #expect(ranges.last?.first == 1_500_000 && (ranges.last?[1] ?? 0) >= 1_700_000)
            let before = fixture.originBytes("seek.bin")
            let again = try await Curl.get(url, range: "0-199999", in: fixture.folder)
            #expect(again.body == data[0..<200_000])
            #expect(fixture.originBytes("seek.bin") == before)
        }
    }

    @Test("cached bytes are served with the origin stopped, and a whole cached resource is a hit")
    func offline() async throws {
        let data = randomData(500_000, seed: 41)
        try await ProxyFixture.with(files: ["away.bin": data], settings: .init(revalidationInterval: 0)) {
            fixture in
            let url = fixture.url("away.bin")
            #expect(try await Curl.get(url, in: fixture.folder).body == data)
            await fixture.nginx.stop()
            let hitsBefore = try await fixture.statistics().hits
            let range = try await Curl.get(url, range: "1000-399999", in: fixture.folder)
            #expect(range.status == 206 && range.body == data[1000..<400_000])
            let whole = try await Curl.get(url, in: fixture.folder)
            #expect(whole.status == 200 && whole.body == data)
            #expect(try await fixture.statistics().hits == hitsBefore + 2)
            // Nothing cached and no origin: a clear 502 naming the origin and why, not a hang.
            let missing = try await Curl.get(fixture.url("other.bin"), in: fixture.folder)
            #expect(missing.status == 502)
            let said = String(decoding: missing.body, as: UTF8.self).trimmingCharacters(in: .newlines)
            #expect(
                said == "the origin http://127.0.0.1:\(fixture.nginx.port) could not be reached: connection refused",
                "\(said)"
            )
        }
    }

    @Test("a changed file at the origin (new ETag) is served new after revalidation, never mixed with the old")
    func validatorChange() async throws {
        let old = randomData(300_000, seed: 51)
        let new = randomData(310_000, seed: 52)
        // No interval: every request after the one that fetched asks the origin again.
        try await ProxyFixture.with(files: ["v.bin": old], settings: .init(revalidationInterval: 0)) { fixture in
            let url = fixture.url("v.bin")
            #expect(try await Curl.get(url, in: fixture.folder).body == old)
            let oldTag = try #require(try await fixture.resources().first?.etag)
            // Another size and a later modification time: nginx's ETag changes.
            try fixture.replace("v.bin", with: new)
            let range = try await Curl.get(url, range: "1000-1999", in: fixture.folder)
            #expect(range.headers["content-range"] == "bytes 1000-1999/310000")
            #expect(range.body == new[1000..<2000])
            let whole = try await Curl.get(url, in: fixture.folder)
            #expect(whole.body == new)
            let resource = try #require(try await fixture.resources().first)
            #expect(resource.etag != oldTag && resource.totalLength == 310_000)
        }
    }

    @Test("what was cached, and what was dropped, just before the proxy stopped is so after a restart")
    func commitsSurviveStop() async throws {
        let data = randomData(300_000, seed: 71)
        try await ProxyFixture.with(files: ["kept.bin": data, "dropped.bin": data]) { fixture in
            // A second proxy of its own, stopped as the fixture stops proxies: by cancelling its task at once.
            var configuration = fixture.proxy.configuration
            configuration.cacheDirectory = fixture.folder.appendingPathComponent("second", isDirectory: true)
            let kept = fixture.nginx.url("kept.bin")
            let dropped = fixture.nginx.url("dropped.bin")
            try await ProxyFixture.running(configuration) { (_: CacheProxy, port: Int) async throws in
                for origin in [kept, dropped] {
                    let url = ProxyURL(port: port).query(for: origin).absoluteString
                    #expect(try await Curl.get(url, in: fixture.folder).body == data)
                }
                let control = ProxyControl(address: ProxyURL(port: port), secret: configuration.controlSecret)
                #expect(try await control.remove(dropped))
            }
            try await ProxyFixture.running(configuration) { (_: CacheProxy, port: Int) async throws in
                let control = ProxyControl(address: ProxyURL(port: port), secret: configuration.controlSecret)
                let listed = try await control.resources()
                #expect(listed.map(\.url) == [kept.absoluteString], "\(listed)")
                #expect(listed.first?.cachedBytes == 300_000)
            }
        }
    }

    @Test("no-store responses stream through uncached; chunked and range-ignoring origins are cached")
    func originKinds() async throws {
        let data = randomData(400_000, seed: 61)
        try await ProxyFixture.with(files: ["k.bin": data]) { fixture in
            let passed = try await Curl.get(fixture.url("k.bin", location: "nostore"), in: fixture.folder)
            #expect(passed.status == 200 && passed.body == data)
            let ranged = try await Curl.get(fixture.url("k.bin", location: "nostore"), range: "5-9", in: fixture.folder)
            #expect(ranged.status == 206 && ranged.body == data[5...9])
            #expect(try await fixture.resources().isEmpty)

            let chunkedURL = fixture.url("k.bin", location: "chunked")
            let chunked = try await Curl.get(chunkedURL, in: fixture.folder)
            #expect(chunked.status == 200 && chunked.body == data)
            let chunkedRange = try await Curl.get(chunkedURL, range: "1000-1999", in: fixture.folder)
            #expect(chunkedRange.status == 206 && chunkedRange.body == data[1000..<2000])
            #expect(chunkedRange.headers["content-range"] == "bytes 1000-1999/400000")

            let ignoringURL = fixture.url("k.bin", location: "norange")
            let ignoring = try await Curl.get(ignoringURL, range: "300000-300099", in: fixture.folder)
            #expect(ignoring.status == 206 && ignoring.body == data[300_000..<300_100])
            let after = try await Curl.get(ignoringURL, range: "-100", in: fixture.folder)
            #expect(after.body == data[(400_000 - 100)...])
            #expect(fixture.originBytes("k.bin", location: "norange") <= 2 * 400_000)
            let keys = Set(try await fixture.resources().map(\.key))
            #expect(keys == [fixture.nginx.url("k.bin", location: "chunked").absoluteString, ignoringURL.originKey])
        }
    }

    @Test("the cap holds: least recently used blocks go, served bytes stay right, a larger resource streams through")
    func eviction() async throws {
        var files: [String: Data] = [:]
        for index in 0..<4 { files["f\(index).bin"] = randomData(1 << 20, seed: 70 + UInt64(index)) }
        files["big.bin"] = randomData(3 << 20, seed: 79)
        try await ProxyFixture.with(files: files, settings: .init(maxBytes: 5 << 19)) { fixture in
            let cap = fixture.proxy.configuration.maxBytes
            for index in 0..<4 {
                let response = try await Curl.get(fixture.url("f\(index).bin"), in: fixture.folder)
                #expect(response.body == files["f\(index).bin"])
                let statistics = try await fixture.statistics()
                #expect(statistics.bytesUsed <= cap, "\(statistics.bytesUsed) > \(cap)")
            }
            // The first file was used least recently: it lost blocks; the last is whole.
            let resources = try await fixture.resources()
            let cached = Dictionary(uniqueKeysWithValues: resources.map { ($0.key, $0.cachedBytes) })
            #expect(cached[fixture.nginx.url("f0.bin").absoluteString, default: 0] < 1 << 20)
            #expect(cached[fixture.nginx.url("f3.bin").absoluteString] == 1 << 20)
            // On disk too: the block files of the evicted bytes are gone (deleted once the index without them is
            // written, just after).
            let blockBytes = Int64(fixture.proxy.configuration.blockBytes)
            func onDisk() -> Int64 {
                var total: Int64 = 0
                let enumerator = FileManager.default.enumerator(
                    at: fixture.cacheDirectory,
                    includingPropertiesForKeys: nil
                )
                while let file = enumerator?.nextObject() as? URL {
                    guard Int(file.lastPathComponent) != nil else { continue }
                    total += Int64((try? file.resourceValues(forKeys: [.fileSizeKey]).fileSize) ?? 0)
                }
                return total
            }
            let deadline = ContinuousClock.now + Patience.reply
            while onDisk() > cap + blockBytes, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(onDisk() <= cap + blockBytes, "\(onDisk()) bytes of blocks on disk")
            // Evicted bytes come back right.
            #expect(try await Curl.get(fixture.url("f0.bin"), in: fixture.folder).body == files["f0.bin"])
            // Larger than the cap: streamed through, not cached.
            let big = try await Curl.get(fixture.url("big.bin"), range: "100-1048675", in: fixture.folder)
            #expect(big.status == 206 && big.body == files["big.bin"]![100...1_048_675])
            let whole = try await Curl.get(fixture.url("big.bin"), in: fixture.folder)
            #expect(whole.body == files["big.bin"])
            #expect(try await fixture.resources().contains { $0.key.hasSuffix("big.bin") } == false)
        }
    }

    @Test("an origin that dies mid-response cuts the player's response short (never padded) and caches nothing wrong")
    func originDiesMidResponse() async throws {
        let size = 4 << 20
        let data = randomData(size, seed: 91)
        // Slow enough (16 s for the file) that the origin is killed mid-response however loaded the machine.
        try await ProxyFixture.with(files: ["cut.bin": data], limitRate: "256k") { fixture in
            let url = fixture.url("cut.bin", location: "slow")
            async let response = Curl.get(url, in: fixture.folder)
            // Killed once the origin's bytes flow, not after a fixed time the player's start could take.
            try await waitUntil("the origin's bytes flow") { try await fixture.statistics().bytesFromOrigin > 0 }
            await fixture.nginx.kill()
            let cut = try await response
            #expect(cut.status == 200)
            #expect(cut.headers["content-length"] == String(size))
            #expect(cut.body.count < size)
            #expect(cut.exitStatus == 18, "curl reports a partial body")
            #expect(cut.body == data.prefix(cut.body.count))
            // What the cache kept is the origin's bytes: read it back with the origin gone.
            let ranges = try #require(try await fixture.resources().first?.ranges)
            for range in ranges {
                let piece = try await Curl.get(url, range: "\(range[0])-\(range[1] - 1)", in: fixture.folder)
                #expect(piece.body == data[Int(range[0])..<Int(range[1])])
            }
        }
    }

    @Test("redirects are followed up to the limit; other schemes and hosts off the allow-list are refused")
    func redirectsAndSafety() async throws {
        let data = randomData(10_000, seed: 97)
        try await ProxyFixture.with(files: ["r.bin": data], settings: .init(allowedHosts: ["127.0.0.1"])) {
            fixture in
            let moved = try await Curl.get(fixture.url("r.bin", location: "moved"), range: "0-99", in: fixture.folder)
            #expect(moved.status == 206 && moved.body == data[0..<100])
            let loop = ProxyURL(port: fixture.port).query(
                for: URL(string: "http://127.0.0.1:\(fixture.nginx.port)/loop")!
            )
            let looping = try await Curl.get(loop.absoluteString, in: fixture.folder)
            #expect(looping.status == 502)
            #expect(String(decoding: looping.body, as: UTF8.self).contains("redirects"))
            for forbidden in [
                "file:///etc/passwd", "ftp://127.0.0.1/x", "http://localhost:\(fixture.nginx.port)/files/r.bin",
            ] {
                let url = ProxyURL(port: fixture.port).query(for: URL(string: forbidden)!)
                let response = try await Curl.get(url.absoluteString, in: fixture.folder)
                #expect(response.status == 403, "\(forbidden)")
            }
            let nothing = try await Curl.get("http://127.0.0.1:\(fixture.port)/?nope=1", in: fixture.folder)
            #expect(nothing.status == 404)
            let missing = try await Curl.get(fixture.url("absent.bin"), in: fixture.folder)
            #expect(missing.status == 404)
            let said = String(decoding: missing.body, as: UTF8.self).trimmingCharacters(in: .newlines)
            #expect(said == "the origin http://127.0.0.1:\(fixture.nginx.port) answered 404", "\(said)")
        }
    }

    @Test("a redirect to another port of the same host does not carry the player's Cookie and Authorization")
    func redirectToAnotherPort() async throws {
        let data = randomData(5000, seed: 98)
        let other = try await FreePort.pick()
        // The same nginx on a second port: /hop/ on the first sends the player to /leak/ on the second, which
        // answers 418 if credentials came along.
        let extra = """
                    listen 127.0.0.1:\(other);
                    location /hop/ { rewrite ^/hop/(.*)$ http://127.0.0.1:\(other)/leak/$1 redirect; }
                    location /leak/ {
                        alias {root}/;
                        if ($http_authorization) { return 418; }
                        if ($http_cookie) { return 418; }
                    }
            """
        try await ProxyFixture.with(files: ["p.bin": data], nginxExtra: extra) { fixture in
            let moved = try await Curl.get(
                fixture.url("p.bin", location: "hop"),
                range: "0-99",
                headers: ["Cookie: session=abc", "Authorization: Bearer t0k"],
                in: fixture.folder
            )
            #expect(moved.status == 206 && moved.body == data[0..<100], "\(moved.status)")
        }
    }

    @Test("the player's Cookie, Authorization, Referer and User-Agent reach the origin; identity is asked for")
    func forwardedHeaders() async throws {
        let data = randomData(5000, seed: 99)
        let extra = """
                    location /private/ {
                        alias {root}/;
                        if ($http_cookie != "session=abc") { return 403; }
                        if ($http_authorization != "Bearer t0k") { return 401; }
                        if ($http_referer != "https://app.example/") { return 403; }
                        if ($http_user_agent != "CourierPlayer/1") { return 403; }
                        if ($http_accept_encoding != "identity") { return 406; }
                    }
            """
        try await ProxyFixture.with(files: ["p.bin": data], nginxExtra: extra) { fixture in
            let url = fixture.url("p.bin", location: "private")
            let refused = try await Curl.get(url, in: fixture.folder)
            #expect(refused.status == 403)
            let allowed = try await Curl.get(
                url,
                range: "0-99",
                headers: [
                    "Cookie: session=abc", "Authorization: Bearer t0k", "Referer: https://app.example/",
                    "User-Agent: CourierPlayer/1",
                ],
                in: fixture.folder
            )
            #expect(allowed.status == 206 && allowed.body == data[0..<100])
        }
    }
}

extension String {
    /// The origin URL inside a query-form proxy URL (the default cache key).
    var originKey: String {
        guard let components = URLComponents(string: self),
            let value = components.queryItems?.first(where: { $0.name == "url" })?.value
        else { return self }
        return value
    }
}
