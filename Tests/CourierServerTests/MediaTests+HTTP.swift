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

/// Media messages: `GET /media` with byte ranges.
extension MediaTests {
    @Test("GET /media: random ranges equal the bytes, suffix ranges, HEAD, 416, a stable ETag, the sent type")
    func httpRanges() async throws {
        try await ServerFixture.with { fixture in
            for name in ["alice", "bob"] { try await fixture.user(name) }
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            let (_, bobWelcome) = try await NativeTestClient.login(fixture, "bob")
            // An MP4's first box (the type is served only for bytes that begin as that type's), then noise.
            let video =
                [0, 0, 0, 0x18] + Array("ftypisom".utf8) + Self.randomBytes(5 * 1024 * 1024 + 3, "httpRanges-video")
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
                // A player, which can only be given a URL, gets a ticket for the file, ranges and all; never the
                // token in the URL.
                let asked = try await get(auth + ["--request", "POST"], url: url + "/ticket")
                #expect(asked.0 == "200", "\(asked)")
                #expect(asked.1["cache-control"] == "no-store")
                let answer = try JSONSerialization.jsonObject(with: Data(asked.2)) as? [String: Any]
                let ticket = try #require(answer?["ticket"] as? String)
                #expect(answer?["url"] as? String == "/media/\(sha)?ticket=\(ticket)")
                let lifetime = try #require(answer?["expires_in"] as? Int)
                #expect((595...600).contains(lifetime), "the default lifetime, 10 minutes: \(lifetime)")
                #expect(!ticket.contains(bobWelcome.token))
                let byTicket = try await get([], url: url + "?ticket=\(ticket)")
                #expect(byTicket.0 == "200" && Data(byTicket.2) == Data(video))
                #expect(byTicket.1["content-type"] == "video/mp4")
                let rangeByTicket = try await get(["--range", "100-199"], url: url + "?ticket=\(ticket)")
                #expect(rangeByTicket.0 == "206" && Data(rangeByTicket.2) == Data(video[100...199]))
                let query = try await get([], url: url + "?token=\(bobWelcome.token)")
                #expect(query.0 == "401", "a token in the URL is refused, even a good one")
                #expect(String(decoding: query.2, as: UTF8.self).contains("never taken in the URL"))
                // Not beside a good header either, nor beside a ticket: a token in a URL is refused wherever it is.
                #expect(try await get(auth, url: url + "?token=\(bobWelcome.token)").0 == "401")
                #expect(try await get([], url: url + "?ticket=\(ticket)&token=x").0 == "401")
            }
            await alice.close()
        }
    }
}
