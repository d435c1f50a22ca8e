import CourierProtocol
import CourierStore
import Foundation
import Testing

@testable import CourierServer

@Suite("Message bodies go out as stored: copied into the envelope, not decoded and encoded per recipient")
struct RawBodyTests {
    static func event(body: Courier_V1_Body, recalled: Bool = false) throws -> StoredEvent {
        StoredEvent(
            cursor: 42,
            kind: .message(
                StoredMessage(
                    id: "m1",
                    from: "alice",
                    fromDevice: nil,
                    conversation: .group("family"),
                    seq: 7,
                    timeMs: 1_700_000_000_000,
                    body: recalled ? [] : try body.serializedBytes(),
                    recalled: recalled
                )
            )
        )
    }

    @Test(
        "a client parses the raw body as the same message, for bodies whose length takes one, two and three bytes",
        arguments: [0, 5, 127, 128, 16_383, 16_384, 70_000]
    )
    func sameMessage(textBytes: Int) throws {
        var body = Courier_V1_Body()
        body.text = String(repeating: "é", count: textBytes / 2) + String(repeating: "x", count: textBytes % 2)
        let event = try Self.event(body: body)
        let raw = try Courier_V1_Event(event, rawBody: true).serializedBytes() as [UInt8]
        let decoded = try Courier_V1_Event(event, rawBody: false).serializedBytes() as [UInt8]
        let parsed = try Courier_V1_Event(serializedBytes: raw)
        #expect(parsed == (try Courier_V1_Event(serializedBytes: decoded)))
        #expect(parsed.message.body.text == body.text)
        #expect(parsed.message.hasBody)
        #expect(parsed.cursor == 42 && parsed.message.seq == 7 && parsed.message.from == "alice")
        // Nothing more is sent than the decoded way sends (the same fields, in another order).
        #expect(raw.count == decoded.count)
    }

    @Test("media bodies too; a recalled message has no body either way")
    func mediaAndRecalled() throws {
        var body = Courier_V1_Body()
        body.media.kind = .image
        body.media.sha256 = String(repeating: "a", count: 64)
        body.media.size = 123_456
        body.media.mime = "image/jpeg"
        body.media.name = "cat.jpg"
        let parsed = try Courier_V1_Event(
            serializedBytes: try Courier_V1_Event(try Self.event(body: body), rawBody: true).serializedBytes()
                as [UInt8]
        )
        #expect(parsed.message.body == body)
        let recalled = try Courier_V1_Event(
            serializedBytes: try Courier_V1_Event(try Self.event(body: body, recalled: true), rawBody: true)
                .serializedBytes() as [UInt8]
        )
        #expect(recalled.message.recalled && !recalled.message.hasBody)
    }
}
