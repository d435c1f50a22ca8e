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

    /// GETs `url` until it is not refused for want of a connection slot (the proxy counts a connection out when its
    /// task ends, just after the close the client saw).
    static func getOnceThereIsRoom(_ url: String, _ fixture: ProxyFixture) async throws -> Curl.Response {
        var response = try await Curl.get(url, in: fixture.folder)
        let deadline = ContinuousClock.now + Patience.reply
        while response.status == 503, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            response = try await Curl.get(url, in: fixture.folder)
        }
        return response
    }

    @Test("connections beyond maxConnections get a 503; a slot freed by a close is served again")
    func connections() async throws {
        let data = randomData(1000, seed: 3)
        // The timers are far away: what is tested here must not depend on how fast the machine is.
        try await ProxyFixture.with(
            files: ["c.bin": data],
            settings: .init(maxConnections: 2, idleConnectionTimeout: .seconds(600), requestHeadTimeout: .seconds(600))
        ) { fixture in
            // Two connections, each shown to be counted by an answer to its first request, then held open.
            let url = try #require(URLComponents(string: fixture.url("c.bin")))
            let target = url.percentEncodedPath + "?" + (url.percentEncodedQuery ?? "")
            let request = Array("GET \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(fixture.port)\r\n\r\n".utf8)
            var held: [RawConnection] = []
            for _ in 0..<2 {
                let connection = try await RawConnection.connect(port: fixture.port)
                try await connection.write(request)
                let answer = try await connection.read(atLeast: 12)
                #expect(String(decoding: answer.prefix(12), as: UTF8.self) == "HTTP/1.1 200")
                held.append(connection)
            }
            // A third is turned away: its request answered with a 503, then closed.
            let refused = try await Curl.get(fixture.url("c.bin"), in: fixture.folder)
            #expect(refused.status == 503)
            await held[0].close()
            let served = try await Self.getOnceThereIsRoom(fixture.url("c.bin"), fixture)
            #expect(served.status == 200 && served.body == data)
            await held[1].close()
        }
    }

    @Test("an idle connection is closed after idleConnectionTimeout, not before, and its slot is served again")
    func idleConnections() async throws {
        let data = randomData(1000, seed: 4)
        try await ProxyFixture.with(
            files: ["c.bin": data],
            settings: .init(maxConnections: 1, idleConnectionTimeout: .seconds(2), requestHeadTimeout: .seconds(600))
        ) { fixture in
            let opened = ContinuousClock.now
            let idle = try await RawConnection.connect(port: fixture.port)
            _ = try await idle.readUntilClosed()
            #expect(ContinuousClock.now - opened >= .seconds(2))
            // Served though fetching it from the origin may take longer than the idle timeout on a loaded machine: a
            // request waiting for its answer is not idle.
            let served = try await Self.getOnceThereIsRoom(fixture.url("c.bin"), fixture)
            #expect(served.status == 200 && served.body == data, "status \(served.status)")
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
