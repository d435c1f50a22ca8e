import CourierProtocol
import CourierStore
import NIOCore

/// Where a connection's delivery of events stands, once authenticated.
struct SessionDelivery {
    var handle: ConnectionHandle
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
    private(set) var ackInFlight = false
    private(set) var ackWaiting: UInt64?

    init(handle: ConnectionHandle, start: UInt64, latest: UInt64, ackedOnWrite: Bool) {
        self.handle = handle
        self.sent = start
        self.latest = latest
        self.caughtUp = false
        self.ackedOnWrite = ackedOnWrite
    }

    /// Events up to `cursor` were written.
    ///
    /// - Returns: Whether the page reaches the latest cursor of the login (the client is told it caught up), and,
    ///   for `ackedOnWrite`, the cursor to acknowledge now (nil while one is in the group commit: the next carries
    ///   the latest).
    mutating func wrote(upTo cursor: UInt64) -> (reachesLatest: Bool, acknowledge: UInt64?) {
        let reachesLatest = !self.caughtUp && cursor >= self.latest
        if reachesLatest { self.caughtUp = true }
        self.sent = cursor
        guard self.ackedOnWrite else { return (reachesLatest, nil) }
        guard !self.ackInFlight else {
            self.ackWaiting = cursor
            return (reachesLatest, nil)
        }
        self.ackInFlight = true
        return (reachesLatest, cursor)
    }

    /// The acknowledgement in the group commit came back.
    ///
    /// - Returns: The cursor to acknowledge next, if events were written meanwhile.
    mutating func acknowledged() -> UInt64? {
        defer { self.ackWaiting = nil }
        self.ackInFlight = self.ackWaiting != nil
        return self.ackWaiting
    }
}

/// Delivery: the hub wakes the connection, and it sends what woke it while the client takes it.
extension SessionHandler {
    func startDelivery(handle: ConnectionHandle, start: UInt64, latest: UInt64, ackedOnWrite: Bool) {
        var delivery = SessionDelivery(
            handle: handle,
            start: start,
            latest: latest,
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
            handle.notify(cursor: latest, timed: false)
        }
        self.delivery = delivery
        let (bound, loop) = (self.bound, self.eventLoop!)
        handle.setWaker { loop.execute { bound.value.pump() } }
    }

    /// Sends what the hub woke the connection for, while the client takes it: termination first, then notices,
    /// then events (handed over at commit when this connection kept up, else read back from the store a page at a
    /// time).
    func pump() {
        guard var delivery = self.delivery, !delivery.reading, !self.machine.isClosed else { return }
        defer { if !self.machine.isClosed { self.delivery = delivery } }
        let pageSize = self.server.configuration.limits.eventsPerPage
        while self.canWrite, let wake = delivery.handle.take() {
            switch wake {
            case .terminate(let code, let message):
                self.perform(self.machine.closeWhenAnswered(code: code, message: message))
                return
            case .notices(let notices):
                self.emit(notices)
            case .events(let upTo):
                while delivery.sent < upTo, self.canWrite {
                    let events = delivery.handle.takeHanded(after: delivery.sent, limit: pageSize)
                    guard !events.isEmpty else {
                        delivery.reading = true
                        self.readPage(after: delivery.sent, upTo: upTo, user: delivery.handle.user, limit: pageSize)
                        return
                    }
                    self.server.metrics.eventsHanded.increment(by: events.count)
                    self.send(events, delivery: &delivery)
                }
                if delivery.sent >= upTo { self.delivered(upTo: upTo, delivery.handle) }
            }
        }
    }

    private func readPage(after cursor: UInt64, upTo: UInt64, user: UserID, limit: Int) {
        let (store, logger, bound, loop) = (self.server.store, self.requests.logger, self.bound, self.eventLoop!)
        self.work?.spawn {
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
        guard !self.machine.isClosed, var delivery = self.delivery else { return }
        delivery.reading = false
        switch result {
        case .success(let events) where events.isEmpty:
            self.delivered(upTo: upTo, delivery.handle)
        case .success(let events):
            self.send(events, delivery: &delivery)
        case .failure:
            self.closeQuietly(reason: "a page of events could not be read")
            return
        }
        self.delivery = delivery
        self.pump()
    }

    /// Each message written, for its trace: from when the connection learnt of the newest events (roughly: its
    /// oldest wait not sent yet) until now.
    private func traced(_ events: [StoredEvent], _ traces: TraceBook, _ handle: ConnectionHandle) {
        // Only what answers a live wake: a backlog read as the device logs in is no delivery of a send in flight.
        guard let viewer = self.machine.session?.user.name, let waited = handle.oldestWait else { return }
        let now = TraceBook.now
        let started = now - min(now, TraceBook.nanoseconds(waited))
        for event in events {
            guard case .message(let message) = event.kind else { continue }
            let key = TraceBook.Key(viewer: viewer, conversation: message.conversation, seq: message.seq)
            traces.delivered(key, user: viewer, device: handle.device.rawValue, started: started)
        }
    }

    /// Events up to a cursor were written: the wait of the oldest of them the connection was told of goes to
    /// ``ServerMetrics/deliveryLatency``.
    private func delivered(upTo cursor: UInt64, _ handle: ConnectionHandle) {
        if let waited = handle.delivered(upTo: cursor) { self.server.metrics.deliveryLatency.record(waited) }
    }

    /// Writes a page of events.
    private func send(_ events: [StoredEvent], delivery: inout SessionDelivery) {
        guard let last = events.last else { return }
        let (reachesLatest, acknowledge) = delivery.wrote(upTo: last.cursor)
        for page in self.requests.pages(for: events, handle: delivery.handle, caughtUp: reachesLatest) {
            // Traced as written: what a page leaves out (the connection's own sends) is not a delivery.
            if let traces = self.server.traces { self.traced(page.events, traces, delivery.handle) }
            if let encodings = self.encodings, let frame = self.encodedFrame(page.events, page.caughtUp, encodings) {
                self.emit([.frame(frame)], promise: nil)
            } else {
                self.emit(self.requests.envelope(of: page.events, caughtUp: page.caughtUp))
            }
        }
        self.server.metrics.eventsOut.increment(by: events.count)
        self.delivered(upTo: last.cursor, delivery.handle)
        if let acknowledge { self.acknowledge(acknowledge, delivery: delivery) }
    }

    /// A page's frame with its envelope encoded by hand (``EventWire``), on a transport that takes one; nil
    /// otherwise (or if an event does not serialize: the envelope's own serialization then says why).
    private func encodedFrame(
        _ events: [StoredEvent],
        _ caughtUp: Bool,
        _ encodings: EventEncodingCache
    ) -> Transport.Outbound? {
        guard self.transport.takesEncodedEnvelopes,
            let kinds = try? events.map({ (cursor: $0.cursor, kind: try encodings.kindBytes(of: $0)) })
        else { return nil }
        let allocator = self.context.channel.allocator
        return self.transport.frame(envelopeBytes: EventWire.envelope(kinds, caughtUp: caughtUp, allocator: allocator))
    }

    /// Acknowledges delivered events for a connection that asked for `ackedOnWrite`: it rides the group commit
    /// with everything else, one at a time per connection.
    private func acknowledge(_ cursor: UInt64, delivery: SessionDelivery) {
        let (bound, loop) = (self.bound, self.eventLoop!)
        self.server.commits.enqueue(.ack(user: delivery.handle.user, device: delivery.handle.device, cursor: cursor))
            .whenComplete { _ in loop.execute { bound.value.acknowledged() } }
    }

    private func acknowledged() {
        guard var delivery = self.delivery else { return }
        if let next = delivery.acknowledged() { self.acknowledge(next, delivery: delivery) }
        self.delivery = delivery
    }
}
