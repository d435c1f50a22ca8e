import CourierStore
import Testing

@Suite("Reaction keys: one emoji or one short word, in any script")
struct ReactionKeyTests {
    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test(
        "accepted as they are: emoji of one grapheme (skin tones, families, flags, keycaps, symbols with U+FE0F) and words",
        arguments: [
            "👍", "👍🏽", "❤️", "👨‍👩‍👧", "🇨🇳", "1️⃣", "#️⃣", "🎉", "☺️", "✅", "⭐", "©️", "🏳️‍🌈", "🧑🏽‍💻", "🧑🏻‍❤️‍💋‍🧑🏼", "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
            "好", "好的", "lol", "+1", "شكرا", "ありがとう", "wow!", "can’t",
        ]
    )
    func accepted(key: String) throws {
        #expect(Self.bytes(try ReactionKey.validate(key)) == Self.bytes(key))
    }

    @Test(
        "refused with invalid-request: empty, two emoji, emoji with a word, spaces, controls, bidi overrides, invisible characters, too long, punctuation alone",
        arguments: [
            "", "👍👍", "👍ok", "thumbs up", "a\u{0}b", "ok\u{202E}", "\u{1B}[31m",
            String(repeating: "a", count: 33), String(repeating: "好", count: 11), "!!!", "<b>",
            "\u{3164}", "lol\u{FE0F}", "a\u{34F}", "👍\u{200C}", "👍\u{301}", "#",
        ]
    )
    func refused(key: String) {
        do {
            let accepted = try ReactionKey.validate(key)
            Issue.record("accepted as \(accepted.debugDescription)")
        } catch let error as CourierStoreError {
            #expect(error.code == .invalidReaction)
        } catch {
            Issue.record("\(error)")
        }
    }

    @Test("one key however it is typed: a word composed, a text-style emoji with U+FE0F; a huge key refused at once")
    func normalForm() throws {
        #expect(Self.bytes(try ReactionKey.validate("cafe\u{301}")) == Self.bytes("caf\u{E9}"))
        #expect(Self.bytes(try ReactionKey.validate("\u{2764}")) == Self.bytes("\u{2764}\u{FE0F}"))
        #expect(throws: CourierStoreError.self) { try ReactionKey.validate(String(repeating: "x", count: 1_000_000)) }
    }
}
