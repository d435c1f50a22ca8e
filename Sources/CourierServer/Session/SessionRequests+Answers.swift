import CourierProtocol
import CourierStore

/// What goes back: the answer to a write whose outcome came from the group commit, and pages of events.
extension SessionRequests {
    /// The answer to a write whose outcome came back from the group commit (nil for one that is not answered),
    /// after settling what the write had reserved: its sender's fan-out budget and the connection's own-send list.
    func answer(
        _ write: PendingWrites.Pending,
        result: Result<WriteOutcome, any Error>,
        handle: ConnectionHandle?
    ) -> ServerEnvelope? {
        let (request, requestID, reservedFanout) = (write.request, write.requestID, write.reservedFanout)
        let outcome: WriteOutcome
        switch result {
        case .success(let success):
            outcome = success
        case .failure(let error):
            if case .send(let send) = request { handle?.forgetSend(id: send.id) }
            // Nothing was delivered: the reservation is given back.
            if case .send(let send) = request, reservedFanout > 0 {
                self.context.chargeFanout(of: send.sender, deliveries: -reservedFanout)
            }
            return self.failedWrite(request, requestID: requestID, error)
        }
        var envelope = ServerEnvelope()
        envelope.requestID = requestID
        switch outcome {
        case .sent(let receipt):
            if case .send(let send) = request {
                // The reservation becomes the real cost (none for a duplicate: it was delivered before).
                let cost = receipt.duplicate ? 0 : receipt.recipients
                self.context.chargeFanout(of: send.sender, deliveries: cost - reservedFanout)
                if receipt.duplicate {
                    handle?.forgetSend(id: send.id)
                } else {
                    self.context.learnFanout(of: send.sender, to: send.to, deliveries: receipt.recipients)
                }
            }
            envelope.sendAck = Courier_V1_SendAck(receipt)
            self.context.metrics.acksOfSends.increment()
        case .done:
            envelope.done = Courier_V1_Done()
        case .refused(let error):
            if case .send(let send) = request {
                handle?.forgetSend(id: send.id)
                if reservedFanout > 0 { self.context.chargeFanout(of: send.sender, deliveries: -reservedFanout) }
            }
            self.context.metrics.refusals.increment()
            return self.errorEnvelope(requestID, code: "\(error.code)", message: error.message, id: request.messageID)
        }
        return write.answers ? envelope : nil
    }

    /// The answer to a write whose commit failed.
    private func failedWrite(_ request: WriteRequest, requestID: UInt64, _ error: any Error) -> ServerEnvelope {
        if let error = error as? CourierStoreError {
            self.logger.warning("write failed", metadata: ["code": "\(error.code)"])
            return self.errorEnvelope(
                requestID,
                code: "\(error.code)",
                message: error.message,
                id: request.messageID,
                retryAfter: error.code == .storageFailed ? self.context.configuration.limits.storageRetryAfter : nil
            )
        }
        return self.errorEnvelope(requestID, code: ErrorCodes.internalError, message: "\(error)", id: request.messageID)
    }

    /// A page of events split in envelopes' worth: at most `maxEventsBytes` of text each, so that a page of large
    /// texts never makes a frame over the native limit; the last says whether the page reaches the latest cursor.
    /// The connection that sent a message has its acknowledgement and does not get it again; other connections of
    /// the same device do (another process of the same app).
    func pages(
        for events: [StoredEvent],
        handle: ConnectionHandle,
        caughtUp: Bool
    ) -> [(events: [StoredEvent], caughtUp: Bool)] {
        let limit = self.context.configuration.limits.maxEventsBytes
        var pages: [(events: [StoredEvent], caughtUp: Bool)] = []
        var current: [StoredEvent] = []
        var bytes = 0
        for event in events {
            if case .message(let message) = event.kind, handle.isOwnSend(id: message.id, from: message.fromDevice) {
                continue
            }
            // Bodies, a reply's quote among them, and an edit's new body: what makes an envelope large.
            let size =
                switch event.kind {
                case .message(let message): message.body.count + (message.replyTo?.body.count ?? 0) + 256
                case .edit(let message): message.body.count + 256
                default: 256
                }
            if bytes > 0, bytes + size > limit {
                pages.append((current, false))
                current = []
                bytes = 0
            }
            current.append(event)
            bytes += size
        }
        if !current.isEmpty || caughtUp { pages.append((current, caughtUp)) }
        return pages
    }

    /// A page's envelope (``pages(for:handle:caughtUp:)``).
    func envelope(of page: [StoredEvent], caughtUp: Bool) -> ServerEnvelope {
        var list = Courier_V1_Events()
        // Gathered apart and put in the envelope once: appending through the envelope's oneof copies the list at
        // every event (its getter hands out a copy), quadratic in a page.
        list.events = page.map { Courier_V1_Event($0, rawBody: self.transport.sendsRawBodies) }
        list.caughtUp = caughtUp
        var envelope = ServerEnvelope()
        envelope.events = list
        return envelope
    }
}

extension WriteRequest {
    /// The user who sent a message.
    var sender: UserID? {
        if case .send(let send) = self { send.sender } else { nil }
    }

    /// The message id a refusal is about.
    var messageID: String {
        switch self {
        case .send(let send): send.id
        case .recall(_, _, let id): id
        case .ack, .markRead, .edit, .react: ""
        }
    }
}

extension Courier_V1_SendAck {
    /// What a committed send answers: where it went, and whether it was a resend.
    init(_ receipt: SendReceipt) {
        self.init()
        self.id = receipt.id
        self.conversation = Courier_V1_Conversation(receipt.conversation)
        self.seq = receipt.seq
        self.timeMs = receipt.timeMs
        self.duplicate = receipt.duplicate
    }
}
