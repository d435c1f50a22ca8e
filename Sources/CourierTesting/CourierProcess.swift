public import Foundation

/// The `courier` executable built beside the tests, run as a real process.
public enum CourierExecutable {
    /// Where the executable is: `$COURIER_EXECUTABLE`, else next to the running test binary.
    public static var url: URL {
        if let path = ProcessInfo.processInfo.environment["COURIER_EXECUTABLE"] {
            return URL(fileURLWithPath: path)
        }
        var folder = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        // Swift Testing may run from inside the .xctest bundle on some platforms.
        while !FileManager.default.fileExists(atPath: folder.appendingPathComponent("courier").path),
            folder.pathComponents.count > 1
        {
            folder.deleteLastPathComponent()
        }
        return folder.appendingPathComponent("courier")
    }

    /// Runs `courier` with arguments to completion, returning its exit status and output. `environment` adds to
    /// (or replaces variables of) this process's environment.
    public static func run(
        _ arguments: [String],
        environment: [String: String] = [:]
    ) async throws -> (status: Int32, output: String) {
        try await withCheckedThrowingContinuation { continuation in
            onOwnThread {
                continuation.resume(
                    with: Result {
                        let process = Process()
                        process.executableURL = Self.url
                        process.arguments = arguments
                        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
                        // No terminal: a command that would prompt fails instead of waiting.
                        process.standardInput = FileHandle.nullDevice
                        let pipe = Pipe()
                        process.standardOutput = pipe
                        process.standardError = pipe
                        try process.run()
                        let data = pipe.fileHandleForReading.readDataToEndOfFile()
                        process.waitUntilExit()
                        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
                    }
                )
            }
        }
    }
}

extension CourierExecutable {
    /// A `courier` command started with ``start(_:environment:output:)``.
    public final class Command: Sendable {
        public let process: Process
        private let output: URL
        private let ended: AsyncStream<Int32>

        fileprivate init(process: Process, output: URL, ended: AsyncStream<Int32>) {
            self.process = process
            self.output = output
            self.ended = ended
        }

        /// Waits until the command has exited: its status, and what it wrote (stdout and stderr together).
        public func result() async throws -> (status: Int32, output: String) {
            var statuses = self.ended.makeAsyncIterator()
            let status = await statuses.next() ?? self.process.terminationStatus
            return (status, try String(contentsOf: self.output, encoding: .utf8))
        }
    }

    /// Starts `courier` with arguments, its output going to the file `output` (so that many can run at once
    /// without a thread each); ``Command/result()`` waits for it.
    public static func start(
        _ arguments: [String],
        environment: [String: String] = [:],
        output: URL
    ) throws -> Command {
        let process = Process()
        process.executableURL = Self.url
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardInput = FileHandle.nullDevice
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        let handle = try FileHandle(forWritingTo: output)
        process.standardOutput = handle
        process.standardError = handle
        let (ended, exit) = AsyncStream.makeStream(of: Int32.self, bufferingPolicy: .bufferingNewest(1))
        process.terminationHandler = { process in
            exit.yield(process.terminationStatus)
            exit.finish()
        }
        try process.run()
        try handle.close()
        return Command(process: process, output: output, ended: ended)
    }

    /// Adds users with the password "pw-" + name through `courier user add`, throwing if one is refused.
    public static func addUsers(_ names: [String], data: URL) async throws {
        for name in names {
            let result = try await Self.run(["user", "add", name, "--password", "pw-" + name, "--data", data.path])
            guard result.status == 0 else {
                throw ExternalProgram.Failure(description: "courier user add \(name) failed: \(result.output)")
            }
        }
    }
}

/// A `courier serve` process on a data folder and fixed ports, with its output in a log file.
public final class ServerProcess: @unchecked Sendable {
    public let process: Process
    public let log: URL

    /// Starts `courier serve` on `data` with three free ports, its log in `folder` (named after the native port).
    ///
    /// - Returns: The server, and its native and HTTP ports.
    public static func start(
        data: URL,
        logFolder folder: URL,
        arguments: [String] = []
    ) async throws -> (server: ServerProcess, native: Int, http: Int) {
        // A port free a moment ago can be taken meanwhile by another test: a server that cannot bind tries others.
        var attempt = 1
        while true {
            let ports = (try await FreePort.pick(), try await FreePort.pick(), try await FreePort.pick())
            do {
                let server = try await Self.start(
                    data: data,
                    native: ports.0,
                    compat: ports.1,
                    http: ports.2,
                    log: folder.appendingPathComponent("server-\(ports.0).log"),
                    arguments: arguments
                )
                return (server, ports.0, ports.2)
            } catch let error as ServerDidNotStart where error.exited && attempt < 3 {
                attempt += 1
            }
        }
    }

    /// `courier serve` did not come up: it exited (`exited`: it could not bind, say), or never said it listens.
    public struct ServerDidNotStart: Error, CustomStringConvertible {
        public var exited: Bool
        public var description: String
    }

    /// Starts `courier serve` and waits until its native port accepts connections.
    public static func start(
        data: URL,
        native: Int,
        compat: Int,
        http: Int,
        log: URL,
        arguments extra: [String] = []
    ) async throws -> ServerProcess {
        try await Self.start(
            arguments: [
                "serve", "--data", data.path, "--port", String(native), "--compat-port", String(compat),
                "--http-port", String(http),
            ] + extra,
            readyPort: native,
            log: log
        )
    }

    /// Runs `courier` with these arguments (and `environment` added to this process's) and waits until
    /// `readyPort` accepts connections.
    public static func start(
        arguments: [String],
        environment: [String: String] = [:],
        readyPort: Int,
        log: URL
    ) async throws -> ServerProcess {
        let process = Process()
        process.executableURL = CourierExecutable.url
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        if !FileManager.default.fileExists(atPath: log.path) {
            _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        }
        let handle = try FileHandle(forWritingTo: log)
        try handle.seekToEnd()
        process.standardOutput = handle
        process.standardError = handle
        let logged = (try? FileManager.default.attributesOfItem(atPath: log.path)[.size] as? Int) ?? 0
        try process.run()
        let server = ServerProcess(process: process, log: log)
        // Up when this process says it listens on the port (its log, from where it starts), and the port answers:
        // a port another test's server took meanwhile answers too, but not in this log.
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline, process.isRunning {
            if server.saysListening(on: readyPort, after: logged),
                let connection = try? await RawConnection.connect(port: readyPort)
            {
                await connection.close()
                return server
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        let exited = !process.isRunning
        process.terminate()
        let tail = (try? String(contentsOf: log, encoding: .utf8)).map { String($0.suffix(2000)) } ?? ""
        throw ServerDidNotStart(
            exited: exited,
            description:
                "courier \(arguments.first ?? "") did not come up (\(exited ? "it exited" : "no listening line"));"
                + " \(log.path) ends with:\n\(tail)"
        )
    }

    /// Whether the log, after its first `offset` bytes, has a "listening" line naming `port` (any of the three).
    private func saysListening(on port: Int, after offset: Int) -> Bool {
        guard let data = FileManager.default.contents(atPath: self.log.path), data.count > offset else { return false }
        let text = String(decoding: data.dropFirst(offset), as: UTF8.self)
        return text.split(separator: "\n").contains { line in
            line.hasSuffix(" listening") && line.split(separator: " ").contains { $0.hasSuffix("=\(port)") }
        }
    }

    private init(process: Process, log: URL) {
        self.process = process
        self.log = log
    }

    /// The process's resident memory, in bytes (Linux: VmRSS in /proc).
    public var residentBytes: Int? {
        guard
            let status = try? String(contentsOfFile: "/proc/\(self.process.processIdentifier)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kilobytes = Int(line.split(separator: " ").dropFirst().first ?? "")
        else { return nil }
        return kilobytes * 1024
    }

    /// SIGKILL: no chance to finish anything.
    public func kill() async {
        Foundation.kill(self.process.processIdentifier, SIGKILL)
        await self.waitForExit()
    }

    /// Sends a signal and waits until the process has exited.
    public func crash(with signal: Int32, timeout: Duration = .seconds(120)) async throws {
        Foundation.kill(self.process.processIdentifier, signal)
        let deadline = ContinuousClock.now + timeout
        while self.process.isRunning {
            guard ContinuousClock.now < deadline else {
                throw TestClientTimeout(description: "still running \(timeout) after signal \(signal)")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// SIGTERM: a graceful shutdown; returns the exit status.
    @discardableResult
    public func terminate() async -> Int32 {
        self.process.terminate()
        await self.waitForExit()
        return self.process.terminationStatus
    }

    private func waitForExit() async {
        while self.process.isRunning {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }
}
