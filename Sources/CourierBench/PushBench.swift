import CourierClient
import CourierProcess
import CourierStore
import CourierStoreSQLite
import Crypto
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// `courier bench --pattern push`: how fast a server pushes to devices that are away. `recipients` users, each with a
/// device that never connects and a Web Push subscription at a push service stand-in on loopback (it answers every
/// push 201 at once, and counts), are members of groups of at most ``groupSize`` with a sender; the sender writes
/// `messages` texts to each group, and the bench times the pushes from the first send to the last push taken: each one
/// sealed (RFC 8291) for its subscription and POSTed, `recipients × messages` in all.
struct PushBench {
    let recipients: Int
    let messages: Int
    let executable: URL
    let folder: URL
    let say: @Sendable (String) -> Void

    struct Result: Sendable {
        var recipients: Int
        var messages: Int
        var pushes: Int
        /// From the first send to the last message's acknowledgement, and to the last push taken.
        var sendSeconds: Double
        var pushSeconds: Double
        var serverCPUSeconds: Double?
        var serverRSSPeak: Int?
        var provisionSeconds: Double
    }

    func run(limits: [String]) async throws -> Result {
        let sink = try await PushSink.start()
        defer { sink.stop() }
        var logger = Logger(label: "courier.bench")
        logger.logLevel = .warning
        let data = self.folder.appendingPathComponent("data")
        try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
        let provisioned = ContinuousClock.now
        self.say("provisioning \(self.recipients) recipients with a subscription each")
        let token = try await self.provision(data: data, sink: sink.port, logger: logger)
        let provisionSeconds = (ContinuousClock.now - provisioned).seconds
        let (server, port, _) = try await BenchServers.serve(
            executable: self.executable,
            data: data,
            folder: self.folder,
            limits: limits,
            arguments: ["--allow-private-targets"]
        )
        defer { server.stop() }
        let pid = server.process.processIdentifier
        self.say("server \(pid) on 127.0.0.1:\(port); the push service on 127.0.0.1:\(sink.port)")
        let settings = CourierClient.Configuration(
            port: port,
            credentials: .token(token),
            storePath: self.folder.appendingPathComponent("sender.sqlite").path
        )
        let sender = try CourierClient(configuration: settings, logger: logger)
        let peak = Mutex<Int>(0)
        let sampler = Task {
            while !Task.isCancelled {
                if let rss = ProcessMonitor.residentBytes(of: pid) { peak.withLock { $0 = max($0, rss) } }
                try? await Task.sleep(for: .milliseconds(50))
            }
        }
        defer { sampler.cancel() }
        let expected = self.recipients * self.messages
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await sender.run() }
            defer { sender.stop() }
            let cpuBefore = ProcessMonitor.cpuSeconds(of: pid)
            let start = ContinuousClock.now
            let groups = (self.recipients + Self.groupSize - 1) / Self.groupSize
            let ids = try await sender.send(
                contentsOf: (0..<self.messages).flatMap { index in
                    (0..<groups).map { (text: "push bench \(index)", conversation: .group(Self.group($0))) }
                }
            )
            var acknowledged: Set<String> = []
            for await event in sender.events {
                if case .sent(let id, _, _, _) = event { acknowledged.insert(id) }
                if acknowledged.isSuperset(of: ids) { break }
            }
            let sent = ContinuousClock.now
            self.say("sent \(self.messages) messages; waiting for \(expected) pushes")
            let deadline = ContinuousClock.now + .seconds(600)
            while sink.count < expected, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            guard sink.count >= expected, let last = sink.last else {
                throw BenchError("\(sink.count) of \(expected) pushes in ten minutes")
            }
            let cpuAfter = ProcessMonitor.cpuSeconds(of: pid)
            sampler.cancel()
            group.cancelAll()
            return Result(
                recipients: self.recipients,
                messages: self.messages,
                pushes: sink.count,
                sendSeconds: (sent - start).seconds,
                pushSeconds: (last - start).seconds,
                serverCPUSeconds: cpuBefore.flatMap { before in cpuAfter.map { $0 - before } },
                serverRSSPeak: peak.withLock { $0 },
                provisionSeconds: provisionSeconds
            )
        }
    }

    /// A group's members at most (a group's creation writes an event of every member to every member: one of ten
    /// thousand would take the bench's memory, not the pushes').
    static let groupSize = 1000

    static func group(_ index: Int) -> String { "push-bench-\(index)" }

    /// The sender (whose token it returns) and the recipients, each logged in once and subscribed at the sink, all
    /// in one group.
    private func provision(data: URL, sink: Int, logger: Logger) async throws -> String {
        var configuration = SQLiteStore.Configuration()
        configuration.passwordHasher = BenchProvisioning.hasher
        let store = try SQLiteStore(folder: data, configuration: configuration, logger: logger)
        defer { try? store.close() }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        _ = try await store.addUser(name: "sender", password: "sender", nowMs: now)
        let sender = try await store.login(user: "sender", password: "sender", deviceName: "bench", nowMs: now)
        // One subscriber key pair for all (each push is still sealed with a key and salt of its own).
        let key = Array(P256.KeyAgreement.PrivateKey().publicKey.x963Representation)
        var names: [String] = []
        for index in 0..<self.recipients {
            let name = "r\(index)"
            _ = try await store.addUser(name: name, password: name, nowMs: now)
            let session = try await store.login(user: name, password: name, deviceName: "away", nowMs: now)
            try await store.addPushSubscription(
                endpoint: "http://127.0.0.1:\(sink)/push/\(index)",
                p256dh: key,
                auth: (0..<16).map { _ in UInt8.random(in: 0...255) },
                for: session,
                nowMs: now
            )
            names.append(name)
        }
        for (index, start) in stride(from: 0, to: names.count, by: Self.groupSize).enumerated() {
            let members = Array(names[start..<min(names.count, start + Self.groupSize)])
            _ = try await store.createGroup(name: Self.group(index), owner: "sender", members: members, nowMs: now)
        }
        return sender.token ?? ""
    }

    static func text(_ result: Result) -> String {
        let rate = Double(result.pushes) / max(result.pushSeconds, 1e-9)
        var lines = [
            "courier bench --pattern push: \(result.recipients) recipients away in groups of at most "
                + "\(Self.groupSize), \(result.messages) messages to each group",
            String(format: "pushes:        %d in %.2f s (%.0f pushes/s)", result.pushes, result.pushSeconds, rate),
            String(format: "sends:         acknowledged in %.2f s", result.sendSeconds),
        ]
        if let cpu = result.serverCPUSeconds {
            lines.append(
                String(
                    format: "server CPU:    %.1f s (%.0f µs a push)",
                    cpu,
                    cpu * 1e6 / Double(max(1, result.pushes))
                )
            )
        }
        if let rss = result.serverRSSPeak {
            lines.append(String(format: "server peak RSS: %.1f MiB", Double(rss) / 1_048_576))
        }
        lines.append(String(format: "provisioning:  %.1f s", result.provisionSeconds))
        return lines.joined(separator: "\n")
    }

    static func json(_ result: Result) throws -> String {
        var object: [String: Any] = [
            "pattern": "push", "recipients": result.recipients, "messages": result.messages, "pushes": result.pushes,
            "push_seconds": result.pushSeconds, "send_seconds": result.sendSeconds,
            "pushes_per_second": Double(result.pushes) / max(result.pushSeconds, 1e-9),
        ]
        object["server_cpu_seconds"] = result.serverCPUSeconds
        object["server_rss_peak_bytes"] = result.serverRSSPeak
        let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }
}

/// A push service's stand-in on loopback: answers every `POST` 201 at once, counting them and noting when the last
/// came.
final class PushSink: Sendable {
    let port: Int
    private let channel: any Channel
    private let state: State

    final class State: Sendable {
        let count = Atomic<Int>(0)
        let last = Mutex<ContinuousClock.Instant?>(nil)
    }

    var count: Int { self.state.count.load(ordering: .relaxed) }
    var last: ContinuousClock.Instant? { self.state.last.withLock { $0 } }

    private init(port: Int, channel: any Channel, state: State) {
        self.port = port
        self.channel = channel
        self.state = state
    }

    static func start() async throws -> PushSink {
        let state = State()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 1024)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMap {
                    channel.pipeline.addHandler(Handler(state: state))
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        return PushSink(port: channel.localAddress?.port ?? 0, channel: channel, state: state)
    }

    func stop() {
        self.channel.close(promise: nil)
    }

    private final class Handler: ChannelInboundHandler, Sendable {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        let state: State

        init(state: State) { self.state = state }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard case .end = self.unwrapInboundIn(data) else { return }
            self.state.count.add(1, ordering: .relaxed)
            self.state.last.withLock { $0 = .now }
            var headers = HTTPHeaders()
            headers.add(name: "Content-Length", value: "0")
            let head = HTTPResponseHead(version: .http1_1, status: .created, headers: headers)
            context.write(self.wrapOutboundOut(.head(head)), promise: nil)
            context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}
