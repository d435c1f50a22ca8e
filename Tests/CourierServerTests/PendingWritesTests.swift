import CourierStore
import Testing

@testable import CourierServer

@Suite("A connection's writes in the group commit, as values (no channel, no store)")
struct PendingWritesTests {
    static let user = UserID(rawValue: 1)
    static let device = DeviceID(rawValue: 2)

    static func ack(_ cursor: UInt64) -> WriteRequest {
        .ack(user: Self.user, device: Self.device, cursor: cursor)
    }

    static func markRead(_ upTo: UInt64) -> WriteRequest {
        .markRead(user: Self.user, conversation: .user("bob"), upToSeq: upTo)
    }

    static func cursor(_ request: WriteRequest?) -> UInt64? {
        if case .ack(_, _, let cursor)? = request { cursor } else { nil }
    }

    /// Sends what `admit` returns to the "commit" (records it), as the handler does.
    static func admit(_ request: WriteRequest, into writes: inout PendingWrites) -> [(UInt64, WriteRequest, Bool)] {
        writes.admit(request).map { admitted in
            let serial = writes.append(
                admitted.request,
                requestID: 0,
                answers: admitted.isRequest,
                reservedFanout: 0,
                isRequest: admitted.isRequest
            )
            return (serial, admitted.request, admitted.isRequest)
        }
    }

    @Test(
        "acknowledgements that come while one is in the commit merge into one, the latest cursor, sent when it returns"
    )
    func acknowledgementsMerge() {
        var writes = PendingWrites()
        let first = Self.admit(Self.ack(5), into: &writes)
        #expect(first.count == 1)
        #expect(Self.cursor(first[0].1) == 5)
        // Three more while it is in the commit: none goes, the latest waits (an older one does not replace it).
        #expect(Self.admit(Self.ack(7), into: &writes).isEmpty)
        #expect(Self.admit(Self.ack(9), into: &writes).isEmpty)
        #expect(Self.admit(Self.ack(8), into: &writes).isEmpty)
        writes.record([(first[0].0, .success(.done))])
        let answered = writes.popAnswered()
        #expect(answered?.write.isRequest == true)
        #expect(Self.cursor(answered?.next) == 9)
        #expect(writes.popAnswered() == nil)
        // The merged one is in the commit now: another acknowledgement waits for it.
        let merged = writes.append(Self.ack(9), requestID: 0, answers: false, reservedFanout: 0, isRequest: false)
        #expect(Self.admit(Self.ack(12), into: &writes).isEmpty)
        writes.record([(merged, .success(.done))])
        let second = writes.popAnswered()
        #expect(second?.write.isRequest == false)
        #expect(Self.cursor(second?.next) == 12)
    }

    @Test("a waiting acknowledgement goes before any other write, so receipts keep their order")
    func waitingAcknowledgementGoesFirst() {
        var writes = PendingWrites()
        _ = Self.admit(Self.ack(5), into: &writes)
        #expect(Self.admit(Self.ack(6), into: &writes).isEmpty)
        let admitted = Self.admit(Self.markRead(6), into: &writes)
        #expect(admitted.count == 2)
        #expect(Self.cursor(admitted[0].1) == 6 && admitted[0].2 == false)
        if case .markRead = admitted[1].1 {} else { Issue.record("the read marker goes second") }
        #expect(admitted[1].2 == true)
        #expect(writes.takeMergedAck() == nil)
        // Two acknowledgements are in the commit now: another waits until both are back, not just the first.
        #expect(Self.admit(Self.ack(7), into: &writes).isEmpty)
        writes.record([(0, .success(.done))])
        #expect(writes.popAnswered().map { Self.cursor($0.next) } == .some(nil))
        writes.record([(1, .success(.done))])
        #expect(Self.cursor(writes.popAnswered()?.next) == 7)
    }

    @Test("answers come in the order the requests came, whatever order the outcomes come back in")
    func answersInOrder() {
        var writes = PendingWrites()
        var serials: [UInt64] = []
        for cursor in 1...5 { serials += Self.admit(Self.markRead(UInt64(cursor)), into: &writes).map(\.0) }
        writes.record([(serials[3], .success(.done)), (serials[1], .success(.done))])
        #expect(writes.popAnswered() == nil)
        writes.record([(serials[0], .success(.done))])
        var order: [UInt64] = []
        while let answered = writes.popAnswered() { order.append(answered.write.serial) }
        #expect(order == Array(serials[0...1]))
        writes.record([(serials[4], .success(.done)), (serials[2], .success(.done))])
        while let answered = writes.popAnswered() { order.append(answered.write.serial) }
        #expect(order == serials)
        #expect(writes.isEmpty)
        // An outcome for no write in flight is ignored.
        writes.record([(99, .success(.done))])
        #expect(writes.popAnswered() == nil)
    }

    @Test("acknowledged on write: one acknowledgement in the commit per connection; the next carries the latest cursor")
    func deliveryAcknowledgesOneAtATime() {
        let handle = ConnectionHandle(id: 1, user: Self.user, device: Self.device, wantsEphemeral: false)
        var delivery = SessionDelivery(
            handle: handle,
            start: 10,
            latest: 30,
            ackedOnWrite: true
        )
        let first = delivery.wrote(upTo: 20)
        #expect(first.reachesLatest == false && first.acknowledge == 20)
        let second = delivery.wrote(upTo: 30)
        #expect(second.reachesLatest == true && second.acknowledge == nil)
        #expect(delivery.wrote(upTo: 35).acknowledge == nil)
        #expect(delivery.wrote(upTo: 40).reachesLatest == false)
        #expect(delivery.acknowledged() == 40)
        #expect(delivery.ackInFlight)
        #expect(delivery.acknowledged() == nil)
        #expect(!delivery.ackInFlight)
        #expect(delivery.wrote(upTo: 41).acknowledge == 41)
    }
}
