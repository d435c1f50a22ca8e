/// How Courier cuts text into the tokens its search index holds and a query asks for: here, once, for every
/// database, so that SQLite and PostgreSQL answer every query alike.
///
/// Neither database's own tokenizer serves Chinese or Japanese: SQLite's `unicode61` takes a run of Han characters
/// for one token (`上海` would not find 我家在上海东边), its trigram tokenizer finds nothing under three characters, and
/// PostgreSQL's parser does not split Chinese either. So:
///
/// - Each character is first brought to one form, alone (so that a query and a text agree however their
///   neighbours compose): variation selectors dropped; an emoji kept as it is; anything else NFKC (full-width letters
///   and digits become ASCII, half-width katakana full-width, ligatures letters), then lower case with `ς` as `σ`
///   and `ß` as `ss`. Every token is stored in NFC.
/// - A run of Chinese, Japanese or Korean characters gives each character and each pair of neighbours (overlapping
///   bigrams): two-character words, the commonest in Chinese, are found, and so is any longer run, as its bigrams.
/// - Any other run of letters, digits and marks (Latin, Cyrillic, Greek, Arabic, Hebrew, Devanagari, …) is a word,
///   its accents removed (`café` is `cafe`); kana keep their voicing marks (`が` is not `か`).
/// - An emoji (a whole grapheme: `👨‍👩‍👧` is one) is a token of its own; everything else separates.
///
/// - A word of three characters or more is held as its beginnings of ``prefixLengths`` characters (those no longer
///   than itself), each marked as a beginning (``prefixMark``): `tomorrow` gives `tom` and `tomorr`; a
///   shorter word as itself.
///
/// A query is cut alike, except that a run of several CJK characters asks for its bigrams only, and a word asks to
/// begin a word of the text: one of one or two characters asks for that whole word, a longer one for the longest of
/// its beginnings the index holds (`tom` for `tomor`; the exact check then looks at the whole of it). So `tomor`
/// finds tomorrow, in any script whose words are cut by spaces, as a CJK run finds what holds it. A message matches
/// a query when it holds every token the query asks for.
public enum SearchText {
    /// The longest word kept, in characters: a longer one is cut (the same way in the text and in a query).
    public static let maxWordCharacters = 64
    /// The most distinct tokens one text gives: the rest of a text longer than any message is not indexed.
    public static let maxIndexTokens = 65_536
    /// The longest run of CJK characters a query asks for whole (its first characters; a query is short).
    public static let maxQueryRun = Self.maxQueryTokens + 1
    /// The most characters of a query looked at (the rest asks for nothing), before any work on them.
    public static let maxQueryCharacters = 1_024
    /// The most tokens a query asks for: the rest of a very long query is not asked.
    public static let maxQueryTokens = 32
    /// The lengths, in characters, of the beginnings of a word the index holds: two, not every one, so that a word
    /// costs the index at most two tokens (a send's cost stays where it was: docs/BENCHMARKS.md, "Search by a word's
    /// beginning"); a query asks for the longest its own word reaches, and the exact check does the rest.
    public static let prefixLengths = [3, 6]
    /// What marks a token as a word's beginning rather than a whole word: a private-use character, which no word
    /// holds (nor the conversation's token, ``SearchIndex/conversationToken(_:)``, `U+E000`).
    static let prefixMark: Character = "\u{E001}"

    /// What the index holds of a word (already a token) of `count` characters: a short one whole, a longer one as
    /// its beginnings (the whole word is never asked for: a query's word of that length asks for a beginning).
    static func addWord(_ word: String, count: Int, to tokens: inout OrderedTokens) {
        guard count >= Self.prefixLengths[0] else { return tokens.add(word) }
        for length in Self.prefixLengths where length <= count {
            var token = String(Self.prefixMark)
            token.unicodeScalars.append(
                contentsOf: length == count ? word.unicodeScalars[...] : word.prefix(length).unicodeScalars[...]
            )
            tokens.add(token)
        }
    }

    /// The token a query's word asks for: the whole word when it is short, else its longest beginning the index
    /// holds.
    static func queryToken(ofWord word: String) -> String {
        let count = word.count
        guard let length = Self.prefixLengths.last(where: { $0 <= count }) else { return word }
        return String(Self.prefixMark) + word.prefix(length)
    }

    /// The tokens of a text for the index: each once, in the order first met, at most ``maxIndexTokens``.
    public static func indexTokens(_ text: String) -> [String] {
        Self.commonIndexTokens(text) ?? Self.generalIndexTokens(text)
    }

    /// ``indexTokens(_:)`` of a text of ASCII and the common CJK blocks alone (``isCommonCJK(_:)``), the commonest
    /// texts, read a Unicode scalar at a time; nil for any other text. The same tokens as the general way: in such a
    /// text every scalar is a character of its own (but CR LF, two separators either way), ASCII letters are
    /// lowered, digits and letters make words, other ASCII separates, and a CJK scalar is its own form, in NFC.
    package static func commonIndexTokens(_ text: String) -> [String]? {
        var tokens = OrderedTokens(limit: Self.maxIndexTokens)
        var word: [UInt8] = []
        var run: [Unicode.Scalar] = []
        word.reserveCapacity(Self.maxWordCharacters)
        func endWord() {
            guard !word.isEmpty else { return }
            let whole = String(decoding: word.prefix(Self.maxWordCharacters), as: UTF8.self)
            // ASCII: a character a byte.
            Self.addWord(whole, count: min(word.count, Self.maxWordCharacters), to: &tokens)
            word.removeAll(keepingCapacity: true)
        }
        func endRun() {
            guard !run.isEmpty else { return }
            for index in run.indices {
                tokens.add(String(run[index]))
                if index + 1 < run.count {
                    var pair = String(run[index])
                    pair.unicodeScalars.append(run[index + 1])
                    tokens.add(pair)
                }
            }
            run.removeAll(keepingCapacity: true)
        }
        for scalar in text.unicodeScalars {
            let value = scalar.value
            if value < 0x80 {
                endRun()
                switch value {
                case 0x41...0x5A: word.append(UInt8(value + 0x20))
                case 0x30...0x39, 0x61...0x7A: word.append(UInt8(value))
                default: endWord()
                }
            } else if Self.isCommonCJK(value) {
                endWord()
                run.append(scalar)
            } else {
                return nil
            }
        }
        endWord()
        endRun()
        return tokens.list
    }

    /// ``indexTokens(_:)`` of any text, a character at a time.
    package static func generalIndexTokens(_ text: String) -> [String] {
        var tokens = OrderedTokens(limit: Self.maxIndexTokens)
        for piece in Self.pieces(of: Self.normalized(text)) {
            switch piece {
            case .word(let word):
                Self.addWord(word, count: word.count, to: &tokens)
            case .emoji(let word):
                tokens.add(word)
            case .cjk(let run):
                for (index, character) in run.enumerated() {
                    tokens.add(Self.token([character]))
                    if index + 1 < run.count { tokens.add(Self.token(run[index...(index + 1)])) }
                }
            }
            if tokens.isFull { break }
        }
        return tokens.list
    }

    /// The tokens a query asks for: each once, at most ``maxQueryTokens``; empty when it asks for nothing (only
    /// spaces and punctuation).
    public static func queryTokens(_ query: String) -> [String] {
        var tokens = OrderedTokens(limit: Self.maxQueryTokens)
        for piece in Self.pieces(of: Self.normalized(Self.bounded(query))) {
            switch piece {
            case .word(let word):
                tokens.add(Self.queryToken(ofWord: word))
            case .emoji(let word):
                tokens.add(word)
            case .cjk(let run):
                if run.count == 1 {
                    tokens.add(Self.token(run))
                } else {
                    for index in 0..<(run.count - 1) { tokens.add(Self.token(run[index...(index + 1)])) }
                }
            }
            if tokens.isFull { break }
        }
        return tokens.list
    }

    /// A piece of a text around its first match, to show in a list of results: with `…` where the text was cut, and
    /// the matches within it marked (``marks``, in Unicode scalars of ``text``: offsets that do not move when the
    /// fragment is put together, as grapheme clusters may at a cut).
    public struct Fragment: Hashable, Sendable {
        public var text: String
        public var marks: [Range<Int>]

        public init(text: String, marks: [Range<Int>]) {
            self.text = text
            self.marks = marks
        }
    }

    /// The fragment of a text around the first of its matches (``matches(in:query:)``): `context` characters before
    /// it, and after it as many as make the fragment at most `width` characters (and `…` at each end cut); the whole
    /// text when it is that short.
    public static func fragment(
        of text: String,
        marks: [Range<String.Index>],
        context: Int = 20,
        width: Int = 80
    ) -> Fragment {
        let width = max(1, width)
        let context = min(max(0, context), width / 2)
        let scalars = text.unicodeScalars
        let offset = { (index: String.Index) in scalars.distance(from: scalars.startIndex, to: index) }
        let count = text.count
        let first = marks.first.map { text.distance(from: text.startIndex, to: $0.lowerBound) } ?? 0
        let start = count <= width ? 0 : min(max(0, first - context), max(0, count - width))
        let end = min(count, start + width)
        let from = text.index(text.startIndex, offsetBy: start)
        let to = text.index(from, offsetBy: end - start)
        let head = start > 0 ? "…" : ""
        let tail = end < count ? "…" : ""
        let (lowest, highest) = (offset(from), offset(to))
        let shift = head.unicodeScalars.count - lowest
        let kept = marks.compactMap { mark -> Range<Int>? in
            let lower = max(offset(mark.lowerBound), lowest)
            let upper = min(offset(mark.upperBound), highest)
            return lower < upper ? (lower + shift)..<(upper + shift) : nil
        }
        return Fragment(text: head + String(text[from..<to]) + tail, marks: kept)
    }

    /// What a text is made of, in order.
    enum Piece: Equatable, Sendable {
        case word(String)
        case cjk([Character])
        case emoji(String)
    }

    /// One character of a text in the index's form, what kind it is, and the text's character it came from.
    struct Normal {
        var character: Character
        var kind: Kind
        var origin: String.Index
    }

    /// A query's first ``maxQueryCharacters`` characters.
    static func bounded(_ query: String) -> Substring {
        query.prefix(Self.maxQueryCharacters)
    }

    /// A text's characters, each brought to the index's form alone (see the type's description).
    static func normalized(_ text: some StringProtocol) -> [Normal] {
        var result: [Normal] = []
        result.reserveCapacity(text.utf8.count / 2)
        for index in text.indices {
            let character = text[index]
            // The commonest characters need no normalizing: ASCII (but its upper case) and the common CJK blocks.
            if let only = character.unicodeScalars.first, character.unicodeScalars.count == 1 {
                let value = only.value
                if value < 0x80 {
                    // As `kind(of:)` says of ASCII: letters and digits make words, the rest separates.
                    switch value {
                    case 0x41...0x5A:
                        result.append(
                            Normal(
                                character: Character(Unicode.Scalar(value + 0x20)!),
                                kind: .wordCharacter,
                                origin: index
                            )
                        )
                    case 0x30...0x39, 0x61...0x7A:
                        result.append(Normal(character: character, kind: .wordCharacter, origin: index))
                    default:
                        result.append(Normal(character: character, kind: .separator, origin: index))
                    }
                    continue
                }
                if Self.isCommonCJK(value) {
                    result.append(Normal(character: character, kind: .cjk, origin: index))
                    continue
                }
            }
            let scalars = character.unicodeScalars.filter { !Self.isVariationSelector($0) }
            guard !scalars.isEmpty else { continue }
            let bare = String(String.UnicodeScalarView(scalars))
            if Self.isEmoji(character) {
                for character in bare { result.append(Normal(character: character, kind: .emoji, origin: index)) }
                continue
            }
            // A prepended letter takes what follows into its grapheme, a space or punctuation too: such a grapheme
            // separates, or a token would hold a space (which neither database's index keeps whole).
            if scalars.contains(where: { $0.properties.isWhitespace || Self.isASCIISeparator($0) }) {
                result.append(Normal(character: character, kind: .separator, origin: index))
                continue
            }
            let folded = bare.precomposedStringWithCompatibilityMapping.lowercased()
                .replacingOccurrences(of: "ς", with: "σ").replacingOccurrences(of: "ß", with: "ss")
            for character in folded {
                let kind = Self.kind(of: character)
                let forms = kind == .wordCharacter ? Array(Self.unaccented(String(character))) : [character]
                for form in forms { result.append(Normal(character: form, kind: kind, origin: index)) }
            }
        }
        return result
    }

    /// A token's stored form: its characters in NFC.
    static func token(_ characters: some Sequence<Character>) -> String {
        let string = String(characters)
        // ASCII, and the common CJK blocks' characters next to each other, are in NFC already: none of them composes
        // with its neighbour (a kana's voicing mark, a Hangul trailing jamo, lie outside them).
        if string.unicodeScalars.allSatisfy({ $0.value < 0x80 || Self.isCommonCJK($0.value) }) { return string }
        return string.precomposedStringWithCanonicalMapping
    }

    /// The common CJK blocks the fast paths take as they are: CJK unified ideographs, hiragana and katakana letters,
    /// Hangul syllables (each in NFC, and NFKC, alone, and lower case).
    static func isCommonCJK(_ value: UInt32) -> Bool {
        (0x4E00...0x9FFF).contains(value) || (0x3041...0x3096).contains(value) || (0x30A1...0x30FA).contains(value)
            || (0xAC00...0xD7A3).contains(value)
    }

    static func pieces(of normal: [Normal]) -> [Piece] {
        var pieces: [Piece] = []
        var position = 0
        while position < normal.count {
            let kind = normal[position].kind
            var end = position + 1
            if kind == .cjk || kind == .wordCharacter {
                while end < normal.count, normal[end].kind == kind { end += 1 }
            }
            let characters = normal[position..<end].map(\.character)
            switch kind {
            case .wordCharacter: pieces.append(.word(Self.token(characters.prefix(Self.maxWordCharacters))))
            case .cjk: pieces.append(.cjk(characters))
            case .emoji: pieces.append(.emoji(Self.token(characters)))
            case .separator: break
            }
            position = end
        }
        return pieces
    }

    enum Kind {
        case cjk, wordCharacter, emoji, separator
    }

    static func kind(of character: Character) -> Kind {
        guard let first = character.unicodeScalars.first else { return .separator }
        if Self.isCJK(first) { return .cjk }
        if Self.isEmoji(character) { return .emoji }
        let properties = first.properties
        if properties.isAlphabetic || properties.numericType != nil {
            return .wordCharacter
        }
        switch properties.generalCategory {
        case .nonspacingMark, .spacingMark, .enclosingMark, .decimalNumber, .letterNumber, .otherNumber:
            return .wordCharacter
        default:
            return .separator
        }
    }

    /// Whether a character is an emoji: one shown as emoji by default, a keycap, or any other emoji symbol beyond
    /// ASCII (`❤` with or without U+FE0F, `©`): digits, `#` and `*` alone are not.
    static func isEmoji(_ character: Character) -> Bool {
        let scalars = character.unicodeScalars
        guard let first = scalars.first, !Self.isCJK(first) else { return false }
        return first.properties.isEmojiPresentation || scalars.contains { $0.value == 0x20E3 }
            || (first.properties.isEmoji && first.value > 0x7F)
    }

    /// ASCII that is neither a letter nor a digit.
    static func isASCIISeparator(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x80 && !(0x30...0x39).contains(scalar.value) && !(0x41...0x5A).contains(scalar.value)
            && !(0x61...0x7A).contains(scalar.value)
    }

    /// Variation selectors (text or emoji presentation, ideographic variants): they choose a glyph, not a meaning.
    static func isVariationSelector(_ scalar: Unicode.Scalar) -> Bool {
        (0xFE00...0xFE0F).contains(scalar.value) || (0xE0100...0xE01EF).contains(scalar.value)
    }

    /// Chinese (Han, with its extensions and compatibility forms, and `々`), Japanese kana (and the long-vowel mark)
    /// and Korean Hangul.
    static func isCJK(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x3005...0x3007, 0x303B,  // 々 〆 〇 〻
            0x3031...0x3035,  // kana repeat marks
            0x3041...0x309F,  // hiragana
            0x30A1...0x30FA, 0x30FC...0x30FF,  // katakana (ー among them; not the middle dot ・ nor ゠)
            0x31F0...0x31FF,  // katakana phonetic extensions
            0x3400...0x4DBF,  // CJK extension A
            0x4E00...0x9FFF,  // CJK unified ideographs
            0xF900...0xFAFF,  // CJK compatibility ideographs
            0x20000...0x323AF,  // CJK extensions B to H
            0x1100...0x11FF, 0x3130...0x318F, 0xA960...0xA97F, 0xAC00...0xD7FF:  // Hangul jamo and syllables
            return true
        default:
            return false
        }
    }

    /// A word without its accents: decomposed, its combining marks dropped where they sit on a Latin, Greek or
    /// Cyrillic letter (elsewhere, as in Devanagari or Arabic, a mark is part of the letter and stays), composed again.
    static func unaccented(_ word: String) -> String {
        var kept = String.UnicodeScalarView()
        var base: Unicode.Scalar?
        for scalar in word.decomposedStringWithCanonicalMapping.unicodeScalars {
            if scalar.properties.generalCategory == .nonspacingMark, let base, Self.foldsAccents(base) { continue }
            if scalar.properties.generalCategory != .nonspacingMark { base = scalar }
            kept.append(scalar)
        }
        return String(kept).precomposedStringWithCanonicalMapping
    }

    /// Latin, Greek and Cyrillic letters, whose accents a search ignores.
    static func foldsAccents(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x41...0x5A, 0x61...0x7A, 0xC0...0x24F, 0x1E00...0x1EFF, 0x370...0x3FF, 0x400...0x4FF: true
        default: false
        }
    }
}

/// Tokens in the order first added, each once, up to a limit.
struct OrderedTokens {
    let limit: Int
    private(set) var list: [String] = []
    private var seen: Set<String> = []

    init(limit: Int) {
        self.limit = limit
    }

    var isFull: Bool { self.list.count >= self.limit }

    mutating func add(_ token: String) {
        guard !self.isFull, !token.isEmpty, self.seen.insert(token).inserted else { return }
        self.list.append(token)
    }
}
