import CourierVocabulary
import Testing

@Suite("Mentions read from a message's text, in every script")
struct MentionsTests {
    @Test("an @ at the start or after a character no name holds starts a mention; names end where names end")
    func reading() {
        let cases: [(String, [String], Bool)] = [
            ("@bob hi", ["bob"], false),
            ("你好@bob，在吗", ["bob"], false),
            ("こんにちは＠Alice さん", ["alice"], false),
            ("mail@bob.example and x@y", [], false),
            ("see @bob. And @carol-, @dave_!", ["bob", "carol", "dave"], false),
            ("@all 开会 @ALL", [], true),
            ("@allison is not everyone", ["allison"], false),
            ("@@bob @ bob @-bob @.x", [], false),
            ("@bob @BOB @Bob", ["bob"], false),
            ("مرحبا @omar", ["omar"], false),
            ("(@a.b_c-d)", ["a.b_c-d"], false),
            ("@" + String(repeating: "x", count: 33), [], false),
            ("@" + String(repeating: "x", count: 32), [String(repeating: "x", count: 32)], false),
            ("👋@zoe", ["zoe"], false),
        ]
        for (text, names, everyone) in cases {
            let mentions = Mentions(in: text)
            #expect(mentions.names == names, "\(text)")
            #expect(mentions.everyone == everyone, "\(text)")
        }
        // A run that ends with punctuation is kept whole too: a name may end so, and the server prefers a member's.
        #expect(Mentions(in: "see @bob. And @carol-, @dave_!").runs == ["bob.", "carol-", "dave_"])
        #expect(Mentions(in: "@bob_").mention("bob_") && Mentions(in: "@bob_").mention("bob"))
        // Long runs: no truncated name stands in for them; the fullwidth sign doubles as the ASCII one does.
        #expect(Mentions(in: "@bob" + String(repeating: ".", count: 61) + "evil").isEmpty)
        #expect(Mentions(in: "＠@bob ＠＠bob @＠bob").isEmpty)
        let farAway = String(repeating: "字", count: 5_000) + " @zoe"
        #expect(Mentions(in: farAway).names == ["zoe"], "the whole text is read, not the indexed part")
        #expect(Mentions(in: "@all").mention("anyone"))
        #expect(Mentions(in: "@Bob").mention("BOB"))
        #expect(!Mentions(in: "bob").mention("bob"))
    }

    @Test("at most 32 names count, each once, in the order they first appear")
    func limit() {
        let text = (0..<40).map { "@u\($0)" }.joined(separator: " ") + " @u0"
        let mentions = Mentions(in: text)
        #expect(mentions.names == (0..<32).map { "u\($0)" })
    }
}
