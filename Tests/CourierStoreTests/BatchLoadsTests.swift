import CourierStore
import Testing

/// A group commit reads its rows in rounds the whole batch shares (``GroupCommit/Run``): the requests declare what
/// they read, wave after wave, and the rules find it loaded instead of stopping at each row they lack.
@Suite("A group commit's reads: a few rounds for the whole batch, whatever its size")
struct BatchLoadsTests {
    static let pairs = 24

    @Test(
        "sends, answers and acknowledgements of 24 conversations load in a few waves; a rule asks only for a new conversation",
        arguments: StoreKind.allCases
    )
    func wavesForTheBatch(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            var senders: [UserID] = []
            var readers: [UserID] = []
            var phones: [DeviceID] = []
            for index in 0..<Self.pairs {
                let ids = try await fixture.users("sender\(index)", "reader\(index)")
                senders.append(ids["sender\(index)"]!)
                readers.append(ids["reader\(index)"]!)
                let login = try await store.login(
                    user: "reader\(index)",
                    password: "pw-reader\(index)",
                    deviceName: "📱",
                    nowMs: StoreFixture.start
                )
                phones.append(login.device.id)
            }
            func send(_ index: Int, _ id: String, reply: Bool = false) -> WriteRequest {
                let (from, to) =
                    reply ? (readers[index], "sender\(index)") : (senders[index], "reader\(index)")
                return .send(.init(sender: from, id: id, to: .user(to), body: Array("你好 \(id) 👋 مرحبا".utf8)))
            }

            // First sends: each makes its conversation, the one row no declaration may read ahead (it is written).
            let first = try await store.apply((0..<Self.pairs).map { send($0, "m1-\($0)") }, nowMs: StoreFixture.start)
            #expect(first.outcomes.allSatisfy { if case .sent(let receipt) = $0 { receipt.seq == 1 } else { false } })
            #expect(first.loads.misses == Self.pairs, "\(first.loads)")
            #expect(first.loads.waves <= GroupCommit.Run.maxWaves, "\(first.loads)")

            // Second sends, the answers and a resend of a first: every row declared, none asked for by a rule.
            let second = try await store.apply(
                (0..<Self.pairs).flatMap { [send($0, "m2-\($0)"), send($0, "r1-\($0)", reply: true)] }
                    + [send(0, "m1-0")],
                nowMs: StoreFixture.start
            )
            let seqs = second.outcomes.map { outcome -> UInt64 in
                if case .sent(let receipt) = outcome { receipt.seq } else { 0 }
            }
            #expect(seqs == Array((0..<Self.pairs).map { _ in [UInt64(2), 3] }.joined()) + [1])
            if case .sent(let resend) = second.outcomes.last { #expect(resend.duplicate) }
            #expect(second.loads.misses == 0, "\(second.loads)")
            #expect((1...GroupCommit.Run.maxWaves).contains(second.loads.waves), "\(second.loads)")

            // Every reader's phone acknowledges its log: the deliveries, their conversations and their senders are
            // declared too; each sender hears a delivered receipt.
            // The first reader's phone acknowledges twice in the batch (up to its first event, then all): the second
            // starts where the first left it, in the declaration as in the rule.
            let firstEvent = try #require(try await fixture.log(readers[0]).first?.cursor)
            var acks: [WriteRequest] = [.ack(user: readers[0], device: phones[0], cursor: firstEvent)]
            for index in 0..<Self.pairs {
                let cursor = try await store.logCursor(of: readers[index])
                acks.append(.ack(user: readers[index], device: phones[index], cursor: cursor))
            }
            var before: [UInt64] = []
            for sender in senders { before.append(try await store.logCursor(of: sender)) }
            let acked = try await store.apply(acks, nowMs: StoreFixture.start)
            #expect(acked.loads.misses == 0, "\(acked.loads)")
            #expect((1...GroupCommit.Run.maxWaves).contains(acked.loads.waves), "\(acked.loads)")
            for index in 0..<Self.pairs {
                let receipts = try await fixture.log(senders[index], after: before[index]).compactMap { event in
                    guard case .receipt(_, let who, .delivered, let upTo) = event.kind else { return nil as UInt64? }
                    #expect(who == "reader\(index)")
                    return upTo
                }
                #expect(receipts == (index == 0 ? [1, 2] : [2]), "sender \(index)")
            }
        }
    }
}
