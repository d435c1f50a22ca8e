import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierStoreSQLite
import CourierTesting
import CourierWire
import Foundation
import Logging
import NIOCore
import Testing

@Suite("Edits, replies and reactions over the ports")
struct EditsServerTests {
    static func code(_ envelope: ServerEnvelope) -> String? {
        if case .error(let error)? = envelope.body { error.code } else { nil }
    }

    static func isDone(_ envelope: ServerEnvelope) -> Bool {
        if case .done? = envelope.body { true } else { false }
    }

    /// Reads events (acknowledging each page) until `count` of them match.
    static func events(
        _ client: NativeTestClient,
        _ count: Int,
        where matches: @escaping @Sendable (Courier_V1_Event) -> Bool
    ) async throws -> [Courier_V1_Event] {
        var found: [Courier_V1_Event] = []
        while found.count < count {
            let page = try await client.expect("events") { envelope -> [Courier_V1_Event]? in
                guard case .events(let events)? = envelope.body, !events.events.isEmpty else { return nil }
                return events.events
            }
            found += page.filter(matches)
            var ack = ClientEnvelope()
            ack.ack.cursor = page.last!.cursor
            _ = try await client.send(ack)
        }
        return found
    }

    @Test(
        "an edit and a reaction reach a device that was offline, in order, on sync; by id, refusals by code; versions"
    )
    func offlineDeviceSyncs() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (alice, _) = try await NativeTestClient.login(port: fixture.ports.native, "alice")
            let (bob, bobWelcome) = try await NativeTestClient.login(port: fixture.ports.native, "bob")
            _ = try await alice.sendText("我家在上海东边", to: .user("bob"), id: "m1")
            let first = try await Self.events(bob, 1) { $0.message.id == "m1" }
            // Bob goes away with his cursor.
            let cursor = first[0].cursor
            await bob.close()

            let edit = try await alice.request {
                $0.edit.message.id = "m1"
                $0.edit.text = "我家在上海西边"
            }
            #expect(Self.isDone(edit), "\(edit)")
            let stranger = try await alice.request {
                $0.react.message.id = "m1"
                $0.react.key = "👍 👍"
            }
            #expect(Self.code(stranger) == ErrorCodes.invalidReaction)
            let none = try await alice.request {
                $0.edit.message.id = "nope"
                $0.edit.text = "x"
            }
            #expect(Self.code(none) == ErrorCodes.unknownMessage)
            let empty = try await alice.request {
                $0.edit.message.id = "m1"
                $0.edit.text = ""
            }
            #expect(Self.code(empty) == ErrorCodes.emptyMessage)
            let unnamed = try await alice.request { $0.react.key = "👍" }
            #expect(Self.code(unnamed) == ErrorCodes.invalidRequest)

            let (back, _) = try await NativeTestClient.resume(
                port: fixture.ports.native,
                token: bobWelcome.token,
                cursor: cursor
            )
            // Bob reacts by place; alice reacts by id.
            let byPlace = try await back.request {
                $0.react.message.conversation = .user("alice")
                $0.react.message.seq = 1
                $0.react.key = "好"
            }
            #expect(Self.isDone(byPlace), "\(byPlace)")
            let synced = try await Self.events(back, 2) { $0.kind != nil }
            guard case .edit(let edited)? = synced[0].kind, case .reaction(let reaction)? = synced[1].kind else {
                Issue.record("expected an edit, then a reaction: \(synced)")
                return
            }
            #expect(edited.body.text == "我家在上海西边" && edited.editedMs > 0 && edited.seq == 1 && edited.id == "m1")
            #expect(edited.conversation.user == "alice" && edited.from == "alice")
            #expect(reaction.key == "好" && reaction.on && reaction.user == "bob" && reaction.message.id == "m1")
            #expect(reaction.message.from == "alice" && reaction.message.seq == 1)

            let versions = try await back.request {
                $0.versions.message.conversation = .user("alice")
                $0.versions.message.seq = 1
            }
            guard case .versions(let earlier)? = versions.body else {
                Issue.record("\(versions)")
                return
            }
            #expect(earlier.versions.map(\.body.text) == ["我家在上海东边"] && earlier.versions[0].version == 0)
            // Bob cannot edit alice's message, even by place.
            let notSender = try await back.request {
                $0.edit.message.conversation = .user("alice")
                $0.edit.message.seq = 1
                $0.edit.text = "mine now"
            }
            #expect(Self.code(notSender) == ErrorCodes.notSender)

            let history = try await back.request {
                $0.history.conversation = .user("alice")
            }
            guard case .history(let page)? = history.body else {
                Issue.record("\(history)")
                return
            }
            #expect(page.messages[0].body.text == "我家在上海西边" && page.messages[0].editedMs == edited.editedMs)
            #expect(page.messages[0].reactions.map(\.key) == ["好"] && page.messages[0].reactions[0].mine)
            await alice.close()
            await back.close()
        }
    }

    @Test("a reply carries the quote; a media message's edit changes its caption only")
    func replyAndCaption() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let (alice, _) = try await NativeTestClient.login(port: fixture.ports.native, "alice")
            let (bob, _) = try await NativeTestClient.login(port: fixture.ports.native, "bob")
            let bytes = Array("a picture's bytes".utf8)
            let sha = try #require(try await alice.upload(bytes, stream: 1).done?.sha256)
            let sent = try await alice.request {
                $0.send.id = "pic"
                $0.send.to = .user("bob")
                $0.send.body.media.kind = .image
                $0.send.body.media.sha256 = sha
                $0.send.body.media.size = UInt64(bytes.count)
                $0.send.body.media.mime = "image/png"
                $0.send.body.media.name = "山.png"
                $0.send.body.media.caption = "黄山"
            }
            #expect(sent.sendAck.seq == 1, "\(sent)")
            let reply = try await bob.request {
                $0.send.id = "r"
                $0.send.to = .user("alice")
                $0.send.body.text = "好看!"
                $0.send.replyTo.id = "pic"
            }
            #expect(reply.sendAck.seq == 2, "\(reply)")
            let edit = try await alice.request {
                $0.edit.message.id = "pic"
                $0.edit.text = "黄山, 2026"
            }
            #expect(Self.isDone(edit), "\(edit)")
            let events = try await Self.events(alice, 2) {
                if case .edit = $0.kind { return true }
                return $0.message.id == "r"
            }
            let answer = try #require(events.first { $0.message.id == "r" }?.message)
            #expect(answer.replyTo.seq == 1 && answer.replyTo.visible && answer.replyTo.from == "alice")
            #expect(answer.replyTo.body.media.caption == "黄山")
            guard case .edit(let edited)? = events.last?.kind else {
                Issue.record("\(events)")
                return
            }
            #expect(edited.body.media.caption == "黄山, 2026")
            #expect(
                edited.body.media.sha256 == sha && edited.body.media.name == "山.png" && edited.body.media.kind == .image
            )
            // History: the reply's quote shows the edited caption.
            let history = try await alice.request { $0.history.conversation = .user("bob") }
            #expect(history.history.messages.first { $0.id == "r" }?.replyTo.body.media.caption == "黄山, 2026")
            await alice.close()
            await bob.close()
        }
    }

    @Test("the compat port: docs/PROTOCOL.md's edit example, and the edit and reaction packets it causes")
    func compatEdit() async throws {
        let url = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("docs/PROTOCOL.md")
        let document = try String(contentsOf: url, encoding: .utf8)
        let marker = try #require(document.range(of: "<!-- example: compat-edit -->"))
        let open = try #require(document.range(of: "```text\n", range: marker.upperBound..<document.endIndex))
        let close = try #require(document.range(of: "```", range: open.upperBound..<document.endIndex))
        var bytes: [UInt8] = []
        for line in document[open.upperBound..<close.lowerBound].split(separator: "\n") {
            for pair in line.dropFirst(6).prefix(47).split(separator: " ") {
                bytes.append(try #require(UInt8(pair, radix: 16)))
            }
        }
        let example = bytes
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let alice = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await alice.write(try CompatTestClient.packet("auth", ["user": "alice", "password": "pw-alice"]))
            _ = try await alice.expect("welcome")
            let bob = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await bob.write(try CompatTestClient.packet("auth", ["user": "bob", "password": "pw-bob"]))
            _ = try await bob.expect("welcome")
            try await alice.write(
                try CompatTestClient.packet("txt", ["to": "bob", "id": "m1"], payload: Array("我家在上海".utf8))
            )
            _ = try await alice.expect("ack")
            _ = try await bob.expect("txt")

            // The document's bytes, as they are, cut in two.
            try await alice.write(example, cuts: [example.count / 2])
            let done = try await alice.expect("done")
            #expect(CompatTests.string(done, "request") == "edit" && CompatTests.string(done, "id") == "m1")
            let edit = try await bob.expect("edit")
            #expect(String(buffer: edit.payload) == "我家在北京")
            #expect(CompatTests.string(edit, "to") == "alice" && CompatTests.string(edit, "from") == "alice")
            #expect(CompatTests.string(edit, "id") == "m1" && CompatTests.integer(edit, "seq") == 1)
            #expect(CompatTests.string(edit, "edited")?.hasSuffix("Z") == true)

            // Bob answers with a reply and a reaction; alice sees both.
            try await bob.write(
                try CompatTestClient.packet(
                    "txt",
                    ["to": "alice", "id": "b1", "reply_id": "m1"],
                    payload: Array("北京好".utf8)
                )
            )
            _ = try await bob.expect("ack")
            try await bob.write(try CompatTestClient.packet("react", ["id": "m1", "key": "👍"]))
            _ = try await bob.expect("done")
            let answer = try await alice.expect("txt")
            guard case .object(let quoted)? = answer.header["reply_to"] else {
                Issue.record("no reply_to in \(answer.header)")
                return
            }
            #expect(quoted["seq"] == .integer(1) && quoted["id"] == .string("m1") && quoted["from"] == .string("alice"))
            let reaction = try await alice.expect("reaction")
            #expect(CompatTests.string(reaction, "key") == "👍" && CompatTests.string(reaction, "user") == "bob")
            #expect(reaction.header["on"] == .bool(true) && CompatTests.string(reaction, "id") == "m1")
            await alice.close()
            await bob.close()
        }
    }

    @Test(
        "a data folder with messages from before search: the server indexes them while it serves, and search finds them"
    )
    func indexedWhileServing() async throws {
        let folder = try TemporaryDirectory(prefix: "courier-search")
        defer { folder.remove() }
        // A store of the data folder, with messages, and its index as the migration leaves one that had them.
        var configuration = SQLiteStore.Configuration()
        configuration.passwordHasher = ServerFixture.cheapHasher
        let store = try SQLiteStore(folder: folder.url, configuration: configuration, logger: Logger(label: "test"))
        let alice = try await store.addUser(name: "alice", password: "pw-alice", nowMs: 1).id
        _ = try await store.addUser(name: "bob", password: "pw-bob", nowMs: 1)
        var requests: [WriteRequest] = []
        for index in 0..<1_200 {
            var body = Courier_V1_Body()
            body.text = "第\(index)条 旧消息 old message"
            requests.append(
                .send(.init(sender: alice, id: "m\(index)", to: .user("bob"), body: try body.serializedBytes()))
            )
        }
        _ = try await store.apply(requests, nowMs: 2)
        try await store.resetSearchIndex()
        try store.close()

        try await ServerFixture.with(folder: folder.url) { fixture in
            let (bob, _) = try await NativeTestClient.login(port: fixture.ports.native, "bob")
            // 1,200 messages: three batches of the server's 500, the newest first; the oldest is found last.
            try await waitUntil("the oldest message is indexed") {
                let answer = try await bob.request { $0.search.query = "第0条" }
                return answer.search.hits.map(\.message.id) == ["m0"]
            }
            let oldest = try await bob.request { $0.search.query = "第0条" }
            #expect(oldest.search.hits[0].fragment == "第0条 旧消息 old message")
            #expect(oldest.search.hits[0].marks.map { [$0.start, $0.length] } == [[0, 3]])
            let newest = try await bob.request {
                $0.search.query = "旧消息 OLD"
                $0.search.limit = 50
            }
            #expect(newest.search.hits.first?.message.id == "m1199" && newest.search.hits.count == 50)
            #expect(newest.search.more)
            #expect(try await fixture.store.indexPending(limit: 1) == 0)
            await bob.close()
        }
    }
}
