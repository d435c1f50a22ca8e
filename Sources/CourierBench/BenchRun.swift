import CourierProcess
import CourierWire
import Foundation
import Glibc
public import Histogram
import NIOCore
import NIOPosix
import Synchronization

/// What one run measured.
public struct BenchResult: Sendable {
    public var configuration: BenchConfiguration
    public var connected: Int
    public var sent: Int
    public var acknowledged: Int
    public var delivered: Int
    public var failures: Int
    public var firstFailure: String?
    /// From the start signal to the last acknowledgement or delivery.
    public var seconds: Double
    public var acknowledgement: LatencyHistogram
    public var endToEnd: LatencyHistogram
    /// The server's CPU time over the load and its memory, when its process was given.
    public var serverCPUSeconds: Double?
    public var serverPeakRSS: Int?
    public var serverRSSBefore: Int?
    public var serverRSSAfter: Int?
    /// With several nodes: how long the hops of deliveries between them took (``ClusterHops``).
    public var clusterHops: ClusterHops?
}

/// Runs the load: connects every user, waits until all are logged in, starts them together, and waits until every
/// message is acknowledged and delivered (or the timeout).
public struct BenchRun: Sendable {
    public var configuration: BenchConfiguration
    public var host: String
    /// The nodes' ports (native, or HTTP for the WebSocket gateway): user `i` connects to `ports[i % ports.count]`.
    public var ports: [Int]
    /// The servers' process ids, for their CPU time and memory (Linux /proc), added up.
    public var serverProcesses: [Int32]

    public init(configuration: BenchConfiguration, host: String, port: Int, serverProcess: Int32?) {
        self.init(
            configuration: configuration,
            host: host,
            ports: [port],
            serverProcesses: serverProcess.map { [$0] } ?? []
        )
    }

    public init(configuration: BenchConfiguration, host: String, ports: [Int], serverProcesses: [Int32]) {
        self.configuration = configuration
        self.host = host
        self.ports = ports
        self.serverProcesses = serverProcesses
    }

    /// A figure of every server's process added up, or nil when there is none (or one cannot be read).
    private func total<T: AdditiveArithmetic>(_ read: (Int32) -> T?) -> T? {
        guard !self.serverProcesses.isEmpty else { return nil }
        var sum = T.zero
        for process in self.serverProcesses {
            guard let value = read(process) else { return nil }
            sum += value
        }
        return sum
    }

    public func run(users: [BenchUser], progress: @Sendable (String) -> Void = { _ in }) async throws -> BenchResult {
        let configuration = self.configuration
        let tally = BenchTally()
        let group = MultiThreadedEventLoopGroup.singleton
        let perConnectionRate = configuration.rate.map { $0 / Double(max(1, users.count)) }
        let interval = perConnectionRate.map { UInt64(1e9 / max($0, 1e-3)) }
        let rssBefore = self.total { ProcessMonitor.residentBytes(of: $0) }

        // Connect in waves, so the server's accept backlog is not overrun.
        var channels: [(any Channel, BenchHandler)] = []
        for wave in stride(from: 0, to: users.count, by: configuration.connectConcurrency) {
            let batch = users[wave..<min(users.count, wave + configuration.connectConcurrency)]
            try await withThrowingTaskGroup(of: (any Channel, BenchHandler).self) { tasks in
                for (index, user) in zip(batch.indices, batch) {
                    let plan = BenchHandler.Plan(
                        user: user,
                        messages: configuration.pattern == .idle ? 0 : configuration.messagesPerConnection,
                        messageBytes: configuration.messageBytes,
                        window: configuration.window,
                        interval: interval,
                        phase: interval.map { $0 * UInt64(index) / UInt64(users.count) } ?? 0
                    )
                    let port = self.ports[index % self.ports.count]
                    tasks.addTask {
                        try await Self.connect(
                            host: self.host,
                            port: port,
                            transport: configuration.transport,
                            plan: plan,
                            tally: tally,
                            group: group
                        )
                    }
                }
                for try await connection in tasks { channels.append(connection) }
            }
            try await self.waitUntil(timeout: configuration.timeout) {
                tally.ready.load(ordering: .relaxed) + tally.closedBeforeReady.load(ordering: .relaxed)
                    >= channels.count
            }
            if tally.closedBeforeReady.load(ordering: .relaxed) > 0 {
                throw BenchError(
                    "\(tally.closedBeforeReady.load(ordering: .relaxed)) connections were closed before their login "
                        + "was answered; the first: \(tally.failure ?? "?")"
                )
            }
            progress("connected \(channels.count) of \(users.count)")
        }
        defer {
            for (channel, _) in channels { channel.close(promise: nil) }
        }
        let connected = tally.ready.load(ordering: .relaxed)

        var rssAfter: Int?
        let cpuBefore = self.total { ProcessMonitor.cpuSeconds(of: $0) }
        let clock = ContinuousClock()
        let start = clock.now
        var end = start
        if configuration.pattern == .idle {
            try await Task.sleep(for: configuration.settle)
            rssAfter = self.total { ProcessMonitor.residentBytes(of: $0) }
            end = clock.now
        } else {
            for (channel, handler) in channels {
                channel.eventLoop.execute { handler.start() }
            }
            var lastProgress = start
            var lastCount = 0
            let deadline = start + configuration.timeout
            while clock.now < deadline {
                let acknowledged = tally.acknowledged.load(ordering: .relaxed)
                let delivered = tally.delivered.load(ordering: .relaxed)
                if acknowledged + delivered != lastCount {
                    lastCount = acknowledged + delivered
                    end = clock.now
                }
                if acknowledged >= configuration.expectedSends && delivered >= configuration.expectedDeliveries {
                    break
                }
                if clock.now - lastProgress >= .seconds(5) {
                    lastProgress = clock.now
                    progress("acknowledged \(acknowledged) of \(configuration.expectedSends), delivered \(delivered)")
                }
                try await Task.sleep(for: .milliseconds(5))
            }
            rssAfter = self.total { ProcessMonitor.residentBytes(of: $0) }
        }
        let cpuAfter = self.total { ProcessMonitor.cpuSeconds(of: $0) }

        var acknowledgement = LatencyHistogram.latencies()
        var endToEnd = LatencyHistogram.latencies()
        for (channel, handler) in channels {
            let (ack, e2e) = try await channel.eventLoop.submit {
                (handler.acknowledgement, handler.endToEnd)
            }.get()
            acknowledgement.add(ack)
            endToEnd.add(e2e)
        }
        let elapsed = end - start
        return BenchResult(
            configuration: configuration,
            connected: connected,
            sent: tally.sent.load(ordering: .relaxed),
            acknowledged: tally.acknowledged.load(ordering: .relaxed),
            delivered: tally.delivered.load(ordering: .relaxed),
            failures: tally.failures.load(ordering: .relaxed),
            firstFailure: tally.failure,
            seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18,
            acknowledgement: acknowledgement,
            endToEnd: endToEnd,
            serverCPUSeconds: both(cpuBefore, cpuAfter).map { $1 - $0 },
            serverPeakRSS: self.total { ProcessMonitor.peakResidentBytes(of: $0) },
            serverRSSBefore: rssBefore,
            serverRSSAfter: rssAfter
        )
    }

    /// Opens one bench connection: to a native port, or to an HTTP port's WebSocket gateway (returning once the
    /// handshake is done).
    static func connect(
        host: String,
        port: Int,
        source: SocketAddress? = nil,
        transport: BenchTransport = .native,
        plan: BenchHandler.Plan,
        tally: BenchTally,
        group: any EventLoopGroup
    ) async throws -> (any Channel, BenchHandler) {
        var plan = plan
        plan.logsInWhenActive = transport == .native
        let handler = BenchHandler(plan: plan, tally: tally)
        var bootstrap = ClientBootstrap(group: group)
        if let source { bootstrap = bootstrap.bind(to: source) }
        bootstrap = bootstrap.channelOption(.tcpOption(.tcp_nodelay), value: 1)
        switch transport {
        case .native:
            let channel =
                try await bootstrap.channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let pipeline = channel.pipeline.syncOperations
                        try pipeline.addNativeHandlers()
                        try pipeline.addHandler(NativeBenchWire())
                        try pipeline.addHandler(handler)
                    }
                }
                .connect(host: host, port: port).get()
            return (channel, handler)
        case .websocket:
            let upgraded = group.any().makePromise(of: Bool.self)
            let channel: any Channel
            do {
                channel =
                    try await bootstrap.channelInitializer { channel in
                        channel.eventLoop.makeCompletedFuture {
                            try channel.pipeline.syncOperations.addWebSocketClientHandlers(
                                WebSocketClientOptions(host: "\(host):\(port)")
                            ) {
                                [WebSocketBenchWire(), handler]
                            }
                            .cascade(to: upgraded)
                        }
                    }
                    .connect(host: host, port: port).get()
            } catch {
                upgraded.fail(error)
                throw error
            }
            _ = try await upgraded.futureResult.get()
            channel.eventLoop.execute { handler.sayHello() }
            return (channel, handler)
        }
    }

    private func waitUntil(timeout: Duration, _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while !condition() {
            guard ContinuousClock.now < deadline else {
                throw BenchError("connections were not all logged in within \(timeout)")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}

/// A run that could not go on.
public struct BenchError: Error, CustomStringConvertible {
    public var description: String

    public init(_ description: String) {
        self.description = description
    }
}

private func both(_ a: Double?, _ b: Double?) -> (Double, Double)? {
    guard let a, let b else { return nil }
    return (a, b)
}
