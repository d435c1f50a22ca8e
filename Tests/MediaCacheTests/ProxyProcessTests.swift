import CourierTesting
import Foundation
import MediaCache
import Testing

@Suite("MediaCache proxy: `courier proxy` as a process — SIGKILL mid-download, and its commands", .serialized)
struct ProxyProcessTests {
    /// Starts `courier proxy` on `port` over `cache`.
    static func start(port: Int, cache: URL, log: URL) async throws -> ServerProcess {
        try await ServerProcess.start(
            arguments: ["proxy", "--port", String(port), "--cache-dir", cache.path, "--block-bytes", "64K"],
            environment: ["SWIFT_BACKTRACE": "enable=no"],
            readyPort: port,
            log: log
        )
    }

    @Test("killed with SIGKILL at seeded moments mid-download, restarted: every byte it serves or lists is right")
    func sigkillMidDownload() async throws {
        let seed = TestSeed.make(for: "sigkillMidDownload")
        var random = SeededRandom(seed: seed)
        let size = 6 << 20
        let data = randomData(size, seed: seed)
        try await withTemporaryDirectory(prefix: "courier-proxy-kill") { folder in
            let media = folder.appendingPathComponent("media", isDirectory: true)
            try FileManager.default.createDirectory(at: media, withIntermediateDirectories: true)
            try data.write(to: media.appendingPathComponent("film.bin"))
            let nginx = try await NginxOrigin.start(
                root: media,
                folder: folder.appendingPathComponent("nginx"),
                limitRate: "4m"
            )
            let cache = folder.appendingPathComponent("cache", isDirectory: true)
            let log = folder.appendingPathComponent("proxy.log")
            let port = try await FreePort.pick()
            let origin = nginx.url("film.bin", location: "slow")
            let url = ProxyURL(port: port).query(for: origin).absoluteString
            var listed: Int64 = 0
            do {
                for round in 0..<3 {
                    let proxy = try await Self.start(port: port, cache: cache, log: log)
                    // Seek somewhere, so that the cache holds several pieces over the rounds.
                    let start = round == 0 ? 0 : Int(random.next() % UInt64(size - 1))
                    async let partial = Curl.get(url, range: "\(start)-", in: folder)
                    // Killed at a seeded moment after the index first lists bytes of this round (so the check below
                    // always has bytes to check, however slow the machine).
                    let store = try FragmentStore(folder: cache, blockBytes: 64 << 10)
                    let already = store.record(for: origin.absoluteString)?.ranges.count ?? 0
                    let deadline = ContinuousClock.now + .seconds(30)
                    while (store.record(for: origin.absoluteString)?.ranges.count ?? 0) <= already,
                        ContinuousClock.now < deadline
                    {
                        try await Task.sleep(for: .milliseconds(10))
                    }
                    let moment = Int(random.next() % 600)
                    try await Task.sleep(for: .milliseconds(moment))
                    await proxy.kill()
                    let cut = try await partial
                    #expect(cut.body == data[start..<(start + cut.body.count)], "round \(round): bytes served before")

                    // On disk: whatever the index lists is the origin's bytes.
                    if let record = store.record(for: origin.absoluteString) {
                        listed += record.ranges.count
                        for range in record.ranges.ranges {
                            let bytes = try store.read(range, for: record.key, generation: record.generation)
                            #expect(
                                bytes == data[Int(range.lowerBound)..<Int(range.upperBound)],
                                "round \(round), killed at \(moment) ms: \(range) listed"
                            )
                        }
                    }
                    // Restarted: what it serves is right, from the cache and the origin together.
                    let restarted = try await Self.start(port: port, cache: cache, log: log)
                    let first = Int(random.next() % UInt64(size / 2))
                    let last = first + Int(random.next() % UInt64(size / 2))
                    let range = try await Curl.get(url, range: "\(first)-\(last)", in: folder)
                    #expect(range.status == 206 && range.body == data[first...last], "round \(round)")
                    await restarted.kill()
                }
                #expect(listed > 0, "the kills left listed bytes to check")
                // Last, the whole film, then again with the origin gone.
                let proxy = try await Self.start(port: port, cache: cache, log: log)
                #expect(try await Curl.get(url, in: folder).body == data)
                await nginx.stop()
                #expect(try await Curl.get(url, in: folder).body == data)
                await proxy.terminate()
            } catch {
                await nginx.stop()
                throw error
            }
            await nginx.stop()
        }
    }

    @Test("courier proxy url, preload and stats talk to a running proxy")
    func commands() async throws {
        let data = randomData(300_000, seed: 3)
        try await withTemporaryDirectory(prefix: "courier-proxy-cli") { folder in
            let media = folder.appendingPathComponent("media", isDirectory: true)
            try FileManager.default.createDirectory(at: media, withIntermediateDirectories: true)
            try data.write(to: media.appendingPathComponent("clip.mp4"))
            let nginx = try await NginxOrigin.start(root: media, folder: folder.appendingPathComponent("nginx"))
            let port = try await FreePort.pick()
            let proxy = try await Self.start(
                port: port,
                cache: folder.appendingPathComponent("cache"),
                log: folder.appendingPathComponent("proxy.log")
            )
            do {
                // The listening line reaches a log file at once (standard output is not a terminal here).
                let log = folder.appendingPathComponent("proxy.log")
                let deadline = ContinuousClock.now + Patience.reply
                while ContinuousClock.now < deadline,
                    !((try? String(contentsOf: log, encoding: .utf8)) ?? "").contains("courier proxy listening on")
                {
                    try await Task.sleep(for: .milliseconds(20))
                }
                #expect(((try? String(contentsOf: log, encoding: .utf8)) ?? "").contains("listening on"))
                let origin = nginx.url("clip.mp4").absoluteString
                let other = try await CourierExecutable.run(["proxy", "url", "ftp://127.0.0.1/clip.mp4"])
                #expect(other.status != 0 && other.output.contains("http and https URLs only"), "\(other)")
                let printed = try await CourierExecutable.run(["proxy", "url", origin, "--proxy", "127.0.0.1:\(port)"])
                #expect(printed.status == 0)
                let proxyURL = printed.output.trimmingCharacters(in: .whitespacesAndNewlines)
                #expect(proxyURL.hasPrefix("http://127.0.0.1:\(port)/r/") && proxyURL.hasSuffix("/clip.mp4"))
                let query = try await CourierExecutable.run([
                    "proxy", "url", origin, "--query", "--proxy", "127.0.0.1:\(port)",
                ])
                #expect(query.output.hasPrefix("http://127.0.0.1:\(port)/?url=http%3A%2F%2F127.0.0.1"))

                let cache = folder.appendingPathComponent("cache").path
                // Without the secret in the cache folder, the control endpoints refuse.
                let refused = try await CourierExecutable.run(["proxy", "stats", "--proxy", "127.0.0.1:\(port)"])
                #expect(refused.status != 0 && refused.output.contains("401"), "\(refused.output)")
                let preload = try await CourierExecutable.run([
                    "proxy", "preload", origin, "--bytes", "100K", "--proxy", "127.0.0.1:\(port)", "--cache-dir", cache,
                ])
                #expect(preload.status == 0 && preload.output.contains("cached 102400 bytes"), "\(preload.output)")
                let stats = try await CourierExecutable.run([
                    "proxy", "stats", "--proxy", "127.0.0.1:\(port)", "--cache-dir", cache,
                ])
                let statistics = try JSONDecoder().decode(CacheStatistics.self, from: Data(stats.output.utf8))
                #expect(statistics.bytesUsed >= 102_400 && statistics.resources == 1)

                let fetched = try await Curl.get(proxyURL, range: "0-102399", in: folder)
                #expect(fetched.body == data.prefix(102_400))
                let bad = try await CourierExecutable.run([
                    "proxy", "preload", "not a url", "--proxy", "127.0.0.1:\(port)",
                ])
                #expect(bad.status != 0)
                let down = try await CourierExecutable.run([
                    "proxy", "stats", "--proxy", "127.0.0.1:\(try await FreePort.pick())",
                ])
                #expect(down.status != 0 && down.output.contains("cannot reach the proxy"))
                // In plain words: no error dump, no errno, brackets that close.
                #expect(down.output.contains(": connection refused (is courier proxy running there?)"), "\(down)")
                #expect(!down.output.contains("errno") && !down.output.contains("upstream:"), "\(down)")
                let line = down.output.split(separator: "\n").first ?? ""
                #expect(line.filter { $0 == "(" }.count == line.filter { $0 == ")" }.count, "\(down)")
                #expect(await proxy.terminate() == 0)
            } catch {
                await proxy.kill()
                await nginx.stop()
                throw error
            }
            await nginx.stop()
        }
    }
}
