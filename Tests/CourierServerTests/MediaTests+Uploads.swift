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

/// Media messages: uploads: checked, filed once, sent and fetched; head of line; resumed after a cut; abandoned.
extension MediaTests {
    @Test("an upload is checked, filed once by digest, sent as a message, and fetched back byte for byte")
    func uploadSendFetch() async throws {
        try await ServerFixture.with { fixture in
            for name in ["alice", "bob"] { try await fixture.user(name) }
            let (alice, welcome) = try await NativeTestClient.login(fixture, "alice")
            #expect(welcome.limits.maxMediaBytes == 2 * 1024 * 1024 * 1024)
            #expect(welcome.limits.uploadWindowBytes == 1024 * 1024)
            let (bob, _) = try await NativeTestClient.login(fixture, "bob")
            let photo = Self.randomBytes(3 * 1024 * 1024 + 17, "uploadSendFetch")
            let sha = NativeTestClient.sha256(photo)

            let uploaded = try #require(try await alice.upload(photo, stream: 1).done)
            #expect(uploaded.sha256 == sha && uploaded.size == UInt64(photo.count))
            #expect(uploaded.quotaLeftBytes == UInt64(20 * 1024 * 1024 * 1024 - photo.count))
            #expect(Self.files(fixture, "objects") == ["\(sha.prefix(2))/\(sha)"])
            #expect(Self.files(fixture, "uploads").isEmpty)

            var media = Courier_V1_Media.of(photo)
            media.width = 4032
            media.height = 3024
            let ack = try await alice.sendMedia(media, to: .user("bob"), id: "photo-1")
            #expect(ack.sendAck.seq == 1, "\(ack)")

            let received = try #require(try await bob.messages(1).first)
            #expect(received.body.media == media)
            #expect(received.from == "alice")

            let fetched = try await bob.fetch(sha, stream: 1).get()
            #expect(fetched.0.size == UInt64(photo.count) && fetched.0.mime == "image/jpeg")
            #expect(fetched.0.name == "photo.jpg")
            #expect(Data(fetched.1) == Data(photo))
            let part = try await bob.fetch(sha, stream: 3, offset: 1000, length: 70_000).get()
            #expect(Data(part.1) == Data(photo[1000..<71_000]))

            // The same bytes uploaded by another user are stored once, but count against both quotas.
            let again = try #require(try await bob.upload(photo, stream: 5).done)
            #expect(again.sha256 == sha)
            #expect(Self.files(fixture, "objects").count == 1)
            let bobID = try #require(try await fixture.store.user(named: "bob")).id
            #expect(try await fixture.store.mediaUsage(of: bobID) == Int64(photo.count))
            // A second upload by the same user takes no bytes at all.
            let before = try await Self.mediaBytes(fixture).in
            let repeated = try await alice.upload(photo, stream: 7)
            guard case .done(_, let startedAt) = repeated else {
                Issue.record("\(repeated)")
                return
            }
            #expect(startedAt == UInt64(photo.count))
            #expect(try await Self.mediaBytes(fixture).in == before)
            await alice.close()
            await bob.close()
        }
    }

    @Test("head of line: a text sent after a 20 MB image reaches its reader while the image's chunks still wait")
    func headOfLine() async throws {
        try await ServerFixture.with { fixture in
            for name in ["alice", "bob"] { try await fixture.user(name) }
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            let (bob, _) = try await NativeTestClient.login(fixture, "bob")
            let image = Self.randomBytes(20 * 1024 * 1024, "headOfLine")
            let sha = NativeTestClient.sha256(image)

            // Upload: the client sends one window of chunks, then a text, and stops until the text is delivered.
            let window = 1024 * 1024
            let cut = try await alice.upload(image, stream: 1, upTo: window)
            guard case .cut(_, let sent) = cut else {
                Issue.record("\(cut)")
                return
            }
            #expect(sent == window)
            #expect(try await alice.sendText("after the upload started", to: .user("bob")).sendAck.seq == 1)
            let text = try #require(try await bob.messages(1).first)
            #expect(text.body.text == "after the upload started")
            let counted = try await Self.mediaBytes(fixture).in
            #expect(counted <= window, "the server took \(counted) image bytes before the text")
            #expect(Self.files(fixture, "objects").isEmpty)
            let finished = try #require(try await alice.upload(image, stream: 3).done)
            #expect(finished.sha256 == sha)
            _ = try await alice.sendMedia(.of(image), to: .user("bob"))
            _ = try await bob.messages(1)

            // Download with a small receive window that the reader does not renew: the server may send 64 KiB and
            // no more, so the text must pass the image's remaining chunks.
            let small: UInt32 = 64 * 1024
            let ready = try await bob.startFetch(sha, stream: 1, window: small).get()
            #expect(ready.size == UInt64(image.count))
            var received: [UInt8] = []
            while received.count < Int(small) {
                let frame = try await bob.expectFrame("a chunk") { $0.kind == .mediaChunk && $0.streamID == 1 }
                received.append(frame.payload)
                #expect(!frame.flags.contains(.endStream))
            }
            #expect(received.count == Int(small))
            _ = try await alice.sendText("behind the image", to: .user("bob"))
            let overtaking = try #require(try await bob.messages(1).first)
            #expect(overtaking.body.text == "behind the image")
            // The state when the text arrived: 64 KiB of 20 MiB delivered, the stream open.
            #expect(received.count < image.count)
            #expect(try await Self.mediaBytes(fixture).out == Int(small))
            // Renewing the window lets the rest through.
            try await bob.send(frame: .windowUpdate(streamID: 1, increment: small))
            while true {
                let frame = try await bob.expectFrame("a chunk") { $0.kind == .mediaChunk && $0.streamID == 1 }
                received.append(frame.payload)
                if frame.flags.contains(.endStream) { break }
                try await bob.send(frame: .windowUpdate(streamID: 1, increment: UInt32(frame.payloadLength)))
            }
            #expect(NativeTestClient.sha256(received) == sha)
            await alice.close()
            await bob.close()
        }
    }

    @Test("an upload cut at 50% resumes from the server's offset: only the missing half is sent again")
    func resumeAfterCut() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            let file = Self.randomBytes(4 * 1024 * 1024, "resumeAfterCut")
            let half = file.count / 2
            let (first, welcome) = try await NativeTestClient.login(fixture, "alice")
            let cut = try await first.upload(file, stream: 1, upTo: half)
            guard case .cut(0, half) = cut else {
                Issue.record("\(cut)")
                return
            }
            // The server has written what it granted back: wait for the last window update, then break the
            // connection.
            try await Self.waitForBytesIn(fixture, half)
            await first.close()

            let (second, _) = try await NativeTestClient.resume(fixture, token: welcome.token)
            let resumed = try await second.upload(file, stream: 1)
            guard case .done(let done, let startedAt) = resumed else {
                Issue.record("\(resumed)")
                return
            }
            #expect(startedAt == UInt64(half))
            #expect(done.sha256 == NativeTestClient.sha256(file))
            #expect(try await Self.mediaBytes(fixture).in == file.count, "every byte taken once")
            #expect(Self.files(fixture, "uploads").isEmpty)
            await second.close()
        }
    }

    @Test("an upload abandoned past the configured age is deleted; a resume then starts from zero")
    func abandonedUploads() async throws {
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                let file = Self.randomBytes(300_000, "abandonedUploads")
                let (first, welcome) = try await NativeTestClient.login(fixture, "alice")
                _ = try await first.upload(file, stream: 1, upTo: 100_000)
                try await Self.waitForBytesIn(fixture, 100_000)
                let uploads = Self.files(fixture, "uploads")
                #expect(uploads.count == 2, "the part file and its record")
                await first.close()
                // The upload is made old (as its part file's age says) rather than waited for: the test must not
                // race the cleanup on a slow machine.
                for name in uploads where name.hasSuffix(".part") {
                    try FileManager.default.setAttributes(
                        [.modificationDate: Date().addingTimeInterval(-7200)],
                        ofItemAtPath: fixture.folder.appendingPathComponent("media/uploads/\(name)").path
                    )
                }
                let deadline = ContinuousClock.now + Patience.reply
                while !Self.files(fixture, "uploads").isEmpty {
                    guard ContinuousClock.now < deadline else {
                        Issue.record("still there: \(Self.files(fixture, "uploads"))")
                        return
                    }
                    try await Task.sleep(for: .milliseconds(100))
                }
                let (second, _) = try await NativeTestClient.resume(fixture, token: welcome.token)
                guard case .done(_, 0) = try await second.upload(file, stream: 1) else {
                    Issue.record("the upload did not start again from zero")
                    return
                }
                await second.close()
            },
            configure: {
                $0.media.abandonedUploadAge = .seconds(3600)
                $0.media.cleanupInterval = .milliseconds(200)
            }
        )
    }
}
