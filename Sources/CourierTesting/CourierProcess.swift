@_exported public import CourierProcess
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
    /// (or replaces variables of) this process's environment; `input` is its standard input (none: an empty one,
    /// never a terminal).
    public static func run(
        _ arguments: [String],
        environment: [String: String] = [:],
        input: String? = nil
    ) async throws -> (status: Int32, output: String) {
        try await withCheckedThrowingContinuation { continuation in
            onOwnThread {
                continuation.resume(
                    with: Result {
                        // No terminal: a command that would prompt fails instead of waiting.
                        let inputPipe = input.map { _ in Pipe() }
                        let pipe = Pipe()
                        let process = try ChildProcess(
                            executable: Self.url.path,
                            arguments: arguments,
                            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 },
                            standardInput: inputPipe.map { .pipe($0) } ?? .null,
                            standardOutput: .pipe(pipe),
                            standardError: .descriptor(pipe.fileHandleForWriting.fileDescriptor)
                        )
                        if let inputPipe, let input {
                            // A few lines: they fit the pipe's buffer whatever the command reads.
                            inputPipe.fileHandleForWriting.write(Data(input.utf8))
                            try inputPipe.fileHandleForWriting.close()
                        }
                        let data = pipe.fileHandleForReading.readDataToEndOfFile()
                        return (process.waitUntilExit(), String(decoding: data, as: UTF8.self))
                    }
                )
            }
        }
    }
}

extension CourierExecutable {
    /// A `courier` command started with ``start(_:environment:output:)``.
    public final class Command: Sendable {
        public let process: ChildProcess
        private let output: URL

        fileprivate init(process: ChildProcess, output: URL) {
            self.process = process
            self.output = output
        }

        /// Waits until the command has exited: its status, and what it wrote (stdout and stderr together).
        public func result() async throws -> (status: Int32, output: String) {
            let status = await self.process.exited()
            return (status, try String(contentsOf: self.output, encoding: .utf8))
        }
    }

    /// Starts `courier` with arguments, its output going to the file `output`; ``Command/result()`` waits for it.
    public static func start(
        _ arguments: [String],
        environment: [String: String] = [:],
        output: URL
    ) throws -> Command {
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        let handle = try FileHandle(forWritingTo: output)
        defer { try? handle.close() }
        let process = try ChildProcess(
            executable: Self.url.path,
            arguments: arguments,
            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 },
            standardOutput: .descriptor(handle.fileDescriptor),
            standardError: .descriptor(handle.fileDescriptor)
        )
        return Command(process: process, output: output)
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

/// `courier serve` (or `courier proxy`) from the build beside the tests: ``ServerProcess`` with this executable.
extension ServerProcess {
    /// Starts `courier serve` on `data` with three free ports, its log in `folder` (named after the native port).
    ///
    /// - Returns: The server, and its native and HTTP ports.
    public static func start(
        data: URL,
        logFolder folder: URL,
        arguments: [String] = [],
        environment: [String: String] = [:]
    ) async throws -> (server: ServerProcess, native: Int, http: Int) {
        try await Self.start(
            executable: CourierExecutable.url,
            data: data,
            logFolder: folder,
            arguments: Self.testLimits + arguments,
            environment: environment
        )
    }

    /// The timers of a test's server, far away: a client that only reads says nothing until the test's end, a login
    /// can wait behind other tests' work, a reader a test holds back can stay full while the test does more, and the
    /// failed logins a test makes to be throttled can take longer than the login window; on a loaded machine each can
    /// pass a minute. A test of one of these timers sets its own (the last `--limit` of a name wins).
    public static let testLimits = [
        "--limit", "idle-timeout=1h", "--limit", "auth-timeout=10m", "--limit", "slow-consumer-timeout=1h",
        "--limit", "login-window=1h",
    ]

    /// Starts `courier serve` and waits until it listens on its native port.
    public static func start(
        data: URL,
        native: Int,
        compat: Int,
        http: Int,
        log: URL,
        arguments extra: [String] = []
    ) async throws -> ServerProcess {
        try await Self.start(
            executable: CourierExecutable.url,
            data: data,
            native: native,
            compat: compat,
            http: http,
            log: log,
            arguments: Self.testLimits + extra
        )
    }

    /// Runs `courier` with these arguments (and `environment` added to this process's) and waits until it says it
    /// listens on `readyPort`.
    public static func start(
        arguments: [String],
        environment: [String: String] = [:],
        readyPort: Int,
        log: URL
    ) async throws -> ServerProcess {
        try await Self.start(
            executable: CourierExecutable.url,
            arguments: arguments,
            environment: environment,
            readyPort: readyPort,
            log: log
        )
    }
}
