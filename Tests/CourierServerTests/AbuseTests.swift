import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierStoreSQLite
import CourierTesting
import Foundation
import Testing

/// What one user can do to others: type at strangers, put them in groups, flood a large group.
@Suite("One user against the others", .serialized)
struct AbuseTests {
    @Test(
        "a stranger's typing reaches the recipient (who sees it only with the conversation open) and no presence comes with it; a stranger cannot add anyone to a group over the protocol"
    )
    func strangers() async throws {
        try await ServerFixture.with { fixture in
            for name in ["alice", "mallory"] { try await fixture.user(name) }
            let (alice, _) = try await NativeTestClient.login(fixture, "alice", ephemeral: true)
            let (mallory, _) = try await NativeTestClient.login(fixture, "mallory", ephemeral: true)
            var typing = ClientEnvelope()
            typing.typing.conversation.user = "alice"
            typing.typing.typing = true
            let typed = try await mallory.send(typing)
            _ = try await mallory.expect { $0.requestID == typed ? $0 : nil }
            var create = ClientEnvelope()
            create.manageGroup.group = "trap"
            create.manageGroup.create.users = ["alice"]
            let created = try await mallory.send(create)
            let refused = try await mallory.expect { $0.requestID == created ? $0 : nil }
            #expect(refused.failure?.code == ErrorCodes.notContact)
            // Round three: typing before the first message of a new conversation shows (it tells only what the
            // typist chose to show). No presence and no group come before the message, to either of them.
            let notice = try await alice.expect("mallory's typing") { envelope -> Courier_V1_TypingNotice? in
                if case .presence? = envelope.body { Issue.record("alice was told a stranger's presence") }
                if case .typing(let notice)? = envelope.body { return notice }
                return nil
            }
            #expect(notice.user == "mallory" && notice.typing && notice.conversation.user == "mallory")
            #expect(try await mallory.sendText("hi alice", to: .user("alice")).ack != nil)
            let first = try await alice.expect("the first notice or message") { envelope -> ServerEnvelope? in
                switch envelope.body {
                case .presence?: envelope
                case .events(let events)? where !events.events.isEmpty: envelope
                default: nil
                }
            }
            guard case .events(let events)? = first.body else {
                Issue.record("alice heard a stranger's presence before any message: \(first)")
                return
            }
            #expect(events.events.first?.message.body.text == "hi alice")

            await alice.close()
            await mallory.close()
        }
    }

    @Test("a flood to a large group is paced by the sender's fan-out budget, across its connections")
    func groupFlood() async throws {
        try await ServerFixture.with { fixture in
            let members = (0..<9).map { "m\($0)" }
            for name in ["alice", "bob", "carol"] + members { try await fixture.user(name) }
            try await fixture.store.createGroup(name: "big", owner: "alice", members: members, nowMs: 0)
            let (first, _) = try await NativeTestClient.login(fixture, "alice")
            let (second, _) = try await NativeTestClient.login(fixture, "alice")
            let (bob, _) = try await NativeTestClient.login(fixture, "bob")
            let (carol, _) = try await NativeTestClient.login(fixture, "carol")
            // 30 messages to 10 members: 300 deliveries, at 100 a second after a burst of 100.
            let start = ContinuousClock.now
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (client, prefix) in [(first, "a"), (second, "b")] {
                    group.addTask {
                        for index in 0..<15 {
                            let answer = try await client.sendText("flood \(prefix)\(index)", to: .group("big"))
                            #expect(answer.ack != nil)
                        }
                    }
                }
                try await group.waitForAll()
            }
            let elapsed = ContinuousClock.now - start
            print("groupFlood: 300 deliveries in \(elapsed)")
            #expect(elapsed >= .milliseconds(1_500), "the budget paid back 200 deliveries at 100/s")
            // Others were not held: bob and carol talk as before (and they were never paced themselves).
            #expect(try await bob.sendText("unaffected", to: .user("carol")).ack != nil)
            #expect(try await carol.messages(1).map(\.body.text) == ["unaffected"])
            for client in [first, second, bob, carol] { await client.close() }
        } configure: {
            $0.limits.fanoutPerSecond = 100
            $0.limits.fanoutBurst = 100
        }
    }

    @Test("sends in flight count against the fan-out budget before they commit: a flood is held while commits lag")
    func pipelinedFlood() async throws {
        try await ServerFixture.with { fixture in
            let members = (0..<9).map { "m\($0)" }
            for name in ["alice"] + members { try await fixture.user(name) }
            try await fixture.store.createGroup(name: "big", owner: "alice", members: members, nowMs: 0)
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            // One message teaches the connection what a send to the group costs: 10 deliveries of the 100.
            #expect(try await alice.sendText("first", to: .group("big")).ack != nil)
            // Commits lag (another process holds the database's write lock for a second and a half), as they do
            // under a flood; meanwhile 25 sends arrive at once. Counted only after their commit, they would all be
            // taken in and committed together when the lock goes.
            let database = fixture.folder.appendingPathComponent(SQLiteStore.databaseFileName).path
            let marker = fixture.folder.appendingPathComponent("locked").path
            let input = Pipe()
            let lock = try ChildProcess(
                executable: "/usr/bin/env",
                arguments: ["sqlite3", database],
                standardInput: .pipe(input),
                standardOutput: .null
            )
            input.fileHandleForWriting.write(
                // (`.timeout`: the server may be writing at that moment; the lock is waited for, not refused.)
                Data(".timeout 10000\nBEGIN IMMEDIATE;\n.shell touch \(marker)\n.shell sleep 1.5\nCOMMIT;\n".utf8)
            )
            try input.fileHandleForWriting.close()
            let deadline = ContinuousClock.now + Patience.reply
            while !FileManager.default.fileExists(atPath: marker), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            let floodStart = ContinuousClock.now
            var ids: Set<UInt64> = []
            for index in 0..<25 {
                var envelope = ClientEnvelope()
                envelope.send.to.group = "big"
                envelope.send.body.text = "pipelined \(index)"
                ids.insert(try await alice.send(envelope))
            }
            #expect(await lock.exited() == 0)
            // From the lock's release: what was taken in is committed and acknowledged (at least one, waited for),
            // until acknowledgements stop coming for a second.
            let pipelined = ids
            var acked = 0
            var wait = Patience.reply
            while (try? await alice.expect(timeout: wait, "an ack") { pipelined.contains($0.requestID) ? $0 : nil })
                != nil
            {
                acked += 1
                wait = .seconds(1)
            }
            // The budget's 90 deliveries (9 sends, a 10th into debt), then one send per 10 s for as long as the flood
            // has lasted, and two of slack: the rate is low so that a slow machine cannot make room for all 25.
            // Counted after their commit instead, all 25 would be taken in.
            let elapsed = Double((ContinuousClock.now - floodStart).wholeMilliseconds) / 1000
            let allowed = 10 + Int(elapsed / 10) + 2
            print(
                "pipelinedFlood: \(acked) of 25 pipelined sends acknowledged after the lock "
                    + "(at most \(allowed) in \(elapsed) s)"
            )
            #expect(allowed < 25, "the machine was too slow for the flood to tell anything")
            #expect(acked >= 1 && acked <= allowed, "\(acked) sends acknowledged")
            await alice.close()
        } configure: {
            $0.limits.fanoutPerSecond = 1
            $0.limits.fanoutBurst = 100
        }
    }

    @Test("a user's uploads in progress are capped; finishing one frees a place; other users are not affected")
    func uploadsInProgress() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let files = (0..<5).map { MediaTests.randomBytes(10_000, "uploadsInProgress-\($0)") }
            var (alice, _) = try await NativeTestClient.login(fixture, "alice")
            // Three uploads started and left (a client that went away mid-file).
            for index in 0..<3 {
                guard case .cut = try await alice.upload(files[index], stream: UInt32(2 * index + 1), upTo: 0) else {
                    Issue.record("upload \(index) did not start")
                    return
                }
            }
            let refused = try await alice.upload(files[3], stream: 7, upTo: 0)
            #expect(refused.error?.code == ErrorCodes.quotaExceeded, "\(refused)")
            #expect(refused.error?.message.contains("in progress") == true)
            let (bob, _) = try await NativeTestClient.login(fixture, "bob")
            #expect(try await bob.upload(files[4], stream: 1).done != nil)
            // They still count on another connection; resuming one of them is allowed, and finishing it frees a place.
            await alice.close()
            (alice, _) = try await NativeTestClient.login(fixture, "alice")
            #expect(try await alice.upload(files[3], stream: 1, upTo: 0).error?.code == ErrorCodes.quotaExceeded)
            #expect(try await alice.upload(files[0], stream: 3).done != nil)
            guard case .cut = try await alice.upload(files[3], stream: 5, upTo: 0) else {
                Issue.record("no place after an upload finished")
                return
            }
            await alice.close()
            await bob.close()
        } configure: {
            $0.media.maxUploadsPerUser = 3
        }
    }

    @Test("an upload finished short keeps its place among the user's uploads until it is completed")
    func shortUploadKeepsItsPlace() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            let files = (0..<2).map { MediaTests.randomBytes(10_000, "shortUploadKeepsItsPlace-\($0)") }
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            // Half the file, then the end of the stream: refused, but its bytes stay on disk to be resumed.
            let short = try await alice.upload(files[0], stream: 1, upTo: 5_000, endingThere: true)
            #expect(short.error?.code == ErrorCodes.mediaMismatch, "\(short)")
            let refused = try await alice.upload(files[1], stream: 3, upTo: 0)
            #expect(refused.error?.code == ErrorCodes.quotaExceeded, "\(refused)")
            // Resumed where it stopped and completed, it frees the place.
            guard case .done(_, let startedAt) = try await alice.upload(files[0], stream: 5) else {
                Issue.record("the short upload could not be resumed")
                return
            }
            #expect(startedAt == 5_000)
            #expect(try await alice.upload(files[1], stream: 7).done != nil)
            await alice.close()
        } configure: {
            $0.media.maxUploadsPerUser = 1
        }
    }
}
