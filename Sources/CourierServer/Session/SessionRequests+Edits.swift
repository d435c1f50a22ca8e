import CourierProtocol
import CourierStore

/// Edits, reactions and forwards: the message is found first (by place or by id, among those the user can see), then the
/// change goes through the group commit, whose rules check it again under the conversation's lock.
extension SessionRequests {
    /// A new text for a message of the user's: a text message's text, a media message's caption. The body is built
    /// from the message as found: an edit changes nothing else.
    func edit(
        _ name: MessageName,
        text: String,
        session: DeviceSession,
        requestID: UInt64
    ) async throws -> ServerEnvelope {
        let message = try await self.context.store.message(name, for: session.user.id)
        guard message.from == session.user.name else {
            throw CourierStoreError(.notSender, "only its sender may edit a message")
        }
        guard !message.recalled else { throw CourierStoreError(.messageRecalled, "the message was recalled") }
        var body = (try? Courier_V1_Body(serializedBytes: message.body)) ?? Courier_V1_Body()
        guard body.forwardedFrom.isEmpty else {
            throw CourierStoreError(.notSender, "a forwarded message is its first sender's words: it is not edited")
        }
        switch body.content {
        case .media(var media)?:
            media.caption = text
            body.media = media
        case .text?, nil:
            guard !text.isEmpty else { throw SessionRefusal(ErrorCodes.emptyMessage, "the text is empty") }
            body.text = text
        }
        var edit = WriteRequest.Edit(
            user: session.user.id,
            device: session.device.id,
            conversation: message.conversation,
            seq: message.seq,
            body: try body.serializedBytes()
        )
        edit.prepareSearch(text: SearchIndex.text(of: body))
        return try await self.committed(.edit(edit), user: session.user, to: message.conversation, requestID: requestID)
    }

    /// A reaction put on a message or taken off.
    func react(
        _ name: MessageName,
        key: String,
        on: Bool,
        user: User,
        requestID: UInt64
    ) async throws -> ServerEnvelope {
        // The key first: a bad one is refused before anything is looked up.
        _ = try ReactionKey.validate(key)
        let message = try await self.context.store.message(name, for: user.id)
        let request = WriteRequest.react(
            .init(user: user.id, conversation: message.conversation, seq: message.seq, key: key, on: on)
        )
        return try await self.committed(request, user: user, to: message.conversation, requestID: requestID)
    }

    /// A copy of a message the user can see, sent to another conversation (or the same) and marked with its first
    /// sender: its body as last edited, its media without an upload. The forwarder then holds the file as if it had
    /// uploaded it (counted once in its quota: `quota-exceeded` otherwise), so that the copy's receivers may fetch
    /// it as any media sent to them, and it stays while any holder keeps it. Answered as a send is, with a
    /// `SendAck`.
    func forward(
        _ name: MessageName,
        to address: Conversation,
        id: String,
        replyTo: WriteRequest.ReplyTarget?,
        session: DeviceSession,
        requestID: UInt64
    ) async throws -> ServerEnvelope {
        let original = try await self.context.store.message(name, for: session.user.id)
        guard !original.recalled else { throw CourierStoreError(.messageRecalled, "the message was recalled") }
        var body = (try? Courier_V1_Body(serializedBytes: original.body)) ?? Courier_V1_Body()
        // Only what the server knows is copied.
        body.unknownFields = .init()
        if case .media(var media)? = body.content {
            media.unknownFields = .init()
            body.media = media
        }
        if body.forwardedFrom.isEmpty { body.forwardedFrom = original.from }
        var media: MediaReference?
        // An upload recorded here for a forward that then does not go is taken back.
        var recorded: String?
        if case .media(let carried)? = body.content {
            media = MediaReference(
                sha256: carried.sha256,
                size: Int64(carried.size),
                mime: carried.mime,
                name: carried.name
            )
            // Found in a message the user can see: the store checked its sender's upload of this size.
            let held = try await self.context.store.uploadedSize(by: session.user.id, sha256: carried.sha256) != nil
            // The original recalled and its file collected meanwhile: nothing to send.
            _ = try await self.context.media.hold(
                carried.sha256,
                size: Int64(carried.size),
                for: session.user.id,
                forgetting: !held
            ) { CourierStoreError(.unknownMedia, "the file of that message is gone") }
            if !held { recorded = carried.sha256 }
        }
        var send = WriteRequest.Send(
            sender: session.user.id,
            device: session.device.id,
            id: id,
            to: address,
            body: try body.serializedBytes(),
            media: media,
            replyTo: replyTo
        )
        send.prepareSearch(body: body)
        // The first sender's mentions are not the forwarder's: a forward alerts nobody by name (nor `@all`, which a
        // member who is not an admin could not say).
        send.mentions = Mentions()
        // (A commit that failed may have gone or not: its record stays, as an upload's does.)
        let outcome = try await self.context.submit(.send(send), origin: nil, userName: session.user.name).outcome()
        let went: Bool
        switch outcome {
        case .sent(let receipt): went = !receipt.duplicate
        case .refused, .done: went = false
        }
        if let recorded, !went {
            try await self.context.store.forgetUnsentUpload(user: session.user.id, sha256: recorded)
        }
        switch outcome {
        case .refused(let error):
            throw error
        case .done:
            throw CourierStoreError(.storageFailed, "a send was answered without its place")
        case .sent(let receipt):
            if !receipt.duplicate {
                self.context.chargeFanout(of: session.user.id, deliveries: receipt.recipients)
                self.context.learnFanout(of: session.user.id, to: address, deliveries: receipt.recipients)
            }
            var reply = ServerEnvelope()
            reply.requestID = requestID
            reply.sendAck = Courier_V1_SendAck(receipt)
            return reply
        }
    }

    /// Commits a write and answers it: `done`, or its refusal. What it cost the members' logs is charged to the
    /// user's fan-out budget, as a send's is (its next edit, reaction or send waits while the budget is spent).
    /// On a node that forwards, it is committed by its conversation's owner (the session waits for it before its
    /// next request: nothing else orders it).
    private func committed(
        _ request: WriteRequest,
        user: User,
        to conversation: Conversation,
        requestID: UInt64
    ) async throws -> ServerEnvelope {
        switch try await self.context.submit(request, origin: nil, userName: user.name).outcome() {
        case .refused(let error):
            throw error
        case .done, .sent:
            self.context.chargeFanout(
                of: user.id,
                deliveries: self.context.fanoutEstimate(of: user.id, to: conversation)
            )
            var reply = ServerEnvelope()
            reply.requestID = requestID
            reply.done = Courier_V1_Done()
            return reply
        }
    }
}
