/// Counts failed logins per user name and per client address in a sliding window, and refuses logins past the
/// limits until the oldest failure leaves the window.
///
/// Memory is bounded: each key keeps at most its limit of timestamps, and keys whose failures have all left the
/// window are dropped when the table grows past `maxKeys`.
struct LoginThrottle: Sendable {
    let perUser: Int
    let perAddress: Int
    let window: Duration
    let maxKeys: Int
    private var failures: [Key: [ContinuousClock.Instant]] = [:]

    private enum Key: Hashable {
        case user(String)
        case address(String)
    }

    init(perUser: Int, perAddress: Int, window: Duration, maxKeys: Int = 100_000) {
        self.perUser = perUser
        self.perAddress = perAddress
        self.window = window
        self.maxKeys = maxKeys
    }

    /// Whether a login may be tried now.
    ///
    /// - Returns: nil if it may; otherwise how long until it may.
    func check(user: String, address: String, now: ContinuousClock.Instant) -> Duration? {
        let waits = [
            self.wait(.user(user.lowercased()), limit: self.perUser, now: now),
            self.wait(.address(address), limit: self.perAddress, now: now),
        ].compactMap { $0 }
        return waits.max()
    }

    /// Records a failed login.
    mutating func recordFailure(user: String, address: String, now: ContinuousClock.Instant) {
        if self.failures.count >= self.maxKeys { self.prune(now: now) }
        for (key, limit) in [(Key.user(user.lowercased()), self.perUser), (.address(address), self.perAddress)] {
            var times = self.failures[key, default: []].filter { now - $0 < self.window }
            times.append(now)
            self.failures[key] = Array(times.suffix(limit))
        }
    }

    private func wait(_ key: Key, limit: Int, now: ContinuousClock.Instant) -> Duration? {
        let recent = (self.failures[key] ?? []).filter { now - $0 < self.window }
        guard recent.count >= limit, let oldest = recent.first else { return nil }
        return self.window - (now - oldest)
    }

    private mutating func prune(now: ContinuousClock.Instant) {
        self.failures = self.failures.filter { _, times in times.contains { now - $0 < self.window } }
    }
}
