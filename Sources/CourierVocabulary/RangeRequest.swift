/// A `Range` header (RFC 9110 §14.1.2), as the server's media endpoint and the proxy answer it.
///
/// One byte range — `bytes=a-b`, `bytes=a-` or `bytes=-n` — is answered with 206 and `Content-Range: bytes a-b/total`
/// (the resource's whole length, never the piece's). A request with several ranges, another unit, or a header that does
/// not parse is answered with the whole resource (200), as the RFC allows a server to ignore `Range`: players send one
/// range, and a multipart answer would have to be assembled from pieces (the proxy's may not be cached yet).
public enum RangeRequest: Hashable, Sendable {
    /// No range (or one the proxy ignores): the whole resource.
    case whole
    /// One range: from `start` to `end` (inclusive; nil: to the end).
    case from(Int64, through: Int64?)
    /// The last `count` bytes.
    case suffix(Int64)

    /// Parses a `Range` header value.
    public init(header: String?) {
        guard let header else {
            self = .whole
            return
        }
        let trimmed = header.trimmingCharacters(in: " \t")
        guard trimmed.lowercased().hasPrefix("bytes=") else {
            self = .whole
            return
        }
        let spec = String(trimmed.dropFirst("bytes=".count)).trimmingCharacters(in: " \t")
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else {
            self = .whole
            return
        }
        let first = String(spec[..<dash]).trimmingCharacters(in: " \t")
        let last = String(spec[spec.index(after: dash)...]).trimmingCharacters(in: " \t")
        let parsed: (Int64?, Int64?) = (Self.number(first), Self.number(last))
        switch parsed {
        case (nil, let count?) where first.isEmpty:
            self = .suffix(count)
        case (let start?, nil) where last.isEmpty:
            self = .from(start, through: nil)
        case (let start?, let end?) where end >= start:
            self = .from(start, through: end)
        default:
            self = .whole
        }
    }

    /// The bytes to send for a resource of `total` bytes: nil when the range is unsatisfiable (416, with
    /// `Content-Range: bytes */total`).
    public func bytes(of total: Int64) -> Range<Int64>? {
        switch self {
        case .whole:
            return 0..<total
        case .from(let start, let end):
            guard start < total else { return nil }
            return start..<(min(end ?? (total - 1), total - 1) + 1)
        case .suffix(let count):
            guard count > 0, total > 0 else { return nil }
            return max(0, total - count)..<total
        }
    }

    /// Whether this asks for part of the resource (206), rather than all of it (200).
    public var isPartial: Bool { self != .whole }

    /// Digits only (no sign, no spaces inside); values past Int64 read as Int64.max.
    private static func number(_ text: String) -> Int64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        return Int64(text) ?? Int64.max
    }
}

extension String {
    fileprivate func trimmingCharacters(in set: String) -> String {
        var view = Substring(self)
        while let first = view.first, set.contains(first) { view = view.dropFirst() }
        while let last = view.last, set.contains(last) { view = view.dropLast() }
        return String(view)
    }
}

/// A `Content-Range` header (RFC 9110 §14.4): `bytes first-last/total` (total may be `*`), or `bytes */total` on a
/// 416.
public struct ContentRange: Hashable, Sendable {
    public var first: Int64
    public var last: Int64
    /// The whole resource's length, nil for `*`.
    public var total: Int64?

    public init(first: Int64, last: Int64, total: Int64?) {
        self.first = first
        self.last = last
        self.total = total
    }

    /// Parses `bytes first-last/total`; nil for anything else (a range whose last is before its first, or past the
    /// total, included).
    public init?(_ text: String) {
        let trimmed = text.trimmingCharacters(in: " \t")
        guard trimmed.lowercased().hasPrefix("bytes ") else { return nil }
        let parts = trimmed.dropFirst(6).split(separator: "/", maxSplits: 1)
        guard parts.count == 2 else { return nil }
        let bounds = parts[0].split(separator: "-", maxSplits: 1)
        guard bounds.count == 2, let first = Int64(bounds[0]), let last = Int64(bounds[1]), first >= 0, first <= last
        else {
            return nil
        }
        self.first = first
        self.last = last
        if parts[1] == "*" {
            self.total = nil
        } else {
            guard let total = Int64(parts[1]), total > last else { return nil }
            self.total = total
        }
    }

    /// The total of `bytes */total` (an unsatisfiable range's answer).
    public static func unsatisfied(_ text: String) -> Int64? {
        let trimmed = text.trimmingCharacters(in: " \t")
        guard trimmed.lowercased().hasPrefix("bytes */") else { return nil }
        return Int64(trimmed.dropFirst(8))
    }
}
