import Foundation

/// Times as a chat shows them, relative while recent, as the source notes do for post times: "just now",
/// "3 min ago", "5 h ago" (today), "yesterday 14:02", "03-14 09:30" (this year), "2016-03-14 09:30" (before).
struct RelativeTime {
    var calendar: Calendar

    init(timeZone: TimeZone = .current) {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        self.calendar = calendar
    }

    func format(_ date: Date, now: Date) -> String {
        let seconds = now.timeIntervalSince(date)
        // A time from the future (a clock ahead of this one) is shown as now.
        if seconds < 60 { return "just now" }
        let sameDay = self.calendar.isDate(date, inSameDayAs: now)
        if sameDay || seconds < 3600 {
            if seconds < 3600 { return "\(Int(seconds / 60)) min ago" }
            return "\(Int(seconds / 3600)) h ago"
        }
        let time = self.string(date, "HH:mm")
        if let yesterday = self.calendar.date(byAdding: .day, value: -1, to: now),
            self.calendar.isDate(date, inSameDayAs: yesterday)
        {
            return "yesterday \(time)"
        }
        if self.calendar.component(.year, from: date) == self.calendar.component(.year, from: now) {
            return self.string(date, "MM-dd HH:mm")
        }
        return self.string(date, "yyyy-MM-dd HH:mm")
    }

    private func string(_ date: Date, _ format: String) -> String {
        let formatter = DateFormatter()
        formatter.calendar = self.calendar
        formatter.timeZone = self.calendar.timeZone
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = format
        return formatter.string(from: date)
    }
}
