// The exact check a search's candidates pass: where a query matches a text, word by word and run by run.

extension SearchText {
    /// Where a query matches a text, as ranges of the text's own characters (sorted, not overlapping); nil when it
    /// does not match: some word of the query is not a word of the text, or some run of CJK characters does not
    /// stand in the text as a whole. (The index's tokens carry no positions: `上海东` finds a text where `上海` and
    /// `海东` stand apart. This is the exact check a page of candidates passes, and the marks its fragments show.)
    ///
    /// It looks at as much of the query as ``queryTokens(_:)`` asks for, so it never says yes where the index would
    /// not have found the text; its cost is the text's length times that (bounded) query.
    public static func matches(in text: String, query: String) -> [Range<String.Index>]? {
        Self.matches(in: text, query: Query(query))
    }

    /// A query cut once into what it asks for, for the exact check of many texts.
    public struct Query: Sendable {
        let asked: [Piece]

        public init(_ query: String) {
            self.asked = Array(
                SearchText.pieces(of: SearchText.normalized(SearchText.bounded(query))).prefix(
                    SearchText.maxQueryTokens
                )
            )
        }
    }

    /// Where a query (cut once) matches a text: as ``matches(in:query:)-(String,String)``.
    public static func matches(in text: String, query: Query) -> [Range<String.Index>]? {
        // (The ranges index `text`: `normalized` keeps the text's own indices as origins.)
        let asked = query.asked
        guard !asked.isEmpty else { return nil }
        let normal = Self.normalized(text)
        // Its words (by their index form), CJK runs and emoji, as ranges of `normal`.
        var words: [String: [Range<Int>]] = [:]
        var emoji: [String: [Range<Int>]] = [:]
        var runs: [Range<Int>] = []
        var position = 0
        while position < normal.count {
            let kind = normal[position].kind
            var end = position + 1
            if kind == .cjk || kind == .wordCharacter {
                while end < normal.count, normal[end].kind == kind { end += 1 }
            }
            switch kind {
            case .wordCharacter:
                let word = Self.token(normal[position..<end].prefix(Self.maxWordCharacters).map(\.character))
                words[word, default: []].append(position..<end)
            case .emoji: emoji[Self.token([normal[position].character]), default: []].append(position..<end)
            case .cjk: runs.append(position..<end)
            case .separator: break
            }
            position = end
        }
        var found: [Range<Int>] = []
        // The text's words, sorted at the first query word that needs them.
        var sorted: [String] = []
        for piece in asked {
            var hits: [Range<Int>] = []
            switch piece {
            case .word(let word):
                // A word of the text that begins with it (one that is it, when it is short), marked as far as it
                // goes.
                let count = word.count
                if count < Self.prefixLengths[0] {
                    hits = words[word] ?? []
                } else {
                    // The text's words in order: those it begins stand together from where it would stand (a word's
                    // scalars begin with its beginning's, all NFC), found by halving, so that a query word costs the
                    // words it begins, not every word of the text.
                    if sorted.isEmpty { sorted = words.keys.sorted() }
                    var low = 0
                    var high = sorted.count
                    while low < high {
                        let middle = (low + high) / 2
                        if sorted[middle] < word { low = middle + 1 } else { high = middle }
                    }
                    while low < sorted.count, sorted[low].unicodeScalars.starts(with: word.unicodeScalars) {
                        // (A scalar's beginning that splits a character, `q` of `q́`, is not the word's.)
                        if sorted[low].hasPrefix(word) {
                            hits += words[sorted[low], default: []].map {
                                $0.lowerBound..<($0.lowerBound + min(count, $0.count))
                            }
                        }
                        low += 1
                    }
                }
            case .emoji(let symbol): hits = emoji[symbol] ?? []
            case .cjk(let whole):
                let run = whole.prefix(Self.maxQueryRun)
                for segment in runs where segment.count >= run.count {
                    for start in segment.lowerBound...(segment.upperBound - run.count)
                    where zip(normal[start..<(start + run.count)], run).allSatisfy({ $0.character == $1 }) {
                        hits.append(start..<(start + run.count))
                    }
                }
            }
            guard !hits.isEmpty else { return nil }
            found += hits
        }
        // Merged where they meet or overlap, then mapped back to the text's characters.
        var ranges: [Range<String.Index>] = []
        for range in found.sorted(by: { $0.lowerBound < $1.lowerBound }) {
            let mapped = normal[range.lowerBound].origin..<text.index(after: normal[range.upperBound - 1].origin)
            if let last = ranges.last, mapped.lowerBound <= last.upperBound {
                ranges[ranges.count - 1] = last.lowerBound..<max(last.upperBound, mapped.upperBound)
            } else {
                ranges.append(mapped)
            }
        }
        return ranges
    }
}
