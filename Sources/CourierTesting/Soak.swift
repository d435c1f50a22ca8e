import Foundation

/// The soak tests (a reader that stops reading for 100 MB, SIGKILLs under 10,000 sends, 500 processes at once, a
/// cluster restarted under load) each take both cores for a minute, and one restarts the PostgreSQL cluster other
/// suites use: they run only when asked for, one at a time, as `scripts/test` runs them.
public enum Soak {
    /// Whether this run asks for the soak tests (`COURIER_TEST_SOAK=1`).
    public static var isAsked: Bool { ProcessInfo.processInfo.environment["COURIER_TEST_SOAK"] == "1" }

    /// What a skipped soak test says.
    public static let skipReason =
        "a soak test, run only when asked: COURIER_TEST_SOAK=1 swift test --filter SUITE (scripts/test runs each alone)"
}
