import CourierClient
import CourierStore
import Synchronization
import Testing

/// The burst the crash tests send through servers that are killed meanwhile: `perSender` texts from alice to bob
/// ("a0", "a1", …) and as many from carol to the group trio ("c0", …), which bob reads.
enum SendBurst {
    /// What one client saw: the ids acknowledged to it, every message it received, its failed sends, and whether
    /// it has caught up.
    final class Tally: Sendable {
        let acked = Mutex<[String: UInt64]>([:])
        let received = Mutex<[String: Int]>([:])
        let failures = Mutex<[String]>([])
        let caughtUp = Mutex(false)

        /// Counts the client's events until its stream ends.
        func follow(_ client: CourierClient) async {
            for await event in client.events {
                switch event {
                case .sent(let id, _, let seq, _): self.acked.withLock { $0[id] = seq }
                case .message(let message): self.received.withLock { $0[message.id, default: 0] += 1 }
                case .sendFailed(let id, let code, _): self.failures.withLock { $0.append("\(id): \(code)") }
                case .caughtUp: self.caughtUp.withLock { $0 = true }
                default: break
                }
            }
        }
    }

    /// Every acknowledged message is stored once (read from `store`), every queued one was acknowledged, none
    /// failed, and bob received each once, stored gap-free and in each sender's order.
    static func check(
        store: any CourierDatabase,
        perSender: Int,
        aliceIDs: [String],
        carolIDs: [String],
        alice: Tally,
        bob: Tally,
        carol: Tally,
        bobsClient: CourierClient
    ) async throws {
        let bobID = try #require(try await store.user(named: "bob")).id
        var direct: [String] = []
        var before: UInt64 = 0
        repeat {
            let page = try await store.history(for: bobID, in: .user("alice"), beforeSeq: before, limit: 1000)
            direct += page.messages.map(\.id)
            before = page.messages.last?.seq ?? 0
            if !page.more { break }
        } while true
        #expect(direct.count == perSender && Set(direct) == Set(aliceIDs))
        let group = try await store.history(for: bobID, in: .group("trio"), beforeSeq: 0, limit: 200)
        #expect(group.messages.first?.seq == UInt64(perSender), "the group holds exactly \(perSender) messages")
        #expect(Set(alice.acked.withLock { Array($0.keys) }) == Set(aliceIDs))
        #expect(Set(carol.acked.withLock { Array($0.keys) }) == Set(carolIDs))
        #expect(alice.failures.withLock { $0 }.isEmpty && carol.failures.withLock { $0 }.isEmpty)
        // bob received each message exactly once, and his device stored them gap-free.
        let received = bob.received.withLock { $0 }
        #expect(Set(received.keys) == Set(aliceIDs + carolIDs))
        #expect(received.values.allSatisfy { $0 == 1 })
        #expect(try await bobsClient.storedMessages(in: .user("alice")).map(\.seq) == Array(1...UInt64(perSender)))
        #expect(try await bobsClient.storedMessages(in: .group("trio")).map(\.seq) == Array(1...UInt64(perSender)))
        // Messages from one sender keep their order.
        let texts = try await bobsClient.storedMessages(in: .user("alice")).map(\.text)
        let firstOutOfOrder = texts.indices.first { texts[$0] != "a\($0)" }
        #expect(
            firstOutOfOrder == nil,
            "alice's messages out of order from \(firstOutOfOrder ?? 0): \(texts.dropFirst(max(0, (firstOutOfOrder ?? 0) - 2)).prefix(12))"
        )
    }
}
