public import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A `courier serve` (or `courier proxy`) process, with its output in a log file: started on free ports or given
/// ones, up once it says it listens (its own line, not another program's port), stopped gracefully or killed.
public final class ServerProcess: @unchecked Sendable {
    public let process: ChildProcess
    public let log: URL

    /// Starts `courier serve` on `data` with three free ports, its log in `folder` (named after the native port), and
    /// `environment` added to this process's (where a database's password goes, never the arguments anyone lists).
    ///
    /// - Returns: The server, and its native and HTTP ports.
    public static func start(
        executable: URL,
        data: URL,
        logFolder folder: URL,
        arguments: [String] = [],
        environment: [String: String] = [:]
    ) async throws -> (server: ServerProcess, native: Int, http: Int) {
        // A port free a moment ago can be taken meanwhile by another test: a server that cannot bind tries others.
        var attempt = 1
        while true {
            let ports = (try await FreePort.pick(), try await FreePort.pick(), try await FreePort.pick())
            do {
                let server = try await Self.start(
                    executable: executable,
                    data: data,
                    native: ports.0,
                    compat: ports.1,
                    http: ports.2,
                    log: folder.appendingPathComponent("server-\(ports.0).log"),
                    arguments: arguments,
                    environment: environment
                )
                return (server, ports.0, ports.2)
            } catch let error as ServerDidNotStart where error.exited && attempt < 3 {
                attempt += 1
            }
        }
    }

    /// The process did not exit in time after a signal.
    public struct ServerDidNotStop: Error, CustomStringConvertible {
        public var description: String
    }

    /// `courier serve` did not come up: it exited (`exited`: it could not bind, say), or never said it listens.
    public struct ServerDidNotStart: Error, CustomStringConvertible {
        public var exited: Bool
        public var description: String
    }

    /// Starts `courier serve` and waits until it listens on its native port.
    public static func start(
        executable: URL,
        data: URL,
        native: Int,
        compat: Int,
        http: Int,
        log: URL,
        arguments extra: [String] = [],
        environment: [String: String] = [:]
    ) async throws -> ServerProcess {
        try await Self.start(
            executable: executable,
            arguments: [
                "serve", "--data", data.path, "--port", String(native), "--compat-port", String(compat),
                "--http-port", String(http),
            ] + extra,
            environment: environment,
            readyPort: native,
            log: log
        )
    }

    /// Runs `executable` with these arguments (and `environment` added to this process's) and waits until it says
    /// it listens on `readyPort` and the port accepts connections.
    public static func start(
        executable: URL,
        arguments: [String],
        environment: [String: String] = [:],
        readyPort: Int,
        log: URL
    ) async throws -> ServerProcess {
        if !FileManager.default.fileExists(atPath: log.path) {
            _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        }
        let handle = try FileHandle(forWritingTo: log)
        defer { try? handle.close() }
        try handle.seekToEnd()
        let logged = (try? FileManager.default.attributesOfItem(atPath: log.path)[.size] as? Int) ?? 0
        let process = try ChildProcess(
            executable: executable.path,
            arguments: arguments,
            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 },
            standardOutput: .descriptor(handle.fileDescriptor),
            standardError: .descriptor(handle.fileDescriptor)
        )
        let server = ServerProcess(process: process, log: log)
        // Up when this process says it listens on the port (its log, from where it starts), and the port answers:
        // a port another test's server took meanwhile answers too, but not in this log.
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline, process.isRunning {
            if server.saysListening(on: readyPort, after: logged), await PortProbe.accepts(port: readyPort) {
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

    /// Whether the log, after its first `offset` bytes, has the line the program writes when it listens
    /// ("courier serve listening on …", "courier proxy listening on …") with `port` among its addresses.
    private func saysListening(on port: Int, after offset: Int) -> Bool {
        guard let data = FileManager.default.contents(atPath: self.log.path), data.count > offset else { return false }
        let text = String(decoding: data.dropFirst(offset), as: UTF8.self)
        return text.split(separator: "\n").contains { line in
            guard line.hasPrefix("courier "), line.contains(" listening on ") else { return false }
            // ":PORT" not followed by another digit.
            return line.split(separator: ":").dropFirst().contains { $0.prefix { $0.isNumber } == String(port) }
        }
    }

    private init(process: ChildProcess, log: URL) {
        self.process = process
        self.log = log
    }

    /// The process's resident memory, in bytes (Linux: VmRSS in /proc).
    public var residentBytes: Int? {
        ProcessMonitor.residentBytes(of: self.process.processIdentifier)
    }

    /// SIGTERM, then waits for the exit on this thread (for a `defer`).
    public func stop() {
        self.process.terminate()
        self.process.waitUntilExit()
    }

    /// SIGKILL: no chance to finish anything.
    public func kill() async {
        self.process.terminate(with: SIGKILL)
        await self.waitForExit()
    }

    /// Sends a signal and waits until the process has exited.
    public func crash(with signal: Int32, timeout: Duration = .seconds(120)) async throws {
        self.process.terminate(with: signal)
        let deadline = ContinuousClock.now + timeout
        while self.process.isRunning {
            guard ContinuousClock.now < deadline else {
                throw ServerDidNotStop(description: "still running \(timeout) after signal \(signal)")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// SIGTERM: a graceful shutdown; returns the exit status.
    @discardableResult
    public func terminate() async -> Int32 {
        self.process.terminate()
        return await self.process.exited()
    }

    private func waitForExit() async {
        await self.process.exited()
    }
}
