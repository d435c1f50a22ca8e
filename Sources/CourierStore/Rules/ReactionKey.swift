/// The rule for a reaction's key: one emoji (one extended grapheme cluster: `👍`, `❤️`, `👨‍👩‍👧`, `🇨🇳`, `1️⃣`, `👍🏽`) or
/// one short word in any script (`好`, `lol`, `+1`, `شكرا`), at most ``maxBytes`` bytes of UTF-8, with no space, no
/// control character and no bidirectional control. Keys are compared in NFC, so the same word typed two ways is one
/// key.
public enum ReactionKey {
    /// The longest key, in bytes of UTF-8.
    public static let maxBytes = 32

    /// The longest emoji key, in bytes of UTF-8 (a family or a couple with skin tones takes 35).
    public static let maxEmojiBytes = 64

    /// The key as stored and compared: an emoji that shows as text by default with U+FE0F after it (`❤` is `❤️`),
    /// a word in NFC.
    ///
    /// - Throws: ``CourierStoreError`` with code `invalid-reaction`, saying what is wrong.
    public static func validate(_ key: String) throws -> String {
        let refused = CourierStoreError(
            .invalidReaction,
            "a reaction is one emoji, or one word of at most \(maxBytes) bytes (letters and digits, with + - _ ! ? . ' ’)"
        )
        // The length first, without copying: a hostile key may be a megabyte long.
        guard !key.isEmpty, key.utf8.count <= Self.maxEmojiBytes else { throw refused }
        if key.count == 1, let emoji = Self.emoji(key.first!) { return emoji }
        let word = key.precomposedStringWithCanonicalMapping
        guard word.utf8.count <= Self.maxBytes, StoreText.isClean(word) else { throw refused }
        let isWordCharacter = { (scalar: Unicode.Scalar) -> Bool in
            let properties = scalar.properties
            // Invisible ones (fillers, joiners, variation selectors) would make keys that look alike.
            guard !properties.isDefaultIgnorableCodePoint else { return false }
            switch properties.generalCategory {
            case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .otherLetter, .nonspacingMark, .spacingMark,
                .decimalNumber, .letterNumber, .otherNumber:
                return true
            default:
                return "+-_!?.'’".unicodeScalars.contains(scalar)
            }
        }
        guard word.unicodeScalars.allSatisfy(isWordCharacter),
            word.unicodeScalars.contains(where: { $0.properties.isAlphabetic || $0.properties.numericType != nil })
        else { throw refused }
        return word
    }

    /// A character as an emoji key, or nil when it is not one emoji: an emoji (by default, or with U+FE0F), with
    /// only what an emoji is made of after it (skin tones, U+FE0F, a keycap, zero-width joiners each followed by an
    /// emoji, a flag's second letter, a subdivision flag's tags).
    static func emoji(_ character: Character) -> String? {
        let scalars = Array(character.unicodeScalars)
        guard let first = scalars.first, first.properties.isEmoji else { return nil }
        var afterJoiner = false
        for scalar in scalars.dropFirst() {
            let value = scalar.value
            let properties = scalar.properties
            if afterJoiner {
                guard properties.isEmoji, value > 0x7F else { return nil }
                afterJoiner = false
            } else if value == 0x200D {
                afterJoiner = true
            } else if value == 0xFE0F || value == 0x20E3 || properties.isEmojiModifier
                || (0x1F1E6...0x1F1FF).contains(value)
                || (first.value == 0x1F3F4 && (0xE0020...0xE007F).contains(value))
            {
                continue
            } else if properties.isEmoji, value > 0x7F {
                continue
            } else {
                return nil
            }
        }
        guard !afterJoiner else { return nil }
        // Digits, `#` and `*` are emoji only as keycaps.
        if first.value <= 0x7F, !scalars.contains(where: { $0.value == 0x20E3 }) { return nil }
        // One that shows as text by default is stored with U+FE0F, however it came.
        if scalars.count == 1, !first.properties.isEmojiPresentation { return String(first) + "\u{FE0F}" }
        return String(character)
    }
}
