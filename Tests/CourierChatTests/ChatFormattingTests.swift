import Foundation
import Testing

@testable import CourierChat

@Suite("What the terminal chat shows: relative times and display widths")
struct ChatFormattingTests {
    static let utc = TimeZone(identifier: "UTC")!

    static func date(_ text: String) -> Date {
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = Self.utc
        return formatter.date(from: text)!
    }

    @Test(
        "recent times are relative, yesterday by its clock time, this year without the year",
        arguments: [
            ("2026-11-22T14:59:50Z", "just now"),
            ("2026-11-22T15:00:30Z", "just now"),  // from a clock slightly ahead
            ("2026-11-22T14:57:00Z", "3 min ago"),
            ("2026-11-22T14:01:00Z", "59 min ago"),
            ("2026-11-22T10:00:00Z", "5 h ago"),
            ("2026-11-21T14:02:00Z", "yesterday 14:02"),
            ("2026-11-20T23:59:00Z", "11-20 23:59"),
            ("2026-03-14T09:30:00Z", "03-14 09:30"),
            ("2016-03-14T09:30:00Z", "2016-03-14 09:30"),
        ]
    )
    func relative(_ time: String, _ expected: String) {
        let now = Self.date("2026-11-22T15:00:00Z")
        #expect(RelativeTime(timeZone: Self.utc).format(Self.date(time), now: now) == expected)
    }

    @Test("just after midnight, 40 minutes ago is minutes, and 22:00 is yesterday")
    func aroundMidnight() {
        let now = Self.date("2026-11-22T00:30:00Z")
        let relative = RelativeTime(timeZone: Self.utc)
        #expect(relative.format(Self.date("2026-11-21T23:50:00Z"), now: now) == "40 min ago")
        #expect(relative.format(Self.date("2026-11-21T22:00:00Z"), now: now) == "yesterday 22:00")
    }

    @Test("days follow the viewer's time zone")
    func timeZones() {
        let now = Self.date("2026-11-22T15:00:00Z")  // 23:00 in Shanghai
        let then = Self.date("2026-11-21T17:00:00Z")  // 01:00 the same day in Shanghai
        #expect(RelativeTime(timeZone: Self.utc).format(then, now: now) == "yesterday 17:00")
        #expect(RelativeTime(timeZone: TimeZone(identifier: "Asia/Shanghai")!).format(then, now: now) == "22 h ago")
    }

    @Test(
        "columns: CJK, Hangul and fullwidth take two, emoji two, combining marks none",
        arguments: [
            ("hello", 5),
            ("你好", 4),
            ("你好, alice 👋", 14),
            ("한국어", 6),
            ("ｈｉ", 4),
            ("e\u{0301}", 1),
            ("👍🏽", 2),
            ("👨‍👩‍👧", 2),
            ("❤️", 2),
            ("❤", 1),
            ("a\u{200B}b", 2),
            ("", 0),
        ]
    )
    func width(_ text: String, _ columns: Int) {
        #expect(DisplayWidth.of(text) == columns, "\(text.unicodeScalars.map { String($0.value, radix: 16) })")
    }
}
