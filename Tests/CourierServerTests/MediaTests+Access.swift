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

/// Media messages: who may fetch media, streams that own uploads, and the limits.
extension MediaTests {
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
            #expect(try await status(sha + "?token=\(carolWelcome.token)") == "401", "never a token in the URL")
            // No ticket for what she cannot see, and none of another file's or user's opens it.
            #expect(try await status(sha + "/ticket", bearer + ["--request", "POST"]) == "404")
            #expect(try await status(guessed + "/ticket", bearer + ["--request", "POST"]) == "404")
            #expect(try await status(sha + "/ticket", ["--request", "POST"]) == "401")
            let (aliceWeb, aliceWelcome) = try await NativeTestClient.login(fixture, "alice", device: "web")
            let aliceToken = aliceWelcome.token
            await aliceWeb.close()
            let ticket = try await HTTPTests.curl([
                "--request", "POST", "--header", "Authorization: Bearer \(aliceToken)", base + sha + "/ticket",
            ])
            let alicesTicket = try #require(
                (try JSONSerialization.jsonObject(with: Data(ticket.utf8)) as? [String: Any])?["ticket"] as? String
            )
            #expect(try await status(sha + "?ticket=\(alicesTicket)") == "200")
            let (_, expires, mac) = try #require(Self.parts(of: alicesTicket))
            let carolID = try #require(try await fixture.store.user(named: "carol")).id.rawValue
            for forged in [
                "\(carolID).\(expires).\(mac)",  // another user
                "\(alicesTicket.split(separator: ".")[0]).\(expires + 3_600_000).\(mac)",  // a longer life
                alicesTicket.dropLast(2) + (alicesTicket.hasSuffix("AA") ? "BA" : "AA"),  // another MAC
                "", "x", "1.2", "1.2.3.4", String(repeating: "9", count: 200),
            ] {
                #expect(try await status(sha + "?ticket=\(forged)") == "401", "\(forged)")
            }
            #expect(try await status(guessed + "?ticket=\(alicesTicket)") == "401", "a ticket opens its one file")
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
            #expect(headers.contains("content-security-policy: default-src 'none'; sandbox"), "\(headers)")
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
                // What was sent is on disk once the server grants its window back. (A chunk still waiting behind the
                // write before it when the connection closes goes with the connection: the resume starts where the
                // disk stands.)
                var granted = 0
                while granted < 128 * 1024 {
                    let update = try await first.expectFrame("the window granted back") {
                        $0.kind == .windowUpdate && $0.streamID == 1
                    }
                    granted += Int(update.windowIncrement ?? 0)
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

    /// A ticket's user, end and MAC.
    static func parts(of ticket: String) -> (Int64, Int64, Substring)? {
        let parts = ticket.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let user = Int64(parts[0]), let expires = Int64(parts[1]) else { return nil }
        return (user, expires, parts[2])
    }
}
