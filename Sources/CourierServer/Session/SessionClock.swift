/// The clock sessions read their deadlines and rates from: the monotonic clock when serving; in a test, one that
/// follows the time the test moves (an event loop's, with `advanceTime(by:)`), so that a deadline is tested without
/// waiting for it.
///
/// A session also schedules on its event loop (a held send, the grace of its last frames), so a test that moves
/// this clock moves the loop's time with it.
struct SessionClock: Sendable {
    private let read: @Sendable () -> ContinuousClock.Instant

    init(_ read: @escaping @Sendable () -> ContinuousClock.Instant) {
        self.read = read
    }

    /// The monotonic clock.
    static let continuous = SessionClock { .now }

    var now: ContinuousClock.Instant { self.read() }
}
