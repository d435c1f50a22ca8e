import CourierProtocol
import CourierStore
import Synchronization

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
        /// Fresh events handed over at commit: every event of the user's log after ``handedAfter`` up to the last
        /// one held, at most ``maxHanded`` (see ``notify(cursor:fresh:)``).
        private(set) var handed: [StoredEvent] = []
        /// The cursor the held events follow (meaningful while some are held). Said by the store with each run, never
        /// worked out from the cursors: they only grow, and need not be consecutive.
        private(set) var handedAfter: UInt64 = 0
        /// What ``handed`` holds, as ``StoredEvent/heldBytes`` counts it: at most ``maxHandedBytes``.
        private(set) var handedBytes = 0
        /// When the connection was told of cursors it has not sent yet, oldest first: at most
        /// ``ConnectionHandle/maxWaits`` (past that a later cursor extends the last, and so counts from earlier).
        var waits: [(cursor: UInt64, since: ContinuousClock.Instant)] = []

        /// Holds a run of events that follows `after`: what is held already, or, when nothing is, what was sent.
        mutating func hold(_ events: [StoredEvent], after: UInt64, bytes: Int) {
            if self.handed.isEmpty { self.handedAfter = after }
            self.handed.append(contentsOf: events)
            self.handedBytes += bytes
        }

        /// Lets go of the first `count` held events (all of them, capacity included, when that is all); the rest
        /// then follow the last one let go.
        mutating func release(first count: Int) {
            guard count > 0 else { return }
            guard count < self.handed.count else {
                self.handed = []
                self.handedBytes = 0
                return
            }
            self.handedAfter = self.handed[count - 1].cursor
            self.handedBytes -= self.handed.prefix(count).reduce(0) { $0 + $1.heldBytes }
            self.handed.removeFirst(count)
        }

        mutating func mapHeld(_ transform: (StoredEvent) -> StoredEvent) {
            self.handed = self.handed.map(transform)
            self.handedBytes = self.handed.reduce(0) { $0 + $1.heldBytes }
        }
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
    /// The most bytes of texts those may hold (``StoredEvent/heldBytes``): a client that stops reading pins no
    /// more than this of other users' messages.
    let maxHandedBytes: Int
    /// Where the nodes sharing a database count this connection, if they do.
    let lease: Int64?
    /// Not a connection but a listener (a webhook's sender): woken like one, never shown online, never counted
    /// against the user's connections.
    let hidden: Bool
    private let state = Mutex(State())

    init(
        id: Int,
        user: UserID,
        device: DeviceID,
        wantsEphemeral: Bool,
        wantsEvents: Bool = true,
        maxOwnSends: Int = 1024,
        maxHanded: Int = 0,
        maxHandedBytes: Int = .max,
        lease: Int64? = nil,
        hidden: Bool = false
    ) {
        self.hidden = hidden
        self.id = id
        self.lease = lease
        self.user = user
        self.device = device
        self.wantsEphemeral = wantsEphemeral
        self.wantsEvents = wantsEvents
        self.maxOwnSends = maxOwnSends
        self.maxHanded = maxHanded
        self.maxHandedBytes = maxHandedBytes
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
    /// holding `fresh` (the new events, and the cursor they follow) for the delivery to send without reading them
    /// back.
    ///
    /// What is held stays one unbroken run of the log and bounded: events that do not follow the last one held
    /// replace what is held (the delivery reads the gap from the store), those that would take it past
    /// ``maxHanded`` or ``maxHandedBytes`` are not held (it reads them after what it holds), and a log that grew by
    /// events not handed lets go of what is held (one of them may recall it). Holding is never needed for
    /// correctness: the delivery reads whatever it is not handed.
    ///
    /// `timed`: whether the wait until it is sent counts as a delivery's (``delivered(upTo:)``); not for what a
    /// connection catches up on as it logs in.
    func notify(cursor: UInt64, fresh run: FreshRun? = nil, timed: Bool = true) {
        guard self.wantsEvents else { return }
        self.wake { state in
            if let run, !run.events.isEmpty, self.maxHanded > 0 {
                let fresh = run.events
                if let last = state.handed.last, run.after != last.cursor { state.release(first: .max) }
                // A recall of a message still held: it goes out recalled, without its body, as a read would send it.
                for event in fresh where !state.handed.isEmpty {
                    guard case .recall(let conversation, let seq, let id, _) = event.kind else { continue }
                    state.mapHeld {
                        $0.recalled { $0.id == id && $0.seq == seq && $0.conversation == conversation }
                    }
                }
                // Past either bound the new ones are not held: they follow what is, and are read from the store
                // once that is sent.
                let bytes = fresh.reduce(0) { $0 + $1.heldBytes }
                if state.handed.count + fresh.count <= self.maxHanded, state.handedBytes + bytes <= self.maxHandedBytes
                {
                    state.hold(fresh, after: run.after, bytes: bytes)
                }
            } else if cursor > state.latest, !state.handed.isEmpty {
                // The log grew by events this connection is not handed (it had no room, or they were more than it
                // had): one of them may recall a message held, which must not go out with its body. What is held is
                // read again from the store, with them.
                state.release(first: .max)
            }
            guard cursor > state.latest else { return false }
            state.latest = cursor
            if timed, state.waits.count < Self.maxWaits {
                state.waits.append((cursor, .now))
            } else if timed {
                state.waits[state.waits.count - 1].cursor = cursor
            }
            return true
        }
    }

    /// How long the oldest cursor told and not sent yet has waited; nil when none is.
    var oldestWait: Duration? {
        self.state.withLock { state in state.waits.first.map { .now - $0.since } }
    }

    /// The most times ``delivered(upTo:)`` remembers for the cursors told and not yet sent.
    static let maxWaits = 8

    /// Up to `limit` handed events that follow `cursor` directly; none when what is held does not start there (the
    /// delivery reads from the store). Held events at or before `cursor` are dropped: they were read already.
    func takeHanded(after cursor: UInt64, limit: Int) -> [StoredEvent] {
        self.state.withLock { state in
            state.release(first: state.handed.prefix { $0.cursor <= cursor }.count)
            guard !state.handed.isEmpty, state.handedAfter == cursor else { return [] }
            let taken = Array(state.handed.prefix(max(1, limit)))
            state.release(first: taken.count)
            return taken
        }
    }

    /// Marks events up to a cursor as sent, so that ``take()`` asks for newer ones only. Returns how long the
    /// oldest of them waited since the connection was told of it (``notify(cursor:fresh:)``: on the node that
    /// committed it, just after the commit), if it was told of any of them.
    @discardableResult
    func delivered(upTo cursor: UInt64) -> Duration? {
        self.state.withLock { state in
            state.delivered = max(state.delivered, cursor)
            let done = state.waits.prefix { $0.cursor <= cursor }.count
            guard done > 0 else { return nil }
            let since = state.waits[0].since
            state.waits.removeFirst(done)
            return .now - since
        }
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

    /// How many fresh events this connection can hold as committed: room under ``maxHanded``. A connection that is
    /// behind holds them too: it reads the gap before them from the store, then sends them from memory. (Without
    /// that, a connection that fell behind once, as every member of a busy group does, read every later event back
    /// from the store: a page read takes longer than a send from memory, so it stayed behind.)
    var freshRoom: Int {
        guard self.wantsEvents, self.maxHanded > 0 else { return 0 }
        return self.state.withLock { state in
            state.handedBytes < self.maxHandedBytes ? max(0, self.maxHanded - state.handed.count) : 0
        }
    }

    /// The cursor after which fresh events would be taken as they are, and how many more it holds, when the
    /// connection takes them and holds everything it has not sent yet (``freshRoom``); nil otherwise.
    var freshAfter: (after: UInt64, room: Int)? {
        guard self.wantsEvents, self.maxHanded > 0 else { return nil }
        return self.state.withLock { state in
            // Everything not sent yet is held: nothing is pending (what is still held was sent from the store, and
            // goes at the next take), or what is held follows what was sent (or some of it was sent) and reaches the
            // newest cursor.
            let holdsTheRest =
                state.latest <= state.delivered
                || state.handed.last.map { state.handedAfter <= state.delivered && $0.cursor >= state.latest } == true
            guard holdsTheRest, state.handed.count < self.maxHanded, state.handedBytes < self.maxHandedBytes
            else { return nil }
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

extension StoredEvent {
    /// What holding this event costs, as ``ConnectionHandle/maxHandedBytes`` counts it, whether or not other
    /// recipients share it: a message's texts (its body and quote, its id and sender's name, the quote's) and 256
    /// bytes besides for the rest of it; 256 for any other event.
    var heldBytes: Int {
        switch self.kind {
        case .message(let message), .edit(let message):
            256 + message.body.count + message.id.utf8.count + message.from.utf8.count
                + (message.replyTo.map { $0.body.count + $0.id.utf8.count + $0.from.utf8.count } ?? 0)
        default: 256
        }
    }
}
