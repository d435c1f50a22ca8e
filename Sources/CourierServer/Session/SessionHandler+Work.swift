import CourierProtocol
import CourierStore
import NIOCore

/// Async work and writes: a request's work runs as a task and hands its end back to the loop, where the machine
/// takes it; a held send is handed in again by a timer on the loop; writes go to the group commit and their outcomes
/// come back to the loop to be answered in order.
extension SessionHandler {
    typealias Work =
        @Sendable (SessionRequests<Transport>, SessionWork, SessionWriter<Transport>) async throws ->
        SessionStateMachine.WorkEnd

    /// Runs a request's async work (the machine has made the requests after it wait): its end comes back to the
    /// loop as an event for the machine. A work that throws could not write to the connection.
    func run(_ work: @escaping Work) {
        guard let sessionWork = self.work else {
            // Not reachable: requests are read only once the connection is admitted.
            self.closeQuietly(reason: "work before the connection was admitted")
            return
        }
        let (requests, writer, bound, loop) = (self.requests, self.writer, self.bound, self.eventLoop!)
        sessionWork.spawn {
            let end: SessionStateMachine.WorkEnd
            do {
                end = try await work(requests, sessionWork, writer)
            } catch {
                requests.logger.debug("connection ended", metadata: ["error": "\(error)"])
                end = .failed("a write to the connection failed")
            }
            loop.execute { bound.value.workEnded(end) }
        }
    }

    /// Runs the async work of a frame that is not an envelope (media bytes): the requests after it wait for it too.
    func start(_ work: @escaping Work) {
        self.machine.workStarted()
        self.run(work)
    }

    private func workEnded(_ end: SessionStateMachine.WorkEnd) {
        switch self.machine.workEnded(end, now: self.now, nowMs: self.server.clock.wallMs) {
        case .none:
            return
        case .takeNext:
            break
        case .deliver(_, let handle, let start, let latest, let ackedOnWrite):
            self.startDelivery(handle: handle, start: start, latest: latest, ackedOnWrite: ackedOnWrite)
        case .submit(let envelope):
            self.submit(envelope)
        case .close(let action):
            self.perform(action)
            return
        }
        self.armDeadline()
        self.drain()
    }

    /// The login's work registered the connection: the session is active from now (see
    /// ``SessionStateMachine/authenticated(_:now:nowMs:)``).
    func activate(_ session: DeviceSession) {
        guard self.machine.authenticated(session, now: self.now, nowMs: self.server.clock.wallMs) else { return }
        self.armDeadline()
    }

    /// Hands a held send in again after `wait` (on the loop's timer: nothing waits meanwhile).
    func hold(for wait: Duration, _ envelope: ClientEnvelope) {
        let bound = self.bound
        self.eventLoop.scheduleTask(in: TimeAmount(wait)) {
            let handler = bound.value
            guard !handler.machine.isClosed else { return }
            handler.machine.holdEnded(now: handler.now)
            handler.submit(envelope)
            handler.drain()
        }
    }

    // MARK: Writes to the group commit

    func enqueue(_ request: WriteRequest, requestID: UInt64, answers: Bool, isRequest: Bool) {
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
            self.delivery?.handle.willSend(id: send.id)
            // A send reserves what it is expected to cost from its sender's fan-out budget now, before its commit:
            // sends in flight count at once, so a flood is held after the budget's worth, not after
            // `maxUnackedSends` of them per connection. The commit settles the difference.
            reserved = self.server.fanoutEstimate(of: send.sender, to: send.to)
            self.server.chargeFanout(of: send.sender, deliveries: reserved)
        }
        let serial = self.machine.sent(
            request,
            requestID: requestID,
            answers: answers,
            reservedFanout: reserved,
            isRequest: isRequest
        )
        if case .ack = request { self.server.metrics.acksOfEvents.increment() }
        guard let work = self.work else { return }
        if self.server.traces != nil, case .send = request { self.traceStarts[serial] = TraceBook.now }
        let (bound, loop) = (self.bound, self.eventLoop!)
        let user = self.machine.session?.user.name
        self.server.submit(request, origin: self.origin, userName: user).whenComplete { result in
            // Outcomes of one batch come together: one turn of the loop answers them all.
            if work.completed(serial, result) {
                loop.execute { bound.value.writesCompleted() }
            }
        }
    }

    /// Answers the writes whose outcomes came back, in the order the requests came.
    private func writesCompleted() {
        guard let work = self.work else { return }
        let committed = self.server.traces == nil ? 0 : TraceBook.now
        for (write, result, next) in self.machine.writesAnswered(work.takeCompleted()) {
            // Settled even when the connection has closed: the fan-out budget and the own-send list.
            let reply = self.requests.answer(write, result: result, handle: work.handle)
            if write.answers, let reply, !self.machine.isClosed { self.emit(reply) }
            if let traces = self.server.traces, let started = self.traceStarts.removeValue(forKey: write.serial),
                case .send(let send) = write.request, case .success(.sent(let receipt)) = result, !receipt.duplicate,
                let sender = self.machine.session?.user.name
            {
                let key = TraceBook.Key(sender: sender, to: receipt.conversation, seq: receipt.seq)
                traces.sent(
                    key,
                    id: send.id,
                    sender: sender,
                    enqueued: started,
                    committed: max(started, committed),
                    ended: TraceBook.now
                )
            }
            // The acknowledgements that came meanwhile, as one.
            if let next { self.enqueue(next, requestID: 0, answers: false, isRequest: false) }
        }
        // After the merged acknowledgements went: they are writes in flight too.
        self.perform(self.machine.closeIfAnswered())
        self.drain()
    }
}
