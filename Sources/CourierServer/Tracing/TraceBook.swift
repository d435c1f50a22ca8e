import CourierStore
import NIOCore
import Synchronization
import Tracing

/// Traces of messages, when the server has a tracer (`courier serve --otlp-endpoint`): each send is a span
/// (`courier.send`) with a child for its group commit (`courier.commit`), and each write of the message to a receiving
/// connection is a child of the commit (`courier.deliver`).
///
/// Spans are made with the times they began and ended, once those are known: a send's when its outcome comes back,
/// a delivery's when the message is written. A delivery can be written before the sender's connection has its outcome
/// (the commit wakes the receivers and the sender at once). It then waits here, briefly and within a bound, and
/// becomes a span when its send is known. Nothing here is on the way of a message: a trace that is lost, or comes
/// too late, loses spans, never a delivery.
final class TraceBook: Sendable {
    /// A message as every viewer can name it: its conversation (a group by name; a direct conversation by its two
    /// users' names, in order) and its seq there.
    struct Key: Hashable, Sendable {
        var conversation: String
        var seq: UInt64

        /// A key as it travels between nodes.
        init(conversation: String, seq: UInt64) {
            self.conversation = conversation
            self.seq = seq
        }

        /// The key of a message sent by `sender` to `to`.
        init(sender: String, to: Conversation, seq: UInt64) {
            self.init(viewer: sender, conversation: to, seq: seq)
        }

        /// The key of a message as `viewer` sees it, in `conversation` (named the viewer's way).
        init(viewer: String, conversation: Conversation, seq: UInt64) {
            switch conversation {
            case .group(let name):
                self.conversation = "#" + name
            case .user(let other):
                self.conversation = "@" + [viewer, other].sorted().joined(separator: "@")
            }
            self.seq = seq
        }
    }

    /// A write of a message to a connection, before its send is known.
    private struct Early: Sendable {
        var user: String
        var device: Int64
        var started: UInt64
        var ended: UInt64
    }

    /// A send known: its commit's context, or nil when the sampler did not keep its trace (its deliveries are not
    /// traced either).
    private struct Known: Sendable {
        var parent: ServiceContext?
    }

    /// The deliveries of a message not known yet; `generation` tells its entry in the order from an older one.
    private struct Waiting: Sendable {
        var generation: UInt64
        var deliveries: [Early]
    }

    private struct State {
        /// The sends known, oldest first (at most ``maxTraced``).
        var traced: [Key: Known] = [:]
        var tracedOrder = CircularBuffer<Key>()
        /// Deliveries of messages not known yet (at most ``maxEarly`` in all, none older than ``maxWait``), their
        /// messages oldest first. Another node tells only of the sends its sampler kept: the deliveries of the others
        /// wait here until they are let go.
        var early: [Key: Waiting] = [:]
        var earlyOrder = CircularBuffer<(key: Key, generation: UInt64)>()
        var earlyCount = 0
        var generation: UInt64 = 0

        /// Lets go of the oldest message's waiting deliveries (an entry whose message was known since: nothing).
        mutating func letGoOldest() {
            let oldest = self.earlyOrder.removeFirst()
            if let waiting = self.early[oldest.key], waiting.generation == oldest.generation {
                self.earlyCount -= waiting.deliveries.count
                self.early[oldest.key] = nil
            }
        }

        /// Whether the oldest entry in the order is of a message known since, or one written before `time`.
        func oldestIsDone(before time: UInt64) -> Bool {
            guard let oldest = self.earlyOrder.first else { return false }
            guard let waiting = self.early[oldest.key], waiting.generation == oldest.generation else { return true }
            return (waiting.deliveries.first?.ended ?? 0) < time
        }
    }

    let tracer: any Tracer
    private let node: String
    /// Tells the other nodes of a send's trace (nil on a server alone).
    private let publish: (@Sendable (Key, String) -> Void)?
    private let state = Mutex(State())
    /// The most sends remembered for their deliveries.
    static let maxTraced = 4096
    /// The most deliveries kept while their sends are not known.
    static let maxEarly = 4096
    /// The longest a delivery waits for its send to be known, in nanoseconds: a notice takes milliseconds.
    static let maxWait: UInt64 = 10_000_000_000

    init(tracer: any Tracer, node: String, publish: (@Sendable (Key, String) -> Void)? = nil) {
        self.tracer = tracer
        self.node = node
        self.publish = publish
    }

    /// Now, as spans are timed.
    static var now: UInt64 { DefaultTracerClock.now.nanosecondsSinceEpoch }

    /// A duration in whole nanoseconds (none for a negative one).
    static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(max(0, seconds * 1_000_000_000 + attoseconds / 1_000_000_000))
    }

    /// A send's outcome came back: its spans, from when it was enqueued until now, and the deliveries written before.
    /// `committed`: when the outcome came back; `ended`: once the acknowledgement was written.
    func sent(_ key: Key, id: String, sender: String, enqueued: UInt64, committed: UInt64, ended: UInt64) {
        let send = self.tracer.startSpan("courier.send", context: .topLevel, ofKind: .server, at: Instant(enqueued))
        // A trace the sampler dropped costs no more: no attributes, no commit span, no delivery spans.
        guard send.isRecording else {
            send.end(at: Instant(ended))
            self.known(key, parent: nil)
            return
        }
        send.attributes["courier.message.id"] = id
        send.attributes["courier.sender"] = sender
        send.attributes["courier.conversation"] = key.conversation
        send.attributes["courier.seq"] = Int64(truncatingIfNeeded: key.seq)
        send.attributes["courier.node"] = self.node
        let commit = self.tracer.startSpan(
            "courier.commit",
            context: send.context,
            ofKind: .internal,
            at: Instant(enqueued)
        )
        commit.attributes["courier.node"] = self.node
        // Only a trace that is kept goes to the other nodes: a sampler's dropped one costs them no notice. (Asked
        // before the span ends: an ended span records no more.)
        if let publish = self.publish, commit.isRecording {
            var carrier: [String: String] = [:]
            self.tracer.inject(commit.context, into: &carrier, using: Carrier())
            if let parent = carrier["traceparent"] { publish(key, parent) }
        }
        commit.end(at: Instant(committed))
        self.known(key, parent: commit.context)
        send.end(at: Instant(ended))
    }

    /// Another node's send, with its commit's context (a W3C `traceparent`): this node's deliveries of it are its
    /// children.
    func remote(_ key: Key, parent: String) {
        var context = ServiceContext.topLevel
        self.tracer.extract(["traceparent": parent], into: &context, using: Carrier())
        self.known(key, parent: context)
    }

    /// A send is known: its deliveries from now on, and those written before, are spans under `parent` (none when
    /// it is nil).
    private func known(_ key: Key, parent: ServiceContext?) {
        let early = self.state.withLock { state -> [Early] in
            if state.traced.updateValue(Known(parent: parent), forKey: key) == nil {
                state.tracedOrder.append(key)
                if state.tracedOrder.count > Self.maxTraced {
                    state.traced[state.tracedOrder.removeFirst()] = nil
                }
            }
            guard let waiting = state.early.removeValue(forKey: key) else { return [] }
            state.earlyCount -= waiting.deliveries.count
            return waiting.deliveries
        }
        guard let parent else { return }
        for delivery in early { self.span(of: delivery, parent: parent) }
    }

    /// A trace context in a dictionary, as it travels in a notice.
    struct Carrier: Injector, Extractor {
        func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) {
            carrier[key] = value
        }

        func extract(key: String, from carrier: [String: String]) -> String? {
            carrier[key]
        }
    }

    /// A message was written to a connection of `user`'s, which learnt of it at `started`, at `ended` (now).
    func delivered(_ key: Key, user: String, device: Int64, started: UInt64, ended: UInt64 = TraceBook.now) {
        let delivery = Early(user: user, device: device, started: started, ended: ended)
        let parent = self.state.withLock { state -> ServiceContext? in
            if let known = state.traced[key] { return known.parent }
            while state.oldestIsDone(before: ended &- min(ended, Self.maxWait)) { state.letGoOldest() }
            if state.early[key] == nil {
                state.generation += 1
                state.early[key] = Waiting(generation: state.generation, deliveries: [])
                state.earlyOrder.append((key, state.generation))
            }
            state.early[key]?.deliveries.append(delivery)
            state.earlyCount += 1
            while state.earlyCount > Self.maxEarly { state.letGoOldest() }
            // The entries of messages known since, behind a waiting one, are dropped together now and then.
            if state.earlyOrder.count > 2 * Self.maxEarly {
                let live = state.earlyOrder.filter { state.early[$0.key]?.generation == $0.generation }
                state.earlyOrder = CircularBuffer(live)
            }
            return nil
        }
        if let parent { self.span(of: delivery, parent: parent) }
    }

    /// How many deliveries wait for their sends to be known.
    var waiting: Int { self.state.withLock { $0.earlyCount } }

    private func span(of delivery: Early, parent: ServiceContext) {
        let span = self.tracer.startSpan(
            "courier.deliver",
            context: parent,
            ofKind: .producer,
            at: Instant(min(delivery.started, delivery.ended))
        )
        span.attributes["courier.receiver"] = delivery.user
        span.attributes["courier.device"] = delivery.device
        span.attributes["courier.node"] = self.node
        span.end(at: Instant(delivery.ended))
    }

    /// A moment in nanoseconds since 1970, as the tracer takes it.
    struct Instant: TracerInstant {
        var nanosecondsSinceEpoch: UInt64

        init(_ nanoseconds: UInt64) {
            self.nanosecondsSinceEpoch = nanoseconds
        }

        static func < (lhs: Self, rhs: Self) -> Bool { lhs.nanosecondsSinceEpoch < rhs.nanosecondsSinceEpoch }
    }
}
