import Foundation
import Testing

@testable import MediaCache

@Suite("MediaCache: HLS playlists pointed back at the proxy")
struct HLSPlaylistTests {
    static let proxy = ProxyURL(port: 6990)

    /// Rewrites through the proxy's path form, and reads each rewritten URI back to the origin URL it stands for.
    static func rewrite(_ text: String, base: String) -> (String, [URL]) {
        var origins: [URL] = []
        let output = HLSPlaylist.rewrite(text, base: URL(string: base)!) { origin in
            origins.append(origin)
            return Self.proxy.path(for: origin)
        }
        return (output, origins)
    }

    @Test("a media playlist: segments, keys (IV kept, rotation), the init map, byte ranges; CRLF kept")
    func mediaPlaylist() throws {
        let text = [
            "#EXTM3U", "#EXT-X-VERSION:7", "#EXT-X-TARGETDURATION:6",
            "#EXT-X-MAP:URI=\"init.mp4\",BYTERANGE=\"720@0\"",
            "#EXT-X-KEY:METHOD=AES-128,URI=\"https://priv.example.com/key.php?r=52\",IV=0x9c7db8778570d05c3177c349fd9236aa",
            "#EXTINF:6.0,", "seg0.ts",
            "#EXT-X-BYTERANGE:1000@2000", "#EXTINF:6.0,", "../other/seg1.ts?token=a%20b",
            "#EXT-X-KEY:METHOD=AES-128,URI=\"customscheme://keys/2\",IV=0x00000000000000000000000000000002",
            "#EXTINF:6.0,", "https://cdn.example.com/abs/seg2.ts",
            "", "# a comment", "#EXT-X-ENDLIST", "",
        ].joined(separator: "\r\n")
        let (output, origins) = Self.rewrite(text, base: "https://media.example.com/vod/movie/index.m3u8")
        #expect(
            origins.map(\.absoluteString) == [
                "https://media.example.com/vod/movie/init.mp4",
                "https://priv.example.com/key.php?r=52",
                "https://media.example.com/vod/movie/seg0.ts",
                "https://media.example.com/vod/other/seg1.ts?token=a%20b",
                "customscheme://keys/2",
                "https://cdn.example.com/abs/seg2.ts",
            ]
        )
        let lines = output.components(separatedBy: "\r\n")
        #expect(lines.count == text.components(separatedBy: "\r\n").count, "line for line, CRLF kept")
        #expect(
            lines[3].hasPrefix("#EXT-X-MAP:URI=\"http://127.0.0.1:6990/r/")
                && lines[3].hasSuffix("/init.mp4\",BYTERANGE=\"720@0\"")
        )
        #expect(lines[4].hasSuffix("/key.php\",IV=0x9c7db8778570d05c3177c349fd9236aa"), "the IV is kept: \(lines[4])")
        #expect(lines[10].hasSuffix(",IV=0x00000000000000000000000000000002"))
        #expect(lines[7] == "#EXT-X-BYTERANGE:1000@2000")
        #expect(lines[6].hasPrefix("http://127.0.0.1:6990/r/") && lines[6].hasSuffix("/seg0.ts"))
        #expect(lines[13].isEmpty && lines[14] == "# a comment" && lines[15] == "#EXT-X-ENDLIST")
        #expect(!HLSPlaylist.isLive(text))
        #expect(HLSPlaylist.isLive(text.replacingOccurrences(of: "#EXT-X-ENDLIST", with: "")))
        let kinds = HLSPlaylist.references(
            in: text,
            base: URL(string: "https://media.example.com/vod/movie/index.m3u8")!
        )
        #expect(kinds.map(\.url) == origins)
        #expect(kinds.filter { $0.reference == .key }.count == 2)
        #expect(kinds.filter { $0.reference == .map }.count == 1)
        #expect(kinds.filter { $0.reference == .segment }.count == origins.count - 3)
        // Every rewritten URI leads back to its origin.
        var found: [URL] = []
        for line in lines {
            let uri: String
            if line.hasPrefix("http://127.0.0.1:6990/") {
                uri = line
            } else if let start = line.range(of: "URI=\"http://127.0.0.1:6990/") {
                let rest = line[line.index(start.lowerBound, offsetBy: 5)...]
                uri = String(rest.prefix { $0 != "\"" })
            } else {
                continue
            }
            let url = try #require(URL(string: uri))
            found.append(try #require(ProxyURL.origin(path: url.path, query: url.query)))
        }
        #expect(found == origins)
    }

    @Test("a master playlist: variants, audio renditions, I-frame playlists; a master playlist is not live")
    func masterPlaylist() {
        let text = """
            #EXTM3U
            #EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="aac",NAME="English",URI="audio/en.m3u8"
            #EXT-X-STREAM-INF:BANDWIDTH=1280000,AUDIO="aac"
            low/index.m3u8
            #EXT-X-I-FRAME-STREAM-INF:BANDWIDTH=86000,URI="low/iframe.m3u8"
            #EXT-X-MEDIA:TYPE=CLOSED-CAPTIONS,GROUP-ID="cc",NAME="CC",INSTREAM-ID="CC1"

            """
        let (output, origins) = Self.rewrite(text, base: "http://redirected.example.com/live/master.m3u8")
        #expect(
            origins.map(\.absoluteString) == [
                "http://redirected.example.com/live/audio/en.m3u8",
                "http://redirected.example.com/live/low/index.m3u8",
                "http://redirected.example.com/live/low/iframe.m3u8",
            ]
        )
        #expect(output.contains("#EXT-X-MEDIA:TYPE=CLOSED-CAPTIONS,GROUP-ID=\"cc\",NAME=\"CC\",INSTREAM-ID=\"CC1\""))
        #expect(output.contains("#EXT-X-STREAM-INF:BANDWIDTH=1280000,AUDIO=\"aac\"\n"))
        #expect(!HLSPlaylist.isLive(text))
        let kinds = HLSPlaylist.references(in: text, base: URL(string: "http://o.example/live/master.m3u8")!)
        #expect(kinds.map(\.reference) == [.other, .variant, .other])
    }

    @Test("playlists are told by Content-Type, else by extension; proxy URLs in both forms read back")
    func detectionAndURLs() throws {
        let origin = try #require(URL(string: "https://cdn.example.com/a b/视频.mp4?sig=x&y=1#frag"))
        #expect(HLSPlaylist.isPlaylist(contentType: "application/vnd.apple.mpegurl", url: origin))
        #expect(HLSPlaylist.isPlaylist(contentType: "audio/mpegurl; charset=utf-8", url: origin))
        #expect(!HLSPlaylist.isPlaylist(contentType: "video/mp4", url: origin))
        #expect(HLSPlaylist.isPlaylist(contentType: nil, url: URL(string: "http://x/a/index.M3U8")!))
        for url in [Self.proxy.query(for: origin), Self.proxy.path(for: origin)] {
            #expect(url.host == "127.0.0.1" && url.port == 6990)
            #expect(ProxyURL.origin(path: url.path, query: url.query) == origin, "\(url)")
        }
        #expect(Self.proxy.path(for: origin).lastPathComponent == "视频.mp4")
        #expect(ProxyURL.origin(path: "/nothing", query: nil) == nil)
        #expect(ProxyURL.origin(path: "/r/!!!/x", query: nil) == nil)
    }
}
