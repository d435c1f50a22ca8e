import CourierTesting
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `ChildProcess`, which starts every program the tests run (Foundation's `Process.run()` here can crash a process
/// that has many descriptors open).
@Suite("ChildProcess: the programs the tests start")
struct ChildProcessTests {
    @Test("with 1,500 more descriptors open here (none close-on-exec), a child starts and has only its three streams")
    func manyDescriptors() async throws {
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        let count = min(1500, Int(limit.rlim_cur) - 300)
        var opened: [Int32] = []
        defer { for descriptor in opened { close(descriptor) } }
        for _ in 0..<count {
            let descriptor = open("/dev/null", O_RDONLY)
            try #require(descriptor >= 0)
            opened.append(descriptor)
        }
        #expect((opened.max() ?? 0) > 1400 || count < 1500, "the descriptors reach past the number that crashed")
        let output = Pipe()
        let child = try ChildProcess(
            executable: "/bin/ls",
            arguments: ["-1", "/proc/self/fd"],
            standardOutput: .pipe(output)
        )
        let listing = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(await child.exited() == 0)
        // ls's own descriptor for the listing is the fourth.
        #expect(listing.split(separator: "\n").compactMap { Int($0) }.sorted() == [0, 1, 2, 3], "\(listing)")
    }

    @Test("a child's standard streams: input through a pipe, output and errors apart, its environment as given")
    func streams() async throws {
        let text = "你好 こんにちは 🌏 مرحبا\n"
        let input = Pipe()
        let output = Pipe()
        let errors = Pipe()
        let child = try ChildProcess(
            executable: "/bin/sh",
            arguments: ["-c", "cat; echo \"$GREETING\" >&2; echo \"${HOME:-none}\" >&2"],
            environment: ["GREETING": "早上好 👋"],
            standardInput: .pipe(input),
            standardOutput: .pipe(output),
            standardError: .pipe(errors)
        )
        input.fileHandleForWriting.write(Data(text.utf8))
        try input.fileHandleForWriting.close()
        let read = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let said = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(child.waitUntilExit() == 0)
        #expect(read == text)
        #expect(said == "早上好 👋\nnone\n", "only the environment given")
    }

    @Test("the status: a program's exit code, or the signal that ended it; every waiter gets it")
    func statuses() async throws {
        let exits = try ChildProcess(executable: "/bin/sh", arguments: ["-c", "exit 7"])
        #expect(await exits.exited() == 7)
        #expect(exits.terminationStatus == 7 && !exits.isRunning)

        let sleeper = try ChildProcess(executable: "/bin/sleep", arguments: ["60"])
        #expect(sleeper.isRunning && sleeper.terminationStatus == nil)
        #expect(getpgid(sleeper.processIdentifier) == sleeper.processIdentifier, "a process group of its own")
        async let first = sleeper.exited()
        async let second = sleeper.exited()
        sleeper.terminate(with: SIGKILL)
        #expect(await [first, second] == [SIGKILL, SIGKILL])
        #expect(sleeper.waitUntilExit() == SIGKILL)
        sleeper.terminate()  // reaped: nothing is sent, to this pid or another's
    }

    @Test("a child started from a thread that blocks SIGTERM still ends on SIGTERM")
    func signalsUnblocked() async throws {
        let started = try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                var blocked = sigset_t()
                sigemptyset(&blocked)
                sigaddset(&blocked, SIGTERM)
                pthread_sigmask(SIG_BLOCK, &blocked, nil)
                continuation.resume(with: Result { try ChildProcess(executable: "/bin/sleep", arguments: ["60"]) })
            }
            thread.start()
        }
        started.terminate()
        #expect(await started.exited() == SIGTERM)
    }

    @Test("a child of a process that ignores SIGPIPE (as servers and the bench do) has it at its default")
    func signalDefaults() async throws {
        signal(SIGPIPE, SIG_IGN)  // what this process may have already; kept (a write to a closed socket is an error)
        let output = Pipe()
        let child = try ChildProcess(
            executable: "/bin/cat",
            arguments: ["/proc/self/status"],
            standardOutput: .pipe(output)
        )
        let status = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(await child.exited() == 0)
        let ignored = status.split(separator: "\n").first { $0.hasPrefix("SigIgn:") }.flatMap {
            UInt64($0.dropFirst("SigIgn:".count).trimmingCharacters(in: .whitespaces), radix: 16)
        }
        let pipeBit = UInt64(1) << (UInt64(SIGPIPE) - 1)
        #expect(ignored.map { $0 & pipeBit == 0 } == true, "\(status)")
    }

    @Test("a program that cannot be started is an error that names it")
    func missing() throws {
        let error = #expect(throws: ChildProcess.SpawnFailed.self) {
            try ChildProcess(executable: "/nonexistent/程序")
        }
        #expect(error?.description.contains("/nonexistent/程序") == true, "\(String(describing: error))")
    }
}
