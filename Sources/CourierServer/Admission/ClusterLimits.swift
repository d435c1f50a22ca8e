import CourierProtocol
import CourierStore
import Logging
import Synchronization

/// The server's side of the limits that hold across the nodes sharing a database (``ClusterAdmission``): password
/// attempts per user name and per address, and connections per user, counted in the database, with this node's
/// heartbeat, the leases of its connections, and the connections that yielded to a login on another node. A server
/// that owns its database alone (SQLite) has no ``ClusterAdmission``: its ``LoginThrottle`` and its ``Hub`` are the
/// whole cluster, and everything here is a no-op.
final class ClusterLimits: Sendable {
    let admission: (any ClusterAdmission)?
    let loginLimits: LoginLimits
    /// The sign-up limits, counted with the password attempts: every sign-up under one key, and under its address's
    /// own (``admitSignUp(address:)``).
    let signUpLimits: LoginLimits
    private let hub: Hub
    private let cluster: ServerConfiguration.Cluster
    private let pollInterval: Duration
    private let logger: Logger
    private let state = Mutex(State())

    private struct State {
        /// Leases whose close failed (the database could not be reached): closed with the next poll.
        var unclosed: [Int64] = []
        /// Each user's logins counting their connection in the database now.
        var opening: [UserID: Int] = [:]
        /// The node is stopping: its leases go all at once when it has stopped, not one by one.
        var stopping = false
        /// The node lapsed and its connections are not counted again yet (the restore failed): tried at the next
        /// heartbeat.
        var needsRestore = false
    }

    init(
        admission: (any ClusterAdmission)?,
        limits: ServerConfiguration.Limits,
        accounts: ServerConfiguration.Accounts,
        cluster: ServerConfiguration.Cluster,
        hub: Hub,
        logger: Logger
    ) {
        self.admission = admission
        self.loginLimits = LoginLimits(
            perUser: limits.maxFailedLoginsPerUser,
            perAddress: limits.maxFailedLoginsPerAddress,
            window: limits.loginWindow,
            inFlightLifetime: cluster.loginInFlightLifetime
        )
        self.signUpLimits = LoginLimits(
            perUser: accounts.maxSignUpsInAll,
            perAddress: accounts.maxSignUpsPerAddress,
            window: accounts.signUpWindow,
            inFlightLifetime: cluster.loginInFlightLifetime
        )
        self.hub = hub
        self.cluster = cluster
        self.pollInterval = limits.changePollInterval
        self.logger = logger
    }

    /// Checks a password attempt against every node's count, and counts it in flight: nil on a single node.
    func admitPassword(user: String, address: String) async throws -> PasswordAdmission? {
        guard let admission else { return nil }
        return try await admission.admitPasswordAttempt(
            user: LoginLimits.userKey(user),
            address: address,
            limits: self.loginLimits,
            nowMs: SessionClock.systemWallMs()
        )
    }

    /// Checks a sign-up against every node's sign-ups, in all and from its address, and counts it in flight: nil on
    /// a single node. Finish it with ``finish(_:failed:)``, `failed` true: every sign-up counts.
    func admitSignUp(address: String) async throws -> PasswordAdmission? {
        guard let admission else { return nil }
        return try await admission.admitSignUp(
            address: address,
            limits: self.signUpLimits,
            nowMs: SessionClock.systemWallMs()
        )
    }

    /// An admitted attempt ended. If its end cannot be written, it stops counting as in flight after
    /// ``ServerConfiguration/Cluster-swift.struct/loginInFlightLifetime``.
    func finish(_ attempt: PasswordAttempt, failed: Bool) async {
        do {
            try await self.admission?.finishPasswordAttempt(attempt, failed: failed, nowMs: SessionClock.systemWallMs())
        } catch {
            self.logger.warning("a login's end could not be counted", metadata: ["error": "\(error)"])
        }
    }

    /// Counts a connection of a user on every node: nil on a single node (the hub counts). A token login is refused
    /// without asking the database when this node alone holds the user's limit.
    func open(user: UserID, maxPerUser: Int, yielding: Bool) async throws -> ConnectionAdmission? {
        guard let admission else { return nil }
        if !yielding, self.hub.placesHeld(by: user) >= maxPerUser { return .full }
        // At most this many at once (``ServerConfiguration/Cluster-swift.struct/maxOpeningPerUser``).
        let maxOpening = self.cluster.maxOpeningPerUser
        let admitted = self.state.withLock { state in
            guard state.opening[user, default: 0] < maxOpening else { return false }
            state.opening[user, default: 0] += 1
            return true
        }
        guard admitted else { return .full }
        defer {
            self.state.withLock { state in
                let left = state.opening[user, default: 1] - 1
                state.opening[user] = left > 0 ? left : nil
            }
        }
        return try await admission.openConnection(
            user: user,
            maxPerUser: maxPerUser,
            yielding: yielding,
            nowMs: SessionClock.systemWallMs()
        )
    }

    /// A connection counted under `lease` ended.
    func close(lease: Int64) async {
        guard let admission, !self.state.withLock({ $0.stopping }) else { return }
        do {
            try await admission.closeConnections([lease])
        } catch {
            self.state.withLock { $0.unclosed.append(lease) }
        }
    }

    /// The node starts: nothing it counted before counts, and it is alive from now.
    func start() async throws {
        guard let admission else { return }
        try await admission.forgetNode()
        try await self.heartbeat(admission)
    }

    /// Until cancelled: says the node is alive, closes the connections that yielded to a login on another node,
    /// closes the leases whose first close failed, and prunes what no longer counts.
    func run() async {
        guard let admission else { return }
        var lastBeat = ContinuousClock.now
        var lastPrune = ContinuousClock.now
        while (try? await Task.sleep(for: self.pollInterval)) != nil {
            do {
                if ContinuousClock.now - lastBeat >= self.cluster.nodeHeartbeatInterval {
                    try await self.heartbeat(admission)
                    lastBeat = .now
                }
                let yielded = try await admission.takeYieldedConnections()
                self.hub.terminate(leases: Set(yielded), early: true)
                let unclosed = self.state.withLock { state in
                    defer { state.unclosed = [] }
                    return state.unclosed
                }
                do {
                    try await admission.closeConnections(unclosed)
                } catch {
                    self.state.withLock { $0.unclosed.append(contentsOf: unclosed) }
                    throw error
                }
                if ContinuousClock.now - lastPrune >= .seconds(60) {
                    let now = SessionClock.systemWallMs()
                    let window = max(self.loginLimits.window, self.loginLimits.inFlightLifetime)
                    let signUpWindow = max(self.signUpLimits.window, self.signUpLimits.inFlightLifetime)
                    // A dead node's yielded connections are kept ten lifetimes: back within that, it closes them.
                    try await admission.prune(
                        attemptsBeforeMs: now - window.wholeMilliseconds,
                        signUpsBeforeMs: now - signUpWindow.wholeMilliseconds,
                        yieldedBeforeMs: now - 10 * self.cluster.nodeLifetime.wholeMilliseconds,
                        nowMs: now
                    )
                    lastPrune = .now
                }
            } catch {
                self.logger.warning("keeping the limits across nodes failed", metadata: ["error": "\(error)"])
            }
        }
    }

    /// The node is stopping: its connections' leases are not closed one by one (``forget()`` drops them all).
    func stopping() {
        self.state.withLock { $0.stopping = true }
    }

    /// The node has stopped: nothing it counted counts.
    func forget() async {
        do {
            try await self.admission?.forgetNode()
        } catch {
            self.logger.warning("the node's leases could not be dropped", metadata: ["error": "\(error)"])
        }
    }

    /// Says the node is alive; if it had lapsed (cut off from the database past `nodeLifetime`), the other nodes
    /// may have dropped its leases, and its open connections are counted again.
    private func heartbeat(_ admission: any ClusterAdmission) async throws {
        let now = SessionClock.systemWallMs()
        let lapsed = try await admission.heartbeat(
            nowMs: now,
            aliveUntilMs: now + self.cluster.nodeLifetime.wholeMilliseconds
        )
        let restore = self.state.withLock { state in
            state.needsRestore = state.needsRestore || lapsed
            return state.needsRestore
        }
        guard restore else { return }
        let leases = self.hub.leases()
        if !leases.isEmpty {
            self.logger.warning(
                "the node was not alive in the database for a while: its connections are counted again",
                metadata: ["connections": "\(leases.count)"]
            )
            try await admission.restoreConnections(leases, nowMs: now)
        }
        // A connection that ended meanwhile may have had its lease closed before it was counted again: closed again
        // (with the next poll, should that fail).
        let gone = Set(leases).subtracting(self.hub.leases()).map(\.lease)
        self.state.withLock { state in
            state.needsRestore = false
            state.unclosed.append(contentsOf: gone.sorted())
        }
    }
}
