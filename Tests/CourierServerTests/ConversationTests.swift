import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import Testing

@Suite("Groups, devices, receipts, recall, typing and presence", .serialized)
struct ConversationTests {
    @Test("a group of 5 made over the protocol; 2 members offline sync the messages later")
    func groupWithOfflineMembers() async throws {
        try await ServerFixture.with { fixture in
            let names = ["alice", "bob", "carol", "dave", "erin"]
            for name in names { try await fixture.user(name) }
            // Only contacts can be put in a group by its owner.
            for name in names.dropFirst() { try await fixture.contacts("alice", name) }
            var clients: [String: NativeTestClient] = [:]
            var tokens: [String: String] = [:]
            for name in names {
                let (client, welcome) = try await NativeTestClient.login(fixture, name)
                clients[name] = client
                tokens[name] = welcome.token
            }
            let created = try await clients["alice"]!.request {
                $0.manageGroup.group = "five"
                $0.manageGroup.create.users = ["bob", "carol", "dave", "erin"]
            }
            #expect(created.body.isDone, "\(created)")
            // dave and erin go offline.
            for name in ["dave", "erin"] { await clients[name]!.close() }

            _ = try await clients["alice"]!.sendText("one", to: .group("five"))
            _ = try await clients["bob"]!.sendText("two", to: .group("five"))
            _ = try await clients["carol"]!.sendText("three", to: .group("five"))
            // Each sender's connection gets the others' messages, not its own (it has their acks).
            let expected = ["alice": ["two", "three"], "bob": ["one", "three"], "carol": ["one", "two"]]
            for (name, texts) in expected {
                #expect(try await clients[name]!.messages(2).map(\.body.text) == texts, "\(name)")
            }
            for name in ["dave", "erin"] {
                let (back, _) = try await NativeTestClient.resume(fixture, token: tokens[name]!)
                let messages = try await back.messages(3)
                #expect(messages.map(\.body.text) == ["one", "two", "three"], "\(name)")
                #expect(messages.map(\.seq) == [1, 2, 3] && messages.allSatisfy { $0.conversation.group == "five" })
                await back.close()
            }
            // Only the owner and admins remove others; a member leaves.
            let denied = try await clients["bob"]!.request {
                $0.manageGroup.group = "five"
                $0.manageGroup.remove.users = ["carol"]
            }
            #expect(denied.failure?.code == ErrorCodes.notAdmin)
            let left = try await clients["bob"]!.request {
                $0.manageGroup.group = "five"
                $0.manageGroup.leave = .init()
            }
            #expect(left.body.isDone)
            #expect(
                try await clients["bob"]!.sendText("back?", to: .group("five")).failure?.code == ErrorCodes.notMember
            )
            for client in clients.values { await client.close() }
        }
    }

    @Test("all of a user's devices get each message, and the sender's other devices get its own")
    func severalDevices() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (phone, _) = try await NativeTestClient.login(fixture, "alice", device: "phone")
            let (laptop, _) = try await NativeTestClient.login(fixture, "alice", device: "laptop")
            let (bob, _) = try await NativeTestClient.login(fixture, "bob")
            _ = try await bob.sendText("to both", to: .user("alice"))
            for device in [phone, laptop] {
                let messages = try await device.messages(1)
                #expect(messages.map(\.body.text) == ["to both"] && messages[0].conversation.user == "bob")
            }
            _ = try await phone.sendText("from my phone", to: .user("bob"))
            let mirrored = try await laptop.messages(1)
            #expect(mirrored.map(\.body.text) == ["from my phone"])
            #expect(mirrored[0].from == "alice" && mirrored[0].conversation.user == "bob")
            for client in [phone, laptop, bob] { await client.close() }
        }
    }

    @Test("two connections of one device each get the other's sends, not their own; no_events gets no events")
    func connectionsOfOneDevice() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (chat, welcome) = try await NativeTestClient.login(fixture, "alice", device: "laptop")
            let (script, _) = try await NativeTestClient.resume(fixture, token: welcome.token)
            // A third connection of the same device that asks for no events.
            let quiet = try await NativeTestClient.connect(port: fixture.ports.native)
            var hello = ClientEnvelope()
            hello.hello.token = welcome.token
            hello.hello.noEvents = true
            try await quiet.send(hello)
            _ = try await quiet.expect("a welcome") { $0.body.welcome }
            let (bob, _) = try await NativeTestClient.login(fixture, "bob")

            // The script sends: the chat gets the message, the script only its ack. Without an id too (the
            // server's own), as compat clients send.
            #expect(try await script.sendText("from the script", to: .user("bob"), id: "s1").ack?.seq == 1)
            #expect(try await script.sendText("no id", to: .user("bob")).ack?.seq == 2)
            #expect(try await chat.sendText("from the chat", to: .user("bob"), id: "c1").ack?.seq == 3)
            _ = try await bob.sendText("from bob", to: .user("alice"))
            // Events come in log order: whatever either reads before bob's message is everything before it.
            let chatSaw = try await chat.messages(3)
            #expect(chatSaw.map(\.body.text) == ["from the script", "no id", "from bob"], "\(chatSaw)")
            #expect(chatSaw[0].id == "s1" && chatSaw[0].from == "alice" && chatSaw[1].id.hasPrefix("s-"))
            let scriptSaw = try await script.messages(2)
            #expect(scriptSaw.map(\.body.text) == ["from the chat", "from bob"], "\(scriptSaw)")

            // A resend of an id stored before (duplicate) is acknowledged and delivers nothing anew.
            #expect(try await chat.sendText("from the script", to: .user("bob"), id: "s1").ack?.duplicate == true)
            _ = try await bob.sendText("again from bob", to: .user("alice"))
            #expect(try await chat.messages(1).map(\.body.text) == ["again from bob"])

            // The quiet connection still answers requests, but never got an event: its first envelope after the
            // welcome is the answer to its history request, though five messages were committed meanwhile.
            var history = ClientEnvelope()
            history.history.conversation.user = "bob"
            let requestID = try await quiet.send(history)
            guard case .envelope(let first) = try await quiet.receive(), case .history? = first.body else {
                Issue.record("the quiet connection's first envelope is not the history page")
                return
            }
            #expect(first.requestID == requestID)
            for client in [chat, script, quiet, bob] { await client.close() }
        }
    }

    @Test("unread counts, mark read with read receipts, and recall reach the peers")
    func unreadReadAndRecall() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            let (bob, _) = try await NativeTestClient.login(fixture, "bob")
            for index in 1...3 { _ = try await alice.sendText("m\(index)", to: .user("bob"), id: "m\(index)") }
            _ = try await bob.messages(3)
            let unread = try await bob.request { $0.unread = .init() }
            guard case .unread(let counts)? = unread.body else {
                Issue.record("\(unread)")
                return
            }
            #expect(counts.entries.map(\.unread) == [3] && counts.entries[0].conversation.user == "alice")

            let marked = try await bob.request {
                $0.markRead.conversation.user = "alice"
                $0.markRead.upToSeq = 2
            }
            #expect(marked.body.isDone)
            let receipt = try await alice.expect("a read receipt") { envelope -> Courier_V1_Receipt? in
                guard case .events(let events)? = envelope.body else { return nil }
                return events.events.compactMap {
                    if case .receipt(let receipt)? = $0.kind, receipt.kind == .read { receipt } else { nil }
                }.first
            }
            #expect(receipt.user == "bob" && receipt.upToSeq == 2)

            let recalled = try await alice.request {
                $0.recall.conversation.user = "bob"
                $0.recall.id = "m3"
            }
            #expect(recalled.body.isDone)
            let notice = try await bob.expect("a recall") { envelope -> Courier_V1_RecallNotice? in
                guard case .events(let events)? = envelope.body else { return nil }
                return events.events.compactMap { if case .recall(let recall)? = $0.kind { recall } else { nil } }.first
            }
            #expect(notice.id == "m3" && notice.seq == 3 && notice.by == "alice")
            let notMine = try await bob.request {
                $0.recall.conversation.user = "alice"
                $0.recall.id = "m1"
            }
            #expect(notMine.failure?.code == ErrorCodes.unknownMessage)

            let history = try await bob.request {
                $0.history.conversation.user = "alice"
                $0.history.limit = 2
            }
            guard case .history(let page)? = history.body else {
                Issue.record("\(history)")
                return
            }
            #expect(page.messages.map(\.seq) == [3, 2] && page.more && page.messages[0].recalled)
            await alice.close()
            await bob.close()
        }
    }

    @Test("typing and presence reach connected peers who asked for them")
    func typingAndPresence() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            try await fixture.user("carol")
            try await fixture.store.createGroup(name: "pair", owner: "alice", members: ["bob"], nowMs: 0)
            let (bob, _) = try await NativeTestClient.login(fixture, "bob", ephemeral: true)
            let (carol, _) = try await NativeTestClient.login(fixture, "carol", ephemeral: true)
            let (alice, _) = try await NativeTestClient.login(fixture, "alice", ephemeral: true)
            let online = try await bob.expect("alice online") { envelope -> Courier_V1_PresenceNotice? in
                if case .presence(let notice)? = envelope.body, notice.user == "alice" { notice } else { nil }
            }
            #expect(online.online)
            // alice is told bob is online.
            _ = try await alice.expect("bob online") { envelope -> Bool? in
                if case .presence(let notice)? = envelope.body, notice.user == "bob", notice.online {
                    true
                } else {
                    nil
                }
            }
            let typed = try await alice.request {
                $0.typing.conversation.user = "bob"
                $0.typing.typing = true
            }
            #expect(typed.body.isDone)
            let typing = try await bob.expect("typing") { envelope -> Courier_V1_TypingNotice? in
                if case .typing(let notice)? = envelope.body { notice } else { nil }
            }
            #expect(typing.user == "alice" && typing.typing && typing.conversation.user == "alice")

            await alice.close()
            let offline = try await bob.expect("alice offline") { envelope -> Courier_V1_PresenceNotice? in
                if case .presence(let notice)? = envelope.body, notice.user == "alice", !notice.online {
                    notice
                } else {
                    nil
                }
            }
            #expect(offline.lastSeenMs > 0)
            // carol shares no conversation with alice: she heard nothing about her.
            await carol.close()
            let heard = try await carol.expectClose()
            #expect(
                !heard.contains { if case .presence(let notice)? = $0.body { notice.user == "alice" } else { false } }
            )
            await bob.close()
        }
    }
}

extension ConversationTests {
    @Test("two strangers: when the recipient opens the conversation, each is told at once that the other is online")
    func presenceOnceOpened() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("carol")
            try await fixture.user("dave")
            try await Self.introduced(carolPort: fixture.ports.native, davePort: fixture.ports.native)
        }
    }

    /// carol writes to dave, a stranger; dave opens the conversation: each is told at once that the other is online.
    static func introduced(carolPort: Int, davePort: Int) async throws {
        let (carol, _) = try await NativeTestClient.login(port: carolPort, "carol", ephemeral: true)
        let (dave, _) = try await NativeTestClient.login(port: davePort, "dave", ephemeral: true)
        let seq = try await carol.sendText("你好，我是 carol", to: .user("dave")).ack!.seq
        // Strangers still: the message comes, and nothing said carol was online before it.
        let first = try await dave.expect("carol's message") { envelope -> String? in
            switch envelope.body {
            case .presence(let notice)? where notice.user == "carol": "presence"
            case .events(let events)? where events.events.contains(where: { $0.message.seq == seq }): "message"
            default: nil
            }
        }
        #expect(first == "message")
        let read = try await dave.request {
            $0.markRead.conversation.user = "carol"
            $0.markRead.upToSeq = seq
        }
        #expect(read.body.isDone)
        _ = try await dave.expect("carol online") { envelope -> Bool? in
            if case .presence(let notice)? = envelope.body, notice.user == "carol", notice.online { true } else { nil }
        }
        _ = try await carol.expect("dave online") { envelope -> Bool? in
            if case .presence(let notice)? = envelope.body, notice.user == "dave", notice.online { true } else { nil }
        }
        await carol.close()
        await dave.close()
    }
}

extension Optional where Wrapped == ServerEnvelope.OneOf_Body {
    var isDone: Bool { if case .done? = self { true } else { false } }
}
