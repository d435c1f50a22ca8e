import CourierProtocol
import CourierStore
import CourierWire
import Logging
import NIOCore

/// One connection's session, in its channel pipeline: frames in, through the ``SessionStateMachine``, actions out.
///
/// Everything here runs on the channel's event loop, and an idle connection is only this object's fields: no task
/// waits for it. Async work exists while there is work (a login, a history read, a page of events read back from the
/// store, a media stream); it runs as tasks of ``SessionShared`` and hands its result back to the loop. Requests are
/// taken in order: a request that needs async work holds the ones after it (reading stops while they wait), except
/// writes, which go to the group commit at once and are answered in order as their outcomes come back. Deadlines
/// (authentication, idle, token expiry, a client that stopped reading) come from the loop's ``LoopDeadlines``.
/// Everything written in one turn of the loop goes out with one flush.
final class SessionHandler<Transport: SessionTransport>: ChannelDuplexHandler {
    typealias InboundIn = Transport.Inbound
    typealias OutboundIn = Transport.Outbound
    typealias OutboundOut = Transport.Outbound

    /// What async work hands back to the loop when it ends.
    enum StepEnd: Sendable {
        /// Go on with the next request.
        case goOn
        /// Read nothing more (the connection is closing).
        case stop
        /// Logged in: start delivering.
        case authenticated(handle: ConnectionHandle, user: User, start: UInt64, latest: UInt64, ackedOnWrite: Bool)
        /// A request that came of the step (a compat media packet's send, once its bytes are stored).
        case submit(ClientEnvelope)
    }

    // The state below is the loop's: read and changed only on the channel's event loop. The extensions (output,
    // delivery, deadlines) in the files beside this one share it.

    let requests: SessionRequests<Transport>
    var transport: Transport { self.requests.transport }
    var server: SessionContext { self.requests.context }

    /// Set from `handlerAdded` to `handlerRemoved` (then dropped: the context holds this handler).
    var context: ChannelHandlerContext!
    var eventLoop: (any EventLoop)!
    var shared: SessionShared!
    private var admitted = false
    /// This connection's mark in the group commit: after a write of it fails, its later ones fail too (see
    /// ``CommitQueue/enqueue(_:origin:)``), so none overtakes the failed one; the connection then closes.
    private var origin = 0
    var closed = false

    // Reading.
    private var inbox = SessionQueue<Transport.Inbound>()
    /// A request's async work runs: the requests after it wait.
    private var stepping = false
    /// A send waits for its rate or fan-out budget.
    private var holding = false
    /// No more requests are taken (goodbye, closing).
    var stopped = false
    private var readWithheld = false

    // Writes in the group commit, answered in order.
    private var writes = SessionWrites()
    /// Close once the writes in flight are answered: with this error, or quietly (`code` nil).
    private var closeAfterWrites: (code: String?, message: String)?

    // Writing (``SessionHandler+Output``).
    var inReadBurst = false
    var flushPending = false
    var flushScheduled = false
    /// A compat media packet is being streamed from the blob store: other writes wait behind it.
    var streamingMedia = false
    var deferred = SessionQueue<([TransportOutput<Transport.Outbound>], EventLoopPromise<Void>?)>()
    /// Async work waiting for the client to read before it writes more (see ``SessionWriter``).
    var writableWaiters: [EventLoopPromise<Void>] = []

    // Delivering (``SessionHandler+Delivery``).
    var delivery: SessionDelivery?

    // Deadlines (``SessionHandler+Deadlines``).
    var deadlines: LoopDeadlines?
    var deadlineKey = 0
    var armedAt: ContinuousClock.Instant?
    var unwritableSince: ContinuousClock.Instant?

    init(requests: SessionRequests<Transport>) {
        self.requests = requests
    }

    var bound: NIOLoopBound<SessionHandler> {
        NIOLoopBound(self, eventLoop: self.eventLoop)
    }

    /// How async work writes to this connection.
    var writer: SessionWriter<Transport> {
        SessionWriter(eventLoop: self.eventLoop, handler: self.bound)
    }

    // MARK: Lifecycle

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        self.eventLoop = context.eventLoop
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.closed = true
        self.stopped = true
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        if let refusal = self.server.admit(address: self.requests.addressKey) {
            let message =
                switch refusal {
                case .serverFull: "the server is at its connection limit"
                case .addressFull: "too many connections from this address are not logged in"
                }
            self.requests.logger.notice("refused a connection", metadata: ["reason": "\(message)"])
            self.closed = true
            self.stopped = true
            self.writeClosing(self.transport.closingFrames(code: ErrorCodes.serverFull, message: message))
            return
        }
        guard self.server.sessionOpened(context.channel) else {
            // The server is stopping: a connection accepted as it did is not served.
            self.server.release(address: self.requests.addressKey, authenticated: false)
            self.closed = true
            self.stopped = true
            context.close(promise: nil)
            return
        }
        self.admitted = true
        self.origin = self.server.commits.newOrigin()
        self.shared = SessionShared(
            machine: SessionStateMachine(
                configuration: .init(
                    self.server.configuration.limits,
                    media: self.server.configuration.media,
                    store: self.server.store.limits
                ),
                now: .now
            ),
            media: self.server.media.configuration
        )
        let deadlines = self.server.deadlines.forLoop(context.eventLoop)
        self.deadlines = deadlines
        self.deadlineKey = deadlines.register { [unowned self] now in self.deadlineFired(now) }
        self.armDeadline()
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.closed = true
        self.stopped = true
        for (_, promise) in self.deferred.removeAll() { promise?.fail(ChannelError.ioOnClosedChannel) }
        for waiter in self.writableWaiters { waiter.fail(ChannelError.ioOnClosedChannel) }
        self.writableWaiters = []
        guard self.admitted else { return }
        // An acknowledgement waiting to be merged goes to the group commit now, before the connection's end is
        // accounted for (a server stopping finishes its commit queue after that).
        if let merged = self.writes.takeMergedAck() {
            self.enqueue(merged, requestID: 0, answers: false, isRequest: false)
        }
        // The hub's handle must not keep this handler (nor this handler it) once the connection is gone.
        self.delivery?.handle.clearWaker()
        self.delivery = nil
        self.deadlines?.unregister(self.deadlineKey)
        self.deadlines = nil
        // The socket is closed: its slot is free once the work in flight has ended. Then the bookkeeping (uploads,
        // last seen, presence), however it ended.
        let shared = self.shared!
        let requests = self.requests
        let channel = context.channel
        let origin = self.origin
        shared.ended {
            // Every write of the connection has come back: its mark is done with.
            requests.context.commits.forget(origin: origin)
            Task {
                await requests.connectionEnded(shared)
                requests.context.sessionClosed(channel)
            }
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // Bytes that break the framing: say which error where the transport can, then close. A peer that left
        // (inside a frame, or resetting the connection) is not an error worth more than a debug line.
        let wire = error as? CourierWireError
        if let wire, wire.code != .truncated {
            self.requests.logger.info("closing: framing error", metadata: ["error": "\(error)"])
        } else {
            self.requests.logger.debug(
                wire == nil ? "the connection failed" : "the client left inside a frame",
                metadata: ["error": "\(error)"]
            )
        }
        guard !self.closed else { return }
        self.shared?.withMachine { $0.close() }
        self.stopped = true
        self.closed = true
        self.writeClosing(wire == nil ? [] : self.transport.closingFrames(framingError: error))
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        guard event is SessionShutdown else {
            context.triggerUserOutboundEvent(event, promise: promise)
            return
        }
        promise?.succeed()
        // An authenticated session is told by the hub (after its writes are answered); one that is not yet goes now.
        if self.admitted, !self.closed, self.shared.handle == nil {
            self.close(code: ErrorCodes.shuttingDown, message: "the server is stopping; reconnect later")
        }
    }

    // MARK: Reading

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.inReadBurst = true
        guard self.admitted, !self.stopped else { return }
        // Something arrived: the client is not idle, even while its request waits in the inbox.
        self.shared.withMachine { $0.receivedBytes(now: .now) }
        self.inbox.append(self.unwrapInboundIn(data))
        self.drain()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        self.inReadBurst = false
        if self.flushPending {
            self.flushPending = false
            context.flush()
        }
    }

    func read(context: ChannelHandlerContext) {
        if self.mayRead {
            context.read()
        } else {
            self.readWithheld = true
        }
    }

    /// Whether to read more from the socket: not while requests wait, nor while the client leaves what it was sent
    /// unread (see ``mayTakeRequests``).
    private var mayRead: Bool {
        !self.stopped && self.inbox.isEmpty && self.mayTakeRequests
    }

    /// Whether the client's requests may be taken: not while a compat media packet streams, nor while more than
    /// four times the write buffer's high-water mark waits unread (its requests would only add answers it does not
    /// take). Deliveries stop at the high-water mark itself (``canWrite``); requests go on past it, so that a busy
    /// recipient's own sends and acknowledgements are not held up behind what it receives.
    private var mayTakeRequests: Bool {
        guard let context = self.context, !self.streamingMedia else { return false }
        if context.channel.isWritable { return true }
        let buffered = (try? context.channel.syncOptions?.getOption(.bufferedWritableBytes)) ?? .max
        let (bound, overflow) = self.server.configuration.limits.outboundBufferBytes.multipliedReportingOverflow(by: 4)
        return buffered < (overflow ? .max : bound)
    }

    private func resumeReading() {
        guard self.readWithheld, self.mayRead else { return }
        self.readWithheld = false
        self.context.read()
    }

    /// Takes requests from the inbox while none waits.
    func drain() {
        while !self.stepping, !self.holding, !self.stopped, !self.inbox.isEmpty, self.mayTakeRequests {
            // As many writes in flight as a connection may have: the next request waits for an answer.
            guard self.shared.withMachine({ $0.mayReadMore }) else { break }
            guard let frame = self.inbox.popFirst() else { break }
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
            self.stopped = true
            self.closeWhenAnswered(code: nil, message: "")
        case .violation(let code, let message):
            self.requests.logger.info(
                "closing: protocol violation",
                metadata: ["code": "\(code)", "reason": "\(message)"]
            )
            self.close(code: code, message: message)
        case .streamWindow(let streamID, let increment):
            self.shared.streams.grant(streamID, increment: increment)
        case .streamChunk(let streamID, let bytes, let end):
            self.step { requests, shared, writer in
                try await requests.receive(bytes, on: streamID, end: end, session: shared, writer: writer)
                return .goOn
            }
        case .streamReset(let streamID):
            self.step { requests, shared, _ in
                if let upload = shared.streams.close(streamID) { await requests.context.media.release(upload.upload) }
                return .goOn
            }
        case .inlineMedia(let envelope, let size):
            self.step { requests, shared, writer in
                try await requests.beginInline(envelope, size: size, session: shared, writer: writer)
            }
        case .inlineBytes(let bytes, let isLast):
            self.step { requests, shared, writer in
                try await requests.receiveInline(bytes, isLast: isLast, session: shared, writer: writer)
            }
        case .inlineAbandoned(let code, let message):
            self.step { requests, shared, writer in
                try await requests.abandonInline(code: code, message: message, session: shared, writer: writer)
            }
        }
    }

    /// Runs a request through the state machine and carries out what it says.
    private func submit(_ envelope: ClientEnvelope) {
        // Over the user's fan-out budget (all its connections together): hold its next send, taking nothing more,
        // until the budget has paid for what was sent. The hold is the server's doing, not the client's silence:
        // it does not count towards the idle timeout.
        if case .send? = envelope.body, let user = self.shared.withMachine({ $0.session?.user.id }),
            let wait = self.server.fanoutWait(of: user)
        {
            self.hold(for: min(wait, .seconds(1)), envelope)
            return
        }
        let action = self.shared.withMachine { $0.received(envelope, now: .now) }
        switch action {
        case .none:
            break
        case .pause(let wait):
            // Over the send rate: held (and nothing more taken) until the rate allows it.
            self.hold(for: wait, envelope)
        case .close(let code, let message):
            self.requests.logger.info("closing", metadata: ["code": "\(code)"])
            self.close(code: code, message: message)
        case .refuse(let requestID, let code, let message, let id, let retryAfter):
            self.server.metrics.refusals.increment()
            self.requests.logger.debug("refused", metadata: ["code": "\(code)", "reason": "\(message)"])
            self.emit(
                self.requests.errorEnvelope(requestID, code: code, message: message, id: id, retryAfter: retryAfter)
            )
        case .authenticate(let hello, let requestID):
            self.step { requests, shared, writer in
                try await requests.authenticate(hello, requestID: requestID, session: shared, writer: writer)
            }
        case .request(let request, let requestID):
            self.step { requests, shared, writer in
                try await requests.handle(request, requestID: requestID, session: shared, writer: writer)
            }
        case .write(let request, let requestID, let answers):
            let admitted = self.writes.admit(request)
            // An acknowledgement merged into the next is not a write of its own.
            if admitted.isEmpty { self.shared.withMachine { $0.writeFinished() } }
            for write in admitted {
                if write.isRequest {
                    self.enqueue(write.request, requestID: requestID, answers: answers, isRequest: true)
                } else {
                    self.enqueue(write.request, requestID: 0, answers: false, isRequest: false)
                }
            }
        }
    }

    private func hold(for wait: Duration, _ envelope: ClientEnvelope) {
        self.holding = true
        let bound = self.bound
        self.eventLoop.scheduleTask(in: TimeAmount(wait)) {
            let handler = bound.value
            handler.holding = false
            guard !handler.closed else { return }
            handler.shared.withMachine { $0.receivedBytes(now: .now) }
            handler.submit(envelope)
            handler.drain()
        }
    }

    /// Runs a request's async work; the requests after it wait for its end.
    private func step(
        _ work:
            @escaping @Sendable (SessionRequests<Transport>, SessionShared, SessionWriter<Transport>) async throws ->
            StepEnd
    ) {
        self.stepping = true
        let (requests, shared, writer, bound, loop) = (
            self.requests, self.shared!, self.writer, self.bound, self.eventLoop!
        )
        shared.spawn {
            let end: StepEnd
            do {
                end = try await work(requests, shared, writer)
            } catch {
                // A write failed: the connection is gone, or going.
                requests.logger.debug("connection ended", metadata: ["error": "\(error)"])
                writer.closeChannel()
                end = .stop
            }
            loop.execute { bound.value.stepEnded(end) }
        }
    }

    private func stepEnded(_ end: StepEnd) {
        self.stepping = false
        guard !self.closed else { return }
        switch end {
        case .goOn:
            break
        case .stop:
            self.stopped = true
        case .authenticated(let handle, let user, let start, let latest, let ackedOnWrite):
            self.startDelivery(handle: handle, user: user, start: start, latest: latest, ackedOnWrite: ackedOnWrite)
        case .submit(let envelope):
            self.submit(envelope)
        }
        self.armDeadline()
        self.drain()
    }

    // MARK: Writes to the group commit

    private func enqueue(_ request: WriteRequest, requestID: UInt64, answers: Bool, isRequest: Bool) {
        var request = request
        var reserved = 0
        if case .send(var send) = request {
            self.server.metrics.messagesIn.increment()
            // The id is settled here, not in the store, so that this connection's delivery can tell the message's
            // event apart from its other connections' (it has the acknowledgement; they do not).
            if send.id.isEmpty {
                send.id = WriteRequest.Send.assignedID()
                request = .send(send)
            }
            self.shared.handle?.willSend(id: send.id)
            // A send reserves what it is expected to cost from its sender's fan-out budget now, before its commit:
            // sends in flight count at once, so a flood is held after the budget's worth, not after
            // `maxUnackedSends` of them per connection. The commit settles the difference.
            reserved = self.server.fanoutEstimate(of: send.sender, to: send.to)
            self.server.chargeFanout(of: send.sender, deliveries: reserved)
        }
        let serial = self.writes.append(
            request,
            requestID: requestID,
            answers: answers,
            reservedFanout: reserved,
            isRequest: isRequest
        )
        let (shared, bound, loop) = (self.shared!, self.bound, self.eventLoop!)
        self.server.commits.enqueue(request, origin: self.origin).whenComplete { result in
            // Outcomes of one batch come together: one turn of the loop answers them all.
            if shared.completed(serial, result) {
                loop.execute { bound.value.writesCompleted() }
            }
        }
    }

    /// Answers the writes whose outcomes came back, in the order the requests came.
    private func writesCompleted() {
        self.writes.record(self.shared.takeCompleted())
        var notStored = false
        while let (write, result, next) = self.writes.popAnswered() {
            // Settled even when the connection has closed: the fan-out budget and the own-send list.
            let reply = self.requests.answer(write, result: result, handle: self.shared.handle)
            if write.isRequest { self.shared.withMachine { $0.writeFinished() } }
            if write.answers, let reply, !self.closed { self.emit(reply) }
            if case .failure(let error as CourierStoreError) = result, error.code == .storageFailed { notStored = true }
            // The acknowledgements that came meanwhile, as one.
            if let next { self.enqueue(next, requestID: 0, answers: false, isRequest: false) }
        }
        // The database failed a write: every later write of this connection fails too (none may overtake it), so
        // the connection ends once they are answered, and the client sends again, in order, what was not
        // acknowledged.
        if notStored, !self.closed, self.closeAfterWrites == nil {
            self.closeAfterWrites = (
                ErrorCodes.storageFailed,
                "the server could not store a write: connect again and send what was not acknowledged"
            )
        }
        if self.writes.isEmpty, let (code, message) = self.closeAfterWrites {
            self.closeAfterWrites = nil
            if let code { self.close(code: code, message: message) } else { self.closeQuietly() }
            return
        }
        self.drain()
    }

    /// Closes once the writes in flight are answered.
    func closeWhenAnswered(code: String?, message: String) {
        guard self.writes.isEmpty else {
            self.closeAfterWrites = (code, message)
            return
        }
        if let code { self.close(code: code, message: message) } else { self.closeQuietly() }
    }
}

@available(*, unavailable)
extension SessionHandler: Sendable {}

/// Sent down a session's pipeline when the server stops.
struct SessionShutdown: Sendable {}
