import Foundation

/// The clocks sessions read: the monotonic one for their deadlines and rates, and the wall clock (milliseconds since
/// 1970) for what the store keeps (a token's expiry, a message's time, last seen). When serving, the machine's own;
/// in a test, ones that follow the time the test moves (an event loop's, with `advanceTime(by:)`), so that a deadline
/// or an expiry is tested without waiting for it.
///
/// A session also schedules on its event loop (a held send, the grace of its last frames), so a test that moves
/// these clocks moves the loop's time with them.
struct SessionClock: Sendable {
    private let read: @Sendable () -> ContinuousClock.Instant
    private let readWall: @Sendable () -> Int64

    /// - Parameters:
    ///   - read: The monotonic clock.
    ///   - wallMs: The wall clock, in milliseconds since 1970.
    init(
        _ read: @escaping @Sendable () -> ContinuousClock.Instant,
        wallMs: @escaping @Sendable () -> Int64 = { SessionClock.systemWallMs() }
    ) {
        self.read = read
        self.readWall = wallMs
    }

    /// The machine's clocks.
    static let continuous = SessionClock { .now }

    /// The monotonic clock.
    var now: ContinuousClock.Instant { self.read() }

    /// The wall clock, in milliseconds since 1970.
    var wallMs: Int64 { self.readWall() }

    /// The machine's wall clock, in milliseconds since 1970: for what runs outside a session (the cluster's leases
    /// and heartbeats, which other nodes read, and the upkeep's pruning).
    static func systemWallMs() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1000).rounded())
    }
}
