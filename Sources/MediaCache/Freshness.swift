public import Foundation

/// How long an origin lets the cache serve a response without asking again (RFC 9111), for a private cache (the
/// proxy serves one device's player).
public struct Freshness: Hashable, Sendable {
    /// The response may not be stored at all: it streams through. `Cache-Control: no-store`; or a `Vary` on any
    /// request header but `Accept-Encoding` (the proxy always asks for `identity`): players that send different
    /// cookies, referers or user agents may be given different answers, and one kept for all would serve one player
    /// what another was given.
    public var noStore: Bool
    /// The moment the response stops being fresh; nil when it never was (no explicit lifetime, or `no-cache`): the
    /// cache then revalidates before serving it, at most once per its revalidation interval.
    public var freshUntil: Date?

    /// Reads `Cache-Control`, `Expires`, `Date` and `Age` of a response received at `received`. Header names are
    /// matched without regard to case.
    public init(headers: [(name: String, value: String)], received: Date) {
        func values(_ name: String) -> [String] {
            headers.filter { $0.name.caseInsensitiveCompare(name) == .orderedSame }.map(\.value)
        }
        var directives: [String: String?] = [:]
        for value in values("Cache-Control") {
            for part in value.split(separator: ",") {
                let pieces = part.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                guard let name = pieces.first?.lowercased(), !name.isEmpty else { continue }
                directives[name] = pieces.count > 1 ? pieces[1].trimmingCharacters(in: ["\""]) : .some(nil)
            }
        }
        let varies = values("Vary").flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            .contains { !$0.isEmpty && $0 != "accept-encoding" }
        self.noStore = directives["no-store"] != nil || varies
        if directives["no-cache"] != nil || self.noStore {
            self.freshUntil = nil
            return
        }
        let age = values("Age").first.flatMap { Double($0.trimmingCharacters(in: .whitespaces)) } ?? 0
        if let maxAge = directives["max-age"].flatMap({ $0 }).flatMap({ Double($0) }), maxAge >= 0 {
            self.freshUntil = received.addingTimeInterval(max(0, maxAge - age))
            return
        }
        if let expires = values("Expires").first {
            // An invalid Expires (such as "0") means already expired.
            guard let expiry = Self.httpDate(expires) else {
                self.freshUntil = nil
                return
            }
            let originNow = values("Date").first.flatMap(Self.httpDate) ?? received
            let lifetime = expiry.timeIntervalSince(originNow) - age
            self.freshUntil = lifetime > 0 ? received.addingTimeInterval(lifetime) : nil
            return
        }
        self.freshUntil = nil
    }

    /// Whether cached bytes may be served at `now` without asking the origin.
    public func isFresh(at now: Date) -> Bool {
        self.freshUntil.map { now < $0 } ?? false
    }

    /// Whether the cache asks the origin before serving: when the response is not fresh and the last check is older
    /// than `interval` (so a resource is revalidated at most once per interval).
    public func needsRevalidation(at now: Date, lastValidated: Date?, interval: TimeInterval) -> Bool {
        if self.isFresh(at: now) { return false }
        guard let lastValidated else { return true }
        return now.timeIntervalSince(lastValidated) >= interval
    }

    /// An HTTP-date (RFC 9110 §5.6.7): the preferred IMF-fixdate, or the obsolete RFC 850 and asctime forms.
    static func httpDate(_ text: String) -> Date? {
        let formats = ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"]
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        for format in formats {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "GMT")
            formatter.dateFormat = format
            if let date = formatter.date(from: trimmed) { return date }
        }
        return nil
    }
}
