import CourierProtocol
import CourierServerTesting
import CourierStore
import CourierTesting
import Foundation
import Synchronization
import Testing

@Suite("Blocking over the protocol: what a blocked user's connections and the blocker's see")
struct BlockTests {
    @Test(
        "a blocked user's direct message is acknowledged and never reaches the blocker; neither hears the other's typing or presence; a group's messages reach both"
    )
    func blockOverTheProtocol() async throws {
        try await ServerFixture.with { fixture in
            for name in ["alice", "bob", "carol"] { try await fixture.user(name) }
            try await fixture.store.createGroup(name: "club", owner: "carol", members: ["alice", "bob"], nowMs: 0)
            let (bob, _) = try await NativeTestClient.login(fixture, "bob", ephemeral: true)
            let (carol, _) = try await NativeTestClient.login(fixture, "carol", ephemeral: true)
            let (alice, _) = try await NativeTestClient.login(fixture, "alice", ephemeral: true)
            _ = try await bob.expect("alice online") { envelope -> Bool? in
                if case .presence(let notice)? = envelope.body, notice.user == "alice", notice.online {
                    true
                } else {
                    nil
                }
            }
            let blocked = try await alice.request {
                $0.block.user = "bob"
                $0.block.blocked = true
            }
            #expect(blocked.body.isDone)
            let list = try await alice.request { $0.blocks = Courier_V1_BlocksRequest() }
            guard case .blocks(let blocks)? = list.body else {
                Issue.record("no block list: \(list)")
                return
            }
            #expect(blocks.users.map(\.user) == ["bob"])

            // Bob's message is committed: acknowledged as any other.
            let sent = try await bob.request {
                $0.send.id = "withheld-1"
                $0.send.to.user = "alice"
                $0.send.body.text = "你看得到吗 withheld"
            }
            guard case .sendAck(let ack)? = sent.body else {
                Issue.record("no ack: \(sent)")
                return
            }
            #expect(ack.seq > 0 && !ack.duplicate)
            // Alice types in the group: carol hears it, bob does not (the typing notice goes before the message
            // that follows it).
            #expect(
                try await alice.request {
                    $0.typing.conversation.group = "club"
                    $0.typing.typing = true
                }.body.isDone
            )
            _ = try await carol.expect("alice typing") { envelope -> Bool? in
                if case .typing(let notice)? = envelope.body, notice.user == "alice" { true } else { nil }
            }
            _ = try await alice.request {
                $0.send.id = "group-1"
                $0.send.to.group = "club"
                $0.send.body.text = "群里的话"
            }
            let heardByBob = Mutex<[ServerEnvelope]>([])
            _ = try await bob.expect("alice's group message") { envelope -> Bool? in
                heardByBob.withLock { $0.append(envelope) }
                guard case .events(let events)? = envelope.body else { return nil }
                return events.events.contains { $0.message.id == "group-1" } ? true : nil
            }
            // The blocker gets the blocked user's group messages too.
            _ = try await bob.request {
                $0.send.id = "group-2"
                $0.send.to.group = "club"
                $0.send.body.text = "bob in the group"
            }
            let heardByAlice = Mutex<[ServerEnvelope]>([])
            _ = try await alice.expect("bob's group message") { envelope -> Bool? in
                heardByAlice.withLock { $0.append(envelope) }
                guard case .events(let events)? = envelope.body else { return nil }
                return events.events.contains { $0.message.id == "group-2" } ? true : nil
            }
            // Alice goes: carol is told, bob is not.
            await alice.close()
            let aliceClosing = try await alice.expectClose()
            heardByAlice.withLock { $0 += aliceClosing }
            _ = try await carol.expect("alice offline") { envelope -> Bool? in
                if case .presence(let notice)? = envelope.body, notice.user == "alice", !notice.online {
                    true
                } else {
                    nil
                }
            }
            await bob.close()
            let bobClosing = try await bob.expectClose()
            heardByBob.withLock { $0 += bobClosing }
            #expect(
                !heardByBob.withLock { $0 }.contains {
                    switch $0.body {
                    case .typing(let notice)?: notice.user == "alice"
                    case .presence(let notice)?: notice.user == "alice" && !notice.online
                    default: false
                    }
                }
            )
            #expect(
                !heardByAlice.withLock { $0 }.contains {
                    guard case .events(let events)? = $0.body else { return false }
                    return events.events.contains { $0.message.id == "withheld-1" }
                }
            )
            await carol.close()
        }
    }

    @Test(
        "a block says whether a name exists, so it counts as a lookup: unblocking no one is done, blocking no one unknown-user, past the allowance rate-limited"
    )
    func blocksCountAsLookups() async throws {
        try await ServerFixture.with { fixture in
            for name in ["alice", "bob"] { try await fixture.user(name) }
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            func block(_ user: String, _ blocked: Bool) async throws -> ServerEnvelope {
                try await alice.request {
                    $0.block.user = user
                    $0.block.blocked = blocked
                }
            }
            #expect(try await block("bob", true).body.isDone)
            #expect(try await block("nobody", false).body.isDone)
            #expect(try await block("nobody", true).failure?.code == ErrorCodes.unknownUser)
            // The allowance (3) is spent: the next block, and a lookup, wait.
            let limited = try await block("bob", false)
            #expect(limited.failure?.code == ErrorCodes.rateLimited && (limited.failure?.retryAfterMs ?? 0) > 0)
            #expect(try await alice.request { $0.findUser.name = "bob" }.failure?.code == ErrorCodes.rateLimited)
            await alice.close()
        } configure: {
            $0.accounts.maxLookupsPerUser = 3
        }
    }
}
