import CourierVocabulary
import Testing

@Suite("The shared vocabulary: conversations and digests")
struct VocabularyTests {
    @Test("a digest is 64 lowercase hex digits, nothing else; its bytes spell it")
    func digests() {
        let digest = String(repeating: "0123456789abcdef", count: 4)
        #expect(SHA256Hex.isValid(digest))
        #expect(SHA256Hex.isValid(Substring(digest)))
        for bad in [digest.uppercased(), String(digest.dropLast()), digest + "0", String(digest.dropLast()) + "g", ""] {
            #expect(!SHA256Hex.isValid(bad), "\(bad)")
        }
        // A full-width digit is a hex digit to Character, not here.
        #expect(!SHA256Hex.isValid(String(digest.dropLast()) + "\u{FF10}"))
        #expect(SHA256Hex.string([0x00, 0x0F, 0xA0, 0xFF]) == "000fa0ff")
    }

    @Test("durations in whole milliseconds, rounded towards zero")
    func milliseconds() {
        #expect(Duration.seconds(2).wholeMilliseconds == 2000)
        #expect(Duration.microseconds(1999).wholeMilliseconds == 1)
        #expect(Duration.milliseconds(-1500).wholeMilliseconds == -1500)
        #expect(Duration.seconds(30 * 24 * 3600).wholeMilliseconds == 2_592_000_000)
    }

    @Test("conversations are written @user and #group")
    func conversations() {
        #expect(Conversation.user("bob").description == "@bob")
        #expect(Conversation.group("team").description == "#team")
        #expect(Conversation.user("x") != Conversation.group("x"))
    }
}
