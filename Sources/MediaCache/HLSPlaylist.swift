public import Foundation

/// HLS playlists as the proxy passes them on: every URI in them pointing back at the proxy.
public enum HLSPlaylist {
    /// The tags whose `URI` attribute names a resource the player will fetch.
    static let uriTags: Set<String> = [
        "#EXT-X-KEY", "#EXT-X-SESSION-KEY", "#EXT-X-MAP", "#EXT-X-MEDIA", "#EXT-X-I-FRAME-STREAM-INF",
        "#EXT-X-SESSION-DATA", "#EXT-X-PART", "#EXT-X-PRELOAD-HINT", "#EXT-X-RENDITION-REPORT",
    ]

    /// Whether a response is a playlist, by its Content-Type or, failing that, its URL's extension.
    public static func isPlaylist(contentType: String?, url: URL) -> Bool {
        let type = contentType?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
        if let type,
            ["application/vnd.apple.mpegurl", "application/x-mpegurl", "audio/mpegurl", "audio/x-mpegurl"]
                .contains(type)
        {
            return true
        }
        return url.pathExtension.lowercased() == "m3u8"
    }

    /// Whether a playlist is complete (video on demand: `EXT-X-ENDLIST`), so it may be cached; a live one is not.
    public static func isComplete(_ text: String) -> Bool {
        text.split(whereSeparator: \.isNewline).contains { $0.trimmingCharacters(in: .whitespaces) == "#EXT-X-ENDLIST" }
    }

    /// Rewrites a playlist: each URI line (segments, variant playlists) and each `URI="…"` attribute (keys, maps,
    /// renditions, I-frame playlists…) is resolved against `base` — the playlist's final URL, after redirects — and
    /// replaced by `rewrite(resolved)`. Everything else (tags, their other attributes such as a key's `IV`, comments,
    /// blank lines, the line endings) is kept as it was.
    public static func rewrite(_ text: String, base: URL, _ rewrite: (URL) -> URL) -> String {
        var output = ""
        output.reserveCapacity(text.utf8.count * 2)
        var rest = Substring(text)
        while !rest.isEmpty {
            let end = rest.firstIndex(where: \.isNewline) ?? rest.endIndex
            let line = rest[..<end]
            var newline = rest.index(end, offsetBy: 0)
            if newline < rest.endIndex { newline = rest.index(after: newline) }
            output += Self.rewriteLine(line, base: base, rewrite)
            output += rest[end..<newline]
            rest = rest[newline...]
        }
        return output
    }

    /// Where the value of the `URI` attribute starts: `URI="` right after the tag's colon or a comma (not inside
    /// another attribute's quoted value).
    private static func uriValueStart(in line: String) -> String.Index? {
        var searchFrom = line.startIndex
        while let range = line.range(of: "URI=\"", range: searchFrom..<line.endIndex) {
            if range.lowerBound > line.startIndex, [":", ","].contains(line[line.index(before: range.lowerBound)]) {
                return range.upperBound
            }
            searchFrom = range.upperBound
        }
        return nil
    }

    private static func rewriteLine(_ line: Substring, base: URL, _ rewrite: (URL) -> URL) -> String {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        if trimmed.isEmpty { return String(line) }
        if !trimmed.hasPrefix("#") {
            guard let resolved = URL(string: trimmed, relativeTo: base)?.absoluteURL else { return String(line) }
            return rewrite(resolved).absoluteString
        }
        let tag = trimmed.prefix { $0 != ":" }
        guard Self.uriTags.contains(String(tag)), let valueStart = Self.uriValueStart(in: trimmed) else {
            return String(line)
        }
        guard let valueEnd = trimmed[valueStart...].firstIndex(of: "\"") else { return String(line) }
        let value = String(trimmed[valueStart..<valueEnd])
        guard let resolved = URL(string: value, relativeTo: base)?.absoluteURL else { return String(line) }
        return String(trimmed[..<valueStart]) + rewrite(resolved).absoluteString + String(trimmed[valueEnd...])
    }
}
