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
        self.refill(now: now)
        if self.tokens >= 1 {
            self.tokens -= 1
            return nil
        }
        return .milliseconds(Int64(((1 - self.tokens) / self.rate * 1000).rounded(.up)))
    }

    /// Takes `count` tokens whether or not there are that many: the bucket may go into debt, which ``debt(now:)``
    /// reports until the rate has paid it back.
    mutating func charge(_ count: Double, now: ContinuousClock.Instant) {
        self.refill(now: now)
        self.tokens -= count
    }

    /// How long until the bucket is out of debt; nil when it is not in debt.
    mutating func debt(now: ContinuousClock.Instant) -> Duration? {
        self.refill(now: now)
        guard self.tokens < 0 else { return nil }
        return .milliseconds(Int64((-self.tokens / self.rate * 1000).rounded(.up)))
    }

    /// Whether the bucket is full (it can be forgotten and made anew).
    mutating func isFull(now: ContinuousClock.Instant) -> Bool {
        self.refill(now: now)
        return self.tokens >= self.burst
    }

    private mutating func refill(now: ContinuousClock.Instant) {
        let elapsed = now - self.updated
        self.updated = now
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        self.tokens = min(self.burst, self.tokens + seconds * self.rate)
    }
}
