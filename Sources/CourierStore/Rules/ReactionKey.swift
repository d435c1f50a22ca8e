/// The rule for a reaction's key: one emoji (one extended grapheme cluster: `👍`, `❤️`, `👨‍👩‍👧`, `🇨🇳`, `1️⃣`, `👍🏽`) or
/// one short word in any script (`好`, `lol`, `+1`, `شكرا`), at most ``maxBytes`` bytes of UTF-8, with no space, no
/// control character and no bidirectional control. Keys are compared in NFC, so the same word typed two ways is one
/// key.
public enum ReactionKey {
    /// The longest key, in bytes of UTF-8.
    public static let maxBytes = 32

    /// The key as stored and compared (NFC).
    ///
    /// - Throws: ``CourierStoreError`` with code `invalid-request`, saying what is wrong.
    public static func validate(_ key: String) throws -> String {
        // The length first, without copying: a hostile key may be a megabyte long.
        guard !key.isEmpty, key.utf8.count <= 4 * Self.maxBytes else {
            throw CourierStoreError(.invalidRequest, "a reaction is one emoji or a word of at most \(maxBytes) bytes")
        }
        let key = key.precomposedStringWithCanonicalMapping
        guard key.utf8.count <= Self.maxBytes else {
            throw CourierStoreError(.invalidRequest, "a reaction is one emoji or a word of at most \(maxBytes) bytes")
        }
        guard StoreText.isClean(key) else {
            throw CourierStoreError(.invalidRequest, "a reaction has no control or bidirectional characters")
        }
        if key.count == 1, let character = key.first, Self.isEmoji(character) { return key }
        let isWordCharacter = { (scalar: Unicode.Scalar) -> Bool in
            let properties = scalar.properties
            switch properties.generalCategory {
            case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter,
                .nonspacingMark, .spacingMark, .decimalNumber, .letterNumber, .otherNumber:
                return true
            default:
                return "+-_!?.'".unicodeScalars.contains(scalar)
            }
        }
        guard key.unicodeScalars.allSatisfy(isWordCharacter),
            key.unicodeScalars.contains(where: { $0.properties.isAlphabetic || $0.properties.numericType != nil })
        else {
            throw CourierStoreError(
                .invalidRequest,
                "a reaction is one emoji, or one word (letters and digits, with + - _ ! ? . ' allowed): not \(key.debugDescription)"
            )
        }
        return key
    }

    /// Whether a character shows as one emoji: one that shows as emoji by default (with its skin tone or joined to
    /// others; a flag's regional indicators too), a keycap, or a symbol asked to show as emoji (U+FE0F).
    static func isEmoji(_ character: Character) -> Bool {
        let scalars = Array(character.unicodeScalars)
        guard let first = scalars.first else { return false }
        if first.properties.isEmojiPresentation { return true }
        // A text symbol (❤, ☺, 1) shows as emoji with the variation selector, as a keycap with U+20E3 after it.
        return first.properties.isEmoji && scalars.contains { $0.value == 0xFE0F || $0.value == 0x20E3 }
    }
}
