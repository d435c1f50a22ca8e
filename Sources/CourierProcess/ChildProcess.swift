public import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A program started with `posix_spawn`, for the tests, the benchmarks and the tools that run other programs.
///
/// Why not Foundation's `Process`: on Linux, `Process.run()` of the toolchain here (swift-corelibs-foundation before
/// its fix of May 2026, #5472) lists `/proc/self/fd` to find the descriptors to close in the child, copying each
/// entry's whole 256-byte name. Once this process has some 1,350 descriptors open (a test process running its flood
/// tests in parallel has 1,800), the last entry of the directory's buffer is copied past the buffer's end, and the
/// process crashes when that is the end of its memory. Here the child closes every descriptor above the three it is
/// given (glibc's `posix_spawn_file_actions_addclosefrom_np`), nothing is listed.
///
/// Like `Process`, the child gets a process group of its own; unlike it, the child starts with no signal blocked and
/// the usual signals at their defaults (SIGPIPE among them), whatever this process and the spawning thread had.
public final class ChildProcess: Sendable {
    /// What one of the child's standard streams is.
    public enum Stream: Sendable {
        /// /dev/null.
        case null
        /// This process's own stream of the same number.
        case inherit
        /// A descriptor of this process (it stays open here).
        case descriptor(Int32)
        /// The child's end of a pipe (the writing end for output, the reading end for input), closed here once the
        /// child has it, so that the other end sees the end of the stream when the child exits.
        case pipe(Pipe)
    }

    /// The program could not be started: the call that failed and its errno.
    public struct SpawnFailed: Error, CustomStringConvertible {
        public var executable: String
        public var call: String
        public var code: Int32
        public var description: String {
            "cannot start \(executable): \(call) failed: \(String(cString: strerror(code)))"
        }
    }

    private struct State {
        var status: Int32?
        var waiters: [CheckedContinuation<Int32, Never>] = []
    }

    public let processIdentifier: pid_t
    private let state = Mutex(State())
    /// Signalled once, when the child has been reaped.
    private let reaped = DispatchSemaphore(value: 0)

    /// Starts `executable` (a path: no PATH search; use /usr/bin/env for one) with `arguments`, with `environment`
    /// (nil: this process's) and the given streams.
    public init(
        executable: String,
        arguments: [String] = [],
        environment: [String: String]? = nil,
        standardInput: Stream = .null,
        standardOutput: Stream = .inherit,
        standardError: Stream = .inherit
    ) throws {
        let pid = try Self.spawn(
            executable: executable,
            arguments: arguments,
            environment: environment ?? ProcessInfo.processInfo.environment,
            streams: [standardInput, standardOutput, standardError]
        )
        self.processIdentifier = pid
        // The pipes' child ends are the child's now.
        for (number, stream) in [standardInput, standardOutput, standardError].enumerated() {
            guard case .pipe(let pipe) = stream else { continue }
            try? (number == 0 ? pipe.fileHandleForReading : pipe.fileHandleForWriting).close()
        }
        // One thread per child, blocked until it exits: the tests' children are few and short-lived. A thread that
        // cannot be made is an error here, not a child nobody reaps.
        let reaper = Unmanaged.passRetained(Reaper { [self] in self.reap() }).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setstacksize(&attributes, 256 * 1024)
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        var thread = pthread_t()
        let created = pthread_create(
            &thread,
            &attributes,
            { context in
                Unmanaged<Reaper>.fromOpaque(context!).takeRetainedValue().body()
                return nil
            },
            reaper
        )
        guard created == 0 else {
            Unmanaged<Reaper>.fromOpaque(reaper).release()
            kill(pid, SIGKILL)
            var raw: Int32 = 0
            while waitpid(pid, &raw, 0) < 0, errno == EINTR {}
            throw SpawnFailed(executable: executable, call: "pthread_create", code: created)
        }
    }

    /// What the reaping thread runs.
    private final class Reaper {
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }

    /// Waits for the child to exit, on the reaping thread; then wakes whoever waits.
    private func reap() {
        let pid = self.processIdentifier
        // Waited for without reaping, then reaped under the lock that `terminate` signals under: while the status is
        // unknown, the pid is still this child's (a zombie at worst), never another process's.
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) < 0, errno == EINTR {}
        let (status, waiters) = self.state.withLock { state in
            var raw: Int32 = 0x7F00  // status 127 if another waiter reaped it
            while waitpid(pid, &raw, 0) < 0, errno == EINTR {}
            state.status = Self.status(raw)
            defer { state.waiters = [] }
            return (Self.status(raw), state.waiters)
        }
        self.reaped.signal()
        for waiter in waiters { waiter.resume(returning: status) }
    }

    /// Whether the child has not been reaped yet.
    public var isRunning: Bool { self.state.withLock { $0.status == nil } }

    /// The exit status, or the number of the signal that ended the child (as `Process` reports it); nil while it
    /// runs.
    public var terminationStatus: Int32? { self.state.withLock { $0.status } }

    /// Sends `signal` (SIGTERM by default) to the child, if it has not been reaped.
    public func terminate(with signal: Int32 = SIGTERM) {
        // After the reaping the pid may be another process's.
        self.state.withLock { state in
            if state.status == nil { _ = kill(self.processIdentifier, signal) }
        }
    }

    /// Blocks this thread until the child has exited; its status.
    @discardableResult
    public func waitUntilExit() -> Int32 {
        if let status = self.terminationStatus { return status }
        self.reaped.wait()
        self.reaped.signal()  // for the next one waiting
        return self.terminationStatus ?? 127
    }

    /// Waits, without blocking a thread, until the child has exited; its status. Not cancellable: a child that never
    /// exits keeps its waiter (stop it with ``terminate(with:)``).
    @discardableResult
    public func exited() async -> Int32 {
        await withCheckedContinuation { continuation in
            let status = self.state.withLock { state -> Int32? in
                if state.status == nil { state.waiters.append(continuation) }
                return state.status
            }
            if let status { continuation.resume(returning: status) }
        }
    }

    private static func status(_ raw: Int32) -> Int32 {
        let signal = raw & 0x7F
        return signal == 0 ? (raw >> 8) & 0xFF : signal
    }

    /// glibc 2.34's `posix_spawn_file_actions_addclosefrom_np`, which Swift's Glibc module does not declare.
    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private static let closeFrom: CloseFrom? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np")
        else { return nil }
        return unsafeBitCast(symbol, to: CloseFrom.self)
    }()

    private static func spawn(
        executable: String,
        arguments: [String],
        environment: [String: String],
        streams: [Stream]
    ) throws -> pid_t {
        func check(_ call: String, _ result: Int32) throws {
            guard result == 0 else { throw SpawnFailed(executable: executable, call: call, code: result) }
        }
        var actions = posix_spawn_file_actions_t()
        try check("posix_spawn_file_actions_init", posix_spawn_file_actions_init(&actions))
        defer { posix_spawn_file_actions_destroy(&actions) }
        // A source among 0-2 (this process's own streams closed, a descriptor reused) could be overwritten by an
        // earlier stream's action: such a source is copied above 2 first.
        var copies: [Int32] = []
        defer { for copy in copies { close(copy) } }
        for (number, stream) in streams.enumerated() {
            let target = Int32(number)
            var source: Int32
            switch stream {
            case .inherit:
                continue
            case .null:
                try check(
                    "posix_spawn_file_actions_addopen",
                    posix_spawn_file_actions_addopen(
                        &actions,
                        target,
                        "/dev/null",
                        number == 0 ? O_RDONLY : O_WRONLY,
                        0
                    )
                )
                continue
            case .descriptor(let descriptor):
                source = descriptor
            case .pipe(let pipe):
                source = (number == 0 ? pipe.fileHandleForReading : pipe.fileHandleForWriting).fileDescriptor
            }
            if source < 3 {
                let copy = fcntl(source, F_DUPFD_CLOEXEC, 3)
                guard copy >= 0 else { throw SpawnFailed(executable: executable, call: "fcntl", code: errno) }
                copies.append(copy)
                source = copy
            }
            try check("posix_spawn_file_actions_adddup2", posix_spawn_file_actions_adddup2(&actions, source, target))
        }
        guard let closeFrom = Self.closeFrom else {
            throw SpawnFailed(executable: executable, call: "posix_spawn_file_actions_addclosefrom_np", code: ENOSYS)
        }
        try check("posix_spawn_file_actions_addclosefrom_np", closeFrom(&actions, 3))

        var attributes = posix_spawnattr_t()
        try check("posix_spawnattr_init", posix_spawnattr_init(&attributes))
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        try check("posix_spawnattr_setsigmask", posix_spawnattr_setsigmask(&attributes, &none))
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM, SIGCHLD, SIGXFSZ] {
            sigaddset(&defaults, signal)
        }
        try check("posix_spawnattr_setsigdefault", posix_spawnattr_setsigdefault(&attributes, &defaults))
        try check("posix_spawnattr_setpgroup", posix_spawnattr_setpgroup(&attributes, 0))
        let flags = POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF
        try check("posix_spawnattr_setflags", posix_spawnattr_setflags(&attributes, Int16(flags)))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        try check("posix_spawn", posix_spawn(&pid, executable, &actions, &attributes, argv, envp))
        return pid
    }
}
