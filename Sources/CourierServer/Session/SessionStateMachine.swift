import CourierProtocol
import CourierStore

/// One client session's whole life, as a value: what each event of the connection (an envelope, the end of a
/// request's work, a write's outcome, the clock, the client's reading) means in the session's current state, and
/// what the connection must do about it. It holds no socket and does no I/O, so it is tested alone; its
/// ``SessionHandler`` owns it and changes it on the channel's event loop only.
///
/// Beside the lifecycle (waiting for `hello` until the authentication deadline, authenticating, active, closed) it
/// keeps:
/// - the intake: whether the next request may be taken, or a request's async work or a send held for its rate
///   makes the ones after it wait, or nothing more is taken (a goodbye, a termination);
/// - the writes in the group commit (``PendingWrites``, answered in order), and the close that waits for them;
/// - the deadlines: authentication, the token's expiry, silence, and a client that stopped reading;
/// - a compat media packet being streamed, which the requests and writes after it wait for.
struct SessionStateMachine {
    struct Configuration {
        var maxUnackedSends: Int
        var sendsPerSecond: Double
        var sendBurst: Double
        var maxTextBytes: Int
        var maxHistoryPage: Int
        var idleTimeout: Duration
        var authTimeout: Duration
        var slowConsumerTimeout: Duration
        var maxMediaBytes: Int64
        var maxMessageIDBytes: Int

        init(
            _ limits: ServerConfiguration.Limits,
            media: ServerConfiguration.Media = .init(),
            store: StoreLimits = .init()
        ) {
            self.maxMediaBytes = media.maxMediaBytes
            self.maxMessageIDBytes = store.maxMessageIDBytes
            self.maxUnackedSends = limits.maxUnackedSends
            self.sendsPerSecond = limits.sendsPerSecond
            self.sendBurst = limits.sendBurst
            self.maxTextBytes = limits.maxTextBytes
            self.maxHistoryPage = limits.maxHistoryPage
            self.idleTimeout = limits.idleTimeout
            self.authTimeout = limits.authTimeout
            self.slowConsumerTimeout = limits.slowConsumerTimeout
        }
    }

    /// What the connection must do.
    enum Action: Equatable {
        /// Nothing.
        case none
        /// Check these credentials with the store, then hand the outcome to ``workEnded(_:now:nowMs:)``.
        case authenticate(Courier_V1_Hello, requestID: UInt64)
        /// Submit a durable write to the group commit (through ``admit(_:)``) and answer with its outcome.
        case write(WriteRequest, requestID: UInt64, answers: Bool)
        /// Run a read-only or ephemeral request and answer it; its end goes to ``workEnded(_:now:nowMs:)``.
        case request(Request, requestID: UInt64)
        /// The connection is over its send rate: wait this long, then hand the same envelope in again
        /// (``holdEnded()`` first). Nothing is taken meanwhile (backpressure), so a client's messages keep their
        /// order.
        case pause(Duration)
        /// Answer with an error; the session goes on.
        case refuse(requestID: UInt64, code: String, message: String, id: String, retryAfter: Duration?)
        /// Send an error, then close the connection.
        case close(code: String, message: String)
        /// Close without a word (the client stopped reading, or the connection failed); `code` names the reason in
        /// the log where there is one.
        case closeQuietly(code: String?, reason: String)
    }

    /// How a request's async work ended, handed back to the loop.
    enum WorkEnd: Sendable {
        /// Go on with the next request.
        case goOn
        /// Logged in: the session is active, and delivery starts from `start`.
        case authenticated(
            DeviceSession,
            handle: ConnectionHandle,
            start: UInt64,
            latest: UInt64,
            ackedOnWrite: Bool
        )
        /// A request that came of the work (a compat media packet's send, once its bytes are stored).
        case submit(ClientEnvelope)
        /// Send an error, then close (a refused login, a logout, the server stopping).
        case close(code: String, message: String)
        /// The work could not write to the connection: it is gone, or going.
        case failed(String)
    }

    /// What the loop does when work ends.
    enum AfterWork {
        /// Take the next request.
        case takeNext
        /// Start delivering: the session became active.
        case deliver(DeviceSession, handle: ConnectionHandle, start: UInt64, latest: UInt64, ackedOnWrite: Bool)
        /// Take this request before the next.
        case submit(ClientEnvelope)
        /// Carry out this close.
        case close(Action)
        /// Nothing: the session has closed.
        case none
    }

    private enum State {
        /// Before the connection is admitted.
        case unopened
        case awaitingHello(since: ContinuousClock.Instant)
        case authenticating(since: ContinuousClock.Instant)
        case active(Active)
        case closed
    }

    struct Active {
        var session: DeviceSession
        var bucket: TokenBucket
        /// When the session's token expires: the connection closes then with `token-expired`.
        var expires: ContinuousClock.Instant
    }

    /// Whether the next request may be taken.
    private enum Intake: Equatable {
        case open
        /// A request's async work runs: the requests after it wait for its end.
        case working
        /// A send waits for its rate or its user's fan-out budget.
        case holding
        /// Nothing more is taken: the session closes, now or once its writes are answered.
        case stopped
    }

    let configuration: Configuration
    private var state: State = .unopened
    private var intake = Intake.open
    private var lastReceived: ContinuousClock.Instant
    /// Since when the client has left the connection's write buffer over its high-water mark.
    private var unwritableSince: ContinuousClock.Instant?
    /// The writes in the group commit, answered in order.
    private var writes = PendingWrites()
    /// The close that waits for the writes in flight to be answered: with this error, or quietly (`code` nil).
    private var closeAfterWrites: (code: String?, message: String)?
    /// Writes of the client's own in the group commit (a merged acknowledgement is not one).
    private(set) var writesInFlight = 0
    /// A compat media packet is being streamed from the blob store: other writes and requests wait behind it.
    private(set) var isStreamingMedia = false

    init(configuration: Configuration, now: ContinuousClock.Instant) {
        self.configuration = configuration
        self.lastReceived = now
    }

    // MARK: Lifecycle

    /// The connection was admitted: the time to authenticate runs from now.
    mutating func opened(now: ContinuousClock.Instant) {
        guard case .unopened = self.state else { return }
        self.state = .awaitingHello(since: now)
        self.lastReceived = now
    }

    /// Whether the session has closed (the connection is closing or gone).
    var isClosed: Bool {
        if case .closed = self.state { return true }
        return false
    }

    /// The authenticated device session, once there is one.
    var session: DeviceSession? {
        if case .active(let active) = self.state { return active.session }
        return nil
    }

    /// The connection closes for a reason of its own (revoked, shutting down, a framing error, the channel gone).
    ///
    /// - Returns: Whether this closes it (false when it was closed already: the close is carried out once).
    mutating func close() -> Bool {
        if case .closed = self.state { return false }
        self.state = .closed
        self.intake = .stopped
        return true
    }

    /// Closes with an error, unless closed already.
    mutating func close(code: String, message: String) -> Action {
        self.close() ? .close(code: code, message: message) : .none
    }

    /// Closes without a word, unless closed already.
    mutating func closeQuietly(reason: String) -> Action {
        self.close() ? .closeQuietly(code: nil, reason: reason) : .none
    }

    /// Takes nothing more, and closes once the writes in flight are answered (a goodbye, a termination).
    ///
    /// - Returns: The close, when nothing is in flight; else `.none`, and ``writesAnswered(_:)`` returns it later.
    mutating func closeWhenAnswered(code: String?, message: String) -> Action {
        guard !self.isClosed else { return .none }
        self.intake = .stopped
        guard self.writes.isEmpty else {
            if self.closeAfterWrites == nil { self.closeAfterWrites = (code, message) }
            return .none
        }
        return self.closeNow(code: code, message: message)
    }

    private mutating func closeNow(code: String?, message: String) -> Action {
        guard self.close() else { return .none }
        if let code { return .close(code: code, message: message) }
        return .closeQuietly(code: nil, reason: message)
    }

    // MARK: Intake

    /// Whether the connection reads more from the socket (it still stops while requests wait in its inbox).
    var takesInput: Bool {
        self.intake != .stopped
    }

    /// Whether the next request may be taken now: nothing waits before it, fewer than `maxUnackedSends` writes are
    /// in flight, and no compat media packet is being streamed.
    var mayTakeRequest: Bool {
        self.intake == .open && !self.isStreamingMedia && self.mayReadMore
    }

    /// Whether another write may go in flight: not while `maxUnackedSends` wait for their commit.
    var mayReadMore: Bool {
        self.writesInFlight < self.configuration.maxUnackedSends
    }

    /// Something arrived (an envelope, a ping): the connection is not idle.
    mutating func receivedBytes(now: ContinuousClock.Instant) {
        self.lastReceived = now
    }

    /// An envelope from the client.
    mutating func received(_ envelope: ClientEnvelope, now: ContinuousClock.Instant) -> Action {
        self.lastReceived = now
        let requestID = envelope.requestID
        switch self.state {
        case .closed, .unopened:
            return .none
        case .authenticating:
            return self.close(
                code: ErrorCodes.notAuthenticated,
                message: "wait for the welcome before sending requests"
            )
        case .awaitingHello(let since):
            guard case .hello(let hello)? = envelope.body else {
                return self.close(code: ErrorCodes.notAuthenticated, message: "the first request must be hello")
            }
            guard hello.credentials != nil else {
                return self.close(code: ErrorCodes.authFailed, message: "hello carries no password and no token")
            }
            self.state = .authenticating(since: since)
            self.intake = .working
            return .authenticate(hello, requestID: requestID)
        case .active(var active):
            let action = self.activeRequest(envelope, requestID: requestID, active: &active, now: now)
            self.state = .active(active)
            switch action {
            case .write: self.writesInFlight += 1
            // From an open intake only: once stopped (a termination, a failed write), nothing reopens it.
            case .request: if self.intake == .open { self.intake = .working }
            case .pause: if self.intake == .open { self.intake = .holding }
            case .close: _ = self.close()
            case .none, .authenticate, .refuse, .closeQuietly: break
            }
            return action
        }
    }

    /// A request's work that starts from a frame rather than an envelope (a media stream's bytes, a compat media
    /// packet): the requests after it wait for its end.
    mutating func workStarted() {
        if self.intake == .open { self.intake = .working }
    }

    /// A send held by ``Action/pause(_:)`` or for its user's fan-out budget is handed in again.
    mutating func holdEnded(now: ContinuousClock.Instant) {
        if self.intake == .holding { self.intake = .open }
        // The hold was the server's doing, not the client's silence.
        self.lastReceived = now
    }

    /// A send is held for its user's fan-out budget (all its connections together).
    mutating func hold() {
        if self.intake == .open { self.intake = .holding }
    }

    /// A request's async work ended.
    mutating func workEnded(_ end: WorkEnd, now: ContinuousClock.Instant, nowMs: Int64) -> AfterWork {
        if self.intake == .working { self.intake = .open }
        guard !self.isClosed else { return .none }
        switch end {
        case .goOn:
            return .takeNext
        case .submit(let envelope):
            return .submit(envelope)
        case .close(let code, let message):
            return .close(self.close(code: code, message: message))
        case .failed(let reason):
            return .close(self.closeNow(code: nil, message: reason))
        case .authenticated(let session, let handle, let start, let latest, let ackedOnWrite):
            // Active since the login registered the connection (``authenticated(_:now:nowMs:)``), or from now.
            self.authenticated(session, now: now, nowMs: nowMs)
            guard case .active = self.state else { return .none }
            return .deliver(session, handle: handle, start: start, latest: latest, ackedOnWrite: ackedOnWrite)
        }
    }

    /// The store accepted the credentials and the hub registered the connection: the session is active (its
    /// deadlines are the token's expiry and the idle timeout from now on), while the login's work goes on (the
    /// welcome, presence) and the requests after it wait for its end.
    ///
    /// - Parameters:
    ///   - now: The session's clock.
    ///   - nowMs: The wall clock, in milliseconds since 1970, against which the token's expiry is read.
    /// - Returns: Whether the session was authenticating (false once closed).
    @discardableResult
    mutating func authenticated(_ session: DeviceSession, now: ContinuousClock.Instant, nowMs: Int64) -> Bool {
        guard case .authenticating = self.state else { return false }
        let left = min(max(0, session.device.expiresMs - nowMs), 100 * 365 * 86_400_000)
        self.state = .active(
            Active(
                session: session,
                bucket: TokenBucket(
                    rate: self.configuration.sendsPerSecond,
                    burst: self.configuration.sendBurst,
                    now: now
                ),
                expires: now + .milliseconds(left)
            )
        )
        return true
    }

    // MARK: Writes

    /// A write from ``Action/write(_:requestID:answers:)``: the writes to send to the group commit now, first first
    /// (see ``PendingWrites/admit(_:)``).
    mutating func admit(_ request: WriteRequest) -> [PendingWrites.Admitted] {
        let admitted = self.writes.admit(request)
        // An acknowledgement merged into the next is not a write of its own.
        if admitted.isEmpty { self.writeFinished() }
        return admitted
    }

    /// The acknowledgement waiting to be merged, taken out to go to the group commit now: the connection ended.
    mutating func takeMergedAck() -> WriteRequest? {
        self.writes.takeMergedAck()
    }

    /// Records a write sent to the group commit.
    ///
    /// - Returns: Its serial, for ``writesAnswered(_:)``.
    mutating func sent(
        _ request: WriteRequest,
        requestID: UInt64,
        answers: Bool,
        reservedFanout: Int,
        isRequest: Bool
    )
        -> UInt64
    {
        self.writes.append(
            request,
            requestID: requestID,
            answers: answers,
            reservedFanout: reservedFanout,
            isRequest: isRequest
        )
    }

    /// Outcomes came back from the group commit, in any order.
    ///
    /// - Returns: The writes now answered, in the order the requests came, each with the merged acknowledgement
    ///   that goes to the group commit after it, if any. After a write the database failed, nothing more is taken:
    ///   every later write of the connection fails too (none overtakes it), and the connection closes with
    ///   `storage-failed` once they are answered (``closeIfAnswered()``); the client sends again what was not
    ///   acknowledged.
    mutating func writesAnswered(
        _ outcomes: [(serial: UInt64, result: Result<WriteOutcome, any Error>)]
    ) -> [(write: PendingWrites.Pending, result: Result<WriteOutcome, any Error>, next: WriteRequest?)] {
        self.writes.record(outcomes)
        var answered: [(PendingWrites.Pending, Result<WriteOutcome, any Error>, WriteRequest?)] = []
        while let (write, result, next) = self.writes.popAnswered() {
            if write.isRequest { self.writeFinished() }
            if case .failure(let error as CourierStoreError) = result, error.code == .storageFailed,
                !self.isClosed, self.closeAfterWrites == nil
            {
                self.intake = .stopped
                self.closeAfterWrites = (
                    ErrorCodes.storageFailed,
                    "the server could not store a write: connect again and send what was not acknowledged"
                )
            }
            answered.append((write, result, next))
        }
        return answered
    }

    /// The close that waited for the writes in flight, once they are answered (their answers written first).
    mutating func closeIfAnswered() -> Action {
        guard self.writes.isEmpty, let (code, message) = self.closeAfterWrites else { return .none }
        self.closeAfterWrites = nil
        return self.closeNow(code: code, message: message)
    }

    /// A write the client asked for finished (committed, refused or failed), or was merged into the next.
    mutating func writeFinished() {
        self.writesInFlight = max(0, self.writesInFlight - 1)
    }

    // MARK: Output

    /// A compat media packet starts streaming from the blob store.
    mutating func mediaStreamStarted() {
        self.isStreamingMedia = true
    }

    /// The compat media packet was streamed: what waited behind it goes.
    mutating func mediaStreamEnded() {
        self.isStreamingMedia = false
    }

    /// The channel's write buffer crossed its high-water mark (`writable` false) or came back under it.
    mutating func writabilityChanged(writable: Bool, now: ContinuousClock.Instant) {
        if writable {
            self.unwritableSince = nil
        } else if self.unwritableSince == nil {
            self.unwritableSince = now
        }
    }

    // MARK: Deadlines

    /// The earliest instant at which ``tick(now:)`` may close the session: the end of the time to authenticate, or
    /// the token's expiry, the idle timeout, or the end of a stopped reader's grace, whichever comes first; nil
    /// once closed. A connection arms its timer for this instant and asks again when it fires (activity since then
    /// moves it later).
    var nextDeadline: ContinuousClock.Instant? {
        let session: ContinuousClock.Instant? =
            switch self.state {
            case .unopened, .closed: nil
            case .awaitingHello(let since), .authenticating(let since): since + self.configuration.authTimeout
            case .active(let active): min(active.expires, self.lastReceived + self.configuration.idleTimeout)
            }
        guard let session else { return nil }
        guard let unwritableSince else { return session }
        return min(session, unwritableSince + self.configuration.slowConsumerTimeout)
    }

    /// Checks the connection's deadlines.
    ///
    /// - Returns: A close when the client stopped reading for `slowConsumerTimeout`, did not authenticate in time,
    ///   outlived its token, or has been silent for the idle timeout.
    mutating func tick(now: ContinuousClock.Instant) -> Action {
        if let unwritableSince, now - unwritableSince >= self.configuration.slowConsumerTimeout {
            guard self.close() else { return .none }
            return .closeQuietly(code: ErrorCodes.slowConsumer, reason: "the client stopped reading")
        }
        switch self.state {
        case .awaitingHello(let since), .authenticating(let since):
            if now - since >= self.configuration.authTimeout {
                return self.close(
                    code: ErrorCodes.authTimeout,
                    message: "no hello within \(self.configuration.authTimeout)"
                )
            }
        case .active(let active):
            if now >= active.expires {
                return self.close(code: ErrorCodes.tokenExpired, message: "the token expired: log in again")
            }
            if now - self.lastReceived >= self.configuration.idleTimeout {
                return self.close(
                    code: ErrorCodes.idleTimeout,
                    message: "nothing received for \(self.configuration.idleTimeout)"
                )
            }
        case .unopened, .closed:
            break
        }
        return .none
    }
}
