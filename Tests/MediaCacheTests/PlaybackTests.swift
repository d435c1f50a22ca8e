import CourierTesting
import Foundation
import MediaCache
import Testing

/// Media made by ffmpeg at test time: a 30 s H.264/AAC MP4 with its index at the end (no `+faststart`), and an
/// AES-128 HLS VOD of it (segments of about 4 s, one key with an explicit IV) with a master playlist.
enum TestMedia {
    static let ffmpeg = "/usr/bin/ffmpeg"
    static let ffprobe = "/usr/bin/ffprobe"
    static let iv = "0x00112233445566778899aabbccddeeff"

    /// Writes `video.mp4` into `folder`.
    static func mp4(in folder: URL) async throws {
        _ = try await ExternalProgram.output(
            Self.ffmpeg,
            [
                "-y", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc2=duration=30:size=640x360:rate=25",
                "-f", "lavfi", "-i", "sine=frequency=440:duration=30", "-c:v", "libx264", "-preset", "ultrafast",
                "-g", "50", "-b:v", "1M", "-c:a", "aac", "-shortest", folder.appendingPathComponent("video.mp4").path,
            ]
        )
    }

    /// Writes the HLS of `video.mp4` into `folder`: `index.m3u8` (its key URI `keyURI`), `seg*.ts`, and `master.m3u8`
    /// naming `index.m3u8`; the key (16 bytes) is written to `keyFile` and returned.
    static func hls(in folder: URL, keyURI: String, keyFile: URL, seed: UInt64) async throws -> Data {
        let key = randomData(16, seed: seed)
        try key.write(to: keyFile)
        let info = folder.deletingLastPathComponent().appendingPathComponent("keyinfo-\(seed)")
        try "\(keyURI)\n\(keyFile.path)\n\(Self.iv.dropFirst(2))\n".write(to: info, atomically: true, encoding: .utf8)
        _ = try await ExternalProgram.output(
            Self.ffmpeg,
            [
                "-y", "-loglevel", "error", "-i", folder.appendingPathComponent("video.mp4").path, "-c", "copy",
                "-f", "hls", "-hls_time", "4", "-hls_playlist_type", "vod", "-hls_key_info_file", info.path,
                "-hls_segment_filename", folder.appendingPathComponent("seg%02d.ts").path,
                folder.appendingPathComponent("index.m3u8").path,
            ]
        )
        try "#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1300000,RESOLUTION=640x360\nindex.m3u8\n"
            .write(to: folder.appendingPathComponent("master.m3u8"), atomically: true, encoding: .utf8)
        return key
    }

    /// The MD5 of every decoded frame (and sample, unless `videoOnly`) ffmpeg reads from `input` (a file or a URL).
    static func decodedMD5(_ input: String, videoOnly: Bool = false) async throws -> String {
        let maps = videoOnly ? ["-map", "0:v"] : ["-map", "0:v", "-map", "0:a"]
        let output = try await ExternalProgram.output(
            Self.ffmpeg,
            ["-v", "error", "-i", input] + maps + ["-f", "md5", "-"]
        )
        return output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The duration ffprobe reads from `input`.
    static func probedDuration(_ input: String) async throws -> Double {
        let output = try await ExternalProgram.output(
            Self.ffprobe,
            ["-v", "error", "-show_entries", "format=duration", "-of", "default=nw=1:nk=1", input]
        )
        return Double(output.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
    }
}

@Suite("MediaCache proxy: ffmpeg and ffprobe playing MP4 and AES-128 HLS through it", .serialized)
struct PlaybackTests {
    @Test("an MP4 with its index at the end plays through the proxy, then again with nginx stopped")
    func mp4() async throws {
        // The origin is slowed (1 MB/s: the file, about 4 MB, takes 4 s) so that the player's first request cannot
        // have fetched the whole file before it seeks to the index at the end, even on a loaded machine (at 4 MB/s a
        // full test run once had it all cached by then): the reads that follow are then partly cached, partly not.
        try await ProxyFixture.with(
            limitRate: "1m",
            settings: .init(blockBytes: 256 << 10, coalesceBytes: 512 << 10)
        ) { fixture in
            try await TestMedia.mp4(in: fixture.media)
            let file = try fixture.file("video.mp4")
            let moov = try #require(file.range(of: Data("moov".utf8)))
            let mdat = try #require(file.range(of: Data("mdat".utf8)))
            #expect(moov.lowerBound > mdat.lowerBound, "the index is at the end")
            let expected = try await TestMedia.decodedMD5(fixture.media.appendingPathComponent("video.mp4").path)

            let url = fixture.pathURL("video.mp4", location: "slow")
            // A player that started and stopped: the first bytes are cached, so the reads that follow span cached
            // and missing bytes (partial hits), whatever the timing of ffprobe's and ffmpeg's own requests.
            let start = try await Curl.get(url, range: "0-99999", in: fixture.folder)
            #expect(start.body == file.prefix(100_000))
            let duration = try await TestMedia.probedDuration(url)
            #expect(abs(duration - 30) < 0.5, "ffprobe read \(duration) s")
            #expect(try await TestMedia.decodedMD5(url) == expected)
            let statistics = try await fixture.statistics()
            #expect(statistics.partialHits > 0, "\(statistics)")
            #expect(statistics.bytesFromOrigin <= Int64(file.count) + 4 * (256 << 10), "\(statistics)")
            let cached = try #require(try await fixture.resources().first)
            #expect(cached.cachedBytes == Int64(file.count))

            await fixture.nginx.stop()
            #expect(try await TestMedia.decodedMD5(url) == expected)
            #expect(try await TestMedia.probedDuration(fixture.url("video.mp4", location: "slow")) == duration)
            let after = try await fixture.statistics()
            #expect(after.bytesFromOrigin == statistics.bytesFromOrigin)
            #expect(after.hits > statistics.hits)
        }
    }

    @Test("an AES-128 HLS VOD plays through the proxy, then with nginx stopped; its key never reaches the disk")
    func hls() async throws {
        try await ProxyFixture.with(settings: .init(blockBytes: 64 << 10)) { fixture in
            try await TestMedia.mp4(in: fixture.media)
            let key = try await TestMedia.hls(
                in: fixture.media,
                keyURI: "enc.key",
                keyFile: fixture.media.appendingPathComponent("enc.key"),
                seed: 5
            )
            let direct = try await TestMedia.decodedMD5(fixture.nginx.url("master.m3u8").absoluteString)
            let master = fixture.pathURL("master.m3u8")

            // Every URI of the rewritten playlists comes back to the proxy; the key keeps its IV.
            let rewritten = try await Curl.get(master, in: fixture.folder)
            let variant = String(decoding: rewritten.body, as: UTF8.self)
                .split(separator: "\n").first { !$0.hasPrefix("#") }.map(String.init)
            let variantURL = try #require(variant)
            #expect(variantURL.hasPrefix("http://127.0.0.1:\(fixture.port)/r/") && variantURL.hasSuffix("/index.m3u8"))
            let media = String(decoding: try await Curl.get(variantURL, in: fixture.folder).body, as: UTF8.self)
            let keyLine = try #require(media.split(separator: "\n").first { $0.hasPrefix("#EXT-X-KEY") })
            #expect(keyLine.contains("URI=\"http://127.0.0.1:\(fixture.port)/_key?url="))
            #expect(keyLine.contains("IV=\(TestMedia.iv)"))
            let segments = media.split(separator: "\n").filter { !$0.hasPrefix("#") }
            #expect(segments.count >= 7)
            #expect(segments.allSatisfy { $0.hasPrefix("http://127.0.0.1:\(fixture.port)/r/") && $0.hasSuffix(".ts") })

            let duration = try await TestMedia.probedDuration(master)
            #expect(abs(duration - 30) < 0.5, "ffprobe read \(duration) s")
            #expect(try await TestMedia.decodedMD5(master) == direct)
            await fixture.nginx.stop()
            #expect(try await TestMedia.decodedMD5(master) == direct)
            #expect(try await TestMedia.probedDuration(master) == duration)

            // The key is in no file of the cache.
            let enumerator = FileManager.default.enumerator(at: fixture.cacheDirectory, includingPropertiesForKeys: nil)
            while let file = enumerator?.nextObject() as? URL {
                guard let bytes = try? Data(contentsOf: file) else { continue }
                #expect(bytes.range(of: key) == nil, "the key is in \(file.path)")
            }
        }
    }

    @Test("an app's key provider supplies a custom-scheme key; without one the scheme is refused")
    func keyProvider() async throws {
        let provided = randomData(16, seed: 77)
        try await ProxyFixture.with(
            settings: .init(
                blockBytes: 64 << 10,
                keyProvider: { url in url.scheme == "courierkey" && url.host == "movie1" ? Array(provided) : nil }
            )
        ) { fixture in
            try await TestMedia.mp4(in: fixture.media)
            let keyFile = fixture.folder.appendingPathComponent("local.key")
            let key = try await TestMedia.hls(
                in: fixture.media,
                keyURI: "courierkey://movie1",
                keyFile: keyFile,
                seed: 77
            )
            #expect(key == provided)
            let expected = try await TestMedia.decodedMD5(
                fixture.media.appendingPathComponent("video.mp4").path,
                videoOnly: true
            )
            // Decoding the HLS gives the same pictures as the MP4 it was cut from (the video stream was copied; the
            // audio's priming differs at the cuts), so the key the provider gave was the right one.
            #expect(try await TestMedia.decodedMD5(fixture.pathURL("index.m3u8"), videoOnly: true) == expected)
            let unknown = ProxyURL(port: fixture.port).query(for: URL(string: "courierkey://other")!)
            let keyURL = unknown.absoluteString.replacingOccurrences(of: "/?url=", with: "/_key?url=")
            #expect(try await Curl.get(keyURL, in: fixture.folder).status == 403)
        }
    }

    @Test("a live playlist is fetched fresh each time; a VOD one stays cached")
    func livePlaylists() async throws {
        let live = "#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4,\na.ts\n"
        try await ProxyFixture.with(files: ["live.m3u8": Data(live.utf8)]) { fixture in
            let url = fixture.pathURL("live.m3u8")
            let first = String(decoding: try await Curl.get(url, in: fixture.folder).body, as: UTF8.self)
            #expect(first.contains("/a.ts"))
            try Data((live + "#EXTINF:4,\nb.ts\n").utf8).write(to: fixture.media.appendingPathComponent("live.m3u8"))
            let second = String(decoding: try await Curl.get(url, in: fixture.folder).body, as: UTF8.self)
            #expect(second.contains("/b.ts"))
            #expect(try await fixture.resources().isEmpty, "a live playlist is not kept")
            // Players reading it at once all get it.
            let together = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<4 { group.addTask { try await Curl.get(url, in: fixture.folder).status } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(together == [200, 200, 200, 200])
            // Once it has ended, it is cached like a VOD playlist.
            try Data((live + "#EXTINF:4,\nb.ts\n#EXT-X-ENDLIST\n").utf8)
                .write(to: fixture.media.appendingPathComponent("live.m3u8"))
            let ended = String(decoding: try await Curl.get(url, in: fixture.folder).body, as: UTF8.self)
            #expect(ended.contains("#EXT-X-ENDLIST"))
            _ = try await Curl.get(url, in: fixture.folder)
            #expect(try await fixture.resources().count == 1)
            await fixture.nginx.stop()
            let offline = String(decoding: try await Curl.get(url, in: fixture.folder).body, as: UTF8.self)
            #expect(offline == ended)
        }
    }

    @Test("preload caches a playlist, its variant, the first segments and the key; they play with the origin gone")
    func preload() async throws {
        try await ProxyFixture.with(settings: .init(blockBytes: 64 << 10)) { fixture in
            try await TestMedia.mp4(in: fixture.media)
            _ = try await TestMedia.hls(
                in: fixture.media,
                keyURI: "enc.key",
                keyFile: fixture.media.appendingPathComponent("enc.key"),
                seed: 9
            )
            let control = ProxyControl(
                address: ProxyURL(port: fixture.port),
                secret: fixture.proxy.configuration.controlSecret
            )
            let result = try await control.preload(fixture.nginx.url("master.m3u8"), segments: 2)
            #expect(result.playlists == 2 && result.segments == 2 && result.keys == 1)
            let first = try fixture.file("seg00.ts")
            let second = try fixture.file("seg01.ts")
            #expect(result.bytes == Int64(first.count + second.count))
            // Without a count, the configured default (3 segments).
            let defaults = try await control.preload(fixture.nginx.url("index.m3u8"))
            #expect(defaults.playlists == 1 && defaults.segments == 3 && defaults.keys == 1)
            let bytes = try await control.preload(fixture.nginx.url("video.mp4"), bytes: 100_000)
            #expect(bytes.bytes == 100_000)

            await fixture.nginx.stop()
            #expect(try await Curl.get(fixture.pathURL("seg00.ts"), in: fixture.folder).body == first)
            #expect(try await Curl.get(fixture.pathURL("seg01.ts"), in: fixture.folder).body == second)
            #expect(try await Curl.get(fixture.pathURL("seg02.ts"), in: fixture.folder).status == 200)
            #expect(try await Curl.get(fixture.pathURL("seg03.ts"), in: fixture.folder).status == 502)
            let video = try await Curl.get(fixture.url("video.mp4"), range: "0-99999", in: fixture.folder)
            #expect(video.body == (try fixture.file("video.mp4")).prefix(100_000))
        }
    }
}
