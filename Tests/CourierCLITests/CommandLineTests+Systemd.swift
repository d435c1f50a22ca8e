import CourierProcess
import CourierTesting
import Foundation
import NIOCore
import NIOEmbedded
import NIOPosix
import Synchronization
import Testing

@testable import courier

#if canImport(Glibc)
import Glibc
#endif

/// A datagram socket standing in for systemd's notification socket: it keeps every message it receives.
final class NotifySocket: @unchecked Sendable {
    let path: String
    private let descriptor: Int32
    private let received = Received()
    private let reader: Thread

    private final class Received: Sendable {
        let messages = Mutex<[String]>([])
    }

    init(path: String) throws {
        self.path = path
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(.EIO) }
        self.descriptor = descriptor
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { sunPath in
            for (index, byte) in bytes.enumerated() { sunPath[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0 else {
            Glibc.close(descriptor)
            throw POSIXError(.EADDRINUSE)
        }
        // A read gives up every 100 ms, so the reader notices the socket closing.
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let received = self.received
        self.reader = Thread {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while !Thread.current.isCancelled {
                let count = recv(descriptor, &buffer, buffer.count, 0)
                if count > 0 {
                    let message = String(decoding: buffer[..<count], as: UTF8.self)
                    received.messages.withLock { $0.append(message) }
                }
            }
        }
        self.reader.start()
    }

    var messages: [String] { self.received.messages.withLock { $0 } }

    /// Waits (by the condition, not a fixed time) until `condition` holds of the messages so far.
    func wait(_ what: String, timeout: Duration = .seconds(30), until condition: ([String]) -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while !condition(self.messages) {
            guard ContinuousClock.now < deadline else {
                throw TestFailure("no \(what) within \(timeout): \(self.messages)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    func close() {
        self.reader.cancel()
        Glibc.close(self.descriptor)
        unlink(self.path)
    }
}

/// A group of the loops given (a running one and a wedged one, for the watchdog).
final class FixedLoops: EventLoopGroup, @unchecked Sendable {
    let loops: [any EventLoop]

    init(_ loops: [any EventLoop]) {
        self.loops = loops
    }

    func next() -> any EventLoop { self.loops[0] }

    func makeIterator() -> EventLoopIterator { EventLoopIterator(self.loops) }

    func shutdownGracefully(queue: DispatchQueue, _ callback: @escaping @Sendable ((any Error)?) -> Void) {
        queue.async { callback(nil) }
    }
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

extension CommandLineTests {
    @Test("under systemd: READY=1 with the ports once it listens, WATCHDOG=1 while it runs, STOPPING=1 at SIGTERM")
    func systemdNotify() async throws {
        try await withTemporaryDirectory(prefix: "courier-systemd") { folder in
            let notify = try NotifySocket(path: folder.appendingPathComponent("notify").path)
            defer { notify.close() }
            // systemd asks for a ping every 0.4 s; the server sends one every half of it.
            let (server, native, http) = try await Self.serve(
                folder,
                data: folder.appendingPathComponent("data"),
                environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "400000"]
            )
            let pid = server.process.processIdentifier
            try await notify.wait("READY=1") { $0.contains { $0.contains("READY=1") } }
            let ready = try #require(notify.messages.first { $0.contains("READY=1") })
            #expect(ready.contains("MAINPID=\(pid)"), "\(ready)")
            #expect(ready.contains("STATUS=listening on native 127.0.0.1:\(native)"), "\(ready)")
            #expect(ready.contains("http 127.0.0.1:\(http)"), "\(ready)")
            try await notify.wait("three WATCHDOG=1") { $0.filter { $0 == "WATCHDOG=1" }.count >= 3 }
            #expect(!notify.messages.contains { $0.contains("STOPPING=1") })
            #expect(await server.terminate() == 0)
            try await notify.wait("STOPPING=1") { $0.contains { $0.hasPrefix("STOPPING=1") } }
            let log = try String(contentsOf: server.log, encoding: .utf8)
            #expect(log.contains("web chat: http://127.0.0.1:\(http)/"), "\(log)")
        }
    }

    @Test("an event loop that does not run its tasks withholds the watchdog; the loops that do feed it")
    func watchdogWithheld() async throws {
        try await withTemporaryDirectory(prefix: "courier-watchdog") { folder in
            let healthy = try NotifySocket(path: folder.appendingPathComponent("healthy").path)
            let stuck = try NotifySocket(path: folder.appendingPathComponent("stuck").path)
            defer {
                healthy.close()
                stuck.close()
            }
            let running = MultiThreadedEventLoopGroup(numberOfThreads: 2)
            // An embedded loop runs a task only when told to: a loop stuck in a long job, to the watchdog.
            let wedged = EmbeddedEventLoop()
            let feeds = [
                (healthy, running as any EventLoopGroup),
                (stuck, FixedLoops([running.next(), wedged]) as any EventLoopGroup),
            ].map { socket, group in
                Task {
                    let notifier = try #require(SystemdNotifier(environment: ["NOTIFY_SOCKET": socket.path]))
                    try await SystemdService(notifier: notifier, watchdogInterval: .milliseconds(20), group: group)
                        .run()
                }
            }
            // Both wait the same intervals: by the time the healthy one has fed five, the stuck one had as many chances.
            try await healthy.wait("five WATCHDOG=1") { $0.filter { $0 == "WATCHDOG=1" }.count >= 5 }
            for feed in feeds { feed.cancel() }
            for feed in feeds { _ = await feed.result }
            #expect(!stuck.messages.contains("WATCHDOG=1"), "\(stuck.messages)")
            // Cancelled (as at the shutdown), each says it stops, the stuck one too: nothing waited on its loop.
            try await stuck.wait("STOPPING=1") { $0.contains { $0.hasPrefix("STOPPING=1") } }
            try await running.shutdownGracefully()
        }
    }

    @Test("the watchdog's interval is half of WATCHDOG_USEC, for this process only; NOTIFY_SOCKET paths and names")
    func systemdEnvironment() {
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "30000000"], pid: 7) == .seconds(15))
        #expect(
            SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "7"], pid: 7)
                == .seconds(15)
        )
        #expect(
            SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "8"], pid: 7)
                == nil
        )
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "0"], pid: 7) == nil)
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "-5"], pid: 7) == nil)
        #expect(SystemdNotifier.watchdogInterval(environment: [:], pid: 7) == nil)
        #expect(SystemdNotifier(environment: [:]) == nil)
        #expect(SystemdNotifier(environment: ["NOTIFY_SOCKET": "relative/path"]) == nil)
        #expect(SystemdNotifier(environment: ["NOTIFY_SOCKET": "/" + String(repeating: "x", count: 200)]) == nil)
        #expect(SystemdNotifier(environment: ["NOTIFY_SOCKET": "/run/systemd/notify"])?.path.first == UInt8(ascii: "/"))
        #expect(SystemdNotifier(environment: ["NOTIFY_SOCKET": "@courier"])?.path == [0] + Array("courier".utf8))
        // The web chat's URL names a host a browser here can open.
        #expect(Serve.browsable("0.0.0.0") == "127.0.0.1" && Serve.browsable("::") == "[::1]")
        #expect(Serve.browsable("127.0.0.1") == "127.0.0.1" && Serve.browsable("fe80::1") == "[fe80::1]")
        #expect(Serve.browsable("chat.example.com") == "chat.example.com")
    }

    @Test(
        "contrib/courier.service passes systemd-analyze verify, with the hardening docs/DEPLOY.md states; the contrib/courier.toml it reads is valid"
    )
    func serviceUnit() async throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let unit = try String(contentsOf: root.appendingPathComponent("contrib/courier.service"), encoding: .utf8)
        for line in [
            "Type=notify", "WatchdogSec=", "User=courier", "StateDirectory=courier", "NoNewPrivileges=yes",
            "ProtectSystem=strict", "PrivateTmp=yes", "ProtectHome=yes", "CapabilityBoundingSet=",
            "ExecStart=/usr/local/bin/courier serve --config /etc/courier/courier.toml",
        ] {
            #expect(unit.contains("\n" + line), "the unit says \(line)")
        }
        // The configuration file it reads, as contrib/ has it: read without a complaint, its data in the unit's
        // state directory.
        let example = root.appendingPathComponent("contrib/courier.toml").path
        let printed = try await CourierExecutable.run(
            ["serve", "--print-config", "--config", example],
            environment: ["COURIER_DATA": "", "COURIER_HOST": "", "COURIER_PORT": "", "COURIER_HTTP_PORT": ""]
        )
        #expect(printed.status == 0, "\(printed.output)")
        for line in ["data = \"/var/lib/courier\"", "port = 6970", "http-port = 6980", "registration = \"closed\""] {
            #expect(printed.output.contains("\n" + line + "\n"), "\(line) in \(printed.output)")
        }
        try await withTemporaryDirectory(prefix: "courier-unit") { folder in
            /// `systemd-analyze verify` of a unit's text, as installed but for where this build's executable is
            /// (verify checks that it exists): its status and what it said.
            func verify(_ text: String) async throws -> (status: Int32, said: String) {
                let copy = folder.appendingPathComponent("courier.service")
                try text.replacingOccurrences(of: "/usr/local/bin/courier", with: CourierExecutable.url.path)
                    .write(to: copy, atomically: true, encoding: .utf8)
                let run = try await ExternalProgram.run("/usr/bin/systemd-analyze", ["verify", copy.path])
                return (run.status, run.output + run.errors)
            }
            // Any warning (an unknown key, a bad value) fails it too, not only an error.
            let (status, said) = try await verify(unit)
            #expect(status == 0 && said.isEmpty, "\(said)")
            // And verify is not a rubber stamp: a misspelled key is named.
            let complaint = try await verify(unit + "\n[Service]\nWatchdogSecs=5s\n").said
            #expect(complaint.contains("WatchdogSecs"), "\(complaint)")
        }
    }
}
