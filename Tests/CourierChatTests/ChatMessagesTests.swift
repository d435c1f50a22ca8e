import CourierClient
import CourierTesting
import Foundation
import Testing

@testable import CourierChat

@Suite("The terminal chat's edits, replies, reactions and search, without a terminal")
struct ChatMessagesTests {
    static let now = ChatStateTests.now

    /// alice's chat with bob: 1 hers, 2 bob's, 3 hers, 4 bob's (Chinese and Japanese), @bob open and connected.
    static func state() -> ChatState {
        var state = ChatState(me: "alice", server: "test")
        state.connection = .connected
        _ = state.select(.user("bob"), now: Self.now)
        _ = state.merge(
            history: [
                ChatStateTests.message(1, from: "alice", "我家在上海东边"),
                ChatStateTests.message(2, from: "bob", "こんにちは、元気？"),
                ChatStateTests.message(3, from: "alice", "明天见"),
                ChatStateTests.message(4, from: "bob", "好的 👍"),
            ],
            more: false,
            of: .user("bob")
        )
        return state
    }

    static func type(_ text: String, _ state: inout ChatState) -> [ChatAction] {
        text.flatMap { state.handle(.character($0), now: Self.now) }
    }

    static func run(_ line: String, in state: inout ChatState) -> [ChatAction] {
        state.handle(.paste(line), now: Self.now) + state.handle(.enter, now: Self.now)
    }

    static func screen(_ state: ChatState) -> [String] {
        ChatScreen(state, now: Self.now).rows.map(\.plain)
    }

    /// The message as the server sends it back edited.
    static func edited(_ seq: UInt64, from: String, _ text: String) -> ChatMessage {
        var message = ChatStateTests.message(seq, from: from, text)
        message.edited = Self.now
        return message
    }

    @Test("↑ on an empty line puts your newest message in the line; Enter saves it as an edit, Esc leaves it")
    func editWithUpArrow() {
        var state = Self.state()
        #expect(state.handle(.up, now: Self.now).isEmpty)
        #expect(state.editing == ChatState.Editing(conversation: .user("bob"), seq: 3, original: "明天见"))
        #expect(state.input.text == "明天见" && state.scroll == 0)
        #expect(Self.screen(state).contains { $0.contains("editing your message") })
        // Writing in it says nothing of typing: it is not a new message.
        var actions = state.handle(.control("u"), now: Self.now) + Self.type("后天见，在上海", &state)
        #expect(actions.isEmpty, "\(actions)")
        actions = state.handle(.enter, now: Self.now)
        #expect(actions == [.edit(.seq(3, in: .user("bob")), text: "后天见，在上海")])
        #expect(state.editing == nil && state.input.isEmpty)
        // The line changes when the edit's event comes, marked edited; a search finds nothing new in it.
        #expect(state.threads["@bob"]!.lines[2].text == "明天见")
        _ = state.apply(.edited(Self.edited(3, from: "alice", "后天见，在上海")), now: Self.now)
        #expect(state.threads["@bob"]!.lines.map(\.text) == ["我家在上海东边", "こんにちは、元気？", "后天见，在上海", "好的 👍"])
        #expect(Self.screen(state).contains { $0.contains("you: 后天见，在上海 (edited) ✓") })

        // Esc leaves the message as it was and empties the line.
        _ = state.handle(.up, now: Self.now)
        _ = Self.type("！", &state)
        #expect(state.handle(.escape, now: Self.now).isEmpty)
        #expect(state.editing == nil && state.input.isEmpty)
        // Saved unchanged, nothing is sent.
        _ = state.handle(.up, now: Self.now)
        #expect(state.handle(.enter, now: Self.now).isEmpty)
        #expect(state.notice == "not changed")
        // Emptied, nothing is sent either: recalling is what takes a message back.
        _ = state.handle(.up, now: Self.now)
        _ = state.handle(.control("u"), now: Self.now)
        #expect(state.handle(.enter, now: Self.now).isEmpty)
        #expect(state.notice?.contains("/recall") == true)

        // With something written, ↑ scrolls and the line stays as it is.
        _ = Self.type("草稿", &state)
        _ = state.handle(.up, now: Self.now)
        #expect(state.editing == nil && state.input.text == "草稿")
        _ = state.handle(.control("u"), now: Self.now)

        // A recalled message is skipped: ↑ takes the newest that is not.
        _ = state.apply(.recalled(conversation: .user("bob"), seq: 3, id: "m3-alice", by: "alice"), now: Self.now)
        _ = state.handle(.up, now: Self.now)
        #expect(state.editing?.seq == 1 && state.input.text == "我家在上海东边")
        // A text that starts with "/" is the new text, not a command, while editing.
        _ = state.handle(.control("u"), now: Self.now)
        _ = Self.type("/tmp 在上海", &state)
        #expect(state.handle(.enter, now: Self.now) == [.edit(.seq(1, in: .user("bob")), text: "/tmp 在上海")])

        // Recalled while it is being edited: the edit ends.
        _ = state.handle(.up, now: Self.now)
        _ = state.apply(.recalled(conversation: .user("bob"), seq: 1, id: "m1-alice", by: "alice"), now: Self.now)
        #expect(state.editing == nil && state.input.isEmpty)
        // Nothing of hers left: ↑ scrolls.
        _ = state.handle(.up, now: Self.now)
        #expect(state.editing == nil)
    }

    @Test("/edit edits your newest message in the line, or at once to the text given; Tab ends an edit")
    func editCommand() {
        var state = Self.state()
        #expect(Self.run("/edit 明天下午见", in: &state) == [.edit(.seq(3, in: .user("bob")), text: "明天下午见")])
        #expect(Self.run("/edit", in: &state).isEmpty)
        #expect(state.editing?.seq == 3 && state.input.text == "明天见")
        // Another conversation: the edit ends there, its text goes.
        _ = state.apply(.message(ChatStateTests.message(1, from: "carol", in: .user("carol"), "هلا")), now: Self.now)
        _ = state.handle(.tab, now: Self.now)
        #expect(state.open == "@carol" && state.editing == nil && state.input.isEmpty)
        #expect(Self.run("/edit", in: &state).isEmpty)
        #expect(state.notice == "nothing of yours to edit here")
        // A waiting line (not on the server yet) cannot be edited.
        _ = Self.run("مرحبا", in: &state)
        _ = state.handle(.up, now: Self.now)
        #expect(state.editing == nil)
    }

    @Test("/reply picks a message with ↑ ↓ and Enter; the next line answers it, quoted above it; Esc cancels")
    func reply() throws {
        var state = Self.state()
        #expect(Self.run("/reply", in: &state).isEmpty)
        #expect(state.picking == ChatState.Picking(purpose: .reply(nil), seq: 4))
        // The picked message shows reversed.
        let picked = ChatScreen(state, now: Self.now).rows.first { $0.plain.contains("bob: 好的 👍") }
        #expect(picked?.text.contains("\u{1B}[7m好的 👍") == true, "\(String(describing: picked))")
        _ = state.handle(.up, now: Self.now)
        _ = state.handle(.up, now: Self.now)
        #expect(state.picking?.seq == 2)
        _ = state.handle(.down, now: Self.now)
        _ = state.handle(.up, now: Self.now)
        #expect(state.handle(.enter, now: Self.now).isEmpty)
        #expect(state.replying?.quote.seq == 2 && state.replying?.quote.text == "こんにちは、元気？")
        #expect(Self.screen(state).contains { $0.contains("answering bob: こんにちは、元気？") })
        let actions = Self.type("はい、元気です", &state) + state.handle(.enter, now: Self.now)
        guard case .sendReply(let id, "はい、元気です", .user("bob"), replyTo: 2)? = actions.last else {
            Issue.record("\(actions)")
            return
        }
        #expect(state.replying == nil)
        let line = try #require(state.threads["@bob"]!.lines.last)
        #expect(line.id == id && line.replyTo?.seq == 2)
        var screen = Self.screen(state)
        let quote = try #require(screen.firstIndex { $0.contains("you: ↳ bob: こんにちは、元気？") })
        #expect(
            screen[quote + 1].contains("はい、元気です …"),
            "the answer under its quote\n\(screen.joined(separator: "\n"))"
        )

        // The original recalled: the answer stays one, its quote says so.
        _ = state.apply(.sent(id: id, conversation: .user("bob"), seq: 5, time: Self.now), now: Self.now)
        _ = state.apply(.recalled(conversation: .user("bob"), seq: 2, id: "m2-bob", by: "bob"), now: Self.now)
        screen = Self.screen(state)
        #expect(screen.contains { $0.contains("you: ↳ bob: (recalled)") }, "\(screen.joined(separator: "\n"))")
        // ↑ passes over the recalled message; the answer picked is then edited: its quote reads as it now does.
        _ = Self.run("/reply", in: &state)
        #expect(state.picking?.seq == 5)
        for _ in 0..<3 { _ = state.handle(.up, now: Self.now) }
        #expect(state.picking?.seq == 1, "a recalled message is not picked")
        for _ in 0..<2 { _ = state.handle(.down, now: Self.now) }
        #expect(state.picking?.seq == 4)
        _ = state.handle(.enter, now: Self.now)
        _ = Self.run("嗯", in: &state)
        _ = state.apply(.edited(Self.edited(4, from: "bob", "好的 👍👍")), now: Self.now)
        #expect(Self.screen(state).contains { $0.contains("you: ↳ bob: 好的 👍👍") })

        // /reply TEXT answers the picked message at once; Esc cancels a pick, then an answer.
        _ = Self.run("/reply 我也是", in: &state)
        let sent = state.handle(.enter, now: Self.now)
        guard case .sendReply(_, "我也是", .user("bob"), replyTo: 5)? = sent.last else {
            Issue.record("\(sent)")
            return
        }
        _ = Self.run("/reply", in: &state)
        _ = state.handle(.escape, now: Self.now)
        #expect(state.picking == nil && state.replying == nil)
        _ = Self.run("/reply", in: &state)
        _ = state.handle(.enter, now: Self.now)
        #expect(state.replying != nil)
        _ = state.handle(.escape, now: Self.now)
        #expect(state.replying == nil)
        guard case .send? = Self.run("不回了", in: &state).last else {
            Issue.record("a plain send after the answer was cancelled")
            return
        }
    }

    @Test("/react KEY puts it on the picked message, again takes it off; reactions show under the message")
    func react() {
        var state = Self.state()
        #expect(Self.run("/react", in: &state).isEmpty)
        #expect(state.notice?.hasPrefix("usage: /react") == true)
        _ = Self.run("/react 👍", in: &state)
        #expect(state.handle(.enter, now: Self.now) == [.react(.seq(4, in: .user("bob")), key: "👍", on: true)])
        let change = { (user: String, key: String, on: Bool) in
            ClientEvent.reaction(
                ReactionChange(
                    conversation: .user("bob"),
                    seq: 4,
                    id: "m4-bob",
                    from: "bob",
                    user: user,
                    key: key,
                    on: on
                )
            )
        }
        _ = state.apply(change("alice", "👍", true), now: Self.now)
        _ = state.apply(change("bob", "👍", true), now: Self.now)
        _ = state.apply(change("bob", "好", true), now: Self.now)
        #expect(
            state.threads["@bob"]!.lines[3].reactions == [
                ChatReaction(key: "👍", count: 2, mine: true), ChatReaction(key: "好", count: 1, mine: false),
            ]
        )
        let rows = ChatScreen(state, now: Self.now).rows
        let index = rows.firstIndex { $0.plain.contains("bob: 好的 👍") }!
        #expect(rows[index + 1].plain.hasSuffix("👍 2  好 1"), "\(rows[index + 1].plain)")
        #expect(rows[index + 1].text.contains("\u{1B}[1m👍 2"), "hers in bold")
        // Given again, it comes off.
        _ = Self.run("/react 👍", in: &state)
        #expect(state.handle(.enter, now: Self.now) == [.react(.seq(4, in: .user("bob")), key: "👍", on: false)])
        // Picking another message with ↑, and a short word for a key.
        _ = Self.run("/react 赞", in: &state)
        _ = state.handle(.up, now: Self.now)
        #expect(state.handle(.enter, now: Self.now) == [.react(.seq(3, in: .user("bob")), key: "赞", on: true)])
    }

    @Test("reactions and quotes keep every row within the width, CJK and emoji keys wrapping under the message")
    func wideReactions() {
        var state = Self.state()
        (state.columns, state.rows) = (44, 16)
        let keys = ["👍", "好", "❤️", "了解", "🎉", "ありがとう", "✅", "赞", "😂", "👀"]
        state.threads["@bob"]!.lines[3].reactions = keys.enumerated().map {
            ChatReaction(key: $1, count: $0 + 1, mine: $0 % 2 == 0)
        }
        state.threads["@bob"]!.lines[3].replyTo = ChatReply(
            seq: 1,
            from: "alice",
            text: String(repeating: "我家在上海东边", count: 8)
        )
        // Every row of the pane within its width, counted from the pieces (the screen would cut what overflows).
        let paneWidth = 44 - ChatScreen.listWidth(columns: 44) - 1
        for row in ChatScreen.messageRows(of: state.threads["@bob"]!, state: state, now: Self.now) {
            #expect(row.reduce(0) { $0 + DisplayWidth.of($1.0) } <= paneWidth, "\(row)")
        }
        let rows = ChatScreen(state, now: Self.now).rows
        for row in rows { #expect(CLibraryWidth.of(row.plain) <= 44, "\(row.plain)") }
        let plain = rows.map(\.plain).joined(separator: "\n")
        for (index, key) in keys.enumerated() { #expect(plain.contains("\(key) \(index + 1)"), "\(key)") }
        #expect(rows.contains { $0.plain.contains("bob: ↳ alice: 我家在上海") && $0.plain.hasSuffix("…") })
    }

    static func result(_ seq: UInt64, in conversation: Conversation, from: String, _ text: String) -> SearchResult {
        let fragment = text
        let scalars = Array(fragment.unicodeScalars)
        let query = Array("上海".unicodeScalars)
        let at = (0...(scalars.count - query.count)).first { Array(scalars[$0..<$0 + query.count]) == query } ?? 0
        return SearchResult(
            message: ChatStateTests.message(seq, from: from, in: conversation, text),
            fragment: fragment,
            marks: [at..<at + query.count]
        )
    }

    @Test("/search lists results with the match in bold; ↓ past the last asks for more; Enter opens one at the message")
    func search() throws {
        var state = Self.state()
        state.rows = 20
        #expect(Self.run("/search 上海", in: &state) == [.search("上海", before: 0, number: 1)])
        #expect(Self.screen(state).contains { $0.contains("searching") })
        let first = SearchResults(
            results: [
                Self.result(40, in: .group("家人"), from: "dad", "周末回上海吗？"),
                Self.result(1, in: .user("bob"), from: "alice", "我家在上海东边"),
            ],
            more: true,
            next: 1
        )
        // Asked again: the answer to the first search is dropped, though its words are the same.
        #expect(Self.run("/search 上海", in: &state) == [.search("上海", before: 0, number: 2)])
        state.searched(1, page: first, before: 0)
        #expect(state.search?.results.isEmpty == true && state.search?.loading == true)
        state.searched(2, page: first, before: 0)
        let rows = ChatScreen(state, now: Self.now).rows
        #expect(rows.contains { $0.plain.contains("#家人 · dad") })
        #expect(rows.contains { $0.text.contains("我家在\u{1B}[1m上海\u{1B}[0m东边") }, "the match in bold")
        #expect(rows.contains { $0.text.contains("\u{1B}[7m周末回\u{1B}[0m\u{1B}[1m上海") }, "the chosen reversed")
        #expect(rows.contains { $0.plain.contains("↓ for more") })
        let paneWidth = 80 - ChatScreen.listWidth(columns: 80) - 1
        for row in ChatScreen.searchRows(state.search!, state: state, width: paneWidth, rows: 15, now: Self.now) {
            #expect(row.reduce(0) { $0 + DisplayWidth.of($1.0) } <= paneWidth, "\(row)")
        }
        // ↓ to the last result asks for the next page, once.
        #expect(state.handle(.down, now: Self.now) == [.search("上海", before: 1, number: 2)])
        #expect(state.handle(.down, now: Self.now).isEmpty)
        state.searched(
            2,
            page: SearchResults(results: [Self.result(300, in: .user("bob"), from: "bob", "上海")], more: false, next: 0),
            before: 1
        )
        #expect(state.search?.results.count == 3 && state.search?.selected == 1)

        // Enter on a loaded message: @bob shows it, highlighted, the results gone.
        #expect(state.handle(.enter, now: Self.now).isEmpty)
        #expect(state.search == nil && state.open == "@bob")
        #expect(state.picking == ChatState.Picking(purpose: .look, seq: 1))

        // Enter on one in a conversation never opened: it opens, and its pages load back until the message shows.
        _ = Self.run("/search 上海", in: &state)
        state.searched(3, page: first, before: 0)
        var actions = state.handle(.enter, now: Self.now)
        #expect(state.open == "#家人" && actions.contains(.loadHistory(.group("家人"), beforeSeq: 0)), "\(actions)")
        #expect(Self.screen(state).contains { $0.contains("finding the message") })
        let page = { (range: ClosedRange<UInt64>) in
            range.map { ChatStateTests.message($0, from: "dad", in: .group("家人"), $0 == 40 ? "周末回上海吗？" : "\($0)") }
        }
        actions = state.merge(history: page(101...150), more: true, of: .group("家人"), before: 0, now: Self.now)
        #expect(actions.contains(.loadHistory(.group("家人"), beforeSeq: 101)), "\(actions)")
        // A page it did not ask for (scrolling's, say) is not its answer: it asks nothing more.
        actions = state.merge(history: page(91...100), more: true, of: .group("家人"), before: 91, now: Self.now)
        #expect(!actions.contains { if case .loadHistory = $0 { true } else { false } }, "\(actions)")
        actions = state.merge(history: page(51...100), more: true, of: .group("家人"), before: 101, now: Self.now)
        #expect(actions.contains(.loadHistory(.group("家人"), beforeSeq: 51)), "\(actions)")
        actions = state.merge(history: page(1...50), more: false, of: .group("家人"), before: 51, now: Self.now)
        #expect(!actions.contains { if case .loadHistory = $0 { true } else { false } }, "\(actions)")
        #expect(state.picking == ChatState.Picking(purpose: .look, seq: 40) && state.jump == nil)
        // Scrolled to it: it shows, reversed.
        let shown = ChatScreen(state, now: Self.now).rows
        #expect(
            shown.contains { $0.text.contains("\u{1B}[7m周末回上海吗？") },
            "\(shown.map(\.plain).joined(separator: "\n"))"
        )
        #expect(state.scroll > 0)
        // Esc ends the highlight.
        _ = state.handle(.escape, now: Self.now)
        #expect(state.picking == nil)
    }

    @Test("a jump ends when its page fails, or when its message was recalled since; failed pages can be asked again")
    func jumpsThatEnd() {
        var state = Self.state()
        _ = Self.run("/search 上海", in: &state)
        let found = SearchResults(
            results: [Self.result(7, in: .user("carol"), from: "carol", "上海")],
            more: false,
            next: 0
        )
        state.searched(1, page: found, before: 0)
        _ = state.handle(.enter, now: Self.now)
        #expect(state.jump?.awaiting == 0)
        // The page fails (offline, say): the jump ends; the conversation's first page is asked again on the next
        // opening or connection.
        state.historyFailed(.user("carol"), beforeSeq: 0)
        #expect(state.jump == nil && state.threads["@carol"]?.historyRequested == false)
        let again = state.apply(.connected(user: "alice"), now: Self.now)
        #expect(again.contains(.loadHistory(.user("carol"), beforeSeq: 0)), "\(again)")

        // Recalled since the search: history holds it as recalled; the jump says so and shows nothing picked.
        _ = Self.run("/search 上海", in: &state)
        state.searched(2, page: found, before: 0)
        _ = state.handle(.enter, now: Self.now)
        var page = (5...9).map { ChatStateTests.message(UInt64($0), from: "carol", in: .user("carol"), "\($0)") }
        page[2].recalled = true
        page[2].text = ""
        _ = state.merge(history: page, more: true, of: .user("carol"), before: 0, now: Self.now)
        #expect(state.jump == nil && state.picking == nil)
        #expect(state.notice == "that message was recalled")

        // Esc stops a jump that is loading; the page that then comes does nothing more.
        _ = Self.run("/search 上海", in: &state)
        state.searched(
            3,
            page: SearchResults(
                results: [Self.result(2, in: .user("carol"), from: "carol", "上海")],
                more: false,
                next: 0
            ),
            before: 0
        )
        let asked = state.handle(.enter, now: Self.now)
        #expect(asked.contains(.loadHistory(.user("carol"), beforeSeq: 5)), "\(asked)")
        _ = state.handle(.escape, now: Self.now)
        #expect(state.jump == nil)
        let later = state.merge(history: [], more: true, of: .user("carol"), before: 5, now: Self.now)
        #expect(!later.contains { if case .loadHistory = $0 { true } else { false } } && state.picking == nil)

        // A failing search says why; the results it had stay.
        _ = Self.run("/search 東京", in: &state)
        state.searchFailed(4, "rate-limited: slow down")
        #expect(state.search == nil && state.notice == "search failed: rate-limited: slow down")
        #expect(Self.run("/search", in: &state).isEmpty)
        #expect(state.notice?.hasPrefix("usage: /search") == true)
    }

    @Test("a command under the search results closes them; Esc closes a notice before it ends an edit")
    func modesAndNotices() {
        var state = Self.state()
        _ = Self.run("/search 上海", in: &state)
        state.searched(
            1,
            page: SearchResults(
                results: [Self.result(1, in: .user("bob"), from: "alice", "我家在上海东边")],
                more: false,
                next: 0
            ),
            before: 0
        )
        _ = Self.run("/reply", in: &state)
        #expect(state.search == nil && state.picking?.seq == 4)
        _ = state.handle(.escape, now: Self.now)
        // ↑ while answering scrolls: the answer stays.
        _ = Self.run("/reply", in: &state)
        _ = state.handle(.enter, now: Self.now)
        _ = state.handle(.up, now: Self.now)
        #expect(state.replying != nil && state.editing == nil)
        _ = state.handle(.escape, now: Self.now)
        _ = state.handle(.pageDown, now: Self.now)
        // A notice that comes while editing: the first Esc closes it, the second ends the edit.
        _ = state.handle(.up, now: Self.now)
        #expect(state.editing != nil)
        state.notice = "bob joined #家人"
        _ = state.handle(.escape, now: Self.now)
        #expect(state.notice == nil && state.editing != nil && state.input.text == "明天见")
        _ = state.handle(.escape, now: Self.now)
        #expect(state.editing == nil && state.input.isEmpty)
        // /close ends an answer begun in the conversation closed.
        _ = Self.run("/reply", in: &state)
        _ = state.handle(.enter, now: Self.now)
        _ = Self.run("/close", in: &state)
        #expect(state.replying == nil)
        // A photo without a caption: ↑ edits its caption (which may stay empty), and a second ↑ scrolls.
        var photo = ChatStateTests.message(9, from: "alice", in: .user("dave"), "")
        photo.media = MediaInfo(
            kind: .image,
            sha256: String(repeating: "b", count: 64),
            size: 2_000,
            mime: "image/png",
            name: "外滩.png"
        )
        _ = state.apply(.message(photo), now: Self.now)
        _ = Self.run("/open dave", in: &state)
        _ = state.handle(.up, now: Self.now)
        #expect(state.editing?.caption == true && state.input.isEmpty)
        _ = state.handle(.up, now: Self.now)
        #expect(state.editing?.seq == 9)
        _ = Self.type("外滩的夜景", &state)
        #expect(state.handle(.enter, now: Self.now) == [.edit(.seq(9, in: .user("dave")), text: "外滩的夜景")])
    }
}
