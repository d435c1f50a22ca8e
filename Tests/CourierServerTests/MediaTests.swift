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

@Suite("Media messages", .serialized)
struct MediaTests {
    static func randomBytes(_ count: Int, _ name: String) -> [UInt8] {
        SeededRandom.bytes(count, seededFor: name)
    }

    /// The server's media byte counters, from `/metrics`.
    static func mediaBytes(_ fixture: ServerFixture) async throws -> (in: Int, out: Int) {
        (
            try await fixture.metric("courier_media_bytes_in_total"),
            try await fixture.metric("courier_media_bytes_out_total")
        )
    }

    /// The files under the data folder's `media/` subfolder (`objects` or `uploads`).
    static func files(_ fixture: ServerFixture, _ sub: String) -> [String] {
        let root = fixture.folder.appendingPathComponent("media/\(sub)")
        let paths = FileManager.default.enumerator(atPath: root.path)?.compactMap { $0 as? String } ?? []
        return paths.filter { path in
            var folder: ObjCBool = false
            _ = FileManager.default.fileExists(atPath: root.appendingPathComponent(path).path, isDirectory: &folder)
            return !folder.boolValue
        }.sorted()
    }

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

    static func waitForBytesIn(_ fixture: ServerFixture, _ count: Int) async throws {
        let deadline = ContinuousClock.now + Patience.reply
        while try await Self.mediaBytes(fixture).in < count {
            guard ContinuousClock.now < deadline else { throw TestClientTimeout(description: "bytes in short") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    @Test("GET /media: random ranges equal the bytes, suffix ranges, HEAD, 416, a stable ETag, the sent type")
    func httpRanges() async throws {
        try await ServerFixture.with { fixture in
            for name in ["alice", "bob"] { try await fixture.user(name) }
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            let (_, bobWelcome) = try await NativeTestClient.login(fixture, "bob")
            let video = Self.randomBytes(5 * 1024 * 1024 + 3, "httpRanges-video")
            let sha = NativeTestClient.sha256(video)
            _ = try #require(try await alice.upload(video, stream: 1).done)
            _ = try await alice.sendMedia(
                .of(video, kind: .video, mime: "video/mp4", name: "clip.mp4"),
                to: .user("bob")
            )
            let url = "http://127.0.0.1:\(fixture.ports.http)/media/\(sha)"
            let auth = ["--header", "Authorization: Bearer \(bobWelcome.token)"]

            try await withTemporaryDirectory { folder in
                let body = folder.appendingPathComponent("body")
                let headers = folder.appendingPathComponent("headers")
                /// Fetches with curl; returns the status, the headers (lowercased names) and the body.
                func get(_ extra: [String], url: String = url) async throws -> (String, [String: String], [UInt8]) {
                    try? FileManager.default.removeItem(at: body)
                    let status = try await HTTPTests.curl(
                        ["--output", body.path, "--dump-header", headers.path, "--write-out", "%{http_code}"] + extra
                            + [url]
                    )
                    var fields: [String: String] = [:]
                    for line in try String(contentsOf: headers, encoding: .utf8).split(separator: "\r\n") {
                        guard let colon = line.firstIndex(of: ":") else { continue }
                        fields[line[..<colon].lowercased()] = line[line.index(after: colon)...]
                            .trimmingCharacters(in: .whitespaces)
                    }
                    let bytes = (try? Data(contentsOf: body)).map { Array($0) } ?? []
                    return (status, fields, bytes)
                }

                let whole = try await get(auth)
                #expect(whole.0 == "200")
                #expect(Data(whole.2) == Data(video))
                #expect(whole.1["content-type"] == "video/mp4")
                #expect(whole.1["x-content-type-options"] == "nosniff")
                #expect(whole.1["accept-ranges"] == "bytes")
                #expect(whole.1["content-length"] == "\(video.count)")
                let etag = try #require(whole.1["etag"])
                #expect(etag == "\"\(sha)\"")

                let seed = TestSeed.make(for: "httpRanges")
                var random = SeededRandom(seed: seed)
                for _ in 0..<12 {
                    let start = Int.random(in: 0..<video.count, using: &random)
                    let end = Int.random(in: start..<min(video.count, start + 2 * 1024 * 1024), using: &random)
                    let part = try await get(auth + ["--range", "\(start)-\(end)"])
                    #expect(part.0 == "206", "seed \(seed)")
                    #expect(part.1["content-range"] == "bytes \(start)-\(end)/\(video.count)", "seed \(seed)")
                    #expect(Data(part.2) == Data(video[start...end]), "range \(start)-\(end), seed \(seed)")
                    #expect(part.1["etag"] == etag)
                }
                let suffix = try await get(auth + ["--range", "-1000"])
                #expect(suffix.0 == "206")
                #expect(Data(suffix.2) == Data(video.suffix(1000)))
                #expect(suffix.1["content-range"] == "bytes \(video.count - 1000)-\(video.count - 1)/\(video.count)")
                let open = try await get(auth + ["--range", "\(video.count - 10)-"])
                #expect(Data(open.2) == Data(video.suffix(10)))
                let past = try await get(auth + ["--range", "\(video.count)-"])
                #expect(past.0 == "416")
                #expect(past.1["content-range"] == "bytes */\(video.count)")

                // HEAD, on a raw socket, so that any body byte the server wrongly sent would be seen.
                let raw = try await RawConnection.connect(port: fixture.ports.http)
                try await raw.write(
                    Array(
                        ("HEAD /media/\(sha) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(bobWelcome.token)\r\n"
                            + "Connection: close\r\n\r\n").utf8
                    )
                )
                let head = String(decoding: try await raw.readUntilClosed(), as: UTF8.self)
                #expect(head.hasPrefix("HTTP/1.1 200"), "\(head)")
                #expect(head.lowercased().contains("content-length: \(video.count)\r\n"), "\(head)")
                #expect(head.contains(etag))
                #expect(head.hasSuffix("\r\n\r\n"), "no body after the headers: \(head.suffix(100))")
                let cached = try await get(auth + ["--header", "If-None-Match: \(etag)"])
                #expect(cached.0 == "304")
                #expect(cached.2.isEmpty)
                // The token may come in the query, for players that cannot set headers.
                let query = try await get([], url: url + "?token=\(bobWelcome.token)")
                #expect(query.0 == "200" && Data(query.2) == Data(video))
            }
            await alice.close()
        }
    }

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

    @Test("non-members get nothing: not over the socket, not over HTTP, not by guessing ids")
    func nonMembers() async throws {
        try await ServerFixture.with { fixture in
            for name in ["alice", "bob", "carol", "dave"] { try await fixture.user(name) }
            // alice puts bob and carol in a group below: they are her contacts.
            try await fixture.contacts("alice", "bob")
            try await fixture.contacts("alice", "carol")
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            let (carol, carolWelcome) = try await NativeTestClient.login(fixture, "carol")
            let secret = Self.randomBytes(100_000, "nonMembers")
            let sha = NativeTestClient.sha256(secret)
            _ = try #require(try await alice.upload(secret, stream: 1).done)
            _ = try await alice.sendMedia(.of(secret), to: .user("bob"))

            // Carol is in no conversation with it.
            let refused = try await carol.fetch(sha, stream: 1)
            guard case .failure(let error) = refused else {
                Issue.record("carol fetched alice's photo to bob")
                return
            }
            #expect(error.code == "unknown-media")
            let guessed = NativeTestClient.sha256(Array("a guess".utf8))
            let guess = try await carol.fetch(guessed, stream: 3)
            #expect((try? guess.get()) == nil)
            #expect(guess.failureCode == error.code, "a guess and a forbidden id look the same")
            // Nor can she send it on without uploading it.
            let forwarded = try await carol.sendMedia(.of(secret), to: .user("dave"))
            #expect(forwarded.error.code == "unknown-media", "\(forwarded)")

            let base = "http://127.0.0.1:\(fixture.ports.http)/media/"
            func status(_ path: String, _ extra: [String] = []) async throws -> String {
                try await HTTPTests.curl(
                    ["--output", "/dev/null", "--write-out", "%{http_code}"] + extra + [base + path]
                )
            }
            let bearer = ["--header", "Authorization: Bearer \(carolWelcome.token)"]
            #expect(try await status(sha, bearer) == "404")
            #expect(try await status(guessed, bearer) == "404")
            #expect(try await status(sha + "?token=\(carolWelcome.token)") == "404")
            #expect(try await status(sha) == "401")
            #expect(try await status(sha, ["--header", "Authorization: Bearer nonsense"]) == "401")
            #expect(try await status("not-a-digest", bearer) == "404")

            // A range whose end overflows is refused, and the server goes on.
            var overflow = ClientEnvelope()
            overflow.fetch.sha256 = sha
            overflow.fetch.offset = 1
            overflow.fetch.length = UInt64(Int64.max)
            overflow.fetch.streamID = 9
            let (bob, _) = try await NativeTestClient.login(fixture, "bob")
            let overflowID = try await bob.send(overflow)
            let refusedRange = try await bob.expect("an error") { $0.requestID == overflowID ? $0.error : nil }
            #expect(refusedRange.code == "invalid-request", "\(refusedRange)")
            // A type a browser would run is served as a download, never as a page of the server's origin.
            _ = try await alice.upload(Array("<script>alert(1)</script>".utf8), stream: 3)
            let page = Courier_V1_Media.of(
                Array("<script>alert(1)</script>".utf8),
                kind: .file,
                mime: "text/html",
                name: "x.html"
            )
            _ = try await alice.sendMedia(page, to: .user("bob"))
            let (_, bobWelcome) = try await NativeTestClient.login(fixture, "bob", device: "web")
            let headers = try await HTTPTests.curl([
                "--dump-header", "-", "--output", "/dev/null", "--header", "Authorization: Bearer \(bobWelcome.token)",
                base + page.sha256,
            ]).lowercased()
            #expect(headers.contains("content-type: application/octet-stream"), "\(headers)")
            #expect(headers.contains("content-disposition: attachment"), "\(headers)")
            #expect(headers.contains("content-security-policy: sandbox"), "\(headers)")
            await bob.close()

            // A group member who joined after the message does not see it either.
            let (aliceGroup, _) = try await NativeTestClient.login(fixture, "alice", device: "second")
            var create = ClientEnvelope()
            create.manageGroup.group = "team"
            create.manageGroup.create.users = ["bob"]
            _ = try await aliceGroup.send(create)
            _ = try await aliceGroup.expect("done") { envelope -> Bool? in
                if case .done? = envelope.body { true } else { nil }
            }
            _ = try await aliceGroup.sendMedia(.of(secret), to: .group("team"))
            var add = ClientEnvelope()
            add.manageGroup.group = "team"
            add.manageGroup.add.users = ["carol"]
            _ = try await aliceGroup.send(add)
            _ = try await aliceGroup.expect("done") { envelope -> Bool? in
                if case .done? = envelope.body { true } else { nil }
            }
            #expect(try await status(sha, bearer) == "404")
            #expect(try await carol.fetch(sha, stream: 5).failureCode == "unknown-media")
            await alice.close()
            await aliceGroup.close()
            await carol.close()
        }
    }

    @Test("one stream owns an upload at a time; uploads in progress count against the quota; a reset frees a stream")
    func ownershipAndStreams() async throws {
        try await ServerFixture.with(
            { fixture in
                for name in ["alice", "bob"] { try await fixture.user(name) }
                let file = Self.randomBytes(600 * 1024, "ownershipAndStreams")
                let (first, _) = try await NativeTestClient.login(fixture, "alice")
                let (second, _) = try await NativeTestClient.login(fixture, "alice", device: "second")
                guard case .cut = try await first.upload(file, stream: 1, upTo: 128 * 1024) else {
                    Issue.record("the first upload did not start")
                    return
                }
                // The same file from another connection while the first owns it: refused for now, nothing written.
                var request = ClientEnvelope()
                request.upload.sha256 = NativeTestClient.sha256(file)
                request.upload.size = UInt64(file.count)
                request.upload.streamID = 1
                let clashID = try await second.send(request)
                let clash = try await second.expect("a refusal") { $0.requestID == clashID ? $0.error : nil }
                #expect(clash.code == "upload-busy" && clash.retryAfterMs == 1000, "\(clash)")
                // The quota (1 MiB) counts the 600 KiB upload in progress: another 600 KiB does not fit.
                let other = Self.randomBytes(600 * 1024, "ownershipAndStreams-other")
                #expect(try await second.upload(other, stream: 3).error?.code == "quota-exceeded")
                // Once the first connection is gone, the second may resume the upload from where it stands.
                await first.close()
                var stream: UInt32 = 5
                var resumed = try await second.upload(file, stream: stream)
                let deadline = ContinuousClock.now + Patience.reply
                // The server releases the upload when it notices the first connection's end.
                while resumed.error?.code == "upload-busy", ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                    stream += 2
                    resumed = try await second.upload(file, stream: stream)
                }
                guard case .done(_, let startedAt) = resumed else {
                    Issue.record("the resume was refused: \(resumed)")
                    return
                }
                #expect(startedAt >= 128 * 1024)

                // On one connection, asking again moves the upload to the new stream; the old one is reset and told.
                let third = Self.randomBytes(100 * 1024, "ownershipAndStreams-third")
                guard case .cut = try await second.upload(third, stream: 101, upTo: 10 * 1024) else {
                    Issue.record("the third upload did not start")
                    return
                }
                guard case .done(_, let thirdStart) = try await second.upload(third, stream: 103) else {
                    Issue.record("the takeover failed")
                    return
                }
                #expect(thirdStart == 10 * 1024)
                let reset = try await second.expectFrame("the old stream's reset") {
                    $0.kind == .resetStream && $0.streamID == 101
                }
                #expect(reset.errorCode == .cancel)
                let told = try await second.expect("the old request's error") {
                    $0.error.code == "upload-busy" ? $0 : nil
                }
                #expect(told.error.message.contains("stream 103"))

                // Two streams at most: a fetch the client resets frees its stream for the next.
                _ = try await second.sendMedia(.of(file), to: .user("bob"))
                let (bob, _) = try await NativeTestClient.login(fixture, "bob")
                let sha = NativeTestClient.sha256(file)
                _ = try await bob.startFetch(sha, stream: 1, window: 1024).get()
                _ = try await bob.startFetch(sha, stream: 3, window: 1024).get()
                #expect(try await bob.startFetch(sha, stream: 5, window: 1024).failureCode == "invalid-request")
                // The server reads a connection's frames in order: the reset is handled before the next request.
                try await bob.send(frame: .resetStream(streamID: 1, code: .cancel))
                let again = try await bob.fetch(sha, stream: 7)
                #expect(NativeTestClient.sha256(try again.get().1) == sha)
                await second.close()
                await bob.close()
            },
            configure: {
                $0.media.quotaBytesPerUser = 1024 * 1024
                $0.media.maxStreamsPerConnection = 2
            }
        )
    }

    @Test("oversize media and quota overruns get their own errors, and leave nothing behind")
    func limits() async throws {
        try await ServerFixture.with(
            { fixture in
                for name in ["alice", "bob"] { try await fixture.user(name) }
                let (alice, welcome) = try await NativeTestClient.login(fixture, "alice")
                #expect(welcome.limits.maxMediaBytes == 1024 * 1024)
                #expect(welcome.limits.mediaQuotaLeftBytes == 1536 * 1024)
                let oversize = Self.randomBytes(1024 * 1024 + 1, "limits-oversize")
                #expect(try await alice.upload(oversize, stream: 1).error?.code == "media-too-large")
                var media = Courier_V1_Media.of(oversize)
                #expect(try await alice.sendMedia(media, to: .user("bob")).error.code == "media-too-large")

                let first = Self.randomBytes(1024 * 1024, "limits-first")
                #expect(try await alice.upload(first, stream: 3).done != nil)
                let second = Self.randomBytes(600 * 1024, "limits-second")
                #expect(try await alice.upload(second, stream: 5).error?.code == "quota-exceeded")
                #expect(Self.files(fixture, "uploads").isEmpty)
                #expect(Self.files(fixture, "objects").count == 1)

                // Bytes that are not what was declared: refused at the end, nothing filed or sendable.
                let bob = try await NativeTestClient.login(fixture, "bob").0
                var declared = Self.randomBytes(50_000, "limits-declared")
                var request = ClientEnvelope()
                request.upload.sha256 = NativeTestClient.sha256(declared)
                request.upload.size = UInt64(declared.count)
                request.upload.streamID = 1
                let id = try await bob.send(request)
                _ = try await bob.expect("ready") { $0.requestID == id ? $0.uploadReady : nil }
                declared[7] ^= 0xFF
                try await bob.send(
                    frame: NativeFrame(
                        kind: .mediaChunk,
                        flags: .endStream,
                        streamID: 1,
                        payload: ByteBuffer(bytes: declared)
                    )
                )
                let mismatch = try await bob.expect("an error") { $0.requestID == id ? $0.error : nil }
                #expect(mismatch.code == "media-mismatch", "\(mismatch)")
                declared[7] ^= 0xFF
                media = .of(declared)
                #expect(try await bob.sendMedia(media, to: .user("alice")).error.code == "unknown-media")
                #expect(Self.files(fixture, "objects").count == 1)
                #expect(Self.files(fixture, "uploads").isEmpty)

                // More than the window on a stream: refused, the stream reset.
                var big = ClientEnvelope()
                let huge = Self.randomBytes(900 * 1024, "limits-window")
                big.upload.sha256 = NativeTestClient.sha256(huge)
                big.upload.size = UInt64(huge.count)
                big.upload.streamID = 3
                let bigID = try await bob.send(big)
                let ready = try await bob.expect("ready") { $0.requestID == bigID ? $0.uploadReady : nil }
                #expect(ready.windowBytes == 256 * 1024)
                try await bob.send(
                    frame: NativeFrame(
                        kind: .mediaChunk,
                        streamID: 3,
                        payload: ByteBuffer(bytes: huge[0..<(300 * 1024)])
                    )
                )
                let overrun = try await bob.expect("an error") { $0.requestID == bigID ? $0.error : nil }
                #expect(overrun.code == "media-mismatch")
                let reset = try await bob.expectFrame("a reset") { $0.kind == .resetStream && $0.streamID == 3 }
                #expect(reset.errorCode == .flowControlError)
                // The session goes on.
                #expect(try await bob.sendText("still here", to: .user("alice")).sendAck.seq >= 1)
                await alice.close()
                await bob.close()
            },
            configure: { configuration in
                configuration.media.maxMediaBytes = 1024 * 1024
                configuration.media.quotaBytesPerUser = 1536 * 1024
                configuration.media.uploadWindowBytes = 256 * 1024
                configuration.media.maxChunkBytes = 512 * 1024
            }
        )
    }
}

extension Result where Failure == Courier_V1_Error {
    var failureCode: String? {
        if case .failure(let error) = self { return error.code }
        return nil
    }
}
