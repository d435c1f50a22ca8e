import CourierStore
import CourierTesting
import Testing

/// The cutting of text into search tokens, which both databases index alike: a query finds a text when the text's
/// tokens hold all of the query's, and the exact check then agrees.
@Suite("Search tokens: Chinese, Japanese, Korean, accented Latin, right-to-left scripts, emoji")
struct SearchTextTests {
    static func finds(_ query: String, in text: String) -> Bool {
        // As the databases compare them: by their bytes (Swift's strings compare canonically equivalent ones equal).
        let asked = SearchText.queryTokens(query).map { Array($0.utf8) }
        let indexed =
            !asked.isEmpty && Set(asked).isSubset(of: Set(SearchText.indexTokens(text).map { Array($0.utf8) }))
        let exact = SearchText.matches(in: text, query: query) != nil
        // The exact check never says yes where the index would not have found the text.
        #expect(indexed || !exact, "\(query) matches \(text) exactly, but the index would not find it")
        return indexed && exact
    }

    /// A word's beginning as the index holds it.
    static func prefix(_ beginning: String) -> String { "\u{E001}" + beginning }

    @Test(
        "Chinese: words of one, two and more characters are found inside a run without spaces; others are not",
        arguments: [
            ("上海", "我家在上海东边", true),
            ("上", "我家在上海东边", true),
            ("上海东边", "我家在上海东边", true),
            ("我家在上海东边", "我家在上海东边", true),
            ("北京", "我家在上海东边", false),
            ("海上", "我家在上海东边", false),
            ("上海 东边", "东边的房子比上海的贵", true),
            ("明天见", "好的，明天见！", true),
        ]
    )
    func chinese(query: String, text: String, found: Bool) {
        #expect(Self.finds(query, in: text) == found, "\(query) in \(text): \(SearchText.indexTokens(text))")
    }

    @Test(
        "Japanese: kana and kanji runs, half-width katakana as full-width, voicing marks kept",
        arguments: [
            ("タワー", "東京タワーに行きました", true),
            ("行き", "東京タワーに行きました", true),
            ("東", "東京タワーに行きました", true),
            ("ﾀﾜｰ", "東京タワーに行きました", true),
            ("か", "がっこうへいく", false),
            ("が", "がっこうへいく", true),
            ("大阪", "東京タワーに行きました", false),
        ]
    )
    func japanese(query: String, text: String, found: Bool) {
        #expect(Self.finds(query, in: text) == found, "\(query) in \(text): \(SearchText.indexTokens(text))")
    }

    @Test(
        "words: case, accents and full-width forms folded; Korean, Arabic, Hebrew and Cyrillic as they are written",
        arguments: [
            ("cafe", "Meet at the Café, 8pm", true),
            ("CAFÉ", "meet at the cafe", true),
            ("naive", "a naïve plan", true),
            ("abc123", "ＡＢＣ１２３ is the code", true),
            ("swift 代码", "我用Swift写代码", true),
            ("写代", "我用Swift写代码", true),
            ("swiftui", "我用Swift写代码", false),
            ("안녕", "안녕하세요 여러분", true),
            ("مرحبا", "مرحبا بالعالم", true),
            ("עולם", "שלום עולם", true),
            ("привет", "Привет, мир!", true),
            ("мир", "Привет, мир!", true),
            ("plan", "a naïve planner", true),
            ("tomor", "See you TOMORROW 👋", true),
            ("tomorr", "see you tomorrow", true),
            ("tomorrows", "see you tomorrow", false),
            ("tomorrow", "see you tomorrows", true),
            ("caf", "Meet at the Café", true),
            ("ca", "Meet at the Café", false),
            ("ca", "ca va", true),
            ("morrow", "see you tomorrow", false),
            ("при", "Привет, мир!", true),
            ("مرح", "مرحبا بالعالم", true),
            ("שלו", "שלום עולם", true),
            ("straß", "Die Straßenbahn", true),
            ("ΟΔΟΣ", "στην οδός", true),
            ("strasse", "Die Straße", true),
            ("ㅋㅋ", "ㅋㅋㅋ 진짜", true),
            ("고마워", "고마워ㅠㅠ", true),
            ("葛飾", "葛\u{E0100}飾区", true),
        ]
    )
    func words(query: String, text: String, found: Bool) {
        #expect(Self.finds(query, in: text) == found, "\(query) in \(text): \(SearchText.indexTokens(text))")
    }

    @Test("emoji are tokens of their own, a family of several scalars as one; punctuation asks for nothing")
    func emojiAndPunctuation() {
        #expect(Self.finds("🎉", in: "聚会🎉明天"))
        // With or without the emoji variation selector, a heart is a heart.
        #expect(Self.finds("❤️", in: "love ❤ you") && Self.finds("❤", in: "love ❤️ you"))
        // NFKC would make ℹ️ a letter i: an emoji stays an emoji.
        #expect(!Self.finds("i", in: "see ℹ️ here"))
        #expect(Self.finds("聚会", in: "聚会🎉明天"))
        #expect(Self.finds("👨‍👩‍👧", in: "family 👨‍👩‍👧 photo"))
        #expect(!Self.finds("👨", in: "family 👨‍👩‍👧 photo"), "a part of a family is not the family")
        #expect(SearchText.queryTokens("  ?!。，…  ").isEmpty)
        #expect(SearchText.queryTokens("").isEmpty)
        // Digits are words, not keycap emoji.
        #expect(SearchText.indexTokens("room 101 ok") == [Self.prefix("roo"), Self.prefix("101"), "ok"])
    }

    @Test("a CJK run indexes each character and each pair; a query asks for its pairs only, or its one character")
    func shapes() {
        #expect(SearchText.indexTokens("上海东") == ["上", "上海", "海", "海东", "东"])
        #expect(SearchText.queryTokens("上海东") == ["上海", "海东"])
        #expect(SearchText.queryTokens("上") == ["上"])
        #expect(
            SearchText.indexTokens("Hello, hello WORLD")
                == [Self.prefix("hel"), Self.prefix("wor")]
        )
        // Beginnings of 3 and 6 characters, whatever the script; a query asks for the longest its word reaches.
        #expect(
            SearchText.indexTokens("Привет")
                == [Self.prefix("при"), Self.prefix("привет")]
        )
        #expect(SearchText.queryTokens("tomor ok") == [Self.prefix("tom"), "ok"])
        #expect(SearchText.queryTokens("internationalization") == [Self.prefix("intern")])
    }

    @Test("hostile sizes: a huge word is cut, a text as long as a message is indexed whole, a huge query bounded")
    func bounds() {
        let word = String(repeating: "a", count: 64 * 1024)
        #expect(
            SearchText.indexTokens(word)
                == [3, 6].map { Self.prefix(String(repeating: "a", count: $0)) }
        )
        #expect(Self.finds(word, in: word))
        let text = (0..<10_000).map { "z" + String(100_000 + $0).dropFirst() }.joined(separator: " ")
        // Every word (z00000…z09999) as its six characters, and the ten beginnings of three they share.
        let tokens = SearchText.indexTokens(text)
        #expect(tokens.count == 10_000 + 10 && tokens.contains(Self.prefix("z09999")))
        #expect(SearchText.queryTokens(text).count == SearchText.maxQueryTokens)
        // A megabyte of query is looked at up to its first characters only, before any work on the rest.
        let huge = String(repeating: "上海", count: 500_000)
        #expect(SearchText.queryTokens(huge) == ["上海", "海上"])
        // The exact check asks for the run's first maxQueryRun characters, whole.
        #expect(SearchText.matches(in: String(repeating: "上海", count: 20), query: huge) != nil)
        #expect(SearchText.matches(in: "上海上海", query: huge) == nil)
    }

    /// The marked parts of a text, each in brackets.
    static func marked(_ text: String, _ query: String) -> String? {
        guard let ranges = SearchText.matches(in: text, query: query) else { return nil }
        var result = ""
        var at = text.startIndex
        for range in ranges {
            result += text[at..<range.lowerBound] + "[" + text[range] + "]"
            at = range.upperBound
        }
        return result + text[at...]
    }

    @Test(
        "the exact check and its marks: runs must stand whole, words must be words; marks fall on the text's own characters",
        arguments: [
            ("我家在上海东边", "上海", "我家在[上海]东边"),
            ("上海的东西很贵，海东在青海", "上海东", nil),
            ("上海东边和上海", "上海", "[上海]东边和[上海]"),
            ("Meet at the Café, 8pm", "cafe", "Meet at the [Café], 8pm"),
            ("ＡＢＣ１２３ is the code", "abc123", "[ＡＢＣ１２３] is the code"),
            ("東京ﾀﾜｰに行きました", "タワー", "東京[ﾀﾜｰ]に行きました"),
            ("我用Swift写代码", "swift 代码", "我用[Swift]写[代码]"),
            ("a naïve planner", "plan", "a naïve [plan]ner"),
            ("see you tomorrow, tomorrow", "tomor", "see you [tomor]row, [tomor]row"),
            ("Привет, мир!", "при мир", "[При]вет, [мир]!"),
            ("a naïve planner", "planners", nil),
            ("聚会🎉明天见", "🎉 明天", "聚会[🎉明天]见"),
            ("مرحبا بالعالم", "بالعالم", "مرحبا [بالعالم]"),
            ("nothing here", "?!", nil),
            ("ㅋㅋㅋ 진짜", "ㅋㅋ", "[ㅋㅋㅋ] 진짜"),
            ("στην οδός", "ΟΔΟΣ", "στην [οδός]"),
        ]
    )
    func exactMatches(text: String, query: String, expected: String?) {
        #expect(Self.marked(text, query) == expected)
        // Whatever matches exactly is found by the index's tokens too: the check only narrows.
        if expected != nil { #expect(Self.finds(query, in: text)) }
    }

    /// The marked parts of a fragment.
    static func marked(_ fragment: SearchText.Fragment) -> [String] {
        let scalars = Array(fragment.text.unicodeScalars)
        return fragment.marks.map { String(String.UnicodeScalarView(scalars[$0])) }
    }

    @Test("a fragment around the first match: cut with … at each end, marks moved with it; a short text whole")
    func fragments() throws {
        let long = String(repeating: "前面的话很长。", count: 10) + "我们明天在上海见面吧" + String(repeating: "后面也很长。", count: 10)
        let marks = try #require(SearchText.matches(in: long, query: "上海"))
        let fragment = SearchText.fragment(of: long, marks: marks, context: 5, width: 20)
        #expect(fragment.text.hasPrefix("…") && fragment.text.hasSuffix("…") && fragment.text.count == 22)
        #expect(Self.marked(fragment) == ["上海"], "\(fragment)")
        let short = "see you in 上海"
        let whole = SearchText.fragment(of: short, marks: try #require(SearchText.matches(in: short, query: "上海")))
        #expect(whole.text == short && whole.marks == [11..<13])
        // Marks count Unicode scalars: an accent typed apart is a scalar of its own.
        let accented = "Cafe\u{301} au lait, café"
        let both = SearchText.fragment(
            of: accented,
            marks: try #require(SearchText.matches(in: accented, query: "CAFE"))
        )
        #expect(both.marks == [0..<5, 15..<19] && Self.marked(both) == ["Cafe\u{301}", "café"])
        // A match near the end: the fragment ends with the text, no … after it.
        let ending = String(repeating: "x ", count: 100) + "the end 完"
        let last = SearchText.fragment(of: ending, marks: try #require(SearchText.matches(in: ending, query: "完")))
        #expect(last.text.hasPrefix("…") && last.text.hasSuffix("完") && last.text.count == 81)
        #expect(Self.marked(last) == ["完"])
    }

    @Test("any run of CJK characters is found in any text it is part of (randomized)")
    func substrings() {
        var random = SeededRandom(seed: TestSeed.make(for: "search substrings"))
        let alphabet = Array("上海东边我家在北京明天见东京タワーに行きましたがっこう안녕하세요中文搜索")
        for _ in 0..<500 {
            let length = Int.random(in: 1...30, using: &random)
            let text = String((0..<length).map { _ in alphabet.randomElement(using: &random)! })
            let start = Int.random(in: 0..<length, using: &random)
            let end = Int.random(in: (start + 1)...length, using: &random)
            let query = String(Array(text)[start..<end])
            #expect(Self.finds(query, in: "前缀 \(text) suffix"), "\(query) in \(text)")
            #expect(SearchText.matches(in: "前缀 \(text) suffix", query: query) != nil, "\(query) in \(text)")
        }
    }

    @Test("random text in every script, marks and joiners: nothing traps, and what matches exactly the index finds")
    func randomText() {
        var random = SeededRandom(seed: TestSeed.make(for: "search random text"))
        // Pieces that stress the cutting: combining marks alone, joiners, variation selectors, skin tones, flags,
        // full-width forms, ligatures, RTL and bidi marks, Hangul jamo, kana with voicing marks, digits, spaces.
        let pool: [String] = [
            "a", "Z", "é", "e\u{301}", "\u{301}", "\u{200D}", "\u{FE0F}", "🏽", "👍", "👨‍👩‍👧", "🇨🇳", "1️⃣", "ｱ", "ﾞ",
            "Ａ", "ﬁ", "㍿", "中", "文", "上", "海", "が", "か", "\u{3099}", "ー", "한", "\u{1100}", "\u{1161}", "ع", "ש",
            "\u{200F}", "ß", "İ", "σ", "Σ", "ς", "5", "٣", " ", ".", "\n", "!", "_", "#", "*", "ㅋ", "ㅠ", "ㄱ", "ㅏ",
            "ﾞ", "\u{E0100}", "❤", "ℹ️", "・",
        ]
        for _ in 0..<400 {
            let text = (0..<Int.random(in: 0...40, using: &random)).map { _ in pool.randomElement(using: &random)! }
                .joined()
            let characters = Array(text)
            var query = ""
            if !characters.isEmpty {
                let start = Int.random(in: 0..<characters.count, using: &random)
                let end = Int.random(in: start...characters.count, using: &random)
                query = String(characters[start..<end])
            }
            _ = SearchText.indexTokens(text)
            // The whole text as a query matches it (when it asks for anything).
            if !SearchText.queryTokens(text).isEmpty, text.count <= 30 {
                #expect(SearchText.matches(in: text, query: text) != nil, "\(text.debugDescription)")
            }
            if let marks = SearchText.matches(in: text, query: query) {
                #expect(Self.finds(query, in: text), "\(query.debugDescription) in \(text.debugDescription)")
                let fragment = SearchText.fragment(of: text, marks: marks, context: 3, width: 10)
                #expect(
                    fragment.marks.allSatisfy { $0.upperBound <= fragment.text.unicodeScalars.count },
                    "\(text.debugDescription): \(fragment)"
                )
            }
        }
    }

    @Test("ASCII and the common CJK blocks, read a scalar at a time, give exactly the tokens of the general way")
    func commonTextsFastPath() {
        var random = SeededRandom(seed: TestSeed.make(for: "search common texts"))
        // Every kind the fast way takes: upper and lower case, digits, ASCII punctuation and controls, CR LF (one
        // character of two scalars), ideographs, kana, Hangul syllables, at the ends of their blocks too.
        let pool: [String] = [
            "a", "Z", "q", "0", "9", " ", ".", "-", "_", "\r\n", "\r", "\n", "\t", "\u{0}", "\u{7F}", "~", "@",
            "中", "文", "上", "海", "\u{4E00}", "\u{9FFF}", "ぁ", "\u{3096}", "ァ", "\u{30FA}", "가", "\u{D7A3}", "한",
            "Hello", "WORLD", String(repeating: "x", count: 70),
        ]
        for _ in 0..<2_000 {
            let text = (0..<Int.random(in: 0...30, using: &random)).map { _ in pool.randomElement(using: &random)! }
                .joined()
            let fast = SearchText.commonIndexTokens(text)
            #expect(fast != nil, "\(text.debugDescription)")
            #expect(fast == SearchText.generalIndexTokens(text), "\(text.debugDescription)")
        }
        // Anything else takes the general way.
        for text in ["café", "ｱ", "👍", "e\u{301}", "ー", "々", "\u{80}", "ß", "ع"] {
            #expect(SearchText.commonIndexTokens("abc " + text) == nil, "\(text.debugDescription)")
        }
    }

    @Test("a clean text: no control (general category Cc) and no bidirectional control, for every scalar")
    func cleanEveryScalar() {
        for value in UInt32(0)...0x10FFFF {
            guard let scalar = Unicode.Scalar(value) else { continue }
            let expected =
                scalar.properties.generalCategory != .control && !(0x202A...0x202E).contains(value)
                && !(0x2066...0x2069).contains(value)
            if StoreText.isClean(String(scalar)) != expected {
                Issue.record("U+\(String(value, radix: 16)): isClean is \(!expected)")
            }
        }
    }
}
