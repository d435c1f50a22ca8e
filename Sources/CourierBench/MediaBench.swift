import CourierClient
import CourierProcess
import Crypto
import Foundation
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `courier bench --pattern media`: one file uploaded by one client and downloaded by another, through a fresh
/// server, with the server's memory sampled throughout; then, in the same folder, what the machine can do at most
/// (write + fsync, SHA-256, and the same download over HTTP with curl).
struct MediaBench {
    let bytes: Int64
    let executable: URL
    let folder: URL
    /// A PostgreSQL database the server keeps its rows and media in, instead of SQLite and files in its folder.
    let database: String?
    let say: @Sendable (String) -> Void

    struct Result: Sendable {
        var bytes: Int64
        /// Upload: the client's hashing of the file, then from the upload request to the server's upload_done
        /// (written, fsynced, checked).
        var hashSeconds: Double
        var uploadSeconds: Double
        /// Download: from the fetch to the last byte on the receiver's disk, and then its check of the digest.
        var downloadSeconds: Double
        var verifySeconds: Double
        var serverRSSBefore: Int?
        var serverRSSPeak: Int?
        var serverCPUSeconds: Double?
        /// The same file over HTTP (`GET /media/<sha256>` with curl to /dev/null), when curl is installed.
        var httpSeconds: Double?
        /// The same file over HTTP with curl into a file beside the receiver's (the same disk): the peer of the
        /// native download, which writes the file too.
        var curlFileSeconds: Double?
        /// Ceilings: writing the file's bytes with one fsync at the end, and SHA-256 of as many bytes in memory.
        var diskWriteSeconds: Double
        var sha256Seconds: Double
    }

    func run(limits: [String]) async throws -> Result {
        var configuration = BenchConfiguration()
        configuration.connections = 2
        configuration.pattern = .pairs
        var logger = Logger(label: "courier.bench")
        logger.logLevel = .warning
        let data = self.folder.appendingPathComponent("data")
        let users: [BenchUser]
        if let database = self.database {
            users = try await BenchProvisioning.provision(
                configuration,
                database: database,
                logger: logger,
                say: self.say
            )
            try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
        } else {
            users = try await BenchProvisioning.provision(configuration, dataFolder: data, logger: logger)
        }
        let file = self.folder.appendingPathComponent("upload.bin")
        self.say("writing \(self.bytes) random bytes to \(file.path)")
        try Self.writeRandom(self.bytes, to: file)
        // The ceilings first, each from a clean page cache state (nothing dirty waiting to be written back).
        sync()
        self.say("measuring the ceilings")
        let (diskWrite, sha) = try Self.ceilings(self.bytes, in: self.folder)
        sync()
        let (server, port, httpPort) = try await BenchServers.serve(
            executable: self.executable,
            data: data,
            folder: self.folder,
            limits: limits,
            database: self.database,
            node: self.database == nil ? nil : "bench-media"
        )
        defer { server.stop() }
        let pid = server.process.processIdentifier
        self.say("server \(pid) on 127.0.0.1:\(port)")

        func client(_ user: BenchUser) throws -> CourierClient {
            var settings = CourierClient.Configuration(
                port: port,
                credentials: .token(user.token),
                storePath: self.folder.appendingPathComponent("\(user.name).sqlite").path
            )
            settings.mediaCacheBytes = self.bytes * 2
            return try CourierClient(configuration: settings, logger: logger)
        }
        let sender = try client(users[0])
        let receiver = try client(users[1])
        guard case .user(let peer) = users[0].target else { throw BenchError("no peer") }

        // The server's memory, sampled until the end.
        let peak = Mutex<Int>(0)
        let before = ProcessMonitor.residentBytes(of: pid)
        let cpuBefore = ProcessMonitor.cpuSeconds(of: pid)
        let sampler = Task {
            while !Task.isCancelled {
                if let rss = ProcessMonitor.residentBytes(of: pid) { peak.withLock { $0 = max($0, rss) } }
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
        defer { sampler.cancel() }

        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await sender.run() }
            group.addTask { await receiver.run() }
            defer {
                sender.stop()
                receiver.stop()
            }
            var hashed = ContinuousClock.now
            let start = ContinuousClock.now
            var media: MediaInfo?
            self.say("uploading")
            for try await step in sender.sendMedia(file: file, to: .user(peer)) {
                switch step {
                case .hashed: hashed = .now
                case .uploading: break
                case .queued(_, let info): media = info
                }
            }
            let uploaded = ContinuousClock.now
            guard let media else { throw BenchError("the upload did not finish") }

            // The receiver has it once the message is committed and delivered.
            for await event in receiver.events {
                if case .message(let message) = event, message.media?.sha256 == media.sha256 { break }
            }
            // The download and curl's each start with nothing waiting to be written back.
            sync()
            self.say("downloading")
            let fetchStart = ContinuousClock.now
            var lastByte = fetchStart
            var cached: URL?
            for try await step in receiver.download(media) {
                switch step {
                case .downloading(let received, let total): if received == total { lastByte = .now }
                case .finished(let url): cached = url
                }
            }
            let finished = ContinuousClock.now
            guard let cached,
                (try? FileManager.default.attributesOfItem(atPath: cached.path)[.size] as? NSNumber)??
                    .int64Value == self.bytes
            else { throw BenchError("the download is incomplete") }
            let cpuAfter = ProcessMonitor.cpuSeconds(of: pid)

            var http: Double?
            var curlFile: Double?
            if FileManager.default.isExecutableFile(atPath: "/usr/bin/curl") {
                self.say("downloading over HTTP with curl")
                http = try Self.curl(port: httpPort, sha256: media.sha256, token: users[1].token)
                let copy = cached.deletingLastPathComponent().appendingPathComponent("curl-copy.bin")
                sync()
                self.say("downloading over HTTP with curl into \(copy.path)")
                curlFile = try Self.curl(port: httpPort, sha256: media.sha256, token: users[1].token, to: copy.path)
                try? FileManager.default.removeItem(at: copy)
            }
            sampler.cancel()
            return Result(
                bytes: self.bytes,
                hashSeconds: (hashed - start).seconds,
                uploadSeconds: (uploaded - hashed).seconds,
                downloadSeconds: (lastByte - fetchStart).seconds,
                verifySeconds: (finished - lastByte).seconds,
                serverRSSBefore: before,
                serverRSSPeak: peak.withLock { $0 },
                serverCPUSeconds: both(cpuBefore, cpuAfter).map { $1 - $0 },
                httpSeconds: http,
                curlFileSeconds: curlFile,
                diskWriteSeconds: diskWrite,
                sha256Seconds: sha
            )
        }
    }

    /// `count` pseudo-random bytes (incompressible, cheap to make), written a mebibyte at a time.
    static func writeRandom(_ count: Int64, to file: URL) throws {
        _ = FileManager.default.createFile(atPath: file.path, contents: nil)
        let handle = try FileHandle(forWritingTo: file)
        defer { try? handle.close() }
        var state = UInt64.random(in: 0...UInt64.max)
        var words = [UInt64](repeating: 0, count: 128 * 1024)
        var left = count
        while left > 0 {
            for index in words.indices {
                state &+= 0x9E37_79B9_7F4A_7C15
                var z = state
                z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
                z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
                words[index] = z ^ (z >> 31)
            }
            let chunk = Int(min(left, Int64(words.count * 8)))
            try words.withUnsafeBytes { try handle.write(contentsOf: $0.prefix(chunk)) }
            left -= Int64(chunk)
        }
    }

    /// The machine's ceilings for the same number of bytes: a 1 MiB-at-a-time write with one fsync at the end (as
    /// the server's blob store writes), and SHA-256 (as the server checks uploads), in seconds.
    static func ceilings(_ count: Int64, in folder: URL) throws -> (write: Double, sha256: Double) {
        let buffer = [UInt8](repeating: 0x5A, count: 1024 * 1024)
        let file = folder.appendingPathComponent("ceiling.bin")
        _ = FileManager.default.createFile(atPath: file.path, contents: nil)
        let handle = try FileHandle(forWritingTo: file)
        let writeStart = ContinuousClock.now
        var left = count
        while left > 0 {
            let chunk = Int(min(left, Int64(buffer.count)))
            try buffer.withUnsafeBytes { try handle.write(contentsOf: $0.prefix(chunk)) }
            left -= Int64(chunk)
        }
        try handle.synchronize()
        let write = (ContinuousClock.now - writeStart).seconds
        try handle.close()
        try? FileManager.default.removeItem(at: file)

        var hasher = SHA256()
        let hashStart = ContinuousClock.now
        left = count
        while left > 0 {
            let chunk = Int(min(left, Int64(buffer.count)))
            buffer.withUnsafeBytes { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0.prefix(chunk))) }
            left -= Int64(chunk)
        }
        _ = hasher.finalize()
        return (write, (ContinuousClock.now - hashStart).seconds)
    }

    /// Downloads `/media/<sha256>` with curl into `output` (/dev/null by default); returns the seconds it took.
    static func curl(port: Int, sha256: String, token: String, to output: String = "/dev/null") throws -> Double {
        let pipe = Pipe()
        let process = try ChildProcess(
            executable: "/usr/bin/curl",
            arguments: [
                "--silent", "--show-error", "--fail", "--output", output, "--write-out", "%{time_total}",
                "--header", "Authorization: Bearer \(token)", "http://127.0.0.1:\(port)/media/\(sha256)",
            ],
            standardOutput: .pipe(pipe)
        )
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        let status = process.waitUntilExit()
        guard status == 0, let seconds = Double(String(decoding: output, as: UTF8.self)) else {
            throw BenchError("curl failed with \(status)")
        }
        return seconds
    }

    static func text(_ result: Result) -> String {
        func rate(_ seconds: Double) -> String {
            String(format: "%.2f s, %.0f MB/s", seconds, Double(result.bytes) / seconds / 1e6)
        }
        var lines = [
            "courier bench: media, one file of \(result.bytes) bytes, uploaded and downloaded over loopback",
            "upload:        \(rate(result.uploadSeconds)) (request to upload_done: written, fsynced, checked; "
                + "the client hashed it first in \(String(format: "%.2f", result.hashSeconds)) s)",
            "download:      \(rate(result.downloadSeconds)) (fetch to the last byte on the receiver's disk; "
                + "its digest check took \(String(format: "%.2f", result.verifySeconds)) s more)",
        ]
        if let http = result.httpSeconds {
            lines.append("HTTP download: \(rate(http)) (curl to /dev/null, same server)")
        }
        if let file = result.curlFileSeconds {
            lines.append(
                "HTTP to disk:  \(rate(file)) (curl into a file on the download's disk); "
                    + String(format: "download/curl-to-disk = %.2f", file / result.downloadSeconds)
            )
        }
        if let before = result.serverRSSBefore, let peak = result.serverRSSPeak {
            lines.append(
                "server RSS:    \(BenchReport.mebibytes(before)) before, peak \(BenchReport.mebibytes(peak)): "
                    + "growth \(BenchReport.mebibytes(peak - before))"
            )
        }
        if let cpu = result.serverCPUSeconds {
            lines.append("server CPU:    \(String(format: "%.1f", cpu)) s over the upload and download")
        }
        lines += [
            "ceiling write: \(rate(result.diskWriteSeconds)) (1 MiB writes, one fsync); "
                + String(format: "upload/ceiling = %.2f", result.diskWriteSeconds / result.uploadSeconds),
            "ceiling sha256: \(rate(result.sha256Seconds))",
        ]
        return lines.joined(separator: "\n")
    }

    static func json(_ result: Result) throws -> String {
        var object: [String: Any] = [
            "pattern": "media",
            "bytes": result.bytes,
            "hash_seconds": result.hashSeconds,
            "upload_seconds": result.uploadSeconds,
            "download_seconds": result.downloadSeconds,
            "verify_seconds": result.verifySeconds,
            "ceiling_write_seconds": result.diskWriteSeconds,
            "ceiling_sha256_seconds": result.sha256Seconds,
        ]
        object["http_seconds"] = result.httpSeconds
        object["curl_file_seconds"] = result.curlFileSeconds
        object["server_rss_before_bytes"] = result.serverRSSBefore
        object["server_rss_peak_bytes"] = result.serverRSSPeak
        object["server_cpu_seconds"] = result.serverCPUSeconds
        let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }
}

private func both(_ a: Double?, _ b: Double?) -> (Double, Double)? {
    guard let a, let b else { return nil }
    return (a, b)
}

extension Duration {
    var seconds: Double {
        Double(self.components.seconds) + Double(self.components.attoseconds) / 1e18
    }
}
