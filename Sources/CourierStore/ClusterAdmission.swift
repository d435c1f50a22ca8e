/// The limits that must hold across every node sharing one database: password attempts per user name and per
/// address, and connections per user. A node alone (the SQLite store) keeps these in its memory, which is then the
/// whole cluster's; nodes sharing a database keep them in it, through this.
///
/// Each node is counted while it is alive: it says so with ``heartbeat(nowMs:aliveUntilMs:)`` and what it counted
/// stops counting once its last word runs out (a node killed, or cut off from the database, does not hold its users'
/// places for ever). The nodes' clocks must agree to well within that time.
public protocol ClusterAdmission: Sendable {
    /// Checks a password attempt against the failures and the attempts in flight of its user name and its address,
    /// on every node, and counts it in flight if it may go ahead, in one step.
    ///
    /// - Parameters:
    ///   - user: The key of the user name (``LoginLimits/userKey(_:)``).
    ///   - address: The client's address key.
    func admitPasswordAttempt(
        user: String,
        address: String,
        limits: LoginLimits,
        nowMs: Int64
    ) async throws -> PasswordAdmission

    /// Checks a sign-up against the sign-ups of its address (``LoginLimits/perAddress``) and of every address
    /// (``LoginLimits/perUser``), on every node, and counts it in flight if it may go ahead, in one step; keys of
    /// their own, apart from the password attempts'. Finish it as an attempt that failed: every sign-up counts for
    /// the window, the ones that made an account too.
    func admitSignUp(address: String, limits: LoginLimits, nowMs: Int64) async throws -> PasswordAdmission

    /// An admitted attempt ended; a failure counts against its user name and its address for
    /// ``LoginLimits/window``.
    func finishPasswordAttempt(_ attempt: PasswordAttempt, failed: Bool, nowMs: Int64) async throws

    /// Counts a connection of a user, unless the user has `maxPerUser` on the nodes already: then its oldest ones
    /// yield when `yielding` (a password login: the user's own), and it is refused otherwise.
    func openConnection(
        user: UserID,
        maxPerUser: Int,
        yielding: Bool,
        nowMs: Int64
    ) async throws
        -> ConnectionAdmission

    /// Connections of this node ended.
    func closeConnections(_ leases: [Int64]) async throws

    /// This node's connections that another node's login made yield since the last call: the node closes them
    /// (their leases are gone with this call).
    func takeYieldedConnections() async throws -> [Int64]

    /// Says this node is alive until `aliveUntilMs`, so what it counts counts until then.
    ///
    /// - Returns: Whether the node had lapsed (not alive at `nowMs`, or not known): the other nodes may have dropped
    ///   what it counted, and it counts its open connections again (``restoreConnections(_:nowMs:)``).
    @discardableResult
    func heartbeat(nowMs: Int64, aliveUntilMs: Int64) async throws -> Bool

    /// Counts this node's open connections again, under the leases they were counted under, after the node lapsed:
    /// a lease still counted is left as it is. A user may then hold more than its limit for a while (another node
    /// counted logins meanwhile); its next password login makes the oldest yield as usual.
    func restoreConnections(_ leases: [ConnectionLease], nowMs: Int64) async throws

    /// Forgets what this node counted before (it starts: none of its connections is open).
    func forgetNode() async throws

    /// Forgets attempts and connections that no longer count: the password attempts that started before
    /// `attemptsBeforeMs`, the sign-ups that started before `signUpsBeforeMs`, and the connections of nodes that are not alive at `nowMs`; of those, the ones that yielded (their node,
    /// should it come back, must still find them yielded) only once they yielded before `yieldedBeforeMs`.
    func prune(attemptsBeforeMs: Int64, signUpsBeforeMs: Int64, yieldedBeforeMs: Int64, nowMs: Int64) async throws
}

/// A connection counted across the nodes: its lease and its user.
public struct ConnectionLease: Sendable, Hashable {
    public var lease: Int64
    public var user: UserID

    public init(lease: Int64, user: UserID) {
        self.lease = lease
        self.user = user
    }
}

/// The limits on password attempts, per user name and per address.
public struct LoginLimits: Sendable, Hashable {
    /// Failures plus attempts in flight allowed per user name in a window.
    public var perUser: Int
    /// The same per address.
    public var perAddress: Int
    /// How long a failure counts.
    public var window: Duration
    /// How long an attempt counts as in flight if its end is never recorded (its node died).
    public var inFlightLifetime: Duration
    /// What a client is told to wait when the limit is taken by attempts still in flight.
    public var inFlightRetry: Duration

    public init(
        perUser: Int,
        perAddress: Int,
        window: Duration,
        inFlightLifetime: Duration = .seconds(60),
        inFlightRetry: Duration = .seconds(1)
    ) {
        self.perUser = perUser
        self.perAddress = perAddress
        self.window = window
        self.inFlightLifetime = inFlightLifetime
        self.inFlightRetry = inFlightRetry
    }

    /// The key a user name counts under: the name lowercased, or, for a name that breaks the name rule, one key
    /// shared by all such names (none of them can log in, so throttling them together costs nobody anything).
    public static func userKey(_ user: String) -> String {
        Names.isValid(user) ? user.lowercased() : ""
    }

    /// Whether the attempts counted under one key leave room for one more; if not, how long until they may.
    ///
    /// - Parameters:
    ///   - failures: When the key's failures within the window happened, newest first (at most `limit` needed).
    ///   - inFlight: The key's attempts in flight.
    /// - Returns: nil when there is room; otherwise the wait.
    public func wait(failures: [Int64], inFlight: Int, limit: Int, nowMs: Int64) -> Duration? {
        guard failures.count + inFlight >= limit else { return nil }
        guard failures.count >= limit, limit > 0 else { return self.inFlightRetry }
        let oldestCounted = failures[limit - 1]
        return .milliseconds(max(0, self.window.wholeMilliseconds - (nowMs - oldestCounted)))
    }
}

/// Whether a password attempt may go ahead.
public enum PasswordAdmission: Sendable, Hashable {
    /// It may; hand the attempt back to ``ClusterAdmission/finishPasswordAttempt(_:failed:nowMs:)``.
    case admitted(PasswordAttempt)
    /// Refused; the client may try again after this long.
    case throttled(retryAfter: Duration)
}

/// A password attempt counted in flight.
public struct PasswordAttempt: Sendable, Hashable {
    /// Its rows, one per key it counts under.
    public var ids: [Int64]

    public init(ids: [Int64]) {
        self.ids = ids
    }
}

/// Whether a connection may open.
public enum ConnectionAdmission: Sendable, Hashable {
    /// It may: `lease` counts it until ``ClusterAdmission/closeConnections(_:)``; `yielded` are the user's
    /// connections that made room for it (their nodes close them).
    case opened(lease: Int64, yielded: [Int64])
    /// The user has its limit of connections already.
    case full
}
