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
        maxPerUser: Int = .max,
        yielding: Bool = false,
        lease: Int64? = nil
    ) -> Registration {
        let (registration, yielded) = self.state.withLock { state -> (Registration, [ConnectionHandle]) in
            guard !state.shuttingDown else { return (.shuttingDown, []) }
            if let lease, let early = state.earlyYields.firstIndex(of: lease) {
                // Yielded before it was here: it never takes a place.
                state.earlyYields.remove(at: early)
                return (.userFull, [])
            }
            let counted = state.byUser[user].map { $0.values.filter { !state.yielded.contains($0.id) } } ?? []
            var yielded: [ConnectionHandle] = []
            if counted.count >= maxPerUser {
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
                lease: lease
            )
            state.nextID += 1
            let first = state.byUser[user]?.isEmpty ?? true
            let firstForDevice = !(state.byUser[user]?.values.contains { $0.device == device } ?? false)
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
            state.byUser[user]?.values.filter { !state.yielded.contains($0.id) }.count ?? 0
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
            let lastForDevice = !(state.byUser[handle.user]?.values.contains { $0.device == handle.device } ?? false)
            if state.byUser[handle.user]?.isEmpty ?? false {
                state.byUser[handle.user] = nil
                return (true, true)
            }
            return (false, lastForDevice)
        }
    }

    /// Whether a device of a user has a connection.
    func isConnected(_ device: DeviceID, of user: UserID) -> Bool {
        self.state.withLock { $0.byUser[user]?.values.contains { $0.device == device } ?? false }
    }

    /// The users with a connection.
    func onlineUsers() -> [UserID] {
        self.state.withLock { Array($0.byUser.keys) }
    }

    /// Whether a user has a connection.
    func isOnline(_ user: UserID) -> Bool {
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
    func logsGrew(_ cursors: [UserID: UInt64], fresh: [UserID: [StoredEvent]]) {
        guard !cursors.isEmpty else { return }
        let targets = self.state.withLock { state in
            cursors.flatMap { user, cursor in (state.byUser[user]?.values).map { $0.map { ($0, cursor) } } ?? [] }
        }
        for (handle, cursor) in targets { handle.notify(cursor: cursor, fresh: fresh[handle.user] ?? []) }
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

/// One authenticated connection, as the rest of the server sees it.
final class ConnectionHandle: Sendable {
    /// What the connection's delivery loop has to do next.
    enum Wake: Sendable {
        /// Events up to this cursor exist; send those after what was sent.
        case events(upTo: UInt64)
        /// Typing and presence notices to send.
        case notices([ServerEnvelope])
        /// Send this error, then close.
        case terminate(code: String, message: String)
    }

    private struct State {
        var latest: UInt64 = 0
        var delivered: UInt64 = 0
        var typing: [TypingKey: Courier_V1_TypingNotice] = [:]
        var presence: [String: Courier_V1_PresenceNotice] = [:]
        var termination: (code: String, message: String)?
        /// Called (once until the next ``take()`` that finds nothing) when there is something to do.
        var waker: (@Sendable () -> Void)?
        /// The waker was called and the connection has not found the handle empty since.
        var woken = false
        /// The ids of this connection's sends whose events its delivery has not passed yet (see ``willSend(id:)``).
        var ownSends: Set<String> = []
        /// Fresh events handed over at commit, consecutive cursors, at most ``maxHanded`` (see ``notify(cursor:fresh:)``).
        var handed: [StoredEvent] = []
    }

    private struct TypingKey: Hashable {
        var conversation: Courier_V1_Conversation
        var user: String
    }

    let id: Int
    let user: UserID
    let device: DeviceID
    let wantsEphemeral: Bool
    /// False for a connection that asked for no events (`Hello.no_events`): it only sends and asks.
    let wantsEvents: Bool
    /// The most send ids ``willSend(id:)`` remembers; past it, a send's own event is delivered back to its
    /// connection (clients drop it by id: it answers a send of theirs).
    let maxOwnSends: Int
    /// The most fresh events held for the delivery (0: none; everything is read from the store).
    let maxHanded: Int
    /// Where the nodes sharing a database count this connection, if they do.
    let lease: Int64?
    private let state = Mutex(State())

    init(
        id: Int,
        user: UserID,
        device: DeviceID,
        wantsEphemeral: Bool,
        wantsEvents: Bool = true,
        maxOwnSends: Int = 1024,
        maxHanded: Int = 0,
        lease: Int64? = nil
    ) {
        self.id = id
        self.lease = lease
        self.user = user
        self.device = device
        self.wantsEphemeral = wantsEphemeral
        self.wantsEvents = wantsEvents
        self.maxOwnSends = maxOwnSends
        self.maxHanded = maxHanded
    }

    /// This connection is about to submit a send with this id: its own delivery will skip the message's event
    /// (the connection has the acknowledgement), while the device's other connections receive it like any other
    /// device of the user. Called before the send is committed, so the event can never overtake it.
    func willSend(id: String) {
        // A connection that gets no events has nothing to skip.
        guard self.wantsEvents else { return }
        self.state.withLock { state in
            guard state.ownSends.count < self.maxOwnSends else { return }
            state.ownSends.insert(id)
        }
    }

    /// The send was refused, or answered a resend of an id stored earlier: no new event of it will come.
    func forgetSend(id: String) {
        _ = self.state.withLock { $0.ownSends.remove(id) }
    }

    /// Whether an event's message is one this connection sent (and forgets it: each event is read once).
    func isOwnSend(id: String, from device: DeviceID?) -> Bool {
        guard device == self.device else { return false }
        return self.state.withLock { $0.ownSends.remove(id) != nil }
    }

    /// Raises the cursor the connection has to catch up to (nothing for a connection that asked for no events),
    /// holding `fresh` (the new events, consecutive cursors) for the delivery to send without reading them back.
    ///
    /// What is held stays consecutive and bounded: events that do not follow the ones held replace them (the
    /// delivery reads the gap from the store), and past ``maxHanded`` nothing is held (it reads them all). Holding
    /// is never needed for correctness: the delivery reads whatever it is not handed.
    func notify(cursor: UInt64, fresh: [StoredEvent] = []) {
        guard self.wantsEvents else { return }
        self.wake { state in
            if let first = fresh.first, self.maxHanded > 0 {
                if let last = state.handed.last, first.cursor != last.cursor + 1 { state.handed.removeAll() }
                // A recall of a message still held: it goes out recalled, without its body, as a read would send it.
                for event in fresh where !state.handed.isEmpty {
                    guard case .recall(let conversation, let seq, let id, _) = event.kind else { continue }
                    state.handed = state.handed.map {
                        $0.recalled { $0.id == id && $0.seq == seq && $0.conversation == conversation }
                    }
                }
                if state.handed.count + fresh.count <= self.maxHanded {
                    state.handed.append(contentsOf: fresh)
                } else {
                    state.handed.removeAll()
                }
            }
            guard cursor > state.latest else { return false }
            state.latest = cursor
            return true
        }
    }

    /// Up to `limit` handed events that follow `cursor` directly; none when what is held does not start there (the
    /// delivery reads from the store). Held events at or before `cursor` are dropped: they were read already.
    func takeHanded(after cursor: UInt64, limit: Int) -> [StoredEvent] {
        self.state.withLock { state in
            let stale = state.handed.prefix { $0.cursor <= cursor }.count
            state.handed.removeFirst(stale)
            guard let first = state.handed.first, first.cursor == cursor + 1 else { return [] }
            let taken = Array(state.handed.prefix(max(1, limit)))
            state.handed.removeFirst(taken.count)
            return taken
        }
    }

    /// Marks events up to a cursor as sent, so that ``take()`` asks for newer ones only.
    func delivered(upTo cursor: UInt64) {
        self.state.withLock { $0.delivered = max($0.delivered, cursor) }
    }

    /// Posts a typing notice, replacing an unsent one for the same user and conversation.
    func post(typing notice: Courier_V1_TypingNotice) {
        guard self.wantsEphemeral else { return }
        self.wake { state in
            state.typing[TypingKey(conversation: notice.conversation, user: notice.user)] = notice
            return true
        }
    }

    /// Posts a presence notice, replacing an unsent one for the same user.
    func post(presence notice: Courier_V1_PresenceNotice) {
        guard self.wantsEphemeral else { return }
        self.wake { state in
            state.presence[notice.user] = notice
            return true
        }
    }

    /// How many fresh events this connection can take as they are: room under ``maxHanded``, when everything it
    /// has not sent yet is held (a connection that is behind reads from the store and cannot use them).
    var freshRoom: Int {
        guard self.wantsEvents, self.maxHanded > 0 else { return 0 }
        return self.state.withLock { state in
            let undelivered = state.latest > state.delivered ? state.latest - state.delivered : 0
            guard undelivered <= UInt64(state.handed.count) else { return 0 }
            return max(0, self.maxHanded - state.handed.count)
        }
    }

    /// The cursor after which fresh events would be taken as they are, and how many more it holds, when the
    /// connection takes them and holds everything it has not sent yet (``freshRoom``); nil otherwise.
    var freshAfter: (after: UInt64, room: Int)? {
        guard self.wantsEvents, self.maxHanded > 0 else { return nil }
        return self.state.withLock { state in
            let undelivered = state.latest > state.delivered ? state.latest - state.delivered : 0
            guard undelivered <= UInt64(state.handed.count), state.handed.count < self.maxHanded else { return nil }
            // A connection that logged in caught up has sent up to where it started, and was never told a cursor.
            return (max(state.latest, state.delivered), self.maxHanded - state.handed.count)
        }
    }

    /// The typing and presence notices waiting to be sent.
    var pendingNotices: Int {
        self.state.withLock { $0.typing.count + $0.presence.count }
    }

    /// The cursors of the fresh events held.
    var handedCursors: [UInt64] {
        self.state.withLock { $0.handed.map(\.cursor) }
    }

    /// The cursor the connection has to catch up to.
    var pendingCursor: UInt64 {
        self.state.withLock { $0.latest }
    }

    /// Asks the connection to send an error and close.
    func terminate(code: String, message: String) {
        self.wake { state in
            if state.termination == nil { state.termination = (code, message) }
            return true
        }
    }

    /// Sets what wakes the connection when there is something to do, and calls it at once if there is.
    func setWaker(_ waker: @escaping @Sendable () -> Void) {
        let call = self.state.withLock { state -> Bool in
            state.waker = waker
            guard Self.hasWork(state), !state.woken else { return false }
            state.woken = true
            return true
        }
        if call { waker() }
    }

    /// The connection is gone: nothing wakes it any more (and the handle no longer keeps what the waker holds).
    func clearWaker() {
        self.state.withLock { $0.waker = nil }
    }

    /// What the connection has to do next: termination first, then notices, then events. Nil when nothing; the
    /// waker is then called again for whatever comes next.
    func take() -> Wake? {
        self.state.withLock { state in
            let wake = Self.take(&state)
            if wake == nil { state.woken = false }
            return wake
        }
    }

    private static func hasWork(_ state: State) -> Bool {
        state.termination != nil || !state.typing.isEmpty || !state.presence.isEmpty || state.latest > state.delivered
    }

    private static func take(_ state: inout State) -> Wake? {
        if let termination = state.termination {
            return .terminate(code: termination.code, message: termination.message)
        }
        if !state.typing.isEmpty || !state.presence.isEmpty {
            var notices: [ServerEnvelope] = []
            for notice in state.presence.values {
                var envelope = ServerEnvelope()
                envelope.presence = notice
                notices.append(envelope)
            }
            for notice in state.typing.values {
                var envelope = ServerEnvelope()
                envelope.typing = notice
                notices.append(envelope)
            }
            state.presence.removeAll()
            state.typing.removeAll()
            return .notices(notices)
        }
        if state.latest > state.delivered { return .events(upTo: state.latest) }
        return nil
    }

    private func wake(_ change: (inout State) -> Bool) {
        let waker = self.state.withLock { state -> (@Sendable () -> Void)? in
            guard change(&state), !state.woken, let waker = state.waker else { return nil }
            state.woken = true
            return waker
        }
        waker?()
    }
}
