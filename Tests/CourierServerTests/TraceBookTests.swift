import CourierStore
import InMemoryTracing
import Synchronization
import Testing
import Tracing

@testable import CourierServer

@Suite("Message traces: each span made once its times are known, whichever comes first")
struct TraceBookTests {
    @Test("a message's key is the same for its sender and every viewer, in Chinese too")
    func keys() {
        let direct = TraceBook.Key(sender: "alice", to: .user("王芳"), seq: 7)
        #expect(direct == TraceBook.Key(viewer: "王芳", conversation: .user("alice"), seq: 7))
        #expect(direct == TraceBook.Key(viewer: "alice", conversation: .user("王芳"), seq: 7))
        #expect(direct != TraceBook.Key(viewer: "王芳", conversation: .user("alice"), seq: 8))
        let group = TraceBook.Key(sender: "alice", to: .group("团队 🚀"), seq: 3)
        #expect(group == TraceBook.Key(viewer: "bob", conversation: .group("团队 🚀"), seq: 3))
        // A group named like a user is another conversation.
        #expect(
            TraceBook.Key(sender: "a", to: .group("b"), seq: 1) != TraceBook.Key(sender: "a", to: .user("b"), seq: 1)
        )
    }

    @Test(
        "a delivery written before its send is known waits, then is the commit's child; one after is at once; waiting ones are bounded"
    )
    func order() throws {
        let tracer = InMemoryTracer()
        let book = TraceBook(tracer: tracer, node: "n1")
        let key = TraceBook.Key(sender: "alice", to: .user("bob"), seq: 7)
        let start = TraceBook.now
        book.delivered(key, user: "bob", device: 2, started: start)
        #expect(tracer.finishedSpans.isEmpty)
        book.sent(key, id: "m-7", sender: "alice", enqueued: start, committed: TraceBook.now, ended: TraceBook.now)
        var spans = tracer.popFinishedSpans()
        let send = try #require(spans.first { $0.operationName == "courier.send" })
        let commit = try #require(spans.first { $0.operationName == "courier.commit" })
        let early = try #require(spans.first { $0.operationName == "courier.deliver" })
        #expect(spans.count == 3)
        #expect(send.parentSpanID == nil && commit.parentSpanID == send.spanID && early.parentSpanID == commit.spanID)
        #expect(Set([send.traceID, commit.traceID, early.traceID]).count == 1)
        // Another device, after: at once, under the same commit.
        book.delivered(key, user: "bob", device: 3, started: TraceBook.now)
        spans = tracer.popFinishedSpans()
        #expect(spans.map(\.operationName) == ["courier.deliver"] && spans.first?.parentSpanID == commit.spanID)

        // More waiting deliveries than the bound: the oldest are let go (their spans never made), the newest stay.
        let many = TraceBook.maxEarly + 10
        for seq in 0..<many {
            book.delivered(
                TraceBook.Key(sender: "carol", to: .user("dave"), seq: UInt64(1_000 + seq)),
                user: "dave",
                device: 4,
                started: TraceBook.now
            )
        }
        book.sent(
            TraceBook.Key(sender: "carol", to: .user("dave"), seq: 1_000),
            id: "first",
            sender: "carol",
            enqueued: TraceBook.now,
            committed: TraceBook.now,
            ended: TraceBook.now
        )
        #expect(tracer.popFinishedSpans().map(\.operationName).sorted() == ["courier.commit", "courier.send"])
        book.sent(
            TraceBook.Key(sender: "carol", to: .user("dave"), seq: UInt64(1_000 + many - 1)),
            id: "last",
            sender: "carol",
            enqueued: TraceBook.now,
            committed: TraceBook.now,
            ended: TraceBook.now
        )
        #expect(
            tracer.popFinishedSpans().map(\.operationName).sorted() == [
                "courier.commit", "courier.deliver", "courier.send",
            ]
        )
    }

    @Test("a send whose trace the sampler drops costs no more spans: no commit, no deliveries, before or after it")
    func dropped() throws {
        let tracer = SamplingTracer()
        let book = TraceBook(tracer: tracer, node: "n1")
        let dropped = TraceBook.Key(sender: "alice", to: .group("团队"), seq: 1)
        let kept = TraceBook.Key(sender: "alice", to: .group("团队"), seq: 2)
        // Written before their sends are known: the dropped one's is let go once its send is.
        book.delivered(dropped, user: "bob", device: 1, started: TraceBook.now)
        book.delivered(kept, user: "bob", device: 1, started: TraceBook.now)
        tracer.dropping.withLock { $0 = true }
        book.sent(
            dropped,
            id: "m-1",
            sender: "alice",
            enqueued: TraceBook.now,
            committed: TraceBook.now,
            ended: TraceBook.now
        )
        tracer.dropping.withLock { $0 = false }
        book.delivered(dropped, user: "carol", device: 2, started: TraceBook.now)
        #expect(tracer.recorded.popFinishedSpans().isEmpty, "nothing of the dropped trace")
        #expect(book.waiting == 1, "the dropped send's deliveries, before and after it, wait for nothing")
        book.sent(
            kept,
            id: "m-2",
            sender: "alice",
            enqueued: TraceBook.now,
            committed: TraceBook.now,
            ended: TraceBook.now
        )
        book.delivered(kept, user: "carol", device: 2, started: TraceBook.now)
        #expect(book.waiting == 0)
        let spans = tracer.recorded.popFinishedSpans()
        #expect(
            spans.map(\.operationName).sorted() == [
                "courier.commit", "courier.deliver", "courier.deliver", "courier.send",
            ]
        )
        #expect(Set(spans.map(\.traceID)).count == 1)
    }

    @Test(
        "deliveries waiting for a send no one tells of (another node's dropped trace) are let go after maxWait, and by count with their message"
    )
    func waitingLetGo() {
        let tracer = InMemoryTracer()
        let book = TraceBook(tracer: tracer, node: "n2")
        let start = TraceBook.now
        let old = TraceBook.Key(sender: "alice", to: .group("小组"), seq: 1)
        let young = TraceBook.Key(sender: "alice", to: .group("小组"), seq: 2)
        book.delivered(old, user: "bob", device: 1, started: start, ended: start)
        book.delivered(old, user: "carol", device: 1, started: start, ended: start + 1)
        #expect(book.waiting == 2)
        // Past the wait: the old message's deliveries go, the young one's waits.
        book.delivered(young, user: "bob", device: 1, started: start, ended: start + TraceBook.maxWait + 2)
        #expect(book.waiting == 1)
        book.remote(old, parent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        #expect(tracer.popFinishedSpans().isEmpty, "the old message's deliveries were let go")

        // A big group's deliveries count one by one; past the bound the oldest message goes, with all of its own.
        let big = TraceBook.Key(sender: "dave", to: .group("大群 🎉"), seq: 9)
        let later = start + TraceBook.maxWait + 3
        for device in 0..<Int64(TraceBook.maxEarly - 1) {
            book.delivered(big, user: "member-\(device)", device: device, started: later, ended: later)
        }
        #expect(book.waiting == TraceBook.maxEarly)
        let fresh = (1...2).map { TraceBook.Key(sender: "erin", to: .user("frank"), seq: $0) }
        book.delivered(fresh[0], user: "frank", device: 1, started: later, ended: later)
        #expect(book.waiting == TraceBook.maxEarly, "the young message's one delivery went for it")
        book.delivered(fresh[1], user: "frank", device: 1, started: later, ended: later)
        #expect(book.waiting == 2, "then the big group's message went, all of its deliveries together")
        #expect(tracer.popFinishedSpans().isEmpty)
    }
}

/// An in-memory tracer whose `courier.send` spans are not recorded while `dropping` (as a sampler's dropped traces
/// are not): every other span is the in-memory tracer's.
final class SamplingTracer: Tracer {
    let recorded = InMemoryTracer()
    let dropping = Mutex(false)

    func startSpan<Instant: TracerInstant>(
        _ operationName: String,
        context: @autoclosure () -> ServiceContext,
        ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant,
        function: String,
        file fileID: String,
        line: UInt
    ) -> SampledSpan {
        if operationName == "courier.send", self.dropping.withLock({ $0 }) {
            return .dropped(NoOpTracer.NoOpSpan(context: context()))
        }
        return .kept(
            self.recorded.startSpan(
                operationName,
                context: context(),
                ofKind: kind,
                at: instant(),
                function: function,
                file: fileID,
                line: line
            )
        )
    }

    func forceFlush() {}

    func inject<Carrier, Inject: Injector>(
        _ context: ServiceContext,
        into carrier: inout Carrier,
        using injector: Inject
    ) where Inject.Carrier == Carrier {
        self.recorded.inject(context, into: &carrier, using: injector)
    }

    func extract<Carrier, Extract: Extractor>(
        _ carrier: Carrier,
        into context: inout ServiceContext,
        using extractor: Extract
    ) where Extract.Carrier == Carrier {
        self.recorded.extract(carrier, into: &context, using: extractor)
    }
}

/// A span of ``SamplingTracer``'s: recorded, or dropped.
enum SampledSpan: Span {
    case kept(InMemorySpan)
    case dropped(NoOpTracer.NoOpSpan)

    private var span: any Span {
        switch self {
        case .kept(let span): span
        case .dropped(let span): span
        }
    }

    var context: ServiceContext { self.span.context }
    var operationName: String {
        get { self.span.operationName }
        nonmutating set { self.span.operationName = newValue }
    }
    var attributes: SpanAttributes {
        get { self.span.attributes }
        nonmutating set { self.span.attributes = newValue }
    }
    var isRecording: Bool { self.span.isRecording }
    func setStatus(_ status: SpanStatus) { self.span.setStatus(status) }
    func addEvent(_ event: SpanEvent) { self.span.addEvent(event) }
    func addLink(_ link: SpanLink) { self.span.addLink(link) }
    func recordError<Instant: TracerInstant>(
        _ error: any Error,
        attributes: SpanAttributes,
        at instant: @autoclosure () -> Instant
    ) {
        self.span.recordError(error, attributes: attributes, at: instant())
    }
    func end<Instant: TracerInstant>(at instant: @autoclosure () -> Instant) { self.span.end(at: instant()) }
}
