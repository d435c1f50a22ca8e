import CourierProtocol
import CourierStore
import Foundation
import Logging
import Synchronization

/// What every session shares: the store, the group commit, the map of connections, the login throttle.
final class SessionContext: Sendable {
    let configuration: ServerConfiguration
    let store: SQLiteStore
    let commits: CommitQueue
    let hub: Hub
    let logger: Logger
    let metrics: ServerMetrics
    let media: MediaService
    private let throttle: Mutex<LoginThrottle>
    private let connections = Atomic<Int>(0)

    init(
        configuration: ServerConfiguration,
        store: SQLiteStore,
        commits: CommitQueue,
        hub: Hub,
        metrics: ServerMetrics,
        media: MediaService,
        logger: Logger
    ) {
        self.media = media
        self.configuration = configuration
        self.store = store
        self.commits = commits
        self.hub = hub
        self.metrics = metrics
        self.logger = logger
        self.throttle = Mutex(
            LoginThrottle(
                perUser: configuration.limits.maxFailedLoginsPerUser,
                perAddress: configuration.limits.maxFailedLoginsPerAddress,
                window: configuration.limits.loginWindow
            )
        )
    }

    /// Counts a connection in; nil when the server is at its connection limit.
    func admit() -> Bool {
        let (_, new) = self.connections.add(1, ordering: .relaxed)
        if new > self.configuration.limits.maxConnections {
            self.connections.subtract(1, ordering: .relaxed)
            return false
        }
        self.metrics.connectionOpened()
        return true
    }

    /// Counts a connection out.
    func release() {
        self.connections.subtract(1, ordering: .relaxed)
        self.metrics.connectionClosed()
    }

    /// The server's clock, in milliseconds since 1970.
    static func nowMs() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1000).rounded())
    }

    func loginWait(user: String, address: String) -> Duration? {
        self.throttle.withLock { $0.check(user: user, address: address, now: .now) }
    }

    func loginFailed(user: String, address: String) {
        self.throttle.withLock { $0.recordFailure(user: user, address: address, now: .now) }
    }
}
