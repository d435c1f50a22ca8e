import CourierProcess
import Foundation
import MediaCache

/// `courier bench --pattern proxy`: one file served by nginx directly, by nginx as a caching proxy (`proxy_cache`
/// with `slice`, what one would otherwise deploy) and by `courier proxy`, in the same run: time to first byte and
/// throughput of a whole-file GET, cold (the cache empty: a new URL) and warm (again); then many concurrent cold
/// readers, and the bytes each cache made the origin send.
struct ProxyBench {
    let bytes: Int64
    let runs: Int
    let readers: Int
    let executable: URL
    let folder: URL
    let say: @Sendable (String) -> Void

    struct Result: Sendable {
        var bytes: Int64
        var runs: Int
        /// Each peer's measurements, one per run.
        var direct: [HTTPTiming.Result] = []
        var nginxCold: [HTTPTiming.Result] = []
        var nginxWarm: [HTTPTiming.Result] = []
        var courierCold: [HTTPTiming.Result] = []
        var courierWarm: [HTTPTiming.Result] = []
        var readers: Int
        /// Concurrent cold readers: the wall time until the last finished, how many got the whole file, and the
        /// body bytes the origin sent.
        var courierReaders = Readers()
        var nginxReaders = Readers()
        var courierCPUSeconds: Double?
        var courierPeakRSS: Int?
    }

    struct Readers: Sendable {
        var seconds = 0.0
        var complete = 0
        var firstFailure: String?
        var originBytes: Int64 = 0
    }

    func run() async throws -> Result {
        let media = self.folder.appendingPathComponent("media", isDirectory: true)
        try FileManager.default.createDirectory(at: media, withIntermediateDirectories: true)
        self.say("writing \(self.bytes) random bytes")
        try MediaBench.writeRandom(self.bytes, to: media.appendingPathComponent("film.bin"))
        let origin = try await FreePort.pick()
        let caching = try await FreePort.pick()
        let nginx = try await Nginx.start(
            servers: Self.servers(
                origin: origin,
                caching: caching,
                media: media,
                folder: self.folder,
                bytes: self.bytes
            ),
            ports: [origin, caching],
            folder: self.folder.appendingPathComponent("nginx"),
            workers: "auto"
        )
        do {
            let result = try await self.measure(nginx: nginx, origin: origin, caching: caching)
            await nginx.stop()
            return result
        } catch {
            await nginx.stop()
            throw error
        }
    }

    private func measure(nginx: Nginx, origin: Int, caching: Int) async throws -> Result {
        let (proxy, proxyPort) = try await BenchServers.proxy(
            executable: self.executable,
            folder: self.folder,
            maxBytes: self.bytes * Int64(self.runs + 3)
        )
        defer { proxy.stop() }
        let pid = proxy.process.processIdentifier
        self.say("nginx on 127.0.0.1:\(origin) (origin) and :\(caching) (proxy_cache + slice); courier proxy \(pid)")
        let cpuBefore = ProcessMonitor.cpuSeconds(of: pid)
        var result = Result(bytes: self.bytes, runs: self.runs, readers: self.readers)
        func courierPath(_ query: String) -> String {
            let url = URL(string: "http://127.0.0.1:\(origin)/files/film.bin?\(query)")!
            let proxied = ProxyURL(port: 0).query(for: url)
            return proxied.path + "?" + (proxied.query ?? "")
        }
        for run in 1...self.runs {
            result.direct.append(try await self.get(origin, "/files/film.bin", "nginx direct"))
            result.nginxCold.append(try await self.get(caching, "/files/film.bin?run=\(run)", "nginx cache, cold"))
            result.nginxWarm.append(try await self.get(caching, "/files/film.bin?run=\(run)", "nginx cache, warm"))
            result.courierCold.append(try await self.get(proxyPort, courierPath("run=\(run)"), "courier, cold"))
            result.courierWarm.append(try await self.get(proxyPort, courierPath("run=\(run)"), "courier, warm"))
            self.say("run \(run) of \(self.runs) done")
        }
        if let before = cpuBefore, let after = ProcessMonitor.cpuSeconds(of: pid) {
            result.courierCPUSeconds = after - before
        }
        result.courierPeakRSS = ProcessMonitor.peakResidentBytes(of: pid)
        if self.readers > 0 {
            self.say("\(self.readers) concurrent cold readers through courier")
            result.courierReaders = await self.concurrent(proxyPort, courierPath("readers=1"))
            result.courierReaders.originBytes = Self.originBytes(nginx, query: "readers=1")
            self.say("\(self.readers) concurrent cold readers through nginx's cache")
            result.nginxReaders = await self.concurrent(caching, "/files/film.bin?readers=2")
            result.nginxReaders.originBytes = Self.originBytes(nginx, query: "readers=2")
        }
        return result
    }

    private func get(_ port: Int, _ path: String, _ what: String) async throws -> HTTPTiming.Result {
        let result = try await HTTPTiming.get(port: port, path: path)
        guard result.status == 200, result.bodyBytes == self.bytes else {
            throw BenchError("\(what): status \(result.status), \(result.bodyBytes) of \(self.bytes) bytes")
        }
        return result
    }

    /// Starts every reader at once; returns the seconds until the last one is done, and how many got it all.
    private func concurrent(_ port: Int, _ path: String) async -> Readers {
        let start = ContinuousClock.now
        var readers = Readers()
        await withTaskGroup(of: String?.self) { group in
            for _ in 0..<self.readers {
                group.addTask {
                    do {
                        _ = try await self.get(port, path, "a concurrent reader")
                        return nil
                    } catch {
                        return "\(error)"
                    }
                }
            }
            for await failure in group {
                if let failure {
                    readers.firstFailure = readers.firstFailure ?? failure
                } else {
                    readers.complete += 1
                }
            }
        }
        let elapsed = ContinuousClock.now - start
        readers.seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return readers
    }

    /// The body bytes the origin server sent for requests whose query contains `query`.
    private static func originBytes(_ nginx: Nginx, query: String) -> Int64 {
        nginx.log("origin.log").filter { $0.uri.contains(query) }.reduce(0) { $0 + $1.bodyBytes }
    }

    private static func servers(origin: Int, caching: Int, media: URL, folder: URL, bytes: Int64) -> String {
        let megabytes = max(64, bytes * 8 / (1 << 20))
        return """
                server {
                    listen 127.0.0.1:\(origin);
                    access_log \(folder.path)/nginx/origin.log sent;
                    location /files/ { alias \(media.path)/; }
                }
                upstream origin {
                    server 127.0.0.1:\(origin);
                    keepalive 32;
                }
                proxy_cache_path \(folder.path)/nginx-cache levels=1:2 keys_zone=media:16m max_size=\(megabytes)m
                    inactive=1d use_temp_path=off;
                server {
                    listen 127.0.0.1:\(caching);
                    location /files/ {
                        slice 1m;
                        proxy_cache media;
                        proxy_cache_key $uri$is_args$args$slice_range;
                        proxy_set_header Range $slice_range;
                        proxy_http_version 1.1;
                        proxy_set_header Connection "";
                        proxy_cache_valid 200 206 1h;
                        proxy_cache_lock on;
                        proxy_cache_lock_timeout 60s;
                        proxy_cache_lock_age 60s;
                        proxy_pass http://origin;
                    }
                }
            """
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return 0 }
        return sorted.count.isMultiple(of: 2)
            ? (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2 : sorted[sorted.count / 2]
    }

    static func text(_ result: Result) -> String {
        let megabytes = Double(result.bytes) / 1e6
        func row(_ name: String, _ measures: [HTTPTiming.Result]) -> (String, Double, Double) {
            let ttfb = Self.median(measures.map(\.firstByteSeconds)) * 1000
            let rate = Self.median(measures.map { megabytes / $0.seconds })
            let line =
                name.padding(toLength: 22, withPad: " ", startingAt: 0)
                + String(format: "%9.2f ms %9.0f MB/s", ttfb, rate)
            return (line, ttfb, rate)
        }
        let direct = row("nginx direct", result.direct)
        let nginxCold = row("nginx cache, cold", result.nginxCold)
        let nginxWarm = row("nginx cache, warm", result.nginxWarm)
        let courierCold = row("courier proxy, cold", result.courierCold)
        let courierWarm = row("courier proxy, warm", result.courierWarm)
        var lines = [
            "courier bench: proxy, one file of \(result.bytes) bytes, \(result.runs) runs (medians; a new "
                + "connection per GET, the body counted and dropped)",
            "peer                  first byte   throughput",
            direct.0, nginxCold.0, nginxWarm.0, courierCold.0, courierWarm.0,
            String(
                format: "ratios to nginx direct (throughput): courier warm %.2f, cold %.2f; nginx cache warm %.2f, "
                    + "cold %.2f",
                courierWarm.2 / direct.2,
                courierCold.2 / direct.2,
                nginxWarm.2 / direct.2,
                nginxCold.2 / direct.2
            ),
        ]
        if let cpu = result.courierCPUSeconds, let rss = result.courierPeakRSS {
            lines.append(
                String(format: "courier proxy: %.1f s of CPU over the runs, peak RSS ", cpu)
                    + BenchReport.mebibytes(rss)
            )
        }
        if result.readers > 0 {
            for (name, readers) in [("courier proxy", result.courierReaders), ("nginx cache", result.nginxReaders)] {
                var line =
                    "\(result.readers) concurrent cold readers, \(name): "
                    + String(
                        format: "%.2f s, %d got the whole file, the origin sent %.2f copies",
                        readers.seconds,
                        readers.complete,
                        Double(readers.originBytes) / Double(result.bytes)
                    )
                if let failure = readers.firstFailure { line += " (first failure: \(failure))" }
                lines.append(line)
            }
        }
        return lines.joined(separator: "\n")
    }

    static func json(_ result: Result) throws -> String {
        func measures(_ list: [HTTPTiming.Result]) -> [[String: Double]] {
            list.map { ["first_byte_seconds": $0.firstByteSeconds, "seconds": $0.seconds] }
        }
        var object: [String: Any] = [
            "pattern": "proxy",
            "bytes": result.bytes,
            "runs": result.runs,
            "nginx_direct": measures(result.direct),
            "nginx_cache_cold": measures(result.nginxCold),
            "nginx_cache_warm": measures(result.nginxWarm),
            "courier_cold": measures(result.courierCold),
            "courier_warm": measures(result.courierWarm),
            "readers": result.readers,
            "courier_readers_seconds": result.courierReaders.seconds,
            "courier_readers_complete": result.courierReaders.complete,
            "courier_readers_origin_bytes": result.courierReaders.originBytes,
            "nginx_readers_seconds": result.nginxReaders.seconds,
            "nginx_readers_complete": result.nginxReaders.complete,
            "nginx_readers_origin_bytes": result.nginxReaders.originBytes,
        ]
        object["courier_cpu_seconds"] = result.courierCPUSeconds
        object["courier_peak_rss_bytes"] = result.courierPeakRSS
        let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }
}
