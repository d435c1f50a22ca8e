import CourierProcess
import Foundation
import Glibc
import NIOCore
import NIOPosix
import Synchronization

/// What filling a server with idle connections from several processes found.
public struct IdleFillResult: Sendable, Codable {
    public var processes: Int
    public var attempted: Int
    /// Connections whose login was answered.
    public var connected: Int
    /// Connections the server closed before answering their login (past its connection limit).
    public var refused: Int
    /// Of the connected ones, those that answered a ping at the end, after the settle time.
    public var answeredPing: Int
    public var serverRSSBefore: Int?
    public var serverRSSAfter: Int?
    public var serverCPUSeconds: Double?
    public var settleSeconds: Double

    public var bytesPerConnection: Double? {
        guard let before = self.serverRSSBefore, let after = self.serverRSSAfter, self.connected > 0 else { return nil }
        return Double(after - before) / Double(self.connected)
    }
}

/// `courier bench --pattern idle --processes K`: the connections come from K worker processes (each with its own
/// open-file limit), each from its own loopback source address (127.0.0.2, 127.0.0.3, …) so ephemeral ports do not
/// run out, until the server is full. The parent reads the server's memory and CPU, then asks every worker to ping
/// every connection it holds.
enum IdleFill {
    /// The parent's side: starts the workers on `users`, waits until each has connected all it could, measures, asks
    /// for pings, and stops them.
    static func run(
        users: [BenchUser],
        processes: Int,
        host: String,
        port: Int,
        serverProcess: Int32?,
        executable: URL,
        folder: URL,
        settle: Duration,
        timeout: Duration,
        say: @escaping @Sendable (String) -> Void
    ) async throws -> IdleFillResult {
        let rssBefore = serverProcess.flatMap { ProcessMonitor.residentBytes(of: $0) }
        var workers: [Worker] = []
        defer { for worker in workers { worker.stop() } }
        let share = (users.count + processes - 1) / processes
        for index in 0..<processes {
            let mine = Array(users.dropFirst(index * share).prefix(share))
            guard !mine.isEmpty else { break }
            // Tokens are credentials: a file only this user can read, in the bench's own folder.
            let tokens = folder.appendingPathComponent("worker-\(index).tokens")
            _ = FileManager.default.createFile(
                atPath: tokens.path,
                contents: nil,
                attributes: [.posixPermissions: 0o600]
            )
            try Data(mine.map(\.token).joined(separator: "\n").utf8).write(to: tokens)
            let source = "127.0.0.\(index + 2)"
            workers.append(
                try Worker(
                    executable: executable,
                    arguments: [
                        "bench", "--idle-worker", tokens.path, "--server", "\(host):\(port)", "--source", source,
                        "--timeout", "\(timeout.components.seconds)s",
                    ]
                )
            )
            say("worker \(index + 1) of \(processes): \(mine.count) connections from \(source)")
        }
        var connected = 0
        var refused = 0
        for (index, worker) in workers.enumerated() {
            let line = try await worker.line(starting: "ready", timeout: timeout)
            let fields = Self.fields(line)
            connected += fields["ready"] ?? 0
            refused += fields["refused"] ?? 0
            say("worker \(index + 1): \(line)")
        }
        let cpuBefore = serverProcess.flatMap { ProcessMonitor.cpuSeconds(of: $0) }
        let started = ContinuousClock.now
        try await Task.sleep(for: settle)
        let rssAfter = serverProcess.flatMap { ProcessMonitor.residentBytes(of: $0) }
        let cpuAfter = serverProcess.flatMap { ProcessMonitor.cpuSeconds(of: $0) }
        let held = ContinuousClock.now - started
        var answered = 0
        for worker in workers { worker.send("ping") }
        for worker in workers {
            answered += Self.fields(try await worker.line(starting: "answered", timeout: timeout))["answered"] ?? 0
        }
        return IdleFillResult(
            processes: workers.count,
            attempted: users.count,
            connected: connected,
            refused: refused,
            answeredPing: answered,
            serverRSSBefore: rssBefore,
            serverRSSAfter: rssAfter,
            serverCPUSeconds: cpuBefore.flatMap { before in cpuAfter.map { $0 - before } },
            settleSeconds: Double(held.components.seconds) + Double(held.components.attoseconds) / 1e18
        )
    }

    static func text(_ result: IdleFillResult) -> String {
        var lines = [
            "courier bench: \(result.attempted) idle connections from \(result.processes) processes, held "
                + String(format: "%.1f", result.settleSeconds) + " seconds",
            "connected:     \(result.connected) (refused by the server: \(result.refused))",
            "answered a ping after settling: \(result.answeredPing) of \(result.connected)",
        ]
        if let before = result.serverRSSBefore, let after = result.serverRSSAfter, let each = result.bytesPerConnection
        {
            lines.append(
                String(
                    format: "server RSS:    %.1f MiB before, %.1f MiB after settling: %.1f KiB per connection",
                    Double(before) / 1_048_576,
                    Double(after) / 1_048_576,
                    each / 1024
                )
            )
        }
        if let cpu = result.serverCPUSeconds {
            lines.append(
                String(format: "server CPU:    %.1f s (%.2f cores busy)", cpu, cpu / max(result.settleSeconds, 1e-9))
            )
        }
        return lines.joined(separator: "\n")
    }

    /// "ready 9800 refused 200" → ["ready": 9800, "refused": 200].
    static func fields(_ line: String) -> [String: Int] {
        let words = line.split(separator: " ")
        var fields: [String: Int] = [:]
        for index in stride(from: 0, to: words.count - 1, by: 2) {
            fields[String(words[index])] = Int(words[index + 1])
        }
        return fields
    }

    /// A worker process and its lines.
    final class Worker: Sendable {
        let process: ChildProcess
        private let input: FileHandle
        private let lines: AsyncStream<String>

        init(executable: URL, arguments: [String]) throws {
            let stdin = Pipe()
            let stdout = Pipe()
            let (lines, continuation) = AsyncStream.makeStream(of: String.self)
            let buffer = Mutex(Data())
            stdout.fileHandleForReading.readabilityHandler = { handle in
                let chunk = handle.availableData
                if chunk.isEmpty {
                    continuation.finish()
                    handle.readabilityHandler = nil
                    return
                }
                let complete = buffer.withLock { data -> [String] in
                    data.append(chunk)
                    var found: [String] = []
                    while let newline = data.firstIndex(of: UInt8(ascii: "\n")) {
                        found.append(String(decoding: data[data.startIndex..<newline], as: UTF8.self))
                        data.removeSubrange(data.startIndex...newline)
                    }
                    return found
                }
                for line in complete { continuation.yield(line) }
            }
            self.process = try ChildProcess(
                executable: executable.path,
                arguments: arguments,
                standardInput: .pipe(stdin),
                standardOutput: .pipe(stdout)
            )
            self.input = stdin.fileHandleForWriting
            self.lines = lines
        }

        /// The worker's next line that starts with `word`.
        func line(starting word: String, timeout: Duration) async throws -> String {
            try await withThrowingTaskGroup(of: String?.self) { group in
                group.addTask {
                    for await line in self.lines where line.hasPrefix(word) { return line }
                    return nil
                }
                group.addTask {
                    try await Task.sleep(for: timeout)
                    return nil
                }
                defer { group.cancelAll() }
                guard let line = try await group.next() ?? nil else {
                    throw BenchError("a bench worker said no \"\(word)\" line within \(timeout)")
                }
                return line
            }
        }

        func send(_ line: String) {
            try? self.input.write(contentsOf: Data((line + "\n").utf8))
        }

        /// Ends the worker: its input closes, and it closes its connections and exits.
        func stop() {
            try? self.input.close()
            let deadline = Date().addingTimeInterval(30)
            while self.process.isRunning, Date() < deadline { usleep(20_000) }
            if self.process.isRunning { self.process.terminate() }
        }
    }

    /// The worker's side (`courier bench --idle-worker FILE`): connects one connection per token from `source`,
    /// prints `ready N refused M`, answers each `ping` line with `answered N` (the connections that answered a
    /// ping), and exits when its input closes.
    static func worker(tokensFile: URL, host: String, port: Int, source: String, timeout: Duration) async throws {
        /// A line to the parent, at once (standard output is a pipe: not line-buffered).
        func say(_ line: String) {
            FileHandle.standardOutput.write(Data((line + "\n").utf8))
        }
        let tokens = String(decoding: try Data(contentsOf: tokensFile), as: UTF8.self).split(separator: "\n")
        let tally = BenchTally()
        var channels: [(any Channel, BenchHandler)] = []
        let sourceAddress = try SocketAddress(ipAddress: source, port: 0)
        for wave in stride(from: 0, to: tokens.count, by: 100) {
            try await withThrowingTaskGroup(of: (any Channel, BenchHandler)?.self) { group in
                for token in tokens[wave..<min(tokens.count, wave + 100)] {
                    let plan = BenchHandler.Plan(
                        user: BenchUser(name: "idle", token: String(token), target: .none),
                        messages: 0,
                        messageBytes: 0,
                        window: 1
                    )
                    group.addTask {
                        // A refused or failed connect counts as refused, not as the end of the fill.
                        try? await BenchRun.connect(
                            host: host,
                            port: port,
                            source: sourceAddress,
                            plan: plan,
                            tally: tally,
                            group: MultiThreadedEventLoopGroup.singleton
                        )
                    }
                }
                for try await connection in group {
                    if let connection {
                        channels.append(connection)
                    } else {
                        tally.closedBeforeReady.add(1, ordering: .relaxed)
                    }
                }
            }
            let deadline = ContinuousClock.now + timeout
            while tally.ready.load(ordering: .relaxed) + tally.closedBeforeReady.load(ordering: .relaxed)
                < min(tokens.count, wave + 100), ContinuousClock.now < deadline
            {
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        say("ready \(tally.ready.load(ordering: .relaxed)) refused \(tally.closedBeforeReady.load(ordering: .relaxed))")
        while let line = readLine() {
            guard line == "ping" else { continue }
            let before = tally.pongs.load(ordering: .relaxed)
            let open = channels.filter { $0.0.isActive }
            for (channel, handler) in open { channel.eventLoop.execute { handler.ping() } }
            let deadline = ContinuousClock.now + timeout
            while tally.pongs.load(ordering: .relaxed) - before < open.count, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            say("answered \(tally.pongs.load(ordering: .relaxed) - before)")
        }
        for (channel, _) in channels { channel.close(promise: nil) }
    }
}
