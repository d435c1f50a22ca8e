/// Waits until `condition` holds, checking every 20 ms, for up to `timeout` (a limit for a broken test, not a
/// measure of speed).
///
/// - Throws: ``TestClientTimeout`` naming `what`, when it never held.
public func waitUntil(
    _ what: String,
    timeout: Duration = .seconds(60),
    _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while try await !condition() {
        guard ContinuousClock.now < deadline else { throw TestClientTimeout(description: "never: \(what)") }
        try await Task.sleep(for: .milliseconds(20))
    }
}
