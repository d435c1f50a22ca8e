import CourierTesting
import Foundation
import MediaCache
import Synchronization
import Testing

/// The most bytes on disk a sampler saw.
final class DiskPeak: Sendable {
    let peak = Mutex<Int64>(0)
    let done = Mutex(false)

    /// Samples the block files under `folder` until ``stop()``.
    func sample(_ folder: URL) -> Task<Void, Never> {
        Task.detached {
            while !self.done.withLock({ $0 }) {
                let bytes = Self.onDisk(folder)
                self.peak.withLock { $0 = max($0, bytes) }
                try? await Task.sleep(for: .milliseconds(2))
            }
        }
    }

    /// The bytes of the block files under a cache folder.
    static func onDisk(_ folder: URL) -> Int64 {
        var total: Int64 = 0
        let enumerator = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: [.fileSizeKey])
        while let file = enumerator?.nextObject() as? URL {
            guard Int(file.lastPathComponent) != nil else { continue }
            total += Int64((try? file.resourceValues(forKeys: [.fileSizeKey]).fileSize) ?? 0)
        }
        return total
    }
}

/// The cap holds on disk while resources larger than the cache stream in (evicting while writing, not after), and a
/// slow player's next bytes are not evicted before it reads them.
@Suite("MediaCache proxy: the cap on disk while writing", .serialized)
struct DiskCapTests {
    static let cap: Int64 = 2 << 20
    static let block: Int64 = 256 << 10

    @Test("four chunked origins streaming at once never put much more than the cap on disk, and each is sent once")
    func chunkedStreams() async throws {
        var files: [String: Data] = [:]
        for index in 0..<4 { files["s\(index).bin"] = randomData(8 << 20, seed: 90 + UInt64(index)) }
        try await ProxyFixture.with(
            files: files,
            limitRate: "0",
            settings: .init(blockBytes: Self.block, coalesceBytes: 2 * Self.block, maxBytes: Self.cap)
        ) { fixture in
            let sampler = DiskPeak()
            let sampling = sampler.sample(fixture.cacheDirectory)
            let work = fixture.folder
            let requests = (0..<4).map { ("s\($0).bin", fixture.url("s\($0).bin", location: "chunked")) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (name, url) in requests {
                    let expected = files[name]
                    group.addTask {
                        let response = try await Curl.get(url, in: work)
                        #expect(response.body == expected, "\(name) came back whole and right")
                    }
                }
                try await group.waitForAll()
            }
            sampler.done.withLock { $0 = true }
            await sampling.value
            let seen = sampler.peak.withLock { $0 }
            print("chunkedStreams: at most \(seen) bytes on disk seen, cap \(Self.cap)")
            // Beyond the cap only what players hold: per player, the bytes it is being sent (a block here), the
            // block its fetch writes and the batch about to be written (at most a block).
            #expect(seen <= Self.cap + 4 * 3 * Self.block, "\(seen) bytes on disk with a cap of \(Self.cap)")
            let fetched = fixture.nginx.log().filter { $0.uri.contains("/chunked/") }
            #expect(fetched.count == 4, "\(fetched)")
        }
    }

    @Test("a slow player of a resource larger than the cache gets it whole from one origin response")
    func slowPlayer() async throws {
        // Larger than what the sockets between the proxy and the player hold (the proxy counts those bytes as read).
        let data = randomData(16 << 20, seed: 95)
        try await ProxyFixture.with(
            files: ["slow.bin": data],
            limitRate: "0",
            settings: .init(blockBytes: Self.block, coalesceBytes: 2 * Self.block, maxBytes: Self.cap)
        ) { fixture in
            let sampler = DiskPeak()
            let sampling = sampler.sample(fixture.cacheDirectory)
            // The origin is as fast as loopback; the player reads at 8 MB/s.
            let response = try await Curl.get(
                fixture.url("slow.bin", location: "chunked"),
                options: ["--limit-rate", "8M"],
                in: fixture.folder
            )
            sampler.done.withLock { $0 = true }
            await sampling.value
            #expect(response.body == data)
            let seen = sampler.peak.withLock { $0 }
            print("slowPlayer: at most \(seen) bytes on disk seen, cap \(Self.cap)")
            #expect(seen <= Self.cap + 3 * Self.block, "\(seen) bytes on disk with a cap of \(Self.cap)")
            // Its unread bytes were kept: the origin (which ignores ranges) was not asked again from the start.
            let fetched = fixture.nginx.log().filter { $0.uri.contains("/chunked/") }
            #expect(fetched.count == 1, "\(fetched)")
        }
    }

    @Test("a fetch held at the read-ahead by a paused player stops after a while when its origin honours ranges")
    func heldFetchStops() async throws {
        // Smaller than the cache (a larger one would stream through uncached), and larger than what the sockets
        // between the proxy and the player hold (the proxy counts those bytes as read).
        let data = randomData(40 << 20, seed: 96)
        let block: Int64 = 1 << 20
        try await ProxyFixture.with(
            files: ["held.bin": data],
            limitRate: "0",
            settings: .init(
                blockBytes: block,
                coalesceBytes: 2 * block,
                maxBytes: 64 << 20,
                heldFetchTimeout: .milliseconds(100),
                readAheadBytes: 4 << 20
            )
        ) { fixture in
            // A player that asks, then reads nothing: the sockets fill, the fetch runs the read-ahead further and
            // is held there, then stops; its origin response ends.
            let url = try #require(URL(string: fixture.url("held.bin")))
            let target = url.path + (url.query.map { "?" + $0 } ?? "")
            let player = try await RawConnection.connect(port: fixture.port, reading: false)
            try await player.write(Array("GET \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(fixture.port)\r\n\r\n".utf8))
            let deadline = ContinuousClock.now + .seconds(60)
            let requests = { fixture.nginx.log().filter { $0.uri.contains("held.bin") } }
            while requests().isEmpty, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            #expect(requests().count == 1, "the first origin response ended while the player was paused")
            // The player reads on: it gets the whole file, the rest from a fetch that goes on where the first stopped.
            try await player.resumeReading()
            // The head is a few hundred bytes: once the body's length has arrived, the rest of it follows.
            var received = try await player.read(atLeast: data.count, timeout: .seconds(60))
            let headEnd = received.firstRange(of: Array("\r\n\r\n".utf8))?.upperBound ?? received.count
            received = try await player.read(atLeast: headEnd + data.count, timeout: .seconds(60))
            let body = received[headEnd...]
            await player.close()
            #expect(Data(body) == data)
            while requests().count < 2, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            let fetched = requests()
            print("heldFetchStops: \(fetched.count) origin requests, \(fetched.map(\.range))")
            #expect(fetched.count > 1, "\(fetched)")
            let starts = fetched.dropFirst().compactMap { logged -> Int64? in
                guard logged.status == 206, logged.range.hasPrefix("bytes="),
                    logged.range.hasSuffix("-\(data.count - 1)")
                else { return nil }
                return Int64(logged.range.dropFirst(6).prefix { $0 != "-" })
            }
            #expect(starts.count == fetched.count - 1, "\(fetched)")
            #expect(starts == starts.sorted() && Set(starts).count == starts.count && (starts.first ?? 0) > 0)
        }
    }
}
