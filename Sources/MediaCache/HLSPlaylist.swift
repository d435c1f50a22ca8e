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

    /// What a URI in a playlist names.
    public enum Reference: Hashable, Sendable {
        /// A media segment (a URI line of a media playlist, possibly with `EXT-X-BYTERANGE`).
        case segment
        /// A variant playlist (the URI line after `EXT-X-STREAM-INF`).
        case variant
        /// A key (`EXT-X-KEY`, `EXT-X-SESSION-KEY`).
        case key
        /// An initialization section (`EXT-X-MAP`).
        case map
        /// A rendition playlist (`EXT-X-MEDIA`), an I-frame playlist, or another tag's URI.
        case other
    }

    /// Whether a playlist changes as it is played: a media playlist (with segments) without `EXT-X-ENDLIST`. A live
    /// playlist is fetched fresh each time; a VOD playlist, or a master playlist (variants only), is cached.
    public static func isLive(_ text: String) -> Bool {
        let lines = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
        let isMedia = lines.contains { $0.hasPrefix("#EXTINF") || $0.hasPrefix("#EXT-X-TARGETDURATION") }
        return isMedia && !lines.contains("#EXT-X-ENDLIST")
    }

    /// Rewrites a playlist: each URI line (segments, variant playlists) and each `URI="…"` attribute (keys, maps,
    /// renditions, I-frame playlists…) is resolved against `base` — the playlist's final URL, after redirects — and
    /// replaced by `rewrite(resolved)`. Everything else (tags, their other attributes such as a key's `IV`, comments,
    /// blank lines, the line endings) is kept as it was.
    public static func rewrite(_ text: String, base: URL, _ rewrite: (URL) -> URL) -> String {
        Self.rewrite(text, base: base) { url, _ in rewrite(url) }
    }

    /// Rewrites a playlist as ``rewrite(_:base:_:)-swift.type.method``, telling `rewrite` what each URI names.
    public static func rewrite(_ text: String, base: URL, _ rewrite: (URL, Reference) -> URL) -> String {
        var output = ""
        output.reserveCapacity(text.utf8.count * 2)
        Self.walk(text, base: base) { piece in
            switch piece {
            case .text(let text): output += text
            case .uri(let prefix, let url, let reference, let suffix):
                output += prefix + rewrite(url, reference).absoluteString + suffix
            }
        }
        return output
    }

    /// Every URI in a playlist, resolved against `base`, with what it names, in order.
    public static func references(in text: String, base: URL) -> [(url: URL, reference: Reference)] {
        var found: [(url: URL, reference: Reference)] = []
        Self.walk(text, base: base) { piece in
            if case .uri(_, let url, let reference, _) = piece { found.append((url, reference)) }
        }
        return found
    }

    private enum Piece {
        case text(String)
        case uri(prefix: String, URL, Reference, suffix: String)
    }

    private static func walk(_ text: String, base: URL, _ visit: (Piece) -> Void) {
        var rest = Substring(text)
        var afterStreamInf = false
        while !rest.isEmpty {
            let end = rest.firstIndex(where: \.isNewline) ?? rest.endIndex
            let line = rest[..<end]
            var newline = end
            if newline < rest.endIndex { newline = rest.index(after: newline) }
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if let uri = Self.uri(in: line, base: base, afterStreamInf: afterStreamInf) {
                visit(.uri(prefix: uri.prefix, uri.url, uri.reference, suffix: uri.suffix))
            } else {
                visit(.text(String(line)))
            }
            visit(.text(String(rest[end..<newline])))
            if trimmed.hasPrefix("#EXT-X-STREAM-INF") {
                afterStreamInf = true
            } else if !trimmed.isEmpty && !trimmed.hasPrefix("#") {
                afterStreamInf = false
            }
            rest = rest[newline...]
        }
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

    /// The URI of a line, if it has one: the text before and after it, the URI resolved, and what it names.
    private static func uri(
        in line: Substring,
        base: URL,
        afterStreamInf: Bool
    ) -> (prefix: String, url: URL, reference: Reference, suffix: String)? {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        if trimmed.isEmpty { return nil }
        if !trimmed.hasPrefix("#") {
            guard let resolved = URL(string: trimmed, relativeTo: base)?.absoluteURL else { return nil }
            return ("", resolved, afterStreamInf ? .variant : .segment, "")
        }
        let tag = String(trimmed.prefix { $0 != ":" })
        guard Self.uriTags.contains(tag), let valueStart = Self.uriValueStart(in: trimmed) else { return nil }
        guard let valueEnd = trimmed[valueStart...].firstIndex(of: "\"") else { return nil }
        let value = String(trimmed[valueStart..<valueEnd])
        guard let resolved = URL(string: value, relativeTo: base)?.absoluteURL else { return nil }
        let reference: Reference =
            switch tag {
            case "#EXT-X-KEY", "#EXT-X-SESSION-KEY": .key
            case "#EXT-X-MAP": .map
            default: .other
            }
        return (String(trimmed[..<valueStart]), resolved, reference, String(trimmed[valueEnd...]))
    }
}
