import CourierStore
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// What `courier serve` (and `courier bench`, which starts servers) do to their own process first.
enum ProcessSetup {
    /// Raises the soft limit on open files to the hard limit: each connection is a file descriptor.
    ///
    /// - Returns: The soft limit before and after, or nil if the limits could not be read or set.
    @discardableResult
    static func raiseOpenFileLimit() -> (before: UInt64, after: UInt64)? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return nil }
        let before = UInt64(limit.rlim_cur)
        guard limit.rlim_cur < limit.rlim_max else { return (before, before) }
        limit.rlim_cur = limit.rlim_max
        guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return (before, before) }
        return (before, UInt64(limit.rlim_cur))
    }

    /// Writing to a closed standard output (a daemon's, or a pipe whose reader went) is an error, not a SIGPIPE that
    /// ends the process.
    static func ignoreBrokenPipes() {
        signal(SIGPIPE, SIG_IGN)
    }

    /// Writes a line to standard output at once (not through print's buffer), also when it is a pipe or a file; a
    /// closed one is ignored.
    static func say(_ line: String) {
        try? FileHandle.standardOutput.write(contentsOf: Data((line + "\n").utf8))
    }

    /// The environment variable the Swift runtime's backtracer reads at process start.
    static let backtraceVariable = "SWIFT_BACKTRACE"

    /// Makes a crash leave its backtrace in `folder`: the Swift runtime's backtracer reads `SWIFT_BACKTRACE` when
    /// the process starts, so unless it is already set, this sets it (`enable=yes`, `interactive=no`,
    /// `output-to=` the folder) and re-executes the program with the same arguments. It returns only when no
    /// re-execution was needed (or possible).
    static func enableCrashReports(in folder: URL) {
        let environment = ProcessInfo.processInfo.environment
        guard environment[Self.backtraceVariable] == nil else { return }
        do {
            try PrivateFiles.createFolder(folder)
        } catch {
            return
        }
        let setting = "enable=yes,interactive=no,symbolicate=full,output-to=\(folder.standardizedFileURL.path)"
        setenv(Self.backtraceVariable, setting, 1)
        // This program, whatever the path it was started by (the crash log is named after it).
        let program = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? "/proc/self/exe"
        execv(program, CommandLine.unsafeArgv)
        // Only reached if exec failed: carry on without crash reports.
        unsetenv(Self.backtraceVariable)
    }
}
