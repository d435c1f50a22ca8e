/// How Courier cuts text into the tokens its search index holds and a query asks for: here, once, for every
/// database, so that SQLite and PostgreSQL answer every query alike.
///
/// Neither database's own tokenizer serves Chinese or Japanese: SQLite's `unicode61` takes a run of Han characters
/// for one token (`上海` would not find 我家在上海东边), its trigram tokenizer finds nothing under three characters, and
/// PostgreSQL's parser does not split Chinese either. So:
///
/// - The text is first brought to one form: NFKC (full-width letters and digits become ASCII, half-width katakana
///   full-width, ligatures letters), then lower case.
/// - A run of Chinese, Japanese or Korean characters gives each character and each pair of neighbours (overlapping
///   bigrams): two-character words, the commonest in Chinese, are found, and so is any longer run, as its bigrams.
/// - Any other run of letters, digits and marks (Latin, Cyrillic, Greek, Arabic, Hebrew, Devanagari, …) is a word,
///   its accents removed (`café` is `cafe`); kana keep their voicing marks (`が` is not `か`).
/// - An emoji (a whole grapheme: `👨‍👩‍👧` is one) is a token of its own; everything else separates.
///
/// A query is cut alike, except that a run of several CJK characters asks for its bigrams only. A message matches a
/// query when it holds every token the query asks for.
public enum SearchText {
    /// The longest word kept, in characters: a longer one is cut (the same way in the text and in a query).
    public static let maxWordCharacters = 64
    /// The most distinct tokens one text gives: the rest of a very long text is not indexed.
    public static let maxIndexTokens = 2_048
    /// The most tokens a query asks for: the rest of a very long query is not asked.
    public static let maxQueryTokens = 32

    /// The tokens of a text for the index: each once, in the order first met, at most ``maxIndexTokens``.
    public static func indexTokens(_ text: String) -> [String] {
        var tokens = OrderedTokens(limit: Self.maxIndexTokens)
        for piece in Self.pieces(of: text) {
            switch piece {
            case .word(let word), .emoji(let word):
                tokens.add(word)
            case .cjk(let run):
                for (index, character) in run.enumerated() {
                    tokens.add(String(character))
                    if index + 1 < run.count { tokens.add(String(run[index]) + String(run[index + 1])) }
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
        for piece in Self.pieces(of: query) {
            switch piece {
            case .word(let word), .emoji(let word):
                tokens.add(word)
            case .cjk(let run):
                if run.count == 1 {
                    tokens.add(String(run[0]))
                } else {
                    for index in 0..<(run.count - 1) { tokens.add(String(run[index]) + String(run[index + 1])) }
                }
            }
            if tokens.isFull { break }
        }
        return tokens.list
    }

    /// Where a query matches a text, as ranges of the text's own characters (sorted, not overlapping); nil when it
    /// does not match: some word of the query is not a word of the text, or some run of CJK characters does not
    /// stand in the text as a whole. (The index's tokens carry no positions: `上海东` finds a text where `上海` and
    /// `海东` stand apart. This is the exact check a page of candidates passes, and the marks its fragments show.)
    public static func matches(in text: String, query: String) -> [Range<String.Index>]? {
        let asked = Self.pieces(of: query)
        guard !asked.isEmpty else { return nil }
        // The text's characters, each brought to the index's form alone, and the character each came from.
        var normal: [Character] = []
        var origin: [String.Index] = []
        for index in text.indices {
            for character in String(text[index]).precomposedStringWithCompatibilityMapping.lowercased() {
                let folded = Self.kind(of: character) == .wordCharacter ? Self.unaccented(String(character)) : nil
                for piece in folded.map(Array.init) ?? [character] {
                    normal.append(piece)
                    origin.append(index)
                }
            }
        }
        // Its words, CJK runs and emoji, as ranges of `normal`.
        var segments: [(kind: Kind, range: Range<Int>)] = []
        var position = 0
        while position < normal.count {
            let kind = Self.kind(of: normal[position])
            var end = position + 1
            if kind == .cjk || kind == .wordCharacter {
                while end < normal.count, Self.kind(of: normal[end]) == kind { end += 1 }
            }
            if kind != .separator { segments.append((kind, position..<end)) }
            position = end
        }
        var found: [Range<Int>] = []
        for piece in asked {
            var hits: [Range<Int>] = []
            switch piece {
            case .word(let word):
                for segment in segments where segment.kind == .wordCharacter {
                    let letters = normal[segment.range].prefix(Self.maxWordCharacters)
                    if String(letters) == word { hits.append(segment.range) }
                }
            case .emoji(let emoji):
                for segment in segments where segment.kind == .emoji && String(normal[segment.range]) == emoji {
                    hits.append(segment.range)
                }
            case .cjk(let run):
                for segment in segments where segment.kind == .cjk && segment.range.count >= run.count {
                    for start in segment.range.lowerBound...(segment.range.upperBound - run.count)
                    where Array(normal[start..<(start + run.count)]) == run {
                        hits.append(start..<(start + run.count))
                    }
                }
            }
            guard !hits.isEmpty else { return nil }
            found += hits
        }
        // Merged where they meet or overlap, then mapped back to the text's characters.
        var merged: [Range<Int>] = []
        for range in found.sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = merged.last, range.lowerBound <= last.upperBound {
                merged[merged.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        var ranges: [Range<String.Index>] = []
        for range in merged {
            let range = origin[range.lowerBound]..<text.index(after: origin[range.upperBound - 1])
            if let last = ranges.last, range.lowerBound <= last.upperBound {
                ranges[ranges.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
            } else {
                ranges.append(range)
            }
        }
        return ranges
    }

    /// A piece of a text around its first match, to show in a list of results: with `…` where the text was cut, and
    /// the matches within it marked (``marks``, in Unicode scalars of ``text``: offsets that do not move when the
    /// fragment is put together, as grapheme clusters may at a cut).
    public struct Fragment: Hashable, Sendable {
        public var text: String
        public var marks: [Range<Int>]
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
    enum Piece: Equatable {
        case word(String)
        case cjk([Character])
        case emoji(String)
    }

    static func pieces(of text: String) -> [Piece] {
        let normal = text.precomposedStringWithCompatibilityMapping.lowercased()
        var pieces: [Piece] = []
        var word = ""
        var wordLength = 0
        var run: [Character] = []
        func flush() {
            if !word.isEmpty { pieces.append(.word(Self.unaccented(word))) }
            if !run.isEmpty { pieces.append(.cjk(run)) }
            word = ""
            wordLength = 0
            run = []
        }
        for character in normal {
            switch Self.kind(of: character) {
            case .cjk:
                if !word.isEmpty {
                    pieces.append(.word(Self.unaccented(word)))
                    word = ""
                    wordLength = 0
                }
                run.append(character)
            case .wordCharacter:
                if !run.isEmpty {
                    pieces.append(.cjk(run))
                    run = []
                }
                if wordLength < Self.maxWordCharacters {
                    word.append(character)
                    wordLength += 1
                }
            case .emoji:
                flush()
                pieces.append(.emoji(String(character)))
            case .separator:
                flush()
            }
        }
        flush()
        return pieces
    }

    enum Kind {
        case cjk, wordCharacter, emoji, separator
    }

    static func kind(of character: Character) -> Kind {
        guard let first = character.unicodeScalars.first else { return .separator }
        if Self.isCJK(first) { return .cjk }
        let properties = first.properties
        // Digits, `#` and `*` are emoji too, but only with a variation selector or a keycap do they show as one.
        if properties.isEmojiPresentation || (properties.isEmoji && character.unicodeScalars.count > 1) {
            return .emoji
        }
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

    /// Chinese (Han, with its extensions and compatibility forms, and `々`), Japanese kana (and the long-vowel mark)
    /// and Korean Hangul.
    static func isCJK(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x3005, 0x3007,  // 々 〇
            0x3040...0x30FF,  // hiragana, katakana (ー among them)
            0x31F0...0x31FF,  // katakana phonetic extensions
            0x3400...0x4DBF,  // CJK extension A
            0x4E00...0x9FFF,  // CJK unified ideographs
            0xF900...0xFAFF,  // CJK compatibility ideographs
            0x20000...0x3134F,  // CJK extensions B to G
            0x1100...0x11FF, 0x3130...0x318F, 0xAC00...0xD7AF:  // Hangul jamo and syllables
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
private struct OrderedTokens {
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
