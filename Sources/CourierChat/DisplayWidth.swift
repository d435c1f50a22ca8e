/// How many terminal columns text takes: two for East Asian wide and fullwidth characters and for emoji, none for
/// combining marks and other zero-width characters, one for the rest. Counted per grapheme cluster (what the user
/// sees as one character), so "👍🏽" or "é" written with a combining accent take their true width.
public enum DisplayWidth {
    public static func of(_ text: some StringProtocol) -> Int {
        text.reduce(0) { $0 + Self.of($1) }
    }

    static func of(_ character: Character) -> Int {
        let scalars = character.unicodeScalars
        guard let first = scalars.first else { return 0 }
        if first.value < 0x20 || (0x7F..<0xA0).contains(first.value) { return 0 }
        // An emoji shown as a picture: emoji presentation by default, or text-default emoji asking for it (FE0F).
        if first.properties.isEmojiPresentation
            || (first.properties.isEmoji && scalars.contains("\u{FE0F}"))
        {
            return 2
        }
        // Combining marks inside the wide blocks (the ideographic tone marks, the kana voicing marks) take none.
        if scalars.allSatisfy(Self.isZeroWidth) { return 0 }
        if Self.isWide(first.value) { return 2 }
        return 1
    }

    private static func isZeroWidth(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .nonspacingMark, .enclosingMark, .format: true
        default: scalar.value == 0x200B || (0x1160...0x11FF).contains(scalar.value)
        }
    }

    /// East Asian Wide (W) and Fullwidth (F) ranges of Unicode's EastAsianWidth.txt, condensed.
    private static func isWide(_ value: UInt32) -> Bool {
        switch value {
        case 0x1100...0x115F,  // Hangul Jamo initial consonants
            0x2E80...0x303E,  // CJK radicals, Kangxi, ideographic description, CJK symbols and punctuation
            0x3041...0x33FF,  // Hiragana, Katakana, Bopomofo, Hangul compatibility Jamo, Kanbun, CJK strokes
            0x3400...0x4DBF,  // CJK Extension A
            0x4E00...0x9FFF,  // CJK unified ideographs
            0xA000...0xA4CF,  // Yi
            0xA960...0xA97F,  // Hangul Jamo extended A
            0xAC00...0xD7A3,  // Hangul syllables
            0xF900...0xFAFF,  // CJK compatibility ideographs
            0xFE10...0xFE19,  // vertical forms
            0xFE30...0xFE6F,  // CJK compatibility forms, small form variants
            0xFF00...0xFF60,  // fullwidth forms
            0xFFE0...0xFFE6,
            0x1B000...0x1B2FF,  // Kana supplement and extensions
            0x1F200...0x1F2FF,  // enclosed ideographic supplement
            0x20000...0x2FFFD,  // CJK extensions B–F
            0x30000...0x3FFFD:  // CJK extension G and later
            true
        default:
            false
        }
    }
}
