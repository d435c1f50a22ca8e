import CourierProtocol
import CourierStore

/// The rules of one client session, as a value: what each envelope from the client means in the session's current
/// state, and what the connection must do about it. It holds no socket and does no I/O, so it is tested alone.
///
/// The states: waiting for `hello` (until the authentication deadline), authenticating (the store checks the
/// credentials; anything else that arrives meanwhile is a protocol error), active, and closed.
struct SessionStateMachine {
    struct Configuration {
        var maxUnackedSends: Int
        var sendsPerSecond: Double
        var sendBurst: Double
        var maxTextBytes: Int
        var maxHistoryPage: Int
        var idleTimeout: Duration
        var authTimeout: Duration
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
        }
    }

    /// What the connection must do.
    enum Action: Equatable {
        /// Nothing.
        case none
        /// Check these credentials with the store, then call ``authenticated(_:now:nowMs:)`` or ``authenticationFailed(_:)``.
        case authenticate(Courier_V1_Hello, requestID: UInt64)
        /// Submit a durable write to the group commit and answer with its outcome; ``writeFinished()`` after.
        case write(WriteRequest, requestID: UInt64, answers: Bool)
        /// Run a read-only or ephemeral request and answer it.
        case request(Request, requestID: UInt64)
        /// The connection is over its send rate: wait this long, then hand the same envelope in again. Nothing is
        /// read meanwhile (backpressure), so a client's messages keep their order.
        case pause(Duration)
        /// Answer with an error; the session goes on.
        case refuse(requestID: UInt64, code: String, message: String, id: String, retryAfter: Duration?)
        /// Send an error, then close the connection.
        case close(code: String, message: String)
    }

    /// Requests that read or notify but do not go through the group commit.
    enum Request: Equatable {
        case history(Conversation, beforeSeq: UInt64, limit: Int)
        case unread(offset: Int)
        case typing(Conversation, Bool)
        case manageGroup(Courier_V1_ManageGroup)
        case logout
        /// Start or resume an upload of media bytes on a stream.
        case upload(sha256: String, size: Int64, streamID: UInt32)
        /// Send media bytes on a stream.
        case fetch(sha256: String, offset: Int64, length: Int64, streamID: UInt32, window: Int)
    }

    private enum State {
        case awaitingHello
        case authenticating
        case active(Active)
        case closed
    }

    private struct Active {
        var session: DeviceSession
        var bucket: TokenBucket
        /// When the session's token expires: the connection closes then with `token-expired`.
        var expires: ContinuousClock.Instant
    }

    let configuration: Configuration
    private var state: State = .awaitingHello

    /// Whether the session has closed (the connection is going away).
    var isClosed: Bool {
        if case .closed = self.state { return true }
        return false
    }
    private let connected: ContinuousClock.Instant
    private var lastReceived: ContinuousClock.Instant

    init(configuration: Configuration, now: ContinuousClock.Instant) {
        self.configuration = configuration
        self.connected = now
        self.lastReceived = now
    }

    /// The authenticated device session, once there is one.
    var session: DeviceSession? {
        if case .active(let active) = self.state { return active.session }
        return nil
    }

    /// Writes to the group commit whose outcome has not come back.
    private(set) var writesInFlight = 0

    /// Whether the connection may read another envelope: not while `maxUnackedSends` writes wait for their commit.
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
        case .closed:
            return .none
        case .authenticating:
            self.state = .closed
            return .close(code: ErrorCodes.notAuthenticated, message: "wait for the welcome before sending requests")
        case .awaitingHello:
            guard case .hello(let hello)? = envelope.body else {
                self.state = .closed
                return .close(code: ErrorCodes.notAuthenticated, message: "the first request must be hello")
            }
            guard hello.credentials != nil else {
                self.state = .closed
                return .close(code: ErrorCodes.authFailed, message: "hello carries no password and no token")
            }
            self.state = .authenticating
            return .authenticate(hello, requestID: requestID)
        case .active(var active):
            defer { if case .active = self.state { self.state = .active(active) } }
            return self.activeRequest(envelope, requestID: requestID, active: &active, now: now)
        }
    }

    private mutating func activeRequest(
        _ envelope: ClientEnvelope,
        requestID: UInt64,
        active: inout Active,
        now: ContinuousClock.Instant
    ) -> Action {
        let user = active.session.user.id
        switch envelope.body {
        case .hello:
            return .refuse(
                requestID: requestID,
                code: ErrorCodes.alreadyAuthenticated,
                message: "this connection is authenticated",
                id: "",
                retryAfter: nil
            )
        case .send(let send):
            if let refusal = self.validate(send, requestID: requestID) { return refusal }
            guard let address = Conversation(send.to) else {
                return .refuse(
                    requestID: requestID,
                    code: ErrorCodes.invalidRequest,
                    message: "a send needs a user or a group to go to",
                    id: send.id,
                    retryAfter: nil
                )
            }
            if let wait = active.bucket.take(now: now) {
                return .pause(wait)
            }
            self.writesInFlight += 1
            var media: MediaReference?
            if case .media(let body)? = send.body.content {
                media = MediaReference(
                    sha256: body.sha256,
                    size: Int64(body.size),
                    mime: body.mime,
                    name: body.name
                )
            }
            let body = (try? send.body.serializedBytes() as [UInt8]) ?? []
            return .write(
                .send(
                    .init(
                        sender: user,
                        device: active.session.device.id,
                        id: send.id,
                        to: address,
                        body: body,
                        media: media
                    )
                ),
                requestID: requestID,
                answers: true
            )
        case .ack(let ack):
            self.writesInFlight += 1
            return .write(
                .ack(user: user, device: active.session.device.id, cursor: ack.cursor),
                requestID: requestID,
                answers: false
            )
        case .markRead(let mark):
            guard let address = Conversation(mark.conversation) else { return self.missingConversation(requestID) }
            self.writesInFlight += 1
            return .write(
                .markRead(user: user, conversation: address, upToSeq: mark.upToSeq),
                requestID: requestID,
                answers: true
            )
        case .recall(let recall):
            guard let address = Conversation(recall.conversation) else { return self.missingConversation(requestID) }
            self.writesInFlight += 1
            return .write(
                .recall(user: user, conversation: address, id: recall.id),
                requestID: requestID,
                answers: true
            )
        case .history(let history):
            guard let address = Conversation(history.conversation) else { return self.missingConversation(requestID) }
            let limit = history.limit == 0 ? 50 : Int(history.limit)
            return .request(
                .history(address, beforeSeq: history.beforeSeq, limit: min(limit, self.configuration.maxHistoryPage)),
                requestID: requestID
            )
        case .unread(let unread):
            return .request(.unread(offset: Int(unread.offset)), requestID: requestID)
        case .typing(let typing):
            guard let address = Conversation(typing.conversation) else { return self.missingConversation(requestID) }
            return .request(.typing(address, typing.typing), requestID: requestID)
        case .manageGroup(let manage):
            guard manage.action != nil, !manage.group.isEmpty else {
                return .refuse(
                    requestID: requestID,
                    code: ErrorCodes.invalidRequest,
                    message: "manage_group needs a group and an action",
                    id: "",
                    retryAfter: nil
                )
            }
            return .request(.manageGroup(manage), requestID: requestID)
        case .logout:
            return .request(.logout, requestID: requestID)
        case .upload(let upload):
            if let refusal = Self.validate(digest: upload.sha256, stream: upload.streamID, requestID: requestID) {
                return refusal
            }
            guard upload.size <= UInt64(self.configuration.maxMediaBytes) else {
                return .refuse(
                    requestID: requestID,
                    code: ErrorCodes.mediaTooLarge,
                    message:
                        "\(upload.size) bytes is over the media limit of \(self.configuration.maxMediaBytes) bytes",
                    id: "",
                    retryAfter: nil
                )
            }
            return .request(
                .upload(sha256: upload.sha256, size: Int64(upload.size), streamID: upload.streamID),
                requestID: requestID
            )
        case .fetch(let fetch):
            if let refusal = Self.validate(digest: fetch.sha256, stream: fetch.streamID, requestID: requestID) {
                return refusal
            }
            guard fetch.offset <= Int64.max, fetch.length <= Int64.max else {
                return .refuse(
                    requestID: requestID,
                    code: ErrorCodes.invalidRequest,
                    message: "a range beyond any file",
                    id: "",
                    retryAfter: nil
                )
            }
            return .request(
                .fetch(
                    sha256: fetch.sha256,
                    offset: Int64(fetch.offset),
                    length: Int64(fetch.length),
                    streamID: fetch.streamID,
                    window: Int(fetch.windowBytes)
                ),
                requestID: requestID
            )
        case nil:
            return .refuse(
                requestID: requestID,
                code: ErrorCodes.unsupported,
                message: "a request this server does not know",
                id: "",
                retryAfter: nil
            )
        }
    }

    /// A media digest must be 64 lowercase hex digits, and a stream a client opens an odd id.
    private static func validate(digest: String, stream: UInt32, requestID: UInt64) -> Action? {
        guard SHA256Hex.isValid(digest) else {
            return .refuse(
                requestID: requestID,
                code: ErrorCodes.invalidRequest,
                message: "sha256 is 64 lowercase hex digits",
                id: "",
                retryAfter: nil
            )
        }
        guard stream % 2 == 1 else {
            return .refuse(
                requestID: requestID,
                code: ErrorCodes.invalidRequest,
                message: "a stream a client opens has an odd id",
                id: "",
                retryAfter: nil
            )
        }
        return nil
    }

    /// The longest MIME type and file name a media message may carry, in bytes.
    static let maxMimeBytes = 127
    static let maxMediaNameBytes = 255

    /// Whether a MIME type is safe to send back in a `Content-Type` header and a compat header: `type/subtype` with
    /// optional parameters, printable ASCII only.
    static func isMediaType(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard let slash = bytes.firstIndex(of: UInt8(ascii: "/")), slash > 0, slash < bytes.count - 1 else {
            return false
        }
        return bytes.allSatisfy { (0x20...0x7E).contains($0) }
    }

    private func validate(_ send: Courier_V1_Send, requestID: UInt64) -> Action? {
        func refuse(_ code: String, _ message: String) -> Action {
            .refuse(requestID: requestID, code: code, message: message, id: send.id, retryAfter: nil)
        }
        if send.id.utf8.count > self.configuration.maxMessageIDBytes {
            return refuse(
                ErrorCodes.idTooLong,
                "a message id has at most \(self.configuration.maxMessageIDBytes) bytes"
            )
        }
        if !StoreText.isClean(send.id) {
            return refuse(ErrorCodes.invalidRequest, "a message id has no control characters")
        }
        switch send.body.content {
        case .text(let text)?:
            if text.isEmpty { return refuse(ErrorCodes.emptyMessage, "the text is empty") }
            if text.utf8.count > self.configuration.maxTextBytes {
                return refuse(
                    ErrorCodes.textTooLarge,
                    "\(text.utf8.count) bytes of text; the limit is \(self.configuration.maxTextBytes)"
                )
            }
            return nil
        case .media(let media)?:
            guard SHA256Hex.isValid(media.sha256) else {
                return refuse(ErrorCodes.invalidRequest, "media.sha256 is 64 lowercase hex digits")
            }
            guard media.kind != .unspecified, Courier_V1_Media.Kind.allCases.contains(media.kind) else {
                return refuse(ErrorCodes.invalidRequest, "media.kind is image, voice, video or file")
            }
            if media.size > UInt64(self.configuration.maxMediaBytes) {
                return refuse(
                    ErrorCodes.mediaTooLarge,
                    "\(media.size) bytes is over the media limit of \(self.configuration.maxMediaBytes) bytes"
                )
            }
            if !media.mime.isEmpty, media.mime.utf8.count > Self.maxMimeBytes || !Self.isMediaType(media.mime) {
                return refuse(
                    ErrorCodes.invalidRequest,
                    "media.mime is a MIME type (type/subtype, printable ASCII, at most \(Self.maxMimeBytes) bytes)"
                )
            }
            if media.name.utf8.count > Self.maxMediaNameBytes || media.name.contains("/")
                || media.name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
            {
                return refuse(
                    ErrorCodes.invalidRequest,
                    "media.name is a file name without / or control characters, at most \(Self.maxMediaNameBytes) bytes"
                )
            }
            return nil
        case nil:
            return refuse(ErrorCodes.emptyMessage, "the message has no content")
        }
    }

    private func missingConversation(_ requestID: UInt64) -> Action {
        .refuse(
            requestID: requestID,
            code: ErrorCodes.invalidRequest,
            message: "the request names no conversation",
            id: "",
            retryAfter: nil
        )
    }

    /// The store accepted the credentials.
    ///
    /// - Parameters:
    ///   - now: The session's clock.
    ///   - nowMs: The wall clock, in milliseconds since 1970, against which the token's expiry is read.
    mutating func authenticated(_ session: DeviceSession, now: ContinuousClock.Instant, nowMs: Int64) {
        guard case .authenticating = self.state else { return }
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
    }

    /// The store refused the credentials: the connection closes with that code.
    mutating func authenticationFailed(code: String, message: String) -> Action {
        self.state = .closed
        return .close(code: code, message: message)
    }

    /// A write from ``Action/write(_:requestID:answers:)`` finished (committed, refused or failed).
    mutating func writeFinished() {
        self.writesInFlight = max(0, self.writesInFlight - 1)
    }

    /// The earliest instant at which ``tick(now:)`` may close the session: the end of the time to authenticate, or
    /// the token's expiry or the idle timeout, whichever comes first; nil once closed. A connection arms its timer
    /// for this instant and asks again when it fires (activity since then moves it later).
    var nextDeadline: ContinuousClock.Instant? {
        switch self.state {
        case .awaitingHello, .authenticating:
            self.connected + self.configuration.authTimeout
        case .active(let active):
            min(active.expires, self.lastReceived + self.configuration.idleTimeout)
        case .closed:
            nil
        }
    }

    /// Checks the connection's deadlines.
    ///
    /// - Returns: `.close` when the client did not authenticate in time or has been silent for the idle timeout.
    mutating func tick(now: ContinuousClock.Instant) -> Action {
        switch self.state {
        case .awaitingHello, .authenticating:
            if now - self.connected >= self.configuration.authTimeout {
                self.state = .closed
                return .close(
                    code: ErrorCodes.authTimeout,
                    message: "no hello within \(self.configuration.authTimeout)"
                )
            }
        case .active(let active):
            if now >= active.expires {
                self.state = .closed
                return .close(code: ErrorCodes.tokenExpired, message: "the token expired: log in again")
            }
            if now - self.lastReceived >= self.configuration.idleTimeout {
                self.state = .closed
                return .close(
                    code: ErrorCodes.idleTimeout,
                    message: "nothing received for \(self.configuration.idleTimeout)"
                )
            }
        case .closed:
            break
        }
        return .none
    }

    /// The connection is closing for a reason of its own (revoked, shutting down, a framing error).
    mutating func close() {
        self.state = .closed
    }
}
