import Foundation
import Testing

@testable import MediaCache

@Suite("MediaCache: freshness from the origin's headers")
struct FreshnessTests {
    static let received = Date(timeIntervalSince1970: 1_800_000_000)

    static func freshness(_ headers: [(String, String)]) -> Freshness {
        Freshness(headers: headers.map { (name: $0.0, value: $0.1) }, received: Self.received)
    }

    @Test("max-age (less the Age), Expires against the origin's Date, no-cache, no-store")
    func lifetimes() {
        #expect(Self.freshness([("Cache-Control", "public, max-age=600")]).freshUntil == Self.received + 600)
        #expect(Self.freshness([("cache-control", "max-age=600"), ("Age", "100")]).freshUntil == Self.received + 500)
        #expect(Self.freshness([("Cache-Control", "max-age=60"), ("Age", "100")]).freshUntil == Self.received)
        let expires = Self.freshness([
            ("Date", "Tue, 15 Nov 1994 08:12:31 GMT"), ("Expires", "Tue, 15 Nov 1994 09:12:31 GMT"),
        ])
        #expect(expires.freshUntil == Self.received + 3600, "an hour from the origin's clock, whatever ours says")
        #expect(Self.freshness([("Expires", "0")]).freshUntil == nil)
        #expect(Self.freshness([("Cache-Control", "max-age=600"), ("Expires", "0")]).freshUntil == Self.received + 600)
        let noCache = Self.freshness([("Cache-Control", "no-cache, max-age=600")])
        #expect(noCache.freshUntil == nil && !noCache.noStore)
        let noStore = Self.freshness([("Cache-Control", "private, no-store")])
        #expect(noStore.noStore && noStore.freshUntil == nil)
        #expect(Self.freshness([]).freshUntil == nil && !Self.freshness([]).noStore)
        #expect(Self.freshness([("Cache-Control", "max-age=\"30\"")]).freshUntil == Self.received + 30)
    }

    @Test("a Vary on what players send differently is not stored; on Accept-Encoding (always identity) it is")
    func vary() {
        #expect(Self.freshness([("Vary", "Referer")]).noStore)
        #expect(Self.freshness([("vary", "accept-encoding, Cookie")]).noStore)
        #expect(Self.freshness([("Vary", "*"), ("Cache-Control", "max-age=600")]).noStore)
        #expect(!Self.freshness([("Vary", "Accept-Encoding")]).noStore)
        #expect(!Self.freshness([("Vary", " ")]).noStore)
    }

    @Test("the three HTTP-date forms")
    func dates() {
        let expected = Date(timeIntervalSince1970: 784_111_777)
        #expect(Freshness.httpDate("Sun, 06 Nov 1994 08:49:37 GMT") == expected)
        #expect(Freshness.httpDate("Sunday, 06-Nov-94 08:49:37 GMT") == expected)
        #expect(Freshness.httpDate("Sun Nov  6 08:49:37 1994") == expected)
        #expect(Freshness.httpDate("yesterday") == nil)
    }

    @Test("revalidation: never while fresh, then at most once per interval")
    func revalidation() {
        let fresh = Self.freshness([("Cache-Control", "max-age=100")])
        #expect(!fresh.needsRevalidation(at: Self.received + 50, lastValidated: nil, interval: 60))
        #expect(fresh.needsRevalidation(at: Self.received + 150, lastValidated: nil, interval: 60))
        #expect(!fresh.needsRevalidation(at: Self.received + 150, lastValidated: Self.received + 120, interval: 60))
        #expect(fresh.needsRevalidation(at: Self.received + 190, lastValidated: Self.received + 120, interval: 60))
        let stale = Self.freshness([])
        #expect(stale.needsRevalidation(at: Self.received, lastValidated: nil, interval: 60))
        #expect(!stale.needsRevalidation(at: Self.received + 30, lastValidated: Self.received, interval: 60))
    }
}
