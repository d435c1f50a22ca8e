import CourierProtocol
import CourierWire
public import Histogram
import NIOCore
import Synchronization

/// Counts shared by every connection of a run (each connection's own figures stay on its event loop).
final class BenchTally: Sendable {
    let ready = Atomic<Int>(0)
    /// Connections that closed before their login was answered (the server refused them).
    let closedBeforeReady = Atomic<Int>(0)
    let sent = Atomic<Int>(0)
    let acknowledged = Atomic<Int>(0)
    let delivered = Atomic<Int>(0)
    /// Pongs to the bench's own pings (``BenchHandler/ping()``).
    let pongs = Atomic<Int>(0)
    let failures = Atomic<Int>(0)
    let firstFailure = Mutex<String?>(nil)

    init() {}

    func fail(_ message: String) {
        self.failures.add(1, ordering: .relaxed)
        self.firstFailure.withLock { if $0 == nil { $0 = message } }
    }

    var failure: String? { self.firstFailure.withLock { $0 } }
}

/// Latencies in microseconds, up to a minute, to three significant digits.
public typealias LatencyHistogram = Histogram<UInt64>

extension LatencyHistogram {
    static func latencies() -> LatencyHistogram {
        LatencyHistogram(highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: .three)
    }
}

/// One bench connection, on the native port or the WebSocket gateway (``BenchWire``): it logs in with a token, sends its messages when told to start, and
/// acknowledges what it receives, all on its event loop. The send time travels in each message's text, so the
/// receiving connection measures end-to-end latency on the same clock. Only its channel's event loop touches it
/// (the run reaches it through `eventLoop.execute` and `submit`), hence the unchecked Sendable.
final class BenchHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = BenchInbound
    typealias OutboundOut = BenchOutbound

    struct Plan {
        var user: BenchUser
        var messages: Int
        var messageBytes: Int
        var window: Int
        /// Nanoseconds between two sends in open loop; nil for closed loop.
        var interval: UInt64?
        /// In open loop, how long after the start this connection's first send is due: the connections' sends are
        /// spread evenly over one interval, so the total rate is smooth rather than a burst from every connection
        /// at once.
        var phase: UInt64 = 0
        /// Whether the login goes out as the connection becomes active (not over the gateway: after its handshake).
        var logsInWhenActive = true
    }

    private let plan: Plan
    private let tally: BenchTally
    private let target: Courier_V1_Conversation?
    private var context: ChannelHandlerContext?
    private var nextRequestID: UInt64 = 1
    /// Intended send times by request id, until acknowledged.
    private var waiting: [UInt64: UInt64] = [:]
    private var sent = 0
    private var startedAt: UInt64 = 0
    private var pinger: RepeatedTask?
    /// Whether the server answered the login.
    private var welcomed = false
    private var pacer: Scheduled<Void>?
    private(set) var acknowledgement = LatencyHistogram.latencies()
    private(set) var endToEnd = LatencyHistogram.latencies()

    init(plan: Plan, tally: BenchTally) {
        self.plan = plan
        self.tally = tally
        switch plan.user.target {
        case .user(let name):
            var conversation = Courier_V1_Conversation()
            conversation.user = name
            self.target = conversation
        case .group(let name):
            var conversation = Courier_V1_Conversation()
            conversation.group = name
            self.target = conversation
        case .none:
            self.target = nil
        }
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func channelActive(context: ChannelHandlerContext) {
        if self.plan.logsInWhenActive { self.sayHello() }
        context.fireChannelActive()
    }

    private var saidHello = false

    /// Logs in: when the connection becomes active, or, over the gateway, once its handshake is done (what is written
    /// while NIO's upgrade handler is still in the pipeline is lost).
    func sayHello() {
        guard !self.saidHello else { return }
        self.saidHello = true
        var hello = ClientEnvelope()
        hello.hello.token = self.plan.user.token
        self.write(hello, flush: true)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.pinger?.cancel()
        self.pacer?.cancel()
        if !self.welcomed {
            self.tally.closedBeforeReady.add(1, ordering: .relaxed)
            self.tally.fail("\(self.plan.user.name): the server closed the connection before answering its login")
        } else if self.sent < self.plan.messages || !self.waiting.isEmpty {
            self.tally.fail("\(self.plan.user.name): the connection closed")
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.tally.fail("\(self.plan.user.name): \(error)")
        context.close(promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope: ServerEnvelope
        switch Self.unwrapInboundIn(data) {
        case .ping(let opaque):
            context.writeAndFlush(Self.wrapOutboundOut(.pong(opaque)), promise: nil)
            return
        case .pong(let opaque):
            if opaque == Self.benchPing { self.tally.pongs.add(1, ordering: .relaxed) }
            return
        case .other:
            return
        case .undecodable:
            self.tally.fail("\(self.plan.user.name): an envelope that does not parse")
            return
        case .envelope(let decoded):
            envelope = decoded
        }
        let now = NIODeadline.now().uptimeNanoseconds
        switch envelope.body {
        case .welcome(let welcome)?:
            self.welcomed = true
            self.tally.ready.add(1, ordering: .relaxed)
            let interval = TimeAmount.milliseconds(Int64(welcome.limits.heartbeatIntervalMs))
            if interval > .zero {
                self.pinger = context.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) {
                    [weak self] _ in
                    self?.context?.writeAndFlush(Self.wrapOutboundOut(.ping(0)), promise: nil)
                }
            }
        case .sendAck?:
            guard let intended = self.waiting.removeValue(forKey: envelope.requestID) else { return }
            self.acknowledgement.record((now &- intended) / 1000)
            self.tally.acknowledged.add(1, ordering: .relaxed)
            if self.plan.interval == nil { self.sendDue(now: now) }
        case .events(let events)?:
            var newest: UInt64 = 0
            for event in events.events {
                newest = max(newest, event.cursor)
                guard case .message(let message)? = event.kind, message.from != self.plan.user.name else { continue }
                if let stamp = Self.stamp(message.body.text) {
                    self.endToEnd.record((now &- min(now, stamp)) / 1000)
                }
                self.tally.delivered.add(1, ordering: .relaxed)
            }
            if newest > 0 {
                var ack = ClientEnvelope()
                ack.ack.cursor = newest
                self.write(ack, flush: true)
            }
        case .error(let error)?:
            self.tally.fail("\(self.plan.user.name): \(error.code): \(error.message)")
        default:
            break
        }
    }

    /// The opaque data of the bench's own pings (the heartbeats carry 0).
    static let benchPing: UInt64 = 0xBE4C

    /// Pings the server; its pong is counted in the tally.
    func ping() {
        self.context?.writeAndFlush(Self.wrapOutboundOut(.ping(Self.benchPing)), promise: nil)
    }

    /// Starts sending: open loop on a timer, closed loop up to the window.
    func start() {
        guard self.target != nil, self.plan.messages > 0, let context = self.context else { return }
        let now = NIODeadline.now().uptimeNanoseconds
        self.startedAt = now + self.plan.phase
        self.sendDue(now: now)
        self.scheduleNextSend(on: context.eventLoop)
    }

    /// In open loop, wakes at the next send's intended time (a deadline, not a repeated delay, so the pace does not
    /// drift later and later: a late generator would count as server latency).
    private func scheduleNextSend(on eventLoop: any EventLoop) {
        guard let interval = self.plan.interval, self.sent < self.plan.messages else { return }
        let next = self.startedAt + UInt64(self.sent) * interval
        self.pacer = eventLoop.scheduleTask(deadline: .uptimeNanoseconds(next)) { [weak self] in
            guard let self else { return }
            self.sendDue(now: NIODeadline.now().uptimeNanoseconds)
            self.scheduleNextSend(on: eventLoop)
        }
    }

    /// Sends what is due: in open loop every send whose time has come (each stamped with that time), in closed
    /// loop until the window is full.
    private func sendDue(now: UInt64) {
        guard let target = self.target else { return }
        var wrote = false
        while self.sent < self.plan.messages {
            let intended: UInt64
            if let interval = self.plan.interval {
                intended = self.startedAt + UInt64(self.sent) * interval
                guard intended <= now else { break }
            } else {
                guard self.waiting.count < self.plan.window else { break }
                intended = now
            }
            var envelope = ClientEnvelope()
            envelope.requestID = self.nextRequestID
            envelope.send.id = "\(self.plan.user.name)-\(self.sent)"
            envelope.send.to = target
            envelope.send.body.text = Self.text(stamp: intended, bytes: self.plan.messageBytes)
            self.waiting[self.nextRequestID] = intended
            self.nextRequestID += 1
            self.sent += 1
            self.write(envelope, flush: false)
            wrote = true
        }
        if wrote {
            self.context?.flush()
            self.tally.sent.add(self.sent - self.reportedSent, ordering: .relaxed)
            self.reportedSent = self.sent
        }
    }

    private var reportedSent = 0

    private func write(_ envelope: ClientEnvelope, flush: Bool) {
        guard let context = self.context else { return }
        if flush {
            context.writeAndFlush(Self.wrapOutboundOut(.envelope(envelope)), promise: nil)
        } else {
            context.write(Self.wrapOutboundOut(.envelope(envelope)), promise: nil)
        }
    }

    /// A text of `bytes` bytes starting with the send time in nanoseconds.
    static func text(stamp: UInt64, bytes: Int) -> String {
        let head = "\(stamp) "
        return head + String(repeating: "x", count: max(0, bytes - head.utf8.count))
    }

    static func stamp(_ text: String) -> UInt64? {
        text.split(separator: " ", maxSplits: 1).first.flatMap { UInt64($0) }
    }
}
