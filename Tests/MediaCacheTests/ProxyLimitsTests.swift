import CourierTesting
import Foundation
import Testing

@testable import MediaCache

@Suite("MediaCache proxy: each limit of its configuration, enforced", .serialized)
struct ProxyLimitsTests {
    @Test("a playlist larger than maxPlaylistBytes, or a key larger than maxKeyBytes, is a 502 saying so")
    func playlistAndKeySizes() async throws {
        let playlist = "#EXTM3U\n#EXT-X-TARGETDURATION:4\n" + String(repeating: "#EXTINF:4,\na.ts\n", count: 20)
        let files = [
            "big.m3u8": Data((playlist + "#EXT-X-ENDLIST\n").utf8),
            "small.m3u8": Data("#EXTM3U\n#EXTINF:4,\na.ts\n#EXT-X-ENDLIST\n".utf8),
            "ok.key": randomData(16, seed: 1), "long.key": randomData(17, seed: 2),
        ]
        try await ProxyFixture.with(files: files, settings: .init(maxPlaylistBytes: 200, maxKeyBytes: 16)) { fixture in
            let big = try await Curl.get(fixture.pathURL("big.m3u8"), in: fixture.folder)
            #expect(big.status == 502)
            #expect(String(decoding: big.body, as: UTF8.self).contains("larger than 200 bytes"))
            #expect(try await Curl.get(fixture.pathURL("small.m3u8"), in: fixture.folder).status == 200)
            func key(_ name: String) -> String {
                let url = ProxyURL(port: fixture.port).query(for: fixture.nginx.url(name)).absoluteString
                return url.replacingOccurrences(of: "/?url=", with: "/_key?url=")
            }
            let ok = try await Curl.get(key("ok.key"), in: fixture.folder)
            #expect(ok.status == 200 && ok.body == files["ok.key"] && ok.headers["cache-control"] == "no-store")
            let long = try await Curl.get(key("long.key"), in: fixture.folder)
            #expect(long.status == 502)
            #expect(String(decoding: long.body, as: UTF8.self).contains("larger than 16 bytes"))
        }
    }

    @Test("connections beyond maxConnections get a 503; an idle connection is closed after idleConnectionTimeout")
    func connections() async throws {
        let data = randomData(1000, seed: 3)
        try await ProxyFixture.with(
            files: ["c.bin": data],
            settings: .init(maxConnections: 2, idleConnectionTimeout: .seconds(3))
        ) { fixture in
            let opened = ContinuousClock.now
            let first = try await RawConnection.connect(port: fixture.port)
            let second = try await RawConnection.connect(port: fixture.port)
            // Both held open; a third is turned away (its request answered with a 503, then closed).
            try await Task.sleep(for: .milliseconds(100))
            let refused = try await Curl.get(fixture.url("c.bin"), in: fixture.folder)
            #expect(refused.status == 503)
            // The two idle ones are closed by the proxy, not before the timeout; then a new one is served.
            _ = try await first.readUntilClosed(timeout: .seconds(30))
            _ = try await second.readUntilClosed(timeout: .seconds(30))
            #expect(ContinuousClock.now - opened >= .seconds(3))
            // (The proxy counts a connection out when its task ends, just after the close the client saw.)
            var served = try await Curl.get(fixture.url("c.bin"), in: fixture.folder)
            let deadline = ContinuousClock.now + .seconds(30)
            while served.status == 503, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
                served = try await Curl.get(fixture.url("c.bin"), in: fixture.folder)
            }
            #expect(served.status == 200 && served.body == data)
        }
    }

    @Test("keys beyond maxKeysInMemory are forgotten, the least recently used first")
    func keyStoreCapacity() async {
        let store = KeyStore(capacity: 2)
        await store.store([1], for: "a")
        await store.store([2], for: "b")
        #expect(await store.key(for: "a") == [1])
        await store.store([3], for: "c")
        #expect(await store.count == 2)
        #expect(await store.key(for: "b") == nil, "b was used least recently")
        #expect(await store.key(for: "a") == [1])
        #expect(await store.key(for: "c") == [3])
    }
}
