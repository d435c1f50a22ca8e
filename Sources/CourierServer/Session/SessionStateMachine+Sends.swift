import CourierProtocol
import CourierStore

/// A send: checked here, on the connection's event loop, before it reaches the group commit; a forward goes to the
/// session's work, which finds the message it names first.
extension SessionStateMachine {
    /// A send of the active session: refused, paused by the rate bucket, written, or (a forward) a request.
    func send(
        _ send: Courier_V1_Send,
        requestID: UInt64,
        active: inout Active,
        now: ContinuousClock.Instant
    ) -> Action {
        var send = send
        if send.hasForward { return self.forward(send, requestID: requestID, active: &active, now: now) }
        if let refusal = self.validate(send, requestID: requestID) { return refusal }
        // Stored as the server reads it: no field it does not know (a later version's `forwarded_from` is not
        // a client's to smuggle in early).
        if !send.body.unknownFields.data.isEmpty { send.body.unknownFields = .init() }
        if case .media(var media)? = send.body.content, !media.unknownFields.data.isEmpty || !media.mime.isEmpty {
            media.unknownFields = .init()
            // Stored, served and delivered only in its one spelling (validate parsed it).
            if !media.mime.isEmpty { media.mime = MediaType.canonical(media.mime) ?? "" }
            send.body.media = media
        }
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
        guard let replyTo = Self.replyTarget(of: send) else { return self.unnamedReply(send, requestID) }
        var request = WriteRequest.Send(
            sender: active.session.user.id,
            device: active.session.device.id,
            id: send.id,
            to: address,
            body: body,
            media: media,
            replyTo: replyTo
        )
        // Here, on the connection's event loop, not on the one writer's thread.
        request.prepareSearch(body: send.body)
        return .write(.send(request), requestID: requestID, answers: true)
    }

    /// The longest MIME type and file name a media message may carry, in bytes.
    static let maxMimeBytes = 127
    static let maxMediaNameBytes = 255

    func validateID(of send: Courier_V1_Send, requestID: UInt64) -> Action? {
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
        return nil
    }

    func validate(_ send: Courier_V1_Send, requestID: UInt64) -> Action? {
        func refuse(_ code: String, _ message: String) -> Action {
            .refuse(requestID: requestID, code: code, message: message, id: send.id, retryAfter: nil)
        }
        if let refusal = self.validateID(of: send, requestID: requestID) { return refusal }
        guard send.body.forwardedFrom.isEmpty else {
            return refuse(ErrorCodes.invalidRequest, "forwarded_from is the server's to set: forward the message")
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
            if !media.mime.isEmpty,
                media.mime.utf8.count > Self.maxMimeBytes
                    || MediaType.canonical(media.mime).map({ $0.utf8.count > Self.maxMimeBytes }) ?? true
            {
                return refuse(
                    ErrorCodes.invalidRequest,
                    "media.mime is one media type (type/subtype and parameters, RFC 9110; no list), at most "
                        + "\(Self.maxMimeBytes) bytes"
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
            // A caption is a text: the same limit as a text's (and as its edit's).
            if media.caption.utf8.count > self.configuration.maxTextBytes {
                return refuse(
                    ErrorCodes.textTooLarge,
                    "\(media.caption.utf8.count) bytes of caption; the limit is \(self.configuration.maxTextBytes)"
                )
            }
            return nil
        case nil:
            return refuse(ErrorCodes.emptyMessage, "the message has no content")
        }
    }

    /// A forward: the message it names is found by the session's work (``SessionRequests``), which then sends it.
    func forward(
        _ send: Courier_V1_Send,
        requestID: UInt64,
        active: inout Active,
        now: ContinuousClock.Instant
    ) -> Action {
        func refuse(_ message: String) -> Action {
            .refuse(
                requestID: requestID,
                code: ErrorCodes.invalidRequest,
                message: message,
                id: send.id,
                retryAfter: nil
            )
        }
        if let refusal = self.validateID(of: send, requestID: requestID) { return refusal }
        guard !send.hasBody else { return refuse("a forward carries no body: the server copies the original's") }
        guard let name = Self.messageName(send.forward) else { return self.unnamedMessage(requestID) }
        guard let address = Conversation(send.to) else { return refuse("a send needs a user or a group to go to") }
        guard let replyTo = Self.replyTarget(of: send) else { return self.unnamedReply(send, requestID) }
        if let wait = active.bucket.take(now: now) { return .pause(wait) }
        return .request(.forward(name, to: address, id: send.id, replyTo: replyTo), requestID: requestID)
    }

    /// What a send's `reply_to` names: `.some(nil)` when it has none, nil when it names nothing.
    static func replyTarget(of send: Courier_V1_Send) -> WriteRequest.ReplyTarget?? {
        guard send.hasReplyTo else { return .some(nil) }
        if send.replyTo.seq > 0 { return .seq(send.replyTo.seq) }
        guard !send.replyTo.id.isEmpty else { return nil }
        return .id(send.replyTo.id, from: send.replyTo.from.isEmpty ? nil : send.replyTo.from)
    }

    func unnamedReply(_ send: Courier_V1_Send, _ requestID: UInt64) -> Action {
        .refuse(
            requestID: requestID,
            code: ErrorCodes.invalidRequest,
            message: "reply_to names a message by seq or by id",
            id: send.id,
            retryAfter: nil
        )
    }
}
