import CourierProtocol
import CourierServerTesting
import CourierStore
import CourierTesting
import Foundation
import Testing

@Suite("Forwarding a message: a copy marked with its first sender, media without an upload")
struct ForwardTests {
    @Test(
        "a text and a media message forwarded: marked with the first sender through a forward of a forward, the media fetchable by the new conversation, the copy not editable"
    )
    func forwardTextAndMedia() async throws {
        try await ServerFixture.with { fixture in
            _ = try await fixture.user("alice")
            let bobID = try await fixture.user("bob").id
            let carolID = try await fixture.user("carol").id
            let daveID = try await fixture.user("dave").id
            try await fixture.store.createGroup(name: "tearoom", owner: "alice", members: ["bob"], nowMs: 0)
            let (aliceLink, _) = try await NativeTestClient.login(fixture, "alice", ephemeral: true)
            // Five bytes of a picture, stored: a forward copies a file that is there.
            let picture = Array("猫".utf8) + [0x21, 0x21]
            let sha = NativeTestClient.sha256(picture)
            _ = try #require(try await aliceLink.upload(picture, stream: 1).done)
            let (bob, _) = try await NativeTestClient.login(fixture, "bob", ephemeral: true)
            let (carol, _) = try await NativeTestClient.login(fixture, "carol", ephemeral: true)
            let sentText = try await aliceLink.request {
                $0.send.id = "t1"
                $0.send.to.group = "tearoom"
                $0.send.body.text = "明天见 👋 see you tomorrow"
            }
            #expect(sentText.ack != nil, "\(sentText)")
            let sentMedia = try await aliceLink.request {
                $0.send.id = "m1"
                $0.send.to.group = "tearoom"
                $0.send.body.media = .with {
                    $0.kind = .image
                    $0.sha256 = sha
                    $0.size = 5
                    $0.mime = "image/png"
                    $0.name = "猫.png"
                    $0.caption = "السلام عليكم"
                }
            }
            #expect(sentMedia.ack != nil, "\(sentMedia)")
            // Alice edits her text before bob forwards it: the copy carries the text as last edited.
            let edited = try await aliceLink.request {
                $0.edit.message.id = "t1"
                $0.edit.text = "明天见 👋 see you tomorrow (edited)"
            }
            #expect(edited.body.isDone, "\(edited)")
            let before = try await fixture.store.mediaAccess(for: carolID, sha256: sha)
            #expect(before == nil, "carol may not fetch the picture before it is forwarded to her")

            // A forward that does not go (to a group bob is not in) leaves him holding nothing.
            let refused = try await bob.request {
                $0.send.id = "nowhere"
                $0.send.to.group = "no-such-group"
                $0.send.forward = .with { $0.id = "m1" }
            }
            #expect(refused.failure?.code == ErrorCodes.unknownGroup, "\(refused)")
            #expect(try await fixture.store.mediaUsage(of: bobID) == 0)
            // Bob forwards both to carol (he never uploaded the picture).
            let text = try await bob.request {
                $0.send.id = "f1"
                $0.send.to.user = "carol"
                $0.send.forward = .with { $0.id = "t1" }
            }
            let media = try await bob.request {
                $0.send.id = "f2"
                $0.send.to.user = "carol"
                $0.send.forward = .with { $0.id = "m1" }
            }
            #expect(text.ack?.id == "f1" && media.ack?.id == "f2", "\(text) \(media)")
            let received = [
                try await carol.expect("the text forwarded", Self.message(id: "f1")),
                try await carol.expect("the picture forwarded", Self.message(id: "f2")),
            ]
            #expect(received.map { $0.from } == ["bob", "bob"])
            #expect(received.map { $0.body.forwardedFrom } == ["alice", "alice"])
            #expect(received[0].body.text == "明天见 👋 see you tomorrow (edited)")
            #expect(received[1].body.media.sha256 == sha && received[1].body.media.name == "猫.png")
            #expect(received[1].body.media.caption == "السلام عليكم")
            let access = try await fixture.store.mediaAccess(for: carolID, sha256: sha)
            #expect(access?.mime == "image/png", "carol may fetch the forwarded picture")
            #expect(try await fixture.store.mediaUsage(of: bobID) == 5, "bob holds the file he forwarded")

            // A resend of the same id is the same copy.
            let again = try await bob.request {
                $0.send.id = "f1"
                $0.send.to.user = "carol"
                $0.send.forward = .with { $0.id = "t1" }
            }
            #expect(again.ack?.duplicate == true && again.ack?.seq == text.ack?.seq)

            // Carol forwards bob's copy to dave: still alice's words.
            let onward = try await carol.request {
                $0.send.id = "f3"
                $0.send.to.user = "dave"
                $0.send.forward = .with {
                    $0.conversation.user = "bob"
                    $0.seq = text.ack?.seq ?? 0
                }
            }
            #expect(onward.ack != nil, "\(onward)")
            let daveHistory = try await fixture.store.history(for: daveID, in: .user("carol"), beforeSeq: 0, limit: 10)
            let first = try #require(daveHistory.messages.first)
            let copy = try Courier_V1_Body(serializedBytes: first.body)
            #expect(copy.forwardedFrom == "alice" && copy.text.hasSuffix("(edited)"))

            // A forwarded copy is not edited, not even by its forwarder.
            let edit = try await bob.request {
                $0.edit.message.id = "f1"
                $0.edit.text = "alice never said this"
            }
            #expect(edit.failure?.code == ErrorCodes.notSender, "\(edit)")
        }
    }

    /// A matcher of the page of events that carries the message of this id.
    static func message(id: String) -> @Sendable (ServerEnvelope) -> Courier_V1_Message? {
        { envelope in
            guard case .events(let events)? = envelope.body else { return nil }
            for event in events.events {
                if case .message(let message)? = event.kind, message.id == id { return message }
            }
            return nil
        }
    }

    @Test(
        "refused: a forward of what the user cannot see, of a recalled message, with a body, naming nothing; a forwarded_from a client sets"
    )
    func refusals() async throws {
        try await ServerFixture.with { fixture in
            for name in ["alice", "bob", "erin", "mallory"] { try await fixture.user(name) }
            let (alice, _) = try await NativeTestClient.login(fixture, "alice", ephemeral: true)
            let (bob, _) = try await NativeTestClient.login(fixture, "bob", ephemeral: true)
            let (erin, _) = try await NativeTestClient.login(fixture, "erin", ephemeral: true)
            let (mallory, _) = try await NativeTestClient.login(fixture, "mallory", ephemeral: true)
            let sent = try await alice.request {
                $0.send.id = "secret"
                $0.send.to.user = "bob"
                $0.send.body.text = "只给你看"
            }
            #expect(sent.ack != nil, "\(sent)")
            // Mallory cannot see alice's message to bob: named by id or by place, it is unknown.
            let byID = try await mallory.request {
                $0.send.to.user = "mallory"
                $0.send.forward = .with {
                    $0.id = "secret"
                    $0.from = "alice"
                }
            }
            #expect(byID.failure?.code == ErrorCodes.unknownMessage, "\(byID)")
            let byPlace = try await mallory.request {
                $0.send.to.user = "bob"
                $0.send.forward = .with {
                    $0.conversation.user = "alice"
                    $0.seq = 1
                }
            }
            #expect(byPlace.failure?.code == ErrorCodes.unknownMessage, "\(byPlace)")
            // A spoofed mark is refused: only the server sets it.
            let spoof = try await mallory.request {
                $0.send.to.user = "bob"
                $0.send.body.text = "hi"
                $0.send.body.forwardedFrom = "alice"
            }
            #expect(spoof.failure?.code == ErrorCodes.invalidRequest, "\(spoof)")
            let withBody = try await bob.request {
                $0.send.to.user = "erin"
                $0.send.body.text = "mine"
                $0.send.forward = .with { $0.id = "secret" }
            }
            #expect(withBody.failure?.code == ErrorCodes.invalidRequest, "\(withBody)")
            let unnamed = try await bob.request {
                $0.send.to.user = "erin"
                $0.send.forward = Courier_V1_MessageRef()
            }
            #expect(unnamed.failure?.code == ErrorCodes.invalidRequest, "\(unnamed)")
            // Recalled: nothing to forward.
            let recall = try await alice.request {
                $0.recall.conversation.user = "bob"
                $0.recall.id = "secret"
            }
            #expect(recall.body.isDone, "\(recall)")
            let recalled = try await bob.request {
                $0.send.to.user = "erin"
                $0.send.forward = .with { $0.id = "secret" }
            }
            #expect(recalled.failure?.code == ErrorCodes.messageRecalled, "\(recalled)")
            // A message withheld by a block is not the blocker's to forward.
            let blocked = try await alice.request {
                $0.block.user = "erin"
                $0.block.blocked = true
            }
            #expect(blocked.body.isDone, "\(blocked)")
            let sentByErin = try await erin.request {
                $0.send.id = "withheld"
                $0.send.to.user = "alice"
                $0.send.body.text = "are you there"
            }
            #expect(sentByErin.ack != nil, "\(sentByErin)")
            let withheld = try await alice.request {
                $0.send.to.user = "bob"
                $0.send.forward = .with {
                    $0.id = "withheld"
                    $0.from = "erin"
                }
            }
            #expect(withheld.failure?.code == ErrorCodes.unknownMessage, "\(withheld)")
        }
    }
}

extension ForwardTests {
    @Test("a forward of media the forwarder's quota has no room for is refused, and nothing is sent")
    func forwardCountsInTheQuota() async throws {
        try await ServerFixture.with(
            { fixture in
                let alice = try await fixture.user("alice")
                let bobID = try await fixture.user("bob").id
                try await fixture.contacts("alice", "bob")
                let sha = String(repeating: "c3", count: 32)
                // Alice's upload, recorded under a larger quota than the server gives bob.
                try await fixture.store.recordUpload(user: alice.id, sha256: sha, size: 5, quota: 100, nowMs: 0)
                let (aliceLink, _) = try await NativeTestClient.login(fixture, "alice", ephemeral: true)
                let (bob, _) = try await NativeTestClient.login(fixture, "bob", ephemeral: true)
                let sent = try await aliceLink.request {
                    $0.send.id = "big"
                    $0.send.to.user = "bob"
                    $0.send.body.media = .with {
                        $0.kind = .file
                        $0.sha256 = sha
                        $0.size = 5
                        $0.name = "📄 報告.pdf"
                    }
                }
                #expect(sent.ack != nil, "\(sent)")
                let forward = try await bob.request {
                    $0.send.id = "copy"
                    $0.send.to.user = "alice"
                    $0.send.forward = .with { $0.id = "big" }
                }
                #expect(forward.failure?.code == ErrorCodes.quotaExceeded, "\(forward)")
                let usage = try await fixture.store.mediaUsage(of: bobID)
                #expect(usage == 0)
                let history = try await fixture.store.history(for: bobID, in: .user("alice"), beforeSeq: 0, limit: 10)
                #expect(history.messages.map(\.id).contains("big") && !history.messages.map(\.id).contains("copy"))
            },
            configure: { $0.media.quotaBytesPerUser = 4 }
        )
    }
}

extension ForwardTests {
    @Test(
        "a forward mentions nobody: a member forwards an @all into the group (which it could not say), and no one counts a mention"
    )
    func forwardMentionsNobody() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let carol = try await fixture.user("carol")
            try await fixture.store.createGroup(name: "club", owner: "alice", members: ["bob", "carol"], nowMs: 0)
            let (alice, _) = try await NativeTestClient.login(fixture, "alice", ephemeral: true)
            let (bob, _) = try await NativeTestClient.login(fixture, "bob", ephemeral: true)
            let sent = try await alice.request {
                $0.send.id = "all"
                $0.send.to.group = "club"
                $0.send.body.text = "@all 开会了 @carol"
            }
            #expect(sent.ack != nil, "\(sent)")
            let before = try await fixture.store.unreadCounts(for: carol.id).first { $0.conversation == .group("club") }
            #expect(before?.mentions == 1, "\(String(describing: before))")
            // Said by bob himself, @all is refused; forwarded, it is alice's words and goes.
            let said = try await bob.request {
                $0.send.to.group = "club"
                $0.send.body.text = "@all 开会了"
            }
            #expect(said.failure?.code == ErrorCodes.notAdmin, "\(said)")
            let forwarded = try await bob.request {
                $0.send.id = "again"
                $0.send.to.group = "club"
                $0.send.forward = .with { $0.id = "all" }
            }
            #expect(forwarded.ack != nil, "\(forwarded)")
            let after = try await fixture.store.unreadCounts(for: carol.id).first { $0.conversation == .group("club") }
            #expect(after?.unread == 2 && after?.mentions == 1, "\(String(describing: after))")
        }
    }

    @Test("a field the server does not know is not stored: not from a send, not copied by a forward")
    func unknownFieldsDropped() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            let bob = try await fixture.user("bob")
            let (alice, _) = try await NativeTestClient.login(fixture, "alice", ephemeral: true)
            // A text, and field 99 (length-delimited, one byte) that no version of Body has.
            var text = Courier_V1_Body()
            text.text = "hello 你好"
            let smuggled = try Courier_V1_Body(serializedBytes: try text.serializedBytes() + [0x9A, 0x06, 0x01, 0x41])
            #expect(!smuggled.unknownFields.data.isEmpty, "the test's body carries an unknown field")
            let sent = try await alice.request {
                $0.send.id = "u1"
                $0.send.to.user = "bob"
                $0.send.body = smuggled
            }
            #expect(sent.ack != nil, "\(sent)")
            let history = try await fixture.store.history(for: bob.id, in: .user("alice"), beforeSeq: 0, limit: 5)
            let stored = try #require(history.messages.first { $0.id == "u1" })
            let body = try Courier_V1_Body(serializedBytes: stored.body)
            #expect(body.text == "hello 你好" && body.unknownFields.data.isEmpty)
        }
    }
}

extension ForwardTests {
    @Test("a bot reads a forwarded copy as its first sender's words: forwarded_from in its history")
    func botSeesForwardedFrom() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            try await fixture.contacts("alice", "bob")
            let token = try await fixture.store.addBot(name: "helper", owner: "alice", nowMs: BotAPITests.now())
            let (alice, _) = try await NativeTestClient.login(fixture, "alice", ephemeral: true)
            let (bob, _) = try await NativeTestClient.login(fixture, "bob", ephemeral: true)
            let said = try await bob.request {
                $0.send.id = "b1"
                $0.send.to.user = "alice"
                $0.send.body.text = "原话 from bob"
            }
            #expect(said.ack != nil, "\(said)")
            let forwarded = try await alice.request {
                $0.send.id = "to-bot"
                $0.send.to.user = "helper"
                $0.send.forward = .with {
                    $0.id = "b1"
                    $0.from = "bob"
                }
            }
            #expect(forwarded.ack != nil, "\(forwarded)")
            let history = try await BotAPITests.call(
                fixture.ports.http,
                "GET",
                "/api/v1/history?to=alice",
                token: token
            )
            let messages = history.json["messages"] as? [[String: Any]] ?? []
            let copy = messages.first { $0["id"] as? String == "to-bot" } ?? [:]
            #expect(copy["from"] as? String == "alice" && copy["forwarded_from"] as? String == "bob", "\(history)")
            #expect(copy["text"] as? String == "原话 from bob")
        }
    }
}
