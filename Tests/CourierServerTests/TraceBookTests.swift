import CourierStore
import InMemoryTracing
import Testing

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
}
