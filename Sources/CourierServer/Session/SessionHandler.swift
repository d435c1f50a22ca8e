import CourierProtocol
import CourierStore
import CourierWire
import Logging
import NIOCore

/// One connection's session, in its channel pipeline: frames in, through the ``SessionStateMachine``, actions out.
///
/// Everything here runs on the channel's event loop, and an idle connection is only this object's fields: no task
/// waits for it. The session's state is its machine's; what is here besides is the channel's plumbing (the inbox,
/// the flush, what waits to be written, the deadline's registration). Async work exists while there is work (a
/// login, a history read, a page of events read back from the store, a media stream); it runs as a task of
/// ``SessionWork`` and hands its end back to the loop as an event for the machine. Requests are taken in order: a
/// request that needs async work holds the ones after it (reading stops while they wait), except writes, which go to
/// the group commit at once and are answered in order as their outcomes come back. Deadlines (authentication, idle,
/// token expiry, a client that stopped reading) are the machine's, armed in the loop's ``LoopDeadlines``.
/// Everything written in one turn of the loop goes out with one flush.
///
/// NIO calls a handler through its protocols, and a generic class's protocol methods run unspecialized: each use of
/// `Transport` in them, and in everything they call, was a lookup at run time (2.5 % of the closed loop's server
/// samples in those lookups alone; docs/BENCHMARKS.md, step 7). The methods NIO calls on the hot paths are
/// specialized for each transport (`@_specialize`): the generic entry jumps to the transport's own copy, which calls
/// specialized code. The cold ones (`handlerRemoved`, `errorCaught`, `triggerUserOutboundEvent`) run generic.
final class SessionHandler<Transport: SessionTransport>: ChannelDuplexHandler {
    typealias InboundIn = Transport.Inbound
    typealias OutboundIn = Transport.Outbound
    typealias OutboundOut = Transport.Outbound

    // Everything below is the loop's: read and changed only on the channel's event loop. The extensions (work,
    // output, delivery, deadlines) in the files beside this one share it.

    let requests: SessionRequests<Transport>
    var transport: Transport { self.requests.transport }
    var server: SessionContext { self.requests.context }
    var machine: SessionStateMachine

    /// Set from `handlerAdded` to `handlerRemoved` (then dropped: the context holds this handler).
    var context: ChannelHandlerContext!
    var eventLoop: (any EventLoop)!
    /// The connection's async work; set once the connection is admitted.
    var work: SessionWork?
    /// Whether the connection was admitted or refused (``begin(context:)``).
    private var begun = false
    /// This connection's mark in the group commit: after a write of it fails, its later ones fail too (see
    /// ``CommitQueue/enqueue(_:origin:)``), so none overtakes the failed one; the connection then closes.
    var origin = 0

    // Reading.
    var inbox = SessionQueue<Transport.Inbound>()
    /// A `read` was held back while requests wait: it is passed on when they are taken.
    private var readPending = false

    // Writing (``SessionHandler+Output``).
    var inReadBurst = false
    var flushPending = false
    var flushScheduled = false
    /// Outputs waiting behind a compat media packet being streamed.
    var deferred = SessionQueue<([TransportOutput<Transport.Outbound>], EventLoopPromise<Void>?)>()
    /// Async work waiting for the client to read before it writes more (see ``SessionWriter``).
    var writableWaiters: [EventLoopPromise<Void>] = []

    // Delivering (``SessionHandler+Delivery``).
    var delivery: SessionDelivery?
    /// The loop's encodings of group events, shared by its connections; set once the connection is admitted.
    var encodings: EventEncodingCache?

    // Deadlines (``SessionHandler+Deadlines``).
    var deadlines: LoopDeadlines?
    var deadlineKey = 0
    var armedAt: ContinuousClock.Instant?
    /// When each send in flight was enqueued, by its serial, while the server traces messages (``TraceBook``).
    var traceStarts: [UInt64: UInt64] = [:]

    init(requests: SessionRequests<Transport>) {
        self.requests = requests
        let server = requests.context
        self.machine = SessionStateMachine(
            configuration: .init(
                server.configuration.limits,
                media: server.configuration.media,
                store: server.store.limits
            ),
            now: server.clock.now
        )
    }

    /// The session's clock.
    var now: ContinuousClock.Instant { self.server.clock.now }

    var bound: NIOLoopBound<SessionHandler> {
        NIOLoopBound(self, eventLoop: self.eventLoop)
    }

    /// How async work writes to this connection.
    var writer: SessionWriter<Transport> {
        SessionWriter(eventLoop: self.eventLoop, handler: self.bound)
    }

    // MARK: Lifecycle

    @_specialize(where Transport == NativeTransport)
    @_specialize(where Transport == WebSocketTransport)
    @_specialize(where Transport == CompatTransport)
    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        self.eventLoop = context.eventLoop
        // A WebSocket's session begins in a connection already open (after its HTTP upgrade).
        if context.channel.isActive { self.begin(context: context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        _ = self.machine.close()
        self.context = nil
    }

    @_specialize(where Transport == NativeTransport)
    @_specialize(where Transport == WebSocketTransport)
    @_specialize(where Transport == CompatTransport)
    func channelActive(context: ChannelHandlerContext) {
        self.begin(context: context)
        context.fireChannelActive()
    }

    /// Admits the connection and starts its session, once.
    private func begin(context: ChannelHandlerContext) {
        guard !self.begun else { return }
        self.begun = true
        let ticket: ConnectionCounts.Ticket
        switch self.server.admit(address: self.requests.addressKey, channel: context.channel) {
        case .failure(let refusal):
            let message =
                switch refusal {
                case .serverFull: "the server is at its connection limit"
                case .addressFull: "too many connections from this address are not logged in"
                }
            self.requests.logger.notice("refused a connection", metadata: ["reason": "\(message)"])
            self.perform(self.machine.close(code: ErrorCodes.serverFull, message: message))
            return
        case .success(let admitted):
            ticket = admitted
        }
        guard self.server.sessionOpened(context.channel) else {
            // The server is stopping: a connection accepted as it did is not served.
            self.server.release(ticket, authenticated: false)
            self.perform(self.machine.closeQuietly(reason: "the server is stopping"))
            return
        }
        self.machine.opened(now: self.now)
        self.origin = self.server.commits.newOrigin()
        self.work = SessionWork(media: self.server.media.configuration, ticket: ticket)
        self.encodings = self.server.encodings.forLoop(context.eventLoop)
        let deadlines = self.server.deadlines.forLoop(context.eventLoop)
        self.deadlines = deadlines
        self.deadlineKey = deadlines.register { [unowned self] now in self.deadlineFired(now) }
        self.armDeadline()
    }

    @_specialize(where Transport == NativeTransport)
    @_specialize(where Transport == WebSocketTransport)
    @_specialize(where Transport == CompatTransport)
    func channelInactive(context: ChannelHandlerContext) {
        _ = self.machine.close()
        for (_, promise) in self.deferred.removeAll() { promise?.fail(ChannelError.ioOnClosedChannel) }
        for waiter in self.writableWaiters { waiter.fail(ChannelError.ioOnClosedChannel) }
        self.writableWaiters = []
        guard let work = self.work else { return }
        // An acknowledgement waiting to be merged goes to the group commit now, before the connection's end is
        // accounted for (a server stopping finishes its commit queue after that).
        if let merged = self.machine.takeMergedAck() {
            self.enqueue(merged, requestID: 0, answers: false, isRequest: false)
        }
        // The hub's handle must not keep this handler (nor this handler it) once the connection is gone.
        self.delivery?.handle.clearWaker()
        self.delivery = nil
        self.deadlines?.unregister(self.deadlineKey)
        self.deadlines = nil
        // The socket is closed: its slot is free once the work in flight has ended. Then the bookkeeping (uploads,
        // last seen, presence), however it ended.
        let requests = self.requests
        let channel = context.channel
        let origin = self.origin
        work.ended {
            // Every write of the connection has come back: its mark is done with.
            requests.context.forget(origin: origin)
            Task {
                await requests.connectionEnded(work)
                requests.context.sessionClosed(channel)
            }
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.closeForFraming(error)
    }

    /// Bytes that break the framing: say which error where the transport can, then close. A peer that left
    /// (inside a frame, or resetting the connection) is not an error worth more than a debug line.
    private func closeForFraming(_ error: any Error) {
        let wire = error as? CourierWireError
        if let wire, wire.code != .truncated {
            self.requests.logger.info("closing: framing error", metadata: ["error": "\(error)"])
        } else {
            self.requests.logger.debug(
                wire == nil ? "the connection failed" : "the client left inside a frame",
                metadata: ["error": "\(error)"]
            )
        }
        guard self.machine.close() else { return }
        self.writeClosing(wire == nil ? [] : self.transport.closingFrames(framingError: error))
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        if event is SessionClosedForRoom {
            promise?.succeed()
            // Its place was given to a newer connection: it has sent nothing (a login under way never gets here).
            // Told why as far as the socket takes it now, and closed at once: not held open for a reader that may
            // never read (a TLS handshake never finished holds every write back).
            if self.work != nil, self.machine.session == nil, self.machine.close() {
                for frame in self.transport.closingFrames(code: ErrorCodes.serverFull, message: Self.closedForRoom) {
                    context.write(self.wrapOutboundOut(frame), promise: nil)
                }
                context.flush()
                context.close(promise: nil)
            }
            return
        }
        guard event is SessionShutdown else {
            context.triggerUserOutboundEvent(event, promise: promise)
            return
        }
        promise?.succeed()
        // An authenticated session is told by the hub (after its writes are answered); one that is not yet goes now.
        if self.work != nil, self.machine.session == nil {
            self.close(code: ErrorCodes.shuttingDown, message: "the server is stopping; reconnect later")
        }
    }

    // MARK: Reading

    @_specialize(where Transport == NativeTransport)
    @_specialize(where Transport == WebSocketTransport)
    @_specialize(where Transport == CompatTransport)
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.inReadBurst = true
        guard self.work != nil, self.machine.takesInput else { return }
        // Something arrived: the client is not idle, even while its request waits in the inbox.
        self.machine.receivedBytes(now: self.now)
        self.inbox.append(self.unwrapInboundIn(data))
        self.drain()
    }

    @_specialize(where Transport == NativeTransport)
    @_specialize(where Transport == WebSocketTransport)
    @_specialize(where Transport == CompatTransport)
    func channelReadComplete(context: ChannelHandlerContext) {
        self.inReadBurst = false
        if self.flushPending {
            self.flushPending = false
            context.flush()
        }
    }

    @_specialize(where Transport == NativeTransport)
    @_specialize(where Transport == WebSocketTransport)
    @_specialize(where Transport == CompatTransport)
    func read(context: ChannelHandlerContext) {
        if self.mayRead {
            context.read()
        } else {
            self.readPending = true
        }
    }

    /// Whether to read more from the socket: not while requests wait, nor while the client leaves what it was sent
    /// unread (see ``mayTakeRequests``).
    private var mayRead: Bool {
        self.machine.takesInput && self.inbox.isEmpty && self.clientTakesAnswers
    }

    /// Whether the client takes what it is sent well enough for more of its requests to be taken: not while more
    /// than four times the write buffer's high-water mark waits unread (its requests would only add answers it
    /// does not take). Deliveries stop at the high-water mark itself (``canWrite``); requests go on past it, so
    /// that a busy recipient's own sends and acknowledgements are not held up behind what it receives.
    private var clientTakesAnswers: Bool {
        guard let context = self.context else { return false }
        if context.channel.isWritable { return true }
        let buffered = (try? context.channel.syncOptions?.getOption(.bufferedWritableBytes)) ?? .max
        let (bound, overflow) = self.server.configuration.limits.outboundBufferBytes.multipliedReportingOverflow(by: 4)
        return buffered < (overflow ? .max : bound)
    }

    private func resumeReading() {
        guard self.readPending, self.mayRead else { return }
        self.readPending = false
        self.context.read()
    }

    /// Takes requests from the inbox while the machine lets the next one be taken.
    func drain() {
        while self.machine.mayTakeRequest, self.clientTakesAnswers, let frame = self.inbox.popFirst() {
            self.process(frame)
        }
        self.resumeReading()
    }

    private func process(_ frame: Transport.Inbound) {
        switch self.transport.interpret(frame) {
        case .envelope(let envelope):
            self.submit(envelope)
        case .reply(let frames):
            // Behind a compat media packet being streamed, if there is one.
            self.emit(frames.map { .frame($0) }, promise: nil)
        case .ignore:
            break
        case .refuse(let code, let message, let id):
            self.server.metrics.refusals.increment()
            self.emit(self.requests.errorEnvelope(0, code: code, message: message, id: id))
        case .goodbye:
            self.perform(self.machine.closeWhenAnswered(code: nil, message: "the client said goodbye"))
        case .violation(let code, let message):
            self.requests.logger.info(
                "closing: protocol violation",
                metadata: ["code": "\(code)", "reason": "\(message)"]
            )
            self.close(code: code, message: message)
        case .streamWindow(let streamID, let increment):
            self.work?.streams.grant(streamID, increment: increment)
        case .streamChunk(let streamID, let bytes, let end):
            self.start { requests, work, writer in
                try await requests.receive(bytes, on: streamID, end: end, session: work, writer: writer)
                return .goOn
            }
        case .streamReset(let streamID):
            self.start { requests, work, _ in
                if let upload = work.streams.close(streamID) { await requests.context.media.release(upload.upload) }
                return .goOn
            }
        case .inlineMedia(let envelope, let size):
            guard let device = self.machine.session else {
                self.close(code: ErrorCodes.notAuthenticated, message: "the first request must be auth")
                return
            }
            self.start { requests, work, writer in
                try await requests.beginInline(
                    envelope,
                    size: size,
                    user: device.user.id,
                    session: work,
                    writer: writer
                )
            }
        case .inlineBytes(let bytes, let isLast):
            self.start { requests, work, writer in
                try await requests.receiveInline(bytes, isLast: isLast, session: work, writer: writer)
            }
        case .brokenFraming(let error):
            self.closeForFraming(error)
        case .inlineAbandoned(let code, let message):
            self.start { requests, work, writer in
                try await requests.abandonInline(code: code, message: message, session: work, writer: writer)
            }
        }
    }

    /// Runs a request through the state machine and carries out what it says.
    func submit(_ envelope: ClientEnvelope) {
        // Over the user's fan-out budget (all its connections together): hold its next send, taking nothing more,
        // until the budget has paid for what was sent.
        if envelope.fansOut, let user = self.machine.session?.user.id, let wait = self.server.fanoutWait(of: user) {
            self.machine.hold()
            self.hold(for: min(wait, .seconds(1)), envelope)
            return
        }
        let action = self.machine.received(envelope, now: self.now)
        switch action {
        case .none:
            break
        case .pause(let wait):
            // Over the send rate: held (and nothing more taken) until the rate allows it.
            self.hold(for: wait, envelope)
        case .close, .closeQuietly:
            self.perform(action)
        case .refuse(let requestID, let code, let message, let id, let retryAfter):
            self.server.metrics.refusals.increment()
            self.requests.logger.debug("refused", metadata: ["code": "\(code)", "reason": "\(message)"])
            self.emit(
                self.requests.errorEnvelope(requestID, code: code, message: message, id: id, retryAfter: retryAfter)
            )
        case .authenticate(let hello, let requestID):
            // From here the connection is not closed for room; if it was already, its place is another's.
            guard let ticket = self.work?.ticket, self.server.spoke(ticket) else {
                self.close(code: ErrorCodes.serverFull, message: Self.closedForRoom)
                return
            }
            self.run { requests, work, writer in
                try await requests.authenticate(hello, requestID: requestID, session: work, writer: writer)
            }
        case .request(let request, let requestID):
            guard let session = self.machine.session else {
                // Not reachable: the machine asks for requests of an active session only.
                self.closeQuietly(reason: "a request without a session")
                return
            }
            let handle = self.delivery?.handle
            self.run { requests, work, writer in
                try await requests.handle(
                    request,
                    requestID: requestID,
                    session: session,
                    handle: handle,
                    work: work,
                    writer: writer
                )
            }
        case .write(let request, let requestID, let answers):
            for write in self.machine.admit(request) {
                if write.isRequest {
                    self.enqueue(write.request, requestID: requestID, answers: answers, isRequest: true)
                } else {
                    self.enqueue(write.request, requestID: 0, answers: false, isRequest: false)
                }
            }
        }
    }

    /// Carries out a close the machine decided on (it decides each close once).
    func perform(_ action: SessionStateMachine.Action) {
        switch action {
        case .close(let code, let message):
            self.requests.logger.info("closing", metadata: ["code": "\(code)"])
            self.writeClosing(self.transport.closingFrames(code: code, message: message))
        case .closeQuietly(let code?, let reason):
            self.requests.logger.notice("closing: \(reason)", metadata: ["code": "\(code)"])
            self.context?.flush()
            self.context?.close(promise: nil)
        case .closeQuietly(nil, let reason):
            self.requests.logger.info("closing quietly", metadata: ["reason": "\(reason)"])
            // What was written before goes out first, as far as the socket takes it now.
            self.context?.flush()
            self.context?.close(promise: nil)
        case .none, .authenticate, .write, .request, .pause, .refuse:
            break
        }
    }

    /// Sends the closing frames and closes, unless the session has closed already.
    func close(code: String, message: String) {
        self.perform(self.machine.close(code: code, message: message))
    }

    /// Closes without a word (the client left, or a stream failed), unless the session has closed already.
    func closeQuietly(reason: String) {
        self.perform(self.machine.closeQuietly(reason: reason))
    }
}

@available(*, unavailable)
extension SessionHandler: Sendable {}

/// Sent down a session's pipeline when the server stops.
struct SessionShutdown: Sendable {}

/// Tells a session that has sent nothing yet that its place was given to a newer connection on a full server.
struct SessionClosedForRoom: Sendable {}

extension SessionHandler {
    static var closedForRoom: String {
        "the server is full and made room for a newer connection; this one had sent nothing (send hello at once)"
    }
}

extension ClientEnvelope {
    /// Whether the request writes to every member's log (a send, an edit, a reaction): what the fan-out budget paces.
    var fansOut: Bool {
        switch self.body {
        case .send?, .edit?, .react?: true
        default: false
        }
    }
}
