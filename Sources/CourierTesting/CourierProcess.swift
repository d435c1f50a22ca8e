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
        try process.run()
        let server = ServerProcess(process: process, log: log)
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if let connection = try? await RawConnection.connect(port: readyPort) {
                await connection.close()
                return server
            }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        process.terminate()
        throw TestClientTimeout(description: "courier serve did not come up; see \(log.path)")
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
