import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import Testing

/// Answers that list things are bounded by bytes as well as by count: none may come near the frame limit and close
/// the connection.
@Suite("Answers bounded by bytes", .serialized)
struct AnswerSizeTests {
    @Test("17 texts of 64 KiB: the default history page is cut to fit, and paging gets each message once")
    func largeHistory() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            for index in 0..<17 {
                let text = String(index) + String(repeating: "x", count: 64 * 1024 - 8)
                #expect(try await alice.sendText(text, to: .user("bob")).ack != nil)
            }
            let (bob, _) = try await NativeTestClient.login(fixture, "bob")
            var seen: [UInt64] = []
            var before: UInt64 = 0
            var pages = 0
            while true {
                var request = ClientEnvelope()
                request.history.conversation.user = "alice"
                request.history.beforeSeq = before
                let id = try await bob.send(request)
                let answer = try await bob.expect { $0.requestID == id ? $0 : nil }
                guard case .history(let page)? = answer.body else {
                    Issue.record("\(answer)")
                    return
                }
                pages += 1
                #expect(try (answer.serializedBytes() as [UInt8]).count <= 512 * 1024 + 1024)
                seen += page.messages.map(\.seq)
                guard page.more, let oldest = page.messages.last?.seq else { break }
                before = oldest
            }
            #expect(pages > 1, "one page of 17 x 64 KiB would be over 1 MiB")
            #expect(seen == (1...17).reversed().map { UInt64($0) })
            await alice.close()
            await bob.close()
        }
    }

    @Test("a large group's receipt marks fill only the room the messages leave, the furthest read first")
    func manyReceiptMarks() async throws {
        try await ServerFixture.with { fixture in
            let names = (0..<40).map { "reader\($0)" }
            try await fixture.user("alice")
            for name in names { try await fixture.user(name) }
            try await fixture.store.createGroup(name: "crowd", owner: "alice", members: names, nowMs: 0)
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            for index in 1...3 { #expect(try await alice.sendText("第\(index)条", to: .group("crowd")).ack != nil) }
            // reader0 reads one message, reader1 two, and so on round the three.
            let ids = try await fixture.store.users()
            let reads: [WriteRequest] = ids.filter { $0.name.hasPrefix("reader") }.map { user in
                let index = Int(user.name.dropFirst("reader".count))!
                return .markRead(user: user.id, conversation: .group("crowd"), upToSeq: UInt64(index % 3 + 1))
            }
            _ = try await fixture.store.apply(reads, nowMs: 0)
            var request = ClientEnvelope()
            request.history.conversation.group = "crowd"
            let id = try await alice.send(request)
            let answer = try await alice.expect { $0.requestID == id ? $0 : nil }
            guard case .history(let page)? = answer.body else {
                Issue.record("\(answer)")
                return
            }
            #expect(try (answer.serializedBytes() as [UInt8]).count <= 600)
            #expect(page.messages.map(\.seq) == [3, 2, 1])
            #expect(page.receipts.count > 3 && page.receipts.count < 40, "\(page.receipts.count) marks")
            let reads3 = page.receipts.prefix { $0.readSeq == 3 }.count
            #expect(reads3 == min(13, page.receipts.count), "the furthest read come first: \(page.receipts)")
            await alice.close()
        } configure: {
            $0.limits.maxAnswerBytes = 500
        }
    }

    @Test("unread counts of many conversations come in pages; the SDK's way gets them all, each once")
    func manyConversations() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            for index in 0..<60 {
                try await fixture.store.createGroup(name: "g\(index)", owner: "alice", members: [], nowMs: 0)
            }
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            var groups: [String] = []
            var offset: UInt32 = 0
            var pages = 0
            while true {
                var request = ClientEnvelope()
                request.unread.offset = offset
                let id = try await alice.send(request)
                let answer = try await alice.expect { $0.requestID == id ? $0 : nil }
                guard case .unread(let page)? = answer.body else {
                    Issue.record("\(answer)")
                    return
                }
                pages += 1
                #expect(try (answer.serializedBytes() as [UInt8]).count <= 600)
                groups += page.entries.map(\.conversation.group)
                guard page.more else { break }
                offset = page.nextOffset
            }
            #expect(pages > 1)
            #expect(Set(groups) == Set((0..<60).map { "g\($0)" }) && groups.count == 60)
            await alice.close()
        } configure: {
            $0.limits.maxAnswerBytes = 500
        }
    }
}
