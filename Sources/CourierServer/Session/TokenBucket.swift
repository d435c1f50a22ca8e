/// A token bucket: `rate` tokens per second, holding at most `burst`.
struct TokenBucket: Sendable {
    let rate: Double
    let burst: Double
    private var tokens: Double
    private var updated: ContinuousClock.Instant

    init(rate: Double, burst: Double, now: ContinuousClock.Instant) {
        self.rate = rate
        self.burst = max(1, burst)
        self.tokens = self.burst
        self.updated = now
    }

    /// Takes one token if there is one.
    ///
    /// - Returns: nil when taken; otherwise how long until one is available.
    mutating func take(now: ContinuousClock.Instant) -> Duration? {
        let elapsed = now - self.updated
        self.updated = now
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        self.tokens = min(self.burst, self.tokens + seconds * self.rate)
        if self.tokens >= 1 {
            self.tokens -= 1
            return nil
        }
        return .milliseconds(Int64(((1 - self.tokens) / self.rate * 1000).rounded(.up)))
    }
}
