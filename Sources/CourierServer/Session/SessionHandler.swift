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

    /// A write sent to the group commit, waiting for its outcome.
    struct PendingWrite {
        var serial: UInt64
        var request: WriteRequest
        var requestID: UInt64
        var answers: Bool
        /// The deliveries reserved from the sender's fan-out budget (0 for other writes).
        var reservedFanout: Int
        /// Whether the state machine counts it in flight (a merged acknowledgement is not a request of its own).
        var counted = true
        var result: Result<WriteOutcome, any Error>?
    }

    /// Where the connection's delivery of events stands, once authenticated.
    struct Delivery {
        var handle: ConnectionHandle
        var user: User
        /// The cursor of the last event sent.
        var sent: UInt64
        /// The user's latest cursor at login: the client is told when the delivery reaches it.
        var latest: UInt64
        var caughtUp: Bool
        var ackedOnWrite: Bool
        /// A page is being read back from the store.
        var reading = false
        /// With `ackedOnWrite`: an acknowledgement is in the group commit, and the cursor of the next, if a page
        /// was written meanwhile (one in flight per connection; the latest cursor is all the next needs).
        var ackInFlight = false
        var ackWaiting: UInt64?
    }

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

    let requests: SessionRequests<Transport>
    private var transport: Transport { self.requests.transport }
    private var server: SessionContext { self.requests.context }

    /// Set from `handlerAdded` to `handlerRemoved` (then dropped: the context holds this handler).
    private var context: ChannelHandlerContext!
    private var eventLoop: (any EventLoop)!
    private var shared: SessionShared!
    private var admitted = false
    private var closed = false

    // Reading.
    private var inbox = SessionQueue<Transport.Inbound>()
    /// A request's async work runs: the requests after it wait.
    private var stepping = false
    /// A send waits for its rate or fan-out budget.
    private var holding = false
    /// No more requests are taken (goodbye, closing).
    private var stopped = false
    private var readWithheld = false

    // Writing.
    private var writes = SessionQueue<PendingWrite>()
    private var nextSerial: UInt64 = 0
    private var inReadBurst = false
    private var flushPending = false
    private var flushScheduled = false
    /// A compat media packet is being streamed from the blob store: other writes wait behind it.
    private var streamingMedia = false
    private var deferred = SessionQueue<([TransportOutput<Transport.Outbound>], EventLoopPromise<Void>?)>()
    /// Async work waiting for the client to read before it writes more (see ``SessionWriter``).
    private var writableWaiters: [EventLoopPromise<Void>] = []
    /// An acknowledgement of this connection is in the group commit; `mergedAck` is the latest that came meanwhile
    /// (acknowledgements are cumulative: one per commit batch and connection says all, and makes one set of
    /// delivery receipts instead of one per acknowledgement).
    private var ackInCommit = false
    private var mergedAck: WriteRequest?
    /// Close once the writes in flight are answered: with this error, or quietly (`code` nil).
    private var closeAfterWrites: (code: String?, message: String)?

    // Delivering.
    private var delivery: Delivery?

    // Deadlines.
    private var deadlines: LoopDeadlines?
    private var deadlineKey = 0
    private var armedAt: ContinuousClock.Instant?
    private var unwritableSince: ContinuousClock.Instant?

    init(requests: SessionRequests<Transport>) {
        self.requests = requests
    }

    private var bound: NIOLoopBound<SessionHandler> {
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
        if let merged = self.mergedAck {
            self.mergedAck = nil
            self.enqueue(merged, requestID: 0, answers: false, counted: false)
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
        shared.ended {
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

    /// Whether more may be written now: the client takes what was written (the channel's buffer is under its
    /// high-water mark), and no compat media packet is being streamed (what waits behind it is not piled up).
    private var canWrite: Bool {
        guard let context = self.context else { return false }
        return !self.streamingMedia && context.channel.isWritable
    }

    private func resumeReading() {
        guard self.readWithheld, self.mayRead else { return }
        self.readWithheld = false
        self.context.read()
    }

    /// Takes requests from the inbox while none waits.
    private func drain() {
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
            if case .ack = request {
            } else if let merged = self.mergedAck {
                // Another write: a waiting acknowledgement goes first, so receipts keep their order (delivered up to a
                // message before read up to it).
                self.mergedAck = nil
                self.enqueue(merged, requestID: 0, answers: false, counted: false)
            }
            if case .ack(_, _, let cursor) = request {
                guard !self.ackInCommit else {
                    if case .ack(_, _, let merged)? = self.mergedAck, merged >= cursor {
                    } else {
                        self.mergedAck = request
                    }
                    // Merged into the next: not a write of its own.
                    self.shared.withMachine { $0.writeFinished() }
                    return
                }
                self.ackInCommit = true
            }
            self.enqueue(request, requestID: requestID, answers: answers)
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

    private func enqueue(_ request: WriteRequest, requestID: UInt64, answers: Bool, counted: Bool = true) {
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
        let serial = self.nextSerial
        self.nextSerial += 1
        self.writes.append(
            PendingWrite(
                serial: serial,
                request: request,
                requestID: requestID,
                answers: answers,
                reservedFanout: reserved,
                counted: counted
            )
        )
        let (shared, bound, loop) = (self.shared!, self.bound, self.eventLoop!)
        self.server.commits.enqueue(request).whenComplete { result in
            // Outcomes of one batch come together: one turn of the loop answers them all.
            if shared.completed(serial, result) {
                loop.execute { bound.value.writesCompleted() }
            }
        }
    }

    /// Answers the writes whose outcomes came back, in the order the requests came.
    private func writesCompleted() {
        for (serial, result) in self.shared.takeCompleted() {
            guard let first = self.writes.first else { break }
            self.writes[Int(serial - first.serial)].result = result
        }
        while let first = self.writes.first, let result = first.result {
            _ = self.writes.popFirst()
            // Settled even when the connection has closed: the fan-out budget and the own-send list.
            let reply = self.requests.answer(first, result: result, handle: self.shared.handle)
            if first.counted { self.shared.withMachine { $0.writeFinished() } }
            if first.answers, let reply, !self.closed { self.emit(reply) }
            if case .ack = first.request {
                self.ackInCommit = false
                // The acknowledgements that came meanwhile, as one (also after the close: nothing acknowledged is
                // forgotten).
                if let merged = self.mergedAck {
                    self.mergedAck = nil
                    self.ackInCommit = true
                    self.enqueue(merged, requestID: 0, answers: false, counted: false)
                }
            }
        }
        if self.writes.isEmpty, let (code, message) = self.closeAfterWrites {
            self.closeAfterWrites = nil
            if let code { self.close(code: code, message: message) } else { self.closeQuietly() }
            return
        }
        self.drain()
    }

    // MARK: Delivery

    private func startDelivery(handle: ConnectionHandle, user: User, start: UInt64, latest: UInt64, ackedOnWrite: Bool)
    {
        var delivery = Delivery(
            handle: handle,
            user: user,
            sent: start,
            latest: latest,
            caughtUp: false,
            ackedOnWrite: ackedOnWrite
        )
        handle.delivered(upTo: start)
        if !handle.wantsEvents {
            // Asked for no events: only notices and the end come.
        } else if latest <= start {
            var envelope = ServerEnvelope()
            envelope.events.caughtUp = true
            self.emit(envelope)
            delivery.caughtUp = true
        } else {
            handle.notify(cursor: latest)
        }
        self.delivery = delivery
        let (bound, loop) = (self.bound, self.eventLoop!)
        handle.setWaker { loop.execute { bound.value.pump() } }
    }

    /// Sends what the hub woke the connection for, while the client takes it: termination first, then notices,
    /// then events (handed over at commit when this connection kept up, else read back from the store a page at a
    /// time).
    private func pump() {
        guard var delivery = self.delivery, !delivery.reading, !self.closed else { return }
        defer { if !self.closed { self.delivery = delivery } }
        let pageSize = self.server.configuration.limits.eventsPerPage
        while self.canWrite, let wake = delivery.handle.take() {
            switch wake {
            case .terminate(let code, let message):
                self.stopped = true
                self.closeWhenAnswered(code: code, message: message)
                return
            case .notices(let notices):
                self.emit(notices)
            case .events(let upTo):
                while delivery.sent < upTo, self.canWrite {
                    let events = delivery.handle.takeHanded(after: delivery.sent, limit: pageSize)
                    guard !events.isEmpty else {
                        delivery.reading = true
                        self.readPage(after: delivery.sent, upTo: upTo, user: delivery.user.id, limit: pageSize)
                        return
                    }
                    self.server.metrics.eventsHanded.increment(by: events.count)
                    self.send(events, delivery: &delivery)
                }
                if delivery.sent >= upTo { delivery.handle.delivered(upTo: upTo) }
            }
        }
    }

    private func readPage(after cursor: UInt64, upTo: UInt64, user: UserID, limit: Int) {
        let (store, logger, bound, loop) = (self.server.store, self.requests.logger, self.bound, self.eventLoop!)
        self.shared.spawn {
            let result: Result<[StoredEvent], any Error>
            do {
                result = .success(try await store.events(for: user, after: cursor, limit: limit))
            } catch {
                logger.debug("delivery ended", metadata: ["error": "\(error)"])
                result = .failure(error)
            }
            loop.execute { bound.value.pageRead(result, upTo: upTo) }
        }
    }

    private func pageRead(_ result: Result<[StoredEvent], any Error>, upTo: UInt64) {
        guard !self.closed, var delivery = self.delivery else { return }
        delivery.reading = false
        switch result {
        case .success(let events) where events.isEmpty:
            delivery.handle.delivered(upTo: upTo)
        case .success(let events):
            self.send(events, delivery: &delivery)
        case .failure:
            self.closeQuietly()
            return
        }
        self.delivery = delivery
        self.pump()
    }

    /// Writes a page of events.
    private func send(_ events: [StoredEvent], delivery: inout Delivery) {
        guard let last = events.last else { return }
        let reachesLatest = !delivery.caughtUp && last.cursor >= delivery.latest
        if reachesLatest { delivery.caughtUp = true }
        for envelope in self.requests.envelopes(for: events, handle: delivery.handle, caughtUp: reachesLatest) {
            self.emit(envelope)
        }
        self.server.metrics.eventsOut.increment(by: events.count)
        delivery.sent = last.cursor
        delivery.handle.delivered(upTo: last.cursor)
        if delivery.ackedOnWrite {
            if delivery.ackInFlight {
                delivery.ackWaiting = last.cursor
            } else {
                delivery.ackInFlight = true
                self.acknowledge(last.cursor, delivery: delivery)
            }
        }
    }

    /// Acknowledges delivered events for a connection that asked for `ackedOnWrite`: it rides the group commit
    /// with everything else, one at a time per connection.
    private func acknowledge(_ cursor: UInt64, delivery: Delivery) {
        let (bound, loop) = (self.bound, self.eventLoop!)
        self.server.commits.enqueue(.ack(user: delivery.user.id, device: delivery.handle.device, cursor: cursor))
            .whenComplete { _ in loop.execute { bound.value.acknowledged() } }
    }

    private func acknowledged() {
        guard var delivery = self.delivery else { return }
        if let next = delivery.ackWaiting {
            delivery.ackWaiting = nil
            self.acknowledge(next, delivery: delivery)
        } else {
            delivery.ackInFlight = false
        }
        self.delivery = delivery
    }

    // MARK: Writing

    /// Writes an envelope.
    func emit(_ envelope: ServerEnvelope, promise: EventLoopPromise<Void>? = nil) {
        do {
            self.emit(try self.transport.frames(for: envelope), promise: promise)
        } catch {
            promise?.fail(error)
        }
    }

    /// Writes several envelopes (gathered notices).
    func emit(_ envelopes: [ServerEnvelope], promise: EventLoopPromise<Void>? = nil) {
        do {
            self.emit(try envelopes.flatMap { try self.transport.frames(for: $0) }, promise: promise)
        } catch {
            promise?.fail(error)
        }
    }

    /// Writes a transport's outputs in order; `promise` completes once they are written and the client is taking
    /// what it is sent (as `NIOAsyncChannel`'s writer does: not when the bytes reach the socket, which a client that
    /// stopped reading would never let happen). Media the compat port sends inline is streamed from the blob store,
    /// and whatever is written meanwhile waits behind it.
    func emit(_ outputs: [TransportOutput<Transport.Outbound>], promise: EventLoopPromise<Void>?) {
        guard !self.closed else {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        guard !self.streamingMedia else {
            self.deferred.append((outputs, promise))
            return
        }
        for (index, output) in outputs.enumerated() {
            switch output {
            case .frame(let frame):
                self.write(frame, promise: nil)
            case .media(let sha256, let size, let wrap, let end):
                // The rest of this envelope goes right after the media, before anything else.
                self.deferred.prepend((Array(outputs[(index + 1)...]), promise))
                self.streamingMedia = true
                self.streamMedia(sha256, size: size, wrap: wrap, end: end)
                return
            }
        }
        if let promise { self.whenWritable(promise) }
    }

    /// Completes `promise` now if the client takes what is written, else once it does (or fails it at the close).
    private func whenWritable(_ promise: EventLoopPromise<Void>) {
        if let context = self.context, context.channel.isWritable {
            promise.succeed()
        } else if self.closed {
            promise.fail(ChannelError.ioOnClosedChannel)
        } else {
            self.writableWaiters.append(promise)
        }
    }

    private func streamMedia(
        _ sha256: String,
        size: Int64,
        wrap: @escaping @Sendable (ByteBuffer) -> Transport.Outbound,
        end: Transport.Outbound
    ) {
        let (media, writer, bound, loop) = (self.server.media, self.writer, self.bound, self.eventLoop!)
        self.shared.spawn {
            do {
                try await media.read(sha256, range: 0..<size) { bytes in try await writer.writeDirect(wrap(bytes)) }
                try await writer.writeDirect(end)
            } catch {
                // Part of a packet may be out: nothing else may follow it on this connection.
                writer.closeChannel()
            }
            loop.execute { bound.value.mediaStreamed() }
        }
    }

    private func mediaStreamed() {
        self.streamingMedia = false
        while !self.streamingMedia, let (outputs, promise) = self.deferred.popFirst() {
            self.emit(outputs, promise: promise)
        }
        // What waited for the packet: the delivery, and reading.
        self.pump()
        self.drain()
    }

    /// Writes a frame; the flush comes at the end of the read burst, or of this turn of the loop. Only ``emit(_:promise:)``
    /// and the media stream it starts call this: everything else goes through `emit`, which keeps a compat media
    /// packet whole.
    func write(_ frame: Transport.Outbound, promise: EventLoopPromise<Void>?) {
        guard !self.closed, let context = self.context else {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        context.write(self.wrapOutboundOut(frame), promise: nil)
        if let promise { self.whenWritable(promise) }
        if self.inReadBurst {
            self.flushPending = true
        } else if !self.flushScheduled {
            self.flushScheduled = true
            let bound = self.bound
            self.eventLoop.execute {
                let handler = bound.value
                handler.flushScheduled = false
                handler.context?.flush()
            }
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            self.unwritableSince = nil
            let waiters = self.writableWaiters
            self.writableWaiters = []
            for waiter in waiters { waiter.succeed() }
            self.pump()
            self.drain()
        } else {
            self.unwritableSince = .now
            self.armDeadline()
        }
        context.fireChannelWritabilityChanged()
    }

    // MARK: Closing

    /// Sends the closing frames and closes.
    func close(code: String, message: String) {
        guard !self.closed else { return }
        self.shared?.withMachine { $0.close() }
        self.stopped = true
        self.closed = true
        self.writeClosing(self.transport.closingFrames(code: code, message: message))
    }

    /// Closes without a word (the client left, or stopped reading).
    func closeQuietly() {
        guard !self.closed else { return }
        self.shared?.withMachine { $0.close() }
        self.stopped = true
        self.closed = true
        // What was written before goes out first, as far as the socket takes it now.
        self.context?.flush()
        self.context?.close(promise: nil)
    }

    /// Closes once the writes in flight are answered.
    private func closeWhenAnswered(code: String?, message: String) {
        guard self.writes.isEmpty else {
            self.closeAfterWrites = (code, message)
            return
        }
        if let code { self.close(code: code, message: message) } else { self.closeQuietly() }
    }

    /// Writes the last frames (whatever was written before goes first) and closes once they are out, or after
    /// `slowConsumerTimeout` for a client that does not read them.
    private func writeClosing(_ frames: [Transport.Outbound]) {
        guard let context = self.context else { return }
        // In the middle of a compat media packet, a frame would land inside its bytes: the connection just ends.
        guard let last = frames.last, !self.streamingMedia else {
            context.flush()
            context.close(promise: nil)
            return
        }
        for frame in frames.dropLast() { context.write(self.wrapOutboundOut(frame), promise: nil) }
        let channel = context.channel
        context.writeAndFlush(self.wrapOutboundOut(last)).whenComplete { _ in channel.close(promise: nil) }
        // A client that reads nothing more does not hold the connection open: closed after the slow-reader time.
        let timeout = self.server.configuration.limits.slowConsumerTimeout
        let hardClose = context.eventLoop.scheduleTask(in: TimeAmount(timeout)) { channel.close(promise: nil) }
        channel.closeFuture.whenComplete { _ in hardClose.cancel() }
    }

    // MARK: Deadlines

    /// The earliest instant something may have to be done: the session's deadline, or a client that stopped
    /// reading.
    private var nextDeadline: ContinuousClock.Instant? {
        let session = self.shared.withMachine { $0.nextDeadline }
        guard let unwritableSince else { return session }
        let slow = unwritableSince + self.server.configuration.limits.slowConsumerTimeout
        return session.map { min($0, slow) } ?? slow
    }

    private func armDeadline() {
        guard let deadlines = self.deadlines, let next = self.nextDeadline else { return }
        if let armedAt = self.armedAt, armedAt <= next { return }
        deadlines.arm(self.deadlineKey, at: next)
        self.armedAt = next
    }

    private func deadlineFired(_ now: ContinuousClock.Instant) {
        if let armedAt = self.armedAt, armedAt <= now { self.armedAt = nil }
        guard !self.closed else { return }
        if let unwritableSince,
            now - unwritableSince >= self.server.configuration.limits.slowConsumerTimeout
        {
            self.requests.logger.notice(
                "closing: the client stopped reading",
                metadata: ["code": "\(ErrorCodes.slowConsumer)"]
            )
            self.closeQuietly()
            return
        }
        if case .close(let code, let message) = self.shared.withMachine({ $0.tick(now: now) }) {
            self.requests.logger.info("closing", metadata: ["code": "\(code)"])
            self.close(code: code, message: message)
            return
        }
        self.armDeadline()
    }
}

@available(*, unavailable)
extension SessionHandler: Sendable {}

/// Sent down a session's pipeline when the server stops.
struct SessionShutdown: Sendable {}

/// How a connection's async work writes to it: each write hops to the channel's event loop, where the handler
/// writes it in order with everything else, and returns once it has reached the socket (so a client that does not
/// read holds the work back).
struct SessionWriter<Transport: SessionTransport>: Sendable {
    let eventLoop: any EventLoop
    let handler: NIOLoopBound<SessionHandler<Transport>>

    func write(_ envelope: ServerEnvelope) async throws {
        let promise = self.eventLoop.makePromise(of: Void.self)
        let handler = self.handler
        self.eventLoop.execute { handler.value.emit(envelope, promise: promise) }
        try await promise.futureResult.get()
    }

    func write(_ frame: Transport.Outbound) async throws {
        try await self.write([.frame(frame)])
    }

    private func write(_ outputs: [TransportOutput<Transport.Outbound>]) async throws {
        let promise = self.eventLoop.makePromise(of: Void.self)
        let handler = self.handler
        self.eventLoop.execute { handler.value.emit(outputs, promise: promise) }
        try await promise.futureResult.get()
    }

    /// Writes a frame of the media being streamed (past the queue that waits for it).
    func writeDirect(_ frame: Transport.Outbound) async throws {
        let promise = self.eventLoop.makePromise(of: Void.self)
        let handler = self.handler
        self.eventLoop.execute { handler.value.write(frame, promise: promise) }
        try await promise.futureResult.get()
    }

    /// Sends the closing frames and closes.
    func close(code: String, message: String) {
        let handler = self.handler
        self.eventLoop.execute { handler.value.close(code: code, message: message) }
    }

    /// Closes without a word.
    func closeChannel() {
        let handler = self.handler
        self.eventLoop.execute { handler.value.closeQuietly() }
    }
}
