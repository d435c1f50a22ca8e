import CourierProtocol
import CourierWire
import NIOCore
import NIOPosix
import Synchronization

/// A storm of password logins for names that do not exist, as an attacker sends them: `workers` connections at a
/// time, each sending one `hello` and waiting for the answer, again and again until cancelled.
public final class LoginStorm: Sendable {
    /// What the server answered.
    public struct Tally: Sendable, Hashable {
        public var attempts = 0
        /// Refused before any password was hashed.
        public var throttled = 0
        /// Checked and refused (each cost the server one password hash).
        public var authFailed = 0
        /// Anything else: a refused or broken connection, another code.
        public var other = 0
    }

    private let tally = Mutex(Tally())
    let host: String
    let port: Int
    let workers: Int
    /// The address the storm's connections come from (another loopback address than the users', as an attacker's
    /// would be another than theirs).
    let source: String?

    /// Logins per second, all workers together; nil for as fast as the answers come.
    let rate: Double?

    public init(host: String, port: Int, workers: Int, rate: Double? = nil, source: String? = "127.0.0.2") {
        self.host = host
        self.port = port
        self.workers = workers
        self.rate = rate
        self.source = source
    }

    /// The answers so far.
    public var counts: Tally { self.tally.withLock { $0 } }

    /// Runs until the task is cancelled, on an event loop of its own (the measured connections' loops are not
    /// held up by the storm's).
    public func run() async {
        let loop = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { loop.shutdownGracefully { _ in } }
        await withDiscardingTaskGroup { group in
            for worker in 0..<self.workers {
                group.addTask {
                    var attempt = 0
                    // Each worker's share of the rate: one login every `interval`, starting spread over one.
                    let interval = self.rate.map { Duration.seconds(Double(self.workers) / $0) }
                    var next = ContinuousClock.now + (interval ?? .zero) * (Double(worker) / Double(self.workers))
                    while !Task.isCancelled {
                        if let interval {
                            try? await Task.sleep(until: next, clock: .continuous)
                            next += interval
                        }
                        let code = await self.attempt(user: "ghost-\(worker)-\(attempt)", on: loop)
                        attempt += 1
                        self.tally.withLock { tally in
                            tally.attempts += 1
                            switch code {
                            case ErrorCodes.throttled: tally.throttled += 1
                            case ErrorCodes.authFailed: tally.authFailed += 1
                            default: tally.other += 1
                            }
                        }
                        // A refused connection (the address's share of connections is taken) is retried a moment
                        // later rather than at once, as a client would.
                        if code == nil { try? await Task.sleep(for: .milliseconds(10)) }
                    }
                }
            }
        }
    }

    /// One login: the error code the server answered, or nil when there was none.
    private func attempt(user: String, on loop: any EventLoopGroup) async -> String? {
        do {
            var bootstrap = ClientBootstrap(group: loop)
            if let source = self.source {
                bootstrap = bootstrap.bind(to: try SocketAddress(ipAddress: source, port: 0))
            }
            let channel =
                try await bootstrap
                .connect(host: self.host, port: self.port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let pipeline = channel.pipeline.syncOperations
                        try pipeline.addNativeHandlers()
                        return try NIOAsyncChannel<NativeFrame, NativeFrame>(wrappingChannelSynchronously: channel)
                    }
                }
            return try await channel.executeThenClose { inbound, outbound in
                var hello = ClientEnvelope()
                hello.hello.password.user = user
                hello.hello.password.password = "not the password"
                try await outbound.write(NativeFrame(envelope: hello))
                for try await frame in inbound where frame.kind == .message {
                    let envelope = try frame.envelope(as: ServerEnvelope.self)
                    if case .error(let error)? = envelope.body { return error.code }
                    return "unexpected"
                }
                return nil
            }
        } catch {
            return nil
        }
    }
}
