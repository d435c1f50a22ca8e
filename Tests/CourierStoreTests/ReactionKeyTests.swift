import CourierStore
import Testing

@Suite("Reaction keys: one emoji or one short word, in any script")
struct ReactionKeyTests {
    @Test(
        "accepted: emoji of one grapheme (skin tones, families, flags, keycaps, symbols with U+FE0F) and words",
        arguments: ["👍", "👍🏽", "❤️", "👨‍👩‍👧", "🇨🇳", "1️⃣", "🎉", "好", "好的", "lol", "+1", "شكرا", "ありがとう", "wow!"]
    )
    func accepted(key: String) throws {
        #expect(try ReactionKey.validate(key) == key)
    }

    @Test(
        "refused with invalid-request: empty, two emoji, emoji with a word, spaces, controls, bidi overrides, too long, punctuation alone",
        arguments: [
            "", "👍👍", "👍ok", "thumbs up", "a\u{0}b", "ok\u{202E}", "\u{1B}[31m",
            String(repeating: "a", count: 33), String(repeating: "好", count: 11), "!!!", "❤", "<b>",
        ]
    )
    func refused(key: String) {
        #expect(throws: CourierStoreError.self) { try ReactionKey.validate(key) }
        do {
            _ = try ReactionKey.validate(key)
        } catch let error as CourierStoreError {
            #expect(error.code == .invalidRequest)
        } catch {
            Issue.record("\(error)")
        }
    }

    @Test("one key however it is typed: a decomposed word is stored composed; a huge key is refused before copying")
    func normalForm() throws {
        #expect(try ReactionKey.validate("cafe\u{301}") == "café")
        #expect(throws: CourierStoreError.self) { try ReactionKey.validate(String(repeating: "x", count: 1_000_000)) }
    }
}
