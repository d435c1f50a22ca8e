import Foundation
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Tells systemd how the server is doing (sd_notify(3)): `READY=1` once it listens, `WATCHDOG=1` while its event
/// loops answer, `STOPPING=1` when it drains. Datagrams to `$NOTIFY_SOCKET` (a path, or `@name` in the abstract
/// namespace); without that variable (not started by systemd with `Type=notify`) it does nothing.
struct SystemdNotifier: Sendable {
    /// The socket's address, as `sockaddr_un.sun_path` takes it (a leading NUL for the abstract namespace).
    let path: [UInt8]

    /// The notifier `$NOTIFY_SOCKET` names, if any.
    init?(environment: [String: String] = ProcessInfo.processInfo.environment) {
        guard let socket = environment["NOTIFY_SOCKET"], !socket.isEmpty else { return nil }
        var bytes = Array(socket.utf8)
        if bytes.first == UInt8(ascii: "@") {
            bytes[0] = 0
        } else if bytes.first != UInt8(ascii: "/") {
            return nil
        }
        let capacity = MemoryLayout.size(ofValue: sockaddr_un().sun_path)
        guard bytes.count < capacity else { return nil }
        self.path = bytes
    }

    /// Sends one message ("READY=1", "STATUS=…" lines); false when it could not be sent.
    @discardableResult
    func send(_ message: String) -> Bool {
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { sunPath in
            for (index, byte) in self.path.enumerated() { sunPath[index] = byte }
        }
        // An abstract name's length is exact (no terminating NUL); a path's includes its NUL.
        let length =
            MemoryLayout<sa_family_t>.size + self.path.count + (self.path.first == 0 ? 0 : 1)
        let bytes = Array(message.utf8)
        let sent = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                bytes.withUnsafeBytes { buffer in
                    sendto(
                        descriptor,
                        buffer.baseAddress,
                        buffer.count,
                        Int32(MSG_NOSIGNAL),
                        socketAddress,
                        socklen_t(length)
                    )
                }
            }
        }
        return sent == bytes.count
    }

    /// How often systemd wants `WATCHDOG=1`: half of `$WATCHDOG_USEC`, when that is meant for this process
    /// (`$WATCHDOG_PID` unset or this process's id); nil when there is no watchdog.
    static func watchdogInterval(
        environment: [String: String] = ProcessInfo.processInfo.environment,
        pid: Int32 = getpid()
    ) -> Duration? {
        guard let text = environment["WATCHDOG_USEC"], let microseconds = UInt64(text), microseconds > 0 else {
            return nil
        }
        if let owner = environment["WATCHDOG_PID"], Int32(owner) != pid { return nil }
        return .microseconds(Int64(clamping: microseconds / 2))
    }
}

/// The server's side of systemd's service manager, as a service of its group: it feeds the watchdog (when systemd
/// set one) every interval in which each event loop of the server's group ran a task posted to it at the interval's
/// start (a loop stuck in a long job or a deadlock withholds it, and systemd restarts the server after
/// `WatchdogSec`), and says `STOPPING=1` as soon as the graceful shutdown begins. (`READY=1` is sent by `serve` once
/// its ports listen.) Nothing here waits on a loop: a stuck one cannot hold up the shutdown.
struct SystemdService: Service {
    let notifier: SystemdNotifier
    let watchdogInterval: Duration?
    let group: any EventLoopGroup
    let clock: any Clock<Duration>

    init(
        notifier: SystemdNotifier,
        watchdogInterval: Duration?,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        self.notifier = notifier
        self.watchdogInterval = watchdogInterval
        self.group = group
        self.clock = clock
    }

    func run() async throws {
        if let interval = self.watchdogInterval {
            await cancelWhenGracefulShutdown {
                let loops = Array(self.group.makeIterator())
                while !Task.isCancelled {
                    let answered = Answered(count: loops.count)
                    for (index, loop) in loops.enumerated() {
                        loop.execute { answered.mark(index) }
                    }
                    do {
                        try await self.clock.sleep(for: interval)
                    } catch {
                        return
                    }
                    if answered.all { self.notifier.send("WATCHDOG=1") }
                }
            }
        } else {
            try? await gracefulShutdown()
        }
        self.notifier.send("STOPPING=1\nSTATUS=draining: committing what is in flight, then closing")
    }

    /// Which loops ran the task posted to them this interval.
    private final class Answered: Sendable {
        private let marks: Mutex<[Bool]>

        init(count: Int) {
            self.marks = Mutex(Array(repeating: false, count: count))
        }

        func mark(_ index: Int) {
            self.marks.withLock { $0[index] = true }
        }

        var all: Bool { self.marks.withLock { $0.allSatisfy { $0 } } }
    }
}
