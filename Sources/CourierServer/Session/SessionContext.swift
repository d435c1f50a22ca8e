import CourierProtocol
import CourierStore
import Foundation
import Logging
import NIOCore
import Synchronization

/// What every session shares: the store, the group commit, the map of connections, the login throttle.
final class SessionContext: Sendable {
    let configuration: ServerConfiguration
    let store: any CourierDatabase
    let commits: CommitQueue
    /// Where each conversation's writes are committed, on a node that shares its database (nil: all here).
    let forwarder: Forwarder?
    /// This node's connections: registration, and the handles sessions deliver through.
    let hub: Hub
    /// How news reaches other connections (and nodes); sessions tell it what happened.
    let fanout: any Fanout
    /// Which devices are connected, for `courier user devices`.
    let activity: DeviceActivity
    let logger: Logger
    let metrics: ServerMetrics
    /// Message traces, when the server has a tracer.
    let traces: TraceBook?
    let media: MediaService
    let logins: LoginThrottle
    /// Sign-ups on this node: every one counts, all of them under one key (``signUpsKey``) and each address's under
    /// its own.
    let signUps: LoginThrottle
    /// Sign-ups refused for their invitation, per address: counted apart from ``signUps``, so that guesses at
    /// invitations never use the sign-ups every address shares.
    let badInvites: LoginThrottle
    /// Profile changes, per user and per address.
    let profileChanges: LoginThrottle
    /// Groups created and members added, per user and per address (``ServerConfiguration/Accounts/maxGroupChangesPerUser``).
    let groupChanges: LoginThrottle
    /// Users looked up by name, per user and per address.
    let lookups: LoginThrottle
    /// The limits that hold across the nodes sharing the database (no-ops on a single node).
    let cluster: ClusterLimits
    /// The clock of the sessions' deadlines and rates, and of the fan-out budgets.
    let clock: SessionClock
    /// The deadlines of the sessions, one wheel per event loop.
    let deadlines: PerLoop<LoopDeadlines>
    /// Group events encoded lately, one cache per event loop.
    let encodings: PerLoop<EventEncodingCache>
    /// Every open session's channel, until its end's bookkeeping is done; and who waits for there to be none.
    private let sessions = Mutex<
        (open: [ObjectIdentifier: any Channel], stopping: Bool, waiters: [CheckedContinuation<Void, Never>])
    >(([:], false, []))
    /// The native and compat ports' connections as admission counts them, and the channels of the strangers.
    private let counts: Mutex<(counts: ConnectionCounts, strangers: [Int: any Channel])>
    /// Each sending user's fan-out budget, shared by its connections (buckets that refilled are dropped).
    private let fanoutBudgets = Mutex<[UserID: TokenBucket]>([:])
    /// What each user's last send to each conversation cost in deliveries, for the reservation of the next.
    private let fanoutEstimates = Mutex<[FanoutKey: Int]>([:])

    private struct FanoutKey: Hashable {
        var user: UserID
        /// The conversation as the store resolves it: names without regard to case.
        var conversation: Conversation

        init(_ user: UserID, _ conversation: Conversation) {
            self.user = user
            self.conversation =
                switch conversation {
                case .user(let name): .user(name.lowercased())
                case .group(let name): .group(name.lowercased())
                }
        }
    }

    /// The most (user, conversation) costs remembered; past it the table starts afresh.
    static let maxFanoutEstimates = 100_000
    /// What a send to a group no send of this user's has reached yet is taken to cost until its commit says.
    static let unknownGroupFanout = 100

    init(
        configuration: ServerConfiguration,
        store: any CourierDatabase,
        commits: CommitQueue,
        forwarder: Forwarder? = nil,
        hub: Hub,
        fanout: any Fanout,
        activity: DeviceActivity,
        metrics: ServerMetrics,
        media: MediaService,
        logins: LoginThrottle,
        cluster: ClusterLimits? = nil,
        traces: TraceBook? = nil,
        logger: Logger,
        clock: SessionClock = .continuous
    ) {
        self.cluster =
            cluster
            ?? ClusterLimits(
                admission: nil,
                limits: configuration.limits,
                accounts: configuration.accounts,
                cluster: configuration.cluster,
                hub: hub,
                logger: logger
            )
        self.activity = activity
        self.clock = clock
        self.counts = Mutex(
            (
                ConnectionCounts(
                    maxConnections: configuration.limits.maxConnections,
                    maxUnauthenticated: configuration.limits.maxUnauthenticated,
                    maxUnauthenticatedPerAddress: configuration.limits.maxUnauthenticatedPerAddress,
                    maxClosing: configuration.limits.maxClosingForRoom
                ),
                [:]
            )
        )
        // The wheels' slot width kept between 1 ms and 10 s.
        let resolution = min(max(configuration.limits.deadlineResolution, .milliseconds(1)), .seconds(10))
        self.deadlines = PerLoop { LoopDeadlines(loop: $0, resolution: resolution, clock: clock) }
        let encodedBytes = configuration.limits.encodedEventsCacheBytes
        self.encodings = PerLoop { _ in EventEncodingCache(maxBytes: encodedBytes) }
        self.logins = logins
        let accounts = configuration.accounts
        self.signUps = LoginThrottle(
            perUser: accounts.maxSignUpsInAll,
            perAddress: accounts.maxSignUpsPerAddress,
            window: accounts.signUpWindow
        )
        self.badInvites = LoginThrottle(
            perUser: 1,
            perAddress: accounts.maxSignUpsPerAddress,
            window: accounts.signUpWindow
        )
        self.profileChanges = LoginThrottle(
            perUser: accounts.maxProfileChangesPerUser,
            perAddress: accounts.maxProfileChangesPerAddress,
            window: accounts.profileChangeWindow
        )
        self.groupChanges = LoginThrottle(
            perUser: accounts.maxGroupChangesPerUser,
            perAddress: accounts.maxGroupChangesPerAddress,
            window: accounts.groupChangeWindow
        )
        self.lookups = LoginThrottle(
            perUser: accounts.maxLookupsPerUser,
            perAddress: accounts.maxLookupsPerAddress,
            window: accounts.lookupWindow
        )
        self.media = media
        self.configuration = configuration
        self.store = store
        self.commits = commits
        self.forwarder = forwarder
        self.hub = hub
        self.fanout = fanout
        self.metrics = metrics
        self.traces = traces
        self.logger = logger
    }

    /// Counts a new connection in (see ``ConnectionCounts``): when the server is full, the oldest connection that
    /// has sent nothing yet is closed for its place.
    ///
    /// - Returns: The ticket to hand back to ``spoke(_:)``, ``authenticated(_:)`` and ``release(_:authenticated:)``;
    ///   or why it was refused.
    func admit(address: String, channel: any Channel) -> Result<ConnectionCounts.Ticket, ConnectionCounts.Refusal> {
        let (admission, closing) = self.counts.withLock { state -> (ConnectionCounts.Admission, (any Channel)?) in
            let admission = state.counts.admit(address: address)
            guard case .admitted(let ticket, let closing) = admission else { return (admission, nil) }
            state.strangers[ticket.id] = channel
            return (admission, closing.flatMap { state.strangers.removeValue(forKey: $0) })
        }
        switch admission {
        case .refused(let refusal):
            return .failure(refusal)
        case .admitted(let ticket, _):
            if let closing {
                self.metrics.connectionsClosedForRoom.increment()
                closing.triggerUserOutboundEvent(SessionClosedForRoom(), promise: nil)
            }
            self.metrics.connectionOpened()
            return .success(ticket)
        }
    }

    /// The connection sent what may log it in: it is not closed for room from now.
    ///
    /// - Returns: false when it was closed for room already (its place is another's: it must close).
    func spoke(_ ticket: ConnectionCounts.Ticket) -> Bool {
        self.counts.withLock { state in
            state.strangers[ticket.id] = nil
            return state.counts.spoke(ticket)
        }
    }

    /// The connection logged in: it no longer counts against the limits of connections not logged in.
    func authenticated(_ ticket: ConnectionCounts.Ticket) {
        self.counts.withLock { state in
            state.strangers[ticket.id] = nil
            state.counts.authenticated(ticket)
        }
    }

    /// Counts a connection out.
    func release(_ ticket: ConnectionCounts.Ticket, authenticated: Bool) {
        self.counts.withLock { state in
            state.strangers[ticket.id] = nil
            state.counts.release(ticket, authenticated: authenticated)
        }
        self.metrics.connectionClosed()
    }

    /// A session begins on this channel, unless the server is stopping.
    ///
    /// - Returns: false when the server is stopping: the channel is not served.
    func sessionOpened(_ channel: any Channel) -> Bool {
        self.sessions.withLock { sessions in
            guard !sessions.stopping else { return false }
            sessions.open[ObjectIdentifier(channel)] = channel
            return true
        }
    }

    /// A session's end is fully accounted for.
    func sessionClosed(_ channel: any Channel) {
        let waiters = self.sessions.withLock { sessions -> [CheckedContinuation<Void, Never>] in
            sessions.open[ObjectIdentifier(channel)] = nil
            guard sessions.open.isEmpty else { return [] }
            defer { sessions.waiters = [] }
            return sessions.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// The server is stopping: sessions not logged in close now (the hub tells the others, after their answers).
    func shutDownSessions() {
        // Under the same lock as `sessionOpened`: a session is either here to be told, or refused.
        let channels = self.sessions.withLock { sessions in
            sessions.stopping = true
            return Array(sessions.open.values)
        }
        for channel in channels { channel.triggerUserOutboundEvent(SessionShutdown(), promise: nil) }
    }

    /// Returns once no session is open and every ended one is accounted for.
    func sessionsEnded() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = self.sessions.withLock { sessions -> Bool in
                if sessions.open.isEmpty { return true }
                sessions.waiters.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }

    /// Charges a user's fan-out budget for a committed message's deliveries.
    func chargeFanout(of user: UserID, deliveries: Int) {
        let limits = self.configuration.limits
        let now = self.clock.now
        self.fanoutBudgets.withLock { buckets in
            if buckets.count > 10_000 {
                buckets = buckets.filter { _, bucket in
                    var bucket = bucket
                    return !bucket.isFull(now: now)
                }
            }
            buckets[user, default: TokenBucket(rate: limits.fanoutPerSecond, burst: limits.fanoutBurst, now: now)]
                .charge(Double(deliveries), now: now)
        }
    }

    /// What a user's send to `conversation` is expected to cost in deliveries: what the last one cost (on any of its
    /// connections), or 2 for a direct message and ``unknownGroupFanout`` for a group before any.
    func fanoutEstimate(of user: UserID, to conversation: Conversation) -> Int {
        let known = self.fanoutEstimates.withLock { $0[FanoutKey(user, conversation)] }
        if let known { return known }
        if case .group = conversation { return Self.unknownGroupFanout }
        return 2
    }

    /// A user's send to `conversation` cost `deliveries`.
    func learnFanout(of user: UserID, to conversation: Conversation, deliveries: Int) {
        self.fanoutEstimates.withLock { estimates in
            if estimates.count >= Self.maxFanoutEstimates { estimates = [:] }
            estimates[FanoutKey(user, conversation)] = deliveries
        }
    }

    /// How long a user's next send must wait for its fan-out budget; nil when it may go now.
    func fanoutWait(of user: UserID) -> Duration? {
        self.fanoutBudgets.withLock { buckets in buckets[user]?.debt(now: self.clock.now) }
    }
}

extension SessionContext {
    /// Commits a connection's write: here, or at the node that owns its conversation (``Forwarder``).
    func submit(_ request: WriteRequest, origin: Int?, userName: String?) -> CommitTicket {
        guard let forwarder, let userName else { return self.commits.enqueue(request, origin: origin) }
        return forwarder.submit(request, origin: origin, userName: userName)
    }

    /// A connection is gone and every write of it has come back.
    func forget(origin: Int) {
        self.commits.forget(origin: origin)
        self.forwarder?.forget(origin: origin)
    }
}
