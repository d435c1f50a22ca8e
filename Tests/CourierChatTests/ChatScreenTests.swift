import CourierClient
import CourierTesting
import Foundation
import Testing

@testable import CourierChat

@Suite("The terminal chat's screen: widths checked against the C library's wcwidth, wrapping, marks")
struct ChatScreenTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    /// Display width by glibc's wcwidth(3), the table terminals use, summed over the scalars.
    static func wcwidth(_ text: some StringProtocol) -> Int {
        CLibraryWidth.of(text)
    }

    @Test("DisplayWidth agrees with glibc's wcwidth on CJK, kana, hangul, fullwidth forms, emoji and accents")
    func widthsAgreeWithTheCLibrary() {
        let samples = [
            "hello", "你好，世界", "こんにちは", "カタカナ", "한국어", "ＡＢＣ１２３", "👋😀🎉", "café", "e\u{301}",
            "✓✓ read", "…", "●", "│─", "中文 mixed 文字 👍", "１２３！？", "〈〉《》「」",
        ]
        for sample in samples {
            #expect(DisplayWidth.of(sample) == Self.wcwidth(sample), "\(sample)")
        }
        // Every assigned character of the CJK, kana, hangul and fullwidth blocks, one by one.
        var mismatches: [String] = []
        for range in [0x3000...0x30FF, 0x4E00...0x9FFF, 0xAC00...0xD7A3, 0xFF01...0xFF60, 0x1F300...0x1F64F] {
            for value in range {
                guard let scalar = Unicode.Scalar(value), scalar.properties.generalCategory != .unassigned,
                    !scalar.properties.isEmoji || scalar.properties.isEmojiPresentation
                else { continue }
                let character = Character(scalar)
                if DisplayWidth.of(character) != Self.wcwidth(String(character)) {
                    mismatches.append(String(format: "U+%04X", value))
                }
            }
        }
        #expect(mismatches.isEmpty, "\(mismatches.count): \(mismatches.prefix(20))")
    }

    static func state(columns: Int, rows: Int) -> ChatState {
        var state = ChatState(me: "alice", server: "127.0.0.1:6970")
        state.connection = .connected
        (state.columns, state.rows) = (columns, rows)
        let texts = [
            "你好，alice！这是一条很长的中文消息，用来看换行是否对齐，以及宽字符是否占两列。",
            "mixed 中文 and English words that wrap at spaces where they can 👋👋👋",
            "カタカナとひらがな、한국어도 함께",
        ]
        state.load(
            stored: texts.enumerated().map { index, text in
                ChatMessage(
                    id: "b\(index)",
                    from: "bob",
                    conversation: .user("bob"),
                    seq: UInt64(index + 1),
                    time: Self.now.addingTimeInterval(-180),
                    text: text,
                    recalled: false
                )
            } + [
                ChatMessage(
                    id: "g1",
                    from: "carol",
                    conversation: .group("团队-team"),
                    seq: 1,
                    time: Self.now.addingTimeInterval(-90_000),
                    text: "群里的消息：一二三四五六七八九十一二三四五六七八九十",
                    recalled: false
                )
            ],
            pending: [],
            now: Self.now
        )
        _ = state.select(.user("bob"), now: Self.now)
        state.input.insert("半行中文 half")
        return state
    }

    @Test(
        "no row is wider than the terminal and the list's border stays in one column, at any width",
        arguments: [40, 57, 80, 101, 132]
    )
    func rowsFit(columns: Int) throws {
        let state = Self.state(columns: columns, rows: 20)
        let screen = ChatScreen(state, now: Self.now)
        #expect(screen.rows.count == 20)
        let border = ChatScreen.listWidth(columns: columns)
        for (index, row) in screen.rows.enumerated() {
            let plain = row.plain
            #expect(Self.wcwidth(plain) <= columns, "row \(index) is \(Self.wcwidth(plain)) wide: \(plain)")
            #expect(row.width == Self.wcwidth(plain), "row \(index): \(plain)")
            if (1..<18).contains(index) {
                let before = try #require(plain.firstIndex(of: "│"), "row \(index): \(plain)")
                #expect(Self.wcwidth(plain[..<before]) == border, "row \(index): \(plain)")
            }
        }
        // The cursor is after the input's text, by its display width.
        #expect(screen.cursor == (19, 2 + Self.wcwidth("半行中文 half")))
    }

    @Test("a wrapped message's rows use the pane's width and continue under its text")
    func wrapping() throws {
        let state = Self.state(columns: 80, rows: 24)
        let rows = ChatScreen(state, now: Self.now).rows.map(\.plain)
        let first = try #require(rows.firstIndex { $0.contains("bob: 你好") })
        let textColumn = Self.wcwidth(rows[first].prefix { $0 != "你" })
        let next = rows[first + 1]
        let border = try #require(next.firstIndex(of: "│"))
        let continuation = try #require(next[next.index(after: border)...].firstIndex { $0 != " " })
        #expect(Self.wcwidth(next[..<continuation]) == textColumn, "\(rows[first])\n\(next)")
        // Full CJK rows fill the pane to within one column (a wide character does not fit in one).
        #expect(Self.wcwidth(rows[first]) >= 79, "\(rows[first])")
        // Latin text breaks at spaces.
        let wrapped = ChatScreen.wrap("one two three four", width: 9)
        #expect(wrapped == ["one two", "three", "four"])
        #expect(ChatScreen.wrap("一二三四五", width: 4) == ["一二", "三四", "五"])
        // CJK text breaks between characters rather than at a space far back.
        #expect(ChatScreen.wrap("你好 一二三四五六", width: 10) == ["你好 一二", "三四五六"])
        #expect(ChatScreen.wrap("abc 一二三四", width: 6) == ["abc 一", "二三四"])
        #expect(ChatScreen.wrap("averylongword", width: 5) == ["avery", "longw", "ord"])
        #expect(ChatScreen.wrap("line\nbreak", width: 20) == ["line", "break"])
    }

    @Test("a direct conversation the other has neither answered nor opened says why presence is hidden")
    func presenceHidden() {
        var state = ChatState(me: "alice", server: "127.0.0.1:6970")
        state.connection = .connected
        (state.columns, state.rows) = (100, 20)
        let mine = ChatMessage(
            id: "a1",
            from: "alice",
            conversation: .user("carol"),
            seq: 1,
            time: Self.now,
            text: "hello?",
            recalled: false
        )
        state.load(stored: [mine], pending: [], now: Self.now)
        _ = state.select(.user("carol"), now: Self.now)
        let header = { ChatScreen(state, now: Self.now).rows[1].plain }
        #expect(header().contains("presence shows once carol answers or opens this conversation"), "\(header())")
        // carol opens it (her read receipt comes): the hint goes.
        _ = state.apply(.receipt(conversation: .user("carol"), user: "carol", read: true, upToSeq: 1), now: Self.now)
        #expect(!header().contains("presence shows once"), "\(header())")
    }

    @Test("receipts come from the server's counts: a chat opened afresh shows '✓✓ read' for what the other read")
    func receiptsFromServer() {
        var state = ChatState(me: "alice", server: "127.0.0.1:6970")
        state.connection = .connected
        (state.columns, state.rows) = (100, 20)
        let mine = (1...2).map { seq in
            ChatMessage(
                id: "a\(seq)",
                from: "alice",
                conversation: .user("bob"),
                seq: UInt64(seq),
                time: Self.now,
                text: "message \(seq)",
                recalled: false
            )
        }
        state.load(stored: mine, pending: [], now: Self.now)
        _ = state.select(.user("bob"), now: Self.now)
        let rows = { ChatScreen(state, now: Self.now).rows.map(\.plain) }
        #expect(!rows().contains { $0.contains("read") }, "nothing known yet")
        state.setUnread([
            UnreadCount(conversation: .user("bob"), unread: 0, lastSeq: 2, peerDeliveredSeq: 2, peerReadSeq: 1)
        ])
        let shown = rows()
        #expect(shown.contains { $0.contains("message 1") && $0.contains("✓✓\u{A0}read") }, "\(shown)")
        #expect(shown.contains { $0.contains("message 2") && $0.contains("✓✓") && !$0.contains("read") }, "\(shown)")
    }

    @Test("in a group, a chat opened afresh shows 'read by N' from the marks a history page carries")
    func groupReceiptsFromHistory() {
        var state = ChatState(me: "alice", server: "127.0.0.1:6970")
        state.connection = .connected
        (state.columns, state.rows) = (100, 20)
        _ = state.select(.group("家"), now: Self.now)
        let page = (1...3).reversed().map { seq in
            ChatMessage(
                id: "a\(seq)",
                from: "alice",
                conversation: .group("家"),
                seq: UInt64(seq),
                time: Self.now,
                text: "消息 \(seq)",
                recalled: false
            )
        }
        let rows = { ChatScreen(state, now: Self.now).rows.map(\.plain) }
        _ = state.merge(history: page, more: false, of: .group("家"))
        #expect(!rows().contains { $0.contains("read") }, "nothing known yet: \(rows())")
        _ = state.merge(
            history: page,
            more: false,
            receipts: [
                ReceiptMark(user: "bob", deliveredSeq: 3, readSeq: 2),
                ReceiptMark(user: "Carol", deliveredSeq: 2, readSeq: 2),
                ReceiptMark(user: "dave", deliveredSeq: 3, readSeq: 0),
            ],
            of: .group("家")
        )
        let shown = rows()
        #expect(shown.contains { $0.contains("消息 2") && $0.contains("read\u{A0}by\u{A0}2") }, "\(shown)")
        #expect(shown.contains { $0.contains("消息 3") && $0.contains("✓✓") && !$0.contains("read") }, "\(shown)")
        // A live receipt past the page's marks moves them on; an older page's marks never take them back; a member
        // who joined after a message is not among its readers.
        _ = state.apply(.receipt(conversation: .group("家"), user: "dave", read: true, upToSeq: 3), now: Self.now)
        _ = state.merge(
            history: [],
            more: false,
            receipts: [
                ReceiptMark(user: "dave", deliveredSeq: 1, readSeq: 1),
                // Joined at 3: read up to 3 says nothing of message 3, sent before.
                ReceiptMark(user: "erin", deliveredSeq: 3, readSeq: 3, joinedSeq: 3),
            ],
            of: .group("家")
        )
        let moved = rows()
        #expect(moved.contains { $0.contains("消息 3") && $0.contains("read\u{A0}by\u{A0}1") }, "\(moved)")
    }

    @Test("a status line too long for the terminal ends with an ellipsis after a whole word; CJK is cut by width")
    func statusEllipsis() {
        var state = Self.state(columns: 40, rows: 24)
        state.notice = "could not save the file to /home/alice/Downloads/holiday-photos/beach.jpg"
        let status = ChatScreen(state, now: Self.now).rows[22].plain
        #expect(status == " could not save the file to…", "\(status)")
        state.notice = String(repeating: "中文", count: 30)
        let cjk = ChatScreen(state, now: Self.now).rows[22].plain
        #expect(cjk.hasSuffix("…") && Self.wcwidth(cjk) <= 40, "\(cjk)")
        state.notice = "short"
        #expect(ChatScreen(state, now: Self.now).rows[22].plain == " short")
    }

    @Test("control characters from a peer show as caret notation and never reach the terminal")
    func controlCharactersAreShown() {
        var state = Self.state(columns: 80, rows: 24)
        let hostile = "\u{1B}]0;pwned\u{07}\u{1B}[2J\u{9B}31mred"
        _ = state.apply(
            .message(
                ChatMessage(
                    id: "x",
                    from: "bob",
                    conversation: .user("bob"),
                    seq: 9,
                    time: Self.now,
                    text: hostile,
                    recalled: false
                )
            ),
            now: Self.now
        )
        let rows = ChatScreen(state, now: Self.now).rows
        #expect(rows.allSatisfy { !$0.plain.contains("\u{1B}") && !$0.plain.contains("\u{07}") })
        #expect(rows.contains { $0.plain.contains("bob: ^[]0;pwned^G^[[2J^?31mred") })
    }

    @Test("our messages are marked waiting, committed, delivered, and the newest read one 'read'")
    func marks() {
        var state = ChatState(me: "alice", server: "test")
        (state.columns, state.rows) = (80, 20)
        _ = state.select(.user("bob"), now: Self.now)
        for text in ["one", "two", "three", "four"] {
            for character in text { _ = state.handle(.character(character), now: Self.now) }
            _ = state.handle(.enter, now: Self.now)
        }
        let ids = state.threads["@bob"]?.lines.map(\.id) ?? []
        for (index, id) in ids.prefix(3).enumerated() {
            _ = state.apply(
                .sent(id: id, conversation: .user("bob"), seq: UInt64(index + 1), time: Self.now),
                now: Self.now
            )
        }
        _ = state.apply(.receipt(conversation: .user("bob"), user: "bob", read: false, upToSeq: 2), now: Self.now)
        _ = state.apply(.receipt(conversation: .user("bob"), user: "bob", read: true, upToSeq: 1), now: Self.now)
        let rows = ChatScreen(state, now: Self.now).rows.map { $0.plain.split(separator: "│").last ?? "" }
        // Ours are "you", as in the list.
        let marked = rows.filter { $0.hasPrefix(" you: ") }.map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(marked == ["you: one ✓✓\u{A0}read", "you: two ✓✓", "you: three ✓", "you: four …"])
        #expect(!rows.contains { $0.contains("alice:") })
        #expect(rows.contains { $0.contains(" just now ") })
    }
}
