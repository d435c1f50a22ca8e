import CourierClient
import Foundation
import Testing

@testable import CourierChat

@Suite("The terminal chat's keys, input line and state, without a terminal")
struct ChatStateTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    static func message(
        _ seq: UInt64,
        from: String,
        in conversation: Conversation = .user("bob"),
        _ text: String = "hi",
        at time: Date = Self.now
    ) -> ChatMessage {
        ChatMessage(
            id: "m\(seq)-\(from)",
            from: from,
            conversation: conversation,
            seq: seq,
            time: time,
            text: text,
            recalled: false
        )
    }

    // MARK: Keys

    @Test("escape sequences, UTF-8 and pastes split across reads decode to the same keys")
    func keysAcrossReads() {
        let bytes = Array(
            "a你\u{1B}[A\u{1B}[5~\u{1B}[1;3B\u{1B}OH\u{1B}[Z\u{7F}\r\u{03}\u{1B}x\u{1B}[200~two\nlines\u{1B}[201~é".utf8
        )
        let expected: [Key] = [
            .character("a"), .character("你"), .up, .pageUp, .altDown, .home, .backTab, .backspace, .enter,
            .control("c"), .alt("x"), .paste("two\nlines"), .character("é"),
        ]
        var whole = KeyDecoder()
        #expect(whole.decode(bytes) == expected)
        // Every split point, and one byte at a time.
        for split in 1..<bytes.count {
            var decoder = KeyDecoder()
            let keys = decoder.decode(bytes[..<split]) + decoder.decode(bytes[split...])
            #expect(keys == expected, "split at \(split)")
        }
        var bytewise = KeyDecoder()
        #expect(bytes.flatMap { bytewise.decode([$0]) } == expected)
    }

    @Test("a lone escape is Escape once nothing follows; unknown sequences go; a huge paste is cut at its limit")
    func escapesAndLimits() {
        var decoder = KeyDecoder()
        #expect(decoder.decode(Array("\u{1B}".utf8)).isEmpty && decoder.escapePending)
        #expect(decoder.flush() == [.escape] && !decoder.escapePending)
        #expect(decoder.decode(Array("\u{1B}[99q!".utf8)) == [.character("!")])
        let big = String(repeating: "x", count: KeyDecoder.maxPasteBytes + 100)
        let keys = decoder.decode(Array("\u{1B}[200~\(big)\u{1B}[201~".utf8))
        #expect(keys == [.paste(String(repeating: "x", count: KeyDecoder.maxPasteBytes))])
    }

    // MARK: The input line

    @Test("the input line edits by characters, wide and combined ones too, and scrolls to keep the cursor in view")
    func lineEditor() {
        var line = LineEditor()
        line.insert("你好 world")
        line.home()
        line.right()
        line.insert("e\u{301}")  // e and a combining accent: one character
        #expect(line.text == "你e\u{301}好 world" && line.cursor == 2)
        line.backspace()
        #expect(line.text == "你好 world")
        line.end()
        line.deleteWord()
        #expect(line.text == "你好 " && line.cursor == 3)
        line.insert("a\tb\u{1B}[31m")  // a tab becomes a space; control characters go
        #expect(line.text == "你好 a b[31m")
        #expect(line.view(width: 40) == ("你好 a b[31m", 12))
        // Ten columns: the cursor (at the end) stays inside, the start scrolls out.
        let view = line.view(width: 10)
        #expect(DisplayWidth.of(view.text) <= 9 && view.cursorColumn <= 8 && view.text.hasSuffix("[31m"))
        line.home()
        #expect(line.view(width: 10).cursorColumn == 0 && line.view(width: 10).text.hasPrefix("你好"))
        line.deleteToEnd()
        #expect(line.isEmpty)
    }

    // MARK: State

    @Test("a message in the open conversation is read at once; in another, it counts as unread until opened")
    func unreadAndRead() {
        var state = ChatState(me: "alice", server: "test")
        state.connection = .connected
        #expect(state.select(.user("bob"), now: Self.now) == [.loadHistory(.user("bob"), beforeSeq: 0)])
        #expect(
            state.apply(.message(Self.message(1, from: "bob")), now: Self.now) == [.markRead(.user("bob"), upToSeq: 1)]
        )
        let carol = Self.message(1, from: "carol", in: .user("carol"), at: Self.now.addingTimeInterval(1))
        // A message in a conversation not open alerts (the terminal's bell), once.
        #expect(state.apply(.message(carol), now: Self.now) == [.bell])
        #expect(state.apply(.message(carol), now: Self.now).isEmpty, "a message seen twice counts once")
        #expect(state.threads["@carol"]?.unread == 1)
        // Newest first in the list; Tab goes to carol, reads it and asks for its history.
        #expect(state.ordered.map(\.conversation) == [.user("carol"), .user("bob")])
        let actions = state.handle(.tab, now: Self.now)
        #expect(actions == [.markRead(.user("carol"), upToSeq: 1), .loadHistory(.user("carol"), beforeSeq: 0)])
        #expect(state.threads["@carol"]?.unread == 0 && state.open == "@carol")
        // Read on another of alice's devices clears an unread count too.
        _ = state.apply(.message(Self.message(2, from: "bob")), now: Self.now)
        #expect(state.threads["@bob"]?.unread == 1)
        _ = state.apply(.receipt(conversation: .user("bob"), user: "alice", read: true, upToSeq: 2), now: Self.now)
        #expect(state.threads["@bob"]?.unread == 0)
    }

    @Test("/send PATH: a line shows the upload, then the media's kind, name and size; a failure removes it")
    func sendingFiles() {
        var state = ChatState(me: "alice", server: "test")
        for character in "/send x.jpg" { _ = state.handle(.character(character), now: Self.now) }
        #expect(state.handle(.enter, now: Self.now).isEmpty)
        #expect(state.notice?.hasPrefix("open a conversation first") == true)
        _ = state.select(.user("bob"), now: Self.now)
        for character in "/send ~/Pictures/my cat.jpg" { _ = state.handle(.character(character), now: Self.now) }
        let actions = state.handle(.enter, now: Self.now)
        guard case .sendFile(let id, let path, .user("bob"))? = actions.first else {
            Issue.record("expected a file send, got \(actions)")
            return
        }
        #expect(path == NSHomeDirectory() + "/Pictures/my cat.jpg")
        #expect(state.threads["@bob"]?.lines.map(\.text) == ["[sending my cat.jpg]"])
        state.upload(id: id, .uploading(sent: 450, total: 1000))
        #expect(state.threads["@bob"]?.lines.map(\.text) == ["[sending my cat.jpg 45%]"])
        let media = MediaInfo(
            kind: .image,
            sha256: String(repeating: "a", count: 64),
            size: 2_400_000,
            mime: "image/jpeg",
            name: "my cat.jpg"
        )
        state.upload(id: id, .queued(id: id, media: media))
        #expect(state.threads["@bob"]?.lines.map(\.text) == ["[image my cat.jpg, 2.4 MB]"])
        _ = state.apply(.sent(id: id, conversation: .user("bob"), seq: 3, time: Self.now), now: Self.now)
        #expect(state.threads["@bob"]?.lines.map(\.seq) == [3])

        for character in "/send big.iso" { _ = state.handle(.character(character), now: Self.now) }
        guard case .sendFile(let failing, _, _)? = state.handle(.enter, now: Self.now).first else {
            Issue.record("expected a file send")
            return
        }
        state.uploadFailed(id: failing, "quota-exceeded: over the quota")
        #expect(state.threads["@bob"]?.lines.count == 1)
        #expect(state.notice == "not sent: quota-exceeded: over the quota")
        for character in "/send" { _ = state.handle(.character(character), now: Self.now) }
        _ = state.handle(.enter, now: Self.now)
        #expect(state.notice?.hasPrefix("usage: /send PATH") == true)

        // Media from others shows the same way.
        var voice = Self.message(4, from: "bob")
        voice.text = ""
        voice.media = MediaInfo(
            kind: .voice,
            sha256: String(repeating: "b", count: 64),
            size: 999,
            mime: "audio/mp4",
            name: ""
        )
        _ = state.apply(.message(voice), now: Self.now)
        #expect(state.threads["@bob"]?.lines.last?.text == "[voice bbbbbbbbbbbb…, 999 B]")
        #expect(ChatText.size(999_949) == "1.0 MB")
        #expect(ChatText.size(12_345) == "12 kB")
        #expect(ChatText.size(1_500_000_000) == "1.5 GB")
    }

    @Test("a sent line waits with its id, then takes its sequence number; a refusal marks it and says why")
    func sending() {
        var state = ChatState(me: "alice", server: "test")
        _ = state.select(.user("bob"), now: Self.now)
        for character in "hi bob" { _ = state.handle(.character(character), now: Self.now) }
        let actions = state.handle(.enter, now: Self.now)
        guard case .send(let id, "hi bob", .user("bob"))? = actions.first else {
            Issue.record("expected a send, got \(actions)")
            return
        }
        #expect(state.input.isEmpty && state.threads["@bob"]?.lines.map(\.seq) == [nil])
        _ = state.apply(.sent(id: id, conversation: .user("bob"), seq: 7, time: Self.now), now: Self.now)
        #expect(state.threads["@bob"]?.lines.map(\.seq) == [7])
        // The same message arriving in a history page is not a second line.
        _ = state.merge(
            history: [
                ChatMessage(
                    id: id,
                    from: "alice",
                    conversation: .user("bob"),
                    seq: 7,
                    time: Self.now,
                    text: "hi bob",
                    recalled: false
                )
            ],
            more: false,
            of: .user("bob")
        )
        #expect(state.threads["@bob"]?.lines.count == 1)
        _ = state.handle(.character("x"), now: Self.now)
        guard case .send(let second, _, _)? = state.handle(.enter, now: Self.now).first else {
            Issue.record("expected a send")
            return
        }
        _ = state.apply(.sendFailed(id: second, code: "not-member", message: "no"), now: Self.now)
        #expect(state.threads["@bob"]?.lines.last?.failure == "not-member")
        #expect(state.notice == "not sent: not-member: no")
        // Without an open conversation, Enter explains instead of sending.
        var closed = ChatState(me: "alice", server: "test")
        _ = closed.handle(.character("x"), now: Self.now)
        #expect(closed.handle(.enter, now: Self.now).isEmpty && closed.notice?.hasPrefix("open a conversation") == true)
    }

    @Test("typing is said once, renewed after a few seconds, and stopped on send; a peer's typing expires")
    func typing() {
        var state = ChatState(me: "alice", server: "test")
        _ = state.select(.group("team"), now: Self.now)
        #expect(state.handle(.character("a"), now: Self.now) == [.typing(true, .group("team"))])
        #expect(state.handle(.character("b"), now: Self.now.addingTimeInterval(1)).isEmpty)
        let later = Self.now.addingTimeInterval(ChatState.typingRenewal + 0.5)
        #expect(state.handle(.character("c"), now: later) == [.typing(true, .group("team"))])
        #expect(state.handle(.control("u"), now: later) == [.typing(false, .group("team"))])
        _ = state.handle(.character("d"), now: later)
        #expect(state.handle(.enter, now: later).count == 1, "a send, and the server ends typing with the message")

        _ = state.apply(.typing(conversation: .group("team"), user: "bob", typing: true), now: Self.now)
        #expect(state.threads["#team"]?.typing.keys.sorted() == ["bob"])
        state.expire(now: Self.now.addingTimeInterval(ChatState.typingShownFor - 1))
        #expect(state.threads["#team"]?.typing.isEmpty == false)
        state.expire(now: Self.now.addingTimeInterval(ChatState.typingShownFor + 1))
        #expect(state.threads["#team"]?.typing.isEmpty == true)
    }

    @Test("/open opens a user or group, /quit and Ctrl-C quit, unknown commands are explained")
    func commands() {
        var state = ChatState(me: "alice", server: "test")
        for character in "/open #Team" { _ = state.handle(.character(character), now: Self.now) }
        #expect(state.handle(.enter, now: Self.now).isEmpty)
        #expect(state.open == "#team" && state.input.isEmpty)
        for character in "/open @bob" { _ = state.handle(.character(character), now: Self.now) }
        _ = state.handle(.enter, now: Self.now)
        #expect(state.open == "@bob")
        for character in "/nope" { _ = state.handle(.character(character), now: Self.now) }
        _ = state.handle(.enter, now: Self.now)
        #expect(state.notice == "unknown command /nope; try /help")
        #expect(state.handle(.control("c"), now: Self.now) == [.quit])
        _ = state.handle(.character("x"), now: Self.now)
        #expect(state.handle(.control("d"), now: Self.now).isEmpty, "Ctrl-D quits only on an empty line")
    }

    @Test("scrolling past the oldest loaded message asks for the page before it")
    func scrollingLoadsHistory() {
        var state = ChatState(me: "alice", server: "test")
        state.connection = .connected
        state.rows = 12
        _ = state.select(.user("bob"), now: Self.now)
        let page = (51...100).map { Self.message(UInt64($0), from: "bob") }
        _ = state.merge(history: page, more: true, of: .user("bob"))
        var asked: [ChatAction] = []
        for _ in 0..<20 { asked += state.handle(.pageUp, now: Self.now) }
        #expect(asked == [.loadHistory(.user("bob"), beforeSeq: 51)])
        _ = state.handle(.pageDown, now: Self.now)
        #expect(state.scroll > 0)
        for _ in 0..<20 { _ = state.handle(.pageDown, now: Self.now) }
        #expect(state.scroll == 0)
    }
}
