import CourierProtocol
import CourierStore
import Synchronization

/// The server's map of who is connected: each user's connections, and a way to wake or close them. It is also the
/// in-process ``Fanout``.
///
/// Waking a connection never queues more than a bounded few events: ``ConnectionHandle/notify(cursor:fresh:)``
/// raises the cursor the connection has to catch up to, hands over at most `maxHanded` events it can send as they
/// are (a commit's own, or what the node read for it when another node wrote), and otherwise the connection reads
/// the events from the store at its own pace. Typing and
/// presence notices are coalesced to the latest state per conversation and user, so a connection's pending notices
/// are bounded by its conversations, not by how much happens.
final class Hub: Fanout {
    private struct State {
        var byUser: [UserID: [Int: ConnectionHandle]] = [:]
        /// Connections that yielded their places to a newer login of their user and are closing: they no longer
        /// count against ``register(user:device:ephemeral:events:maxOwnSends:maxHanded:maxPerUser:yielding:lease:)``'s
        /// limit.
        var yielded: Set<Int> = []
        /// Leases another node's login made yield before this node registered their connections (the login here
        /// was still between its count and its registration): their connections close as they register. The newest
        /// `maxEarlyYields` are kept.
        var earlyYields: [Int64] = []
        var nextID = 1
        var shuttingDown = false
    }

    private let state = Mutex(State())
    /// The most leases kept that yielded before their connections registered.
    private let maxEarlyYields: Int

    /// - Parameter maxEarlyYields: ``ServerConfiguration/Cluster-swift.struct/maxEarlyYields``.
    init(maxEarlyYields: Int = ServerConfiguration.Cluster().maxEarlyYields) {
        self.maxEarlyYields = max(0, maxEarlyYields)
    }

    enum Registration {
        /// Registered; `firstForUser`: the user just came online; `firstForDevice`: the device did.
        case registered(ConnectionHandle, firstForUser: Bool, firstForDevice: Bool)
        /// The server is shutting down and takes no more connections.
        case shuttingDown
        /// The user has `maxPerUser` connections already.
        case userFull
    }

    /// Registers a connection, unless its user has `maxPerUser` already: then, when `yielding` (a password login,
    /// which is the user's own), the user's oldest connections are closed to make room, and otherwise it is refused.
    ///
    /// - Parameter lease: Where the nodes sharing a database count the connection (``ClusterLimits``), if they do.
    func register(
        user: UserID,
        device: DeviceID,
        ephemeral: Bool,
        events: Bool = true,
        maxOwnSends: Int = 1024,
        maxHanded: Int = 0,
        maxHandedBytes: Int = .max,
        maxPerUser: Int = .max,
        yielding: Bool = false,
        lease: Int64? = nil,
        hidden: Bool = false
    ) -> Registration {
        let (registration, yielded) = self.state.withLock { state -> (Registration, [ConnectionHandle]) in
            guard !state.shuttingDown else { return (.shuttingDown, []) }
            if let lease, let early = state.earlyYields.firstIndex(of: lease) {
                // Yielded before it was here: it never takes a place.
                state.earlyYields.remove(at: early)
                return (.userFull, [])
            }
            let counted =
                state.byUser[user].map { $0.values.filter { !state.yielded.contains($0.id) && !$0.hidden } } ?? []
            var yielded: [ConnectionHandle] = []
            if !hidden, counted.count >= maxPerUser {
                guard yielding else { return (.userFull, []) }
                yielded = Array(counted.sorted { $0.id < $1.id }.prefix(counted.count - max(0, maxPerUser - 1)))
                state.yielded.formUnion(yielded.map(\.id))
            }
            let handle = ConnectionHandle(
                id: state.nextID,
                user: user,
                device: device,
                wantsEphemeral: ephemeral,
                wantsEvents: events,
                maxOwnSends: maxOwnSends,
                maxHanded: maxHanded,
                maxHandedBytes: maxHandedBytes,
                lease: lease,
                hidden: hidden
            )
            state.nextID += 1
            let first = !hidden && !(state.byUser[user]?.values.contains { !$0.hidden } ?? false)
            let firstForDevice =
                !hidden && !(state.byUser[user]?.values.contains { $0.device == device && !$0.hidden } ?? false)
            state.byUser[user, default: [:]][handle.id] = handle
            return (.registered(handle, firstForUser: first, firstForDevice: firstForDevice), yielded)
        }
        for handle in yielded { handle.terminate(code: ErrorCodes.serverFull, message: Self.yieldMessage) }
        return registration
    }

    /// The leases of the connections here that hold a place (not yielding it), by lease.
    func leases() -> [ConnectionLease] {
        self.state.withLock { state in
            state.byUser.values.flatMap { connections in
                connections.values.compactMap { handle in
                    guard let lease = handle.lease, !state.yielded.contains(handle.id) else { return nil }
                    return ConnectionLease(lease: lease, user: handle.user)
                }
            }.sorted { $0.lease < $1.lease }
        }
    }

    /// A user's connections here that hold a place (not yielding it).
    func placesHeld(by user: UserID) -> Int {
        self.state.withLock { state in
            state.byUser[user]?.values.filter { !state.yielded.contains($0.id) && !$0.hidden }.count ?? 0
        }
    }

    /// What a connection that yielded its place is told.
    static let yieldMessage = "a newer login of this user took this connection's place (its connection limit)"

    /// Closes the connections counted under these leases (they yielded to a newer login). With `early` (the
    /// node's own leases, as the database says they yielded), a lease whose connection has not registered yet is
    /// kept, so that it is refused as it does.
    func terminate(leases: Set<Int64>, early: Bool = false) {
        guard !leases.isEmpty else { return }
        let targets = self.state.withLock { state in
            let targets = state.byUser.values.flatMap { $0.values.filter { $0.lease.map(leases.contains) ?? false } }
            state.yielded.formUnion(targets.map(\.id))
            if early {
                let found = Set(targets.compactMap(\.lease))
                state.earlyYields.append(contentsOf: leases.subtracting(found).sorted())
                state.earlyYields.removeFirst(max(0, state.earlyYields.count - self.maxEarlyYields))
            }
            return targets
        }
        for handle in targets { handle.terminate(code: ErrorCodes.serverFull, message: Self.yieldMessage) }
    }

    /// Removes a connection.
    ///
    /// - Returns: Whether it was the user's last connection (the user just went offline), and its device's.
    func unregister(_ handle: ConnectionHandle) -> (lastForUser: Bool, lastForDevice: Bool) {
        self.state.withLock { state in
            state.byUser[handle.user]?[handle.id] = nil
            state.yielded.remove(handle.id)
            if state.byUser[handle.user]?.isEmpty ?? false { state.byUser[handle.user] = nil }
            // A listener's going changes nobody's presence.
            guard !handle.hidden else { return (false, false) }
            let others = state.byUser[handle.user]?.values.filter { !$0.hidden } ?? []
            return (others.isEmpty, !others.contains { $0.device == handle.device })
        }
    }

    /// Whether a device of a user has a connection.
    func isConnected(_ device: DeviceID, of user: UserID) -> Bool {
        self.state.withLock { $0.byUser[user]?.values.contains { $0.device == device && !$0.hidden } ?? false }
    }

    /// The users with a connection or a listener here: whose logs this node follows.
    func onlineUsers() -> [UserID] {
        self.state.withLock { Array($0.byUser.keys) }
    }

    /// Whether a user has a connection (a listener, such as a webhook's sender, is none).
    func isOnline(_ user: UserID) -> Bool {
        self.state.withLock { $0.byUser[user]?.values.contains { !$0.hidden } ?? false }
    }

    /// Whether anything here (a connection or a listener) waits for a user's log to grow.
    func isListening(_ user: UserID) -> Bool {
        self.state.withLock { $0.byUser[user] != nil }
    }

    /// How many fresh events a user's connections can take as the group commit writes them: the most any of its
    /// connections has room for (0 when none is connected, none is caught up, or none takes events).
    func freshRoom(for user: UserID) -> Int {
        let handles = self.state.withLock { state in state.byUser[user].map { Array($0.values) } ?? [] }
        return handles.reduce(0) { max($0, $1.freshRoom) }
    }

    /// For each of these users with connections that could take fresh events now (``ConnectionHandle/freshAfter``),
    /// where they would start (the lowest cursor among those connections) and how many they have room for (the
    /// least). Its other connections (behind, full, or taking no events) read from the store as they would anyway.
    func freshAfter(of users: some Sequence<UserID>) -> [UserID: (after: UInt64, room: Int)] {
        var found: [UserID: (after: UInt64, room: Int)] = [:]
        for handle in self.connections(of: users) {
            guard let (after, room) = handle.freshAfter else { continue }
            let known = found[handle.user] ?? (after, room)
            found[handle.user] = (min(known.after, after), min(known.room, room))
        }
        return found
    }

    /// The connections of some users.
    func connections(of users: some Sequence<UserID>) -> [ConnectionHandle] {
        self.state.withLock { state in users.flatMap { state.byUser[$0].map { Array($0.values) } ?? [] } }
    }

    /// Tells the connections of users whose logs grew that there are events up to these cursors, handing them the
    /// fresh events where there are some.
    func logsGrew(_ cursors: [UserID: UInt64], fresh: [UserID: FreshRun]) {
        guard !cursors.isEmpty else { return }
        let targets = self.state.withLock { state in
            cursors.flatMap { user, cursor in (state.byUser[user]?.values).map { $0.map { ($0, cursor) } } ?? [] }
        }
        for (handle, cursor) in targets { handle.notify(cursor: cursor, fresh: fresh[handle.user]) }
    }

    func typing(_ notice: TypingHint, to members: [UserID]) {
        for handle in self.connections(of: members) where handle.id != notice.fromConnection {
            handle.post(typing: notice.notice(for: handle.user))
        }
    }

    func introduce(_ introductions: [Introduction]) {
        self.announceLocal(introductions, isOnlineHere: self.isOnline)
    }

    func presence(of name: String, online: Bool, lastSeenMs: Int64, to peers: Set<UserID>) {
        var notice = Courier_V1_PresenceNotice()
        notice.user = name
        notice.online = online
        notice.lastSeenMs = online ? 0 : lastSeenMs
        for handle in self.connections(of: peers) { handle.post(presence: notice) }
    }

    /// Closes every connection of a device.
    func terminate(device: DeviceID, code: String, message: String) {
        let targets = self.state.withLock { state in
            state.byUser.values.flatMap { $0.values.filter { $0.device == device } }
        }
        for handle in targets { handle.terminate(code: code, message: message) }
    }

    /// Closes every connection of a user.
    func terminate(user: UserID, code: String, message: String) {
        for handle in self.connections(of: [user]) { handle.terminate(code: code, message: message) }
    }

    /// Refuses new registrations and closes every connection.
    func shutDown() {
        let targets = self.state.withLock { state in
            state.shuttingDown = true
            return state.byUser.values.flatMap { $0.values }
        }
        for handle in targets {
            handle.terminate(code: ErrorCodes.shuttingDown, message: "the server is stopping; reconnect later")
        }
    }
}
