import CourierVocabulary
import Testing

@Suite("Media types: RFC 9110's grammar, one spelling, and what may be served inline")
struct MediaTypeTests {
    @Test(
        "one type and its parameters, in one spelling",
        arguments: [
            ("image/png", "image/png"),
            ("IMAGE/PNG", "image/png"),
            ("  image/png\t", "image/png"),
            ("audio/webm;codecs=opus", "audio/webm; codecs=opus"),
            ("Audio/WebM ; Codecs=\"opus\"", "audio/webm; codecs=opus"),
            ("text/plain;", "text/plain"),
            ("text/plain;;charset=utf-8", "text/plain; charset=utf-8"),
            ("application/x-thing; name=\"a b\"", "application/x-thing; name=\"a b\""),
            ("application/x-thing; q=\"a\\\"b\\\\c\"", "application/x-thing; q=\"a\\\"b\\\\c\""),
            ("application/x-thing; empty=\"\"", "application/x-thing; empty=\"\""),
            ("application/vnd.ms-excel", "application/vnd.ms-excel"),
        ]
    )
    func canonical(input: String, expected: String) throws {
        let type = try #require(MediaType(input))
        #expect(type.canonical == expected)
        // The canonical spelling is a fixed point.
        #expect(MediaType.canonical(expected) == expected)
    }

    @Test(
        "anything else is no media type: lists, missing parts, bad bytes, a parameter named twice",
        arguments: [
            "image/png, text/html", "image/png,text/javascript", "image/png text/html", "image/png; a=b, text/html",
            "", "image", "image/", "/png", "image/png/x", "image /png", "image/ png", "image/png; charset",
            "image/png; =x", "image/png; a=", "image/png; a=\"x", "image/png; a=b; A=c", "image/pñg",
            "image/png\u{0}", "image/png\r\nX-Evil: 1", "image/png; a=\"tab\there\"", "image/png; a=b c",
            "text/html\n", "image/png; a=\"\u{7F}\"",
        ]
    )
    func refused(input: String) {
        #expect(MediaType(input) == nil, "\(input.debugDescription)")
    }

    @Test("essence: the type and subtype alone")
    func essence() throws {
        #expect(try #require(MediaType("Video/MP4; codecs=\"avc1\"")).essence == "video/mp4")
    }

    @Test("inline only for listed pictures, sound and video whose first bytes are their type's")
    func inline() throws {
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13]
        let html = Array("<html><script>alert(1)</script>".utf8)
        let mp4 = [0, 0, 0, 0x18] + Array("ftypisom".utf8) + [0, 0, 2, 0]
        let cases: [(String, [UInt8], Bool)] = [
            ("image/png", png, true),
            ("image/png", html, false),
            ("image/jpeg", png, false),
            ("image/jpeg", [0xFF, 0xD8, 0xFF, 0xE0], true),
            ("image/gif", Array("GIF89a".utf8) + [1, 0], true),
            ("image/webp", Array("RIFF".utf8) + [0, 0, 0, 0] + Array("WEBP".utf8), true),
            ("image/webp", Array("RIFF".utf8) + [0, 0, 0, 0] + Array("WAVE".utf8), false),
            ("audio/wav", Array("RIFF".utf8) + [0, 0, 0, 0] + Array("WAVE".utf8), true),
            ("video/mp4", mp4, true),
            ("audio/mp4", mp4, true),
            ("audio/webm; codecs=opus", [0x1A, 0x45, 0xDF, 0xA3, 0x9F], true),
            ("audio/ogg", Array("OggS".utf8), true),
            ("audio/mpeg", Array("ID3".utf8) + [4, 0], true),
            ("audio/mpeg", [0xFF, 0xFB, 0x90], true),
            ("audio/mpeg", [0xFF, 0xE0], false),
            ("audio/aac", [0xFF, 0xF1, 0x50], true),
            ("audio/flac", Array("fLaC".utf8), true),
            // Never inline, whatever the bytes: script, documents, text.
            ("image/svg+xml", Array("<svg".utf8), false),
            ("text/html", html, false),
            ("text/plain", Array("hello".utf8), false),
            ("application/pdf", Array("%PDF-1.7".utf8), false),
            ("text/javascript", Array("alert(1)".utf8), false),
            // Too short to tell.
            ("image/png", [0x89, 0x50], false),
            ("image/png", [], false),
        ]
        for (typeText, bytes, expected) in cases {
            let type = try #require(MediaType(typeText))
            #expect(InlineMedia.matches(type, prefix: bytes) == expected, "\(typeText) \(bytes.prefix(8))")
        }
        #expect(InlineMedia.isListed(try #require(MediaType("image/png"))))
        #expect(!InlineMedia.isListed(try #require(MediaType("image/svg+xml"))))
    }
}
