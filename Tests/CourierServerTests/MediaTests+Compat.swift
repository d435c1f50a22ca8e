import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import CourierWire
import Crypto
import Foundation
import NIOCore
import Testing

/// Media messages: media on the compat port.
extension MediaTests {
    @Test("the notes' burst on the compat port reaches a native and a compat receiver byte for byte")
    func notesBurst() async throws {
        try await ServerFixture.with { fixture in
            for name in ["alice", "bob", "carol"] { try await fixture.user(name) }
            try await fixture.store.createGroup(name: "family", owner: "alice", members: ["bob", "carol"], nowMs: 0)
            let (bob, _) = try await NativeTestClient.login(fixture, "bob")
            let carol = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await carol.write(
                CompatTestClient.notesPacket([("type", "auth"), ("user", "carol"), ("password", "pw-carol")])
            )
            _ = try await carol.expect("welcome")

            let alice = try await CompatTestClient.connect(port: fixture.ports.compat)
            try await alice.write(
                CompatTestClient.notesPacket([("type", "auth"), ("user", "alice"), ("password", "pw-alice")])
            )
            _ = try await alice.expect("welcome")
            let texts = ["你好", "猪头", "先生", "今天天气好", "吃饭了吗"]
            let image = Self.randomBytes(20 * 1024 * 1024 + 321, "notesBurst")
            var burst: [UInt8] = []
            for text in texts {
                burst += CompatTestClient.notesPacket(
                    [("type", "txt"), ("group", "family")],
                    payload: Array(text.utf8)
                )
            }
            burst += CompatTestClient.notesPacket(
                [("type", "img"), ("group", "family"), ("mime", "image/jpeg"), ("name", "burst.jpg")],
                payload: image
            )
            // One write, as the notes' client sends it.
            // carol pings all along: the pongs must come between packets, never inside the image's bytes.
            let pinging = Task {
                let ping = try CompatTestClient.packet("ping")
                for _ in 0..<400 {
                    try await carol.write(ping)
                    try await Task.sleep(for: .milliseconds(2))
                }
            }
            try await alice.write(burst)
            for _ in 0..<6 { _ = try await alice.expect("ack") }

            let messages = try await bob.messages(6)
            #expect(messages.prefix(5).map(\.body.text) == texts)
            let media = messages[5].body.media
            #expect(media.kind == .image && media.mime == "image/jpeg" && media.name == "burst.jpg")
            #expect(media.sha256 == NativeTestClient.sha256(image) && media.size == UInt64(image.count))
            let fetched = try await bob.fetch(media.sha256, stream: 1).get()
            #expect(NativeTestClient.sha256(fetched.1) == media.sha256)

            for text in texts {
                let packet = try await carol.expect("txt")
                #expect(String(buffer: packet.payload) == text)
            }
            let img = try await carol.expect("img", timeout: .seconds(60))
            #expect(img.header["sha256"] == .string(media.sha256))
            #expect(img.header["mime"] == .string("image/jpeg"))
            #expect(img.header["name"] == .string("burst.jpg"))
            #expect(img.header["from"] == .string("alice"))
            #expect(NativeTestClient.sha256(img.payload) == media.sha256)
            try await pinging.value
            _ = try await carol.expect("pong")
            await alice.close()
            await carol.close()
            await bob.close()
        }
    }

    @Test(
        "a compat media packet over the limit is refused with media-too-large, its bytes skipped, and the session goes on"
    )
    func compatOversize() async throws {
        try await ServerFixture.with(
            { fixture in
                for name in ["alice", "bob"] { try await fixture.user(name) }
                let alice = try await CompatTestClient.connect(port: fixture.ports.compat)
                try await alice.write(
                    CompatTestClient.notesPacket([("type", "auth"), ("user", "alice"), ("password", "pw-alice")])
                )
                _ = try await alice.expect("welcome")
                let big = Self.randomBytes(300 * 1024, "compatOversize")
                try await alice.write(
                    CompatTestClient.notesPacket([("type", "file"), ("to", "bob")], payload: big)
                        + CompatTestClient.notesPacket([("type", "txt"), ("to", "bob")], payload: Array("after".utf8))
                )
                let error = try await alice.expect("error")
                #expect(error.header["code"] == .string("media-too-large"))
                #expect(error.header["request"] == .string("file"))
                let ack = try await alice.expect("ack")
                #expect(ack.header["seq"] == .integer(1))
                #expect(Self.files(fixture, "objects").isEmpty)
                #expect(Self.files(fixture, "uploads").isEmpty)
                await alice.close()
            },
            configure: { $0.media.maxMediaBytes = 256 * 1024 }
        )
    }
}
