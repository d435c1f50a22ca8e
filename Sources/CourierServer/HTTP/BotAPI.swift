import CourierProtocol
import CourierStore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import Synchronization

/// The HTTP API on the HTTP port (`/api/v1`, docs/BOTS.md, docs/openapi.yaml): what a bot (or a script holding a
/// user's device token) does without speaking the native protocol. Each operation is the protocol's own: a send goes
/// through the same group commit, fan-out budget and store rules as a connection's, so a bot is limited like anyone.
///
/// `Authorization: Bearer <token>` on every request: a missing, unknown, expired or revoked token is 401 (and counts
/// against the address, as a failed login does). Refusals are `{"error": {"code", "message"}}` with the protocol's
/// error code and the status that matches it.
///
/// `GET /api/v1/updates` is a long poll, as Telegram's `getUpdates`: updates are the entries of the user's own event
/// log that are messages (and edits of messages) from others, `update_id` their cursor. An `offset` acknowledges every
/// update below it, for the token's device, which then never gets them again; an update not acknowledged comes again
/// in every answer. While it waits, the poll holds a place in the node's map of connections (and nothing else): a
/// commit on any node that grows the user's log wakes it, as it wakes a connection.
struct BotAPI: Sendable {
    let context: SessionContext
    let logins: LoginThrottle
    /// The API's rates per user, per address and per hook (shared with the push registrations).
    let limiter: APIRateLimiter
    /// This node's webhook sender, told when a webhook was set here.
    let webhooks: WebhookSender?

    init(
        context: SessionContext,
        logins: LoginThrottle,
        limiter: APIRateLimiter? = nil,
        webhooks: WebhookSender? = nil
    ) {
        self.context = context
        self.logins = logins
        self.limiter = limiter ?? APIRateLimiter(context.configuration.api)
        self.webhooks = webhooks
    }

    var configuration: ServerConfiguration.API { self.context.configuration.api }

    func register(on router: Router<CourierRequestContext>) {
        router.get("/api/v1/me") { request, context in
            await APIRefusal.answer { try await self.me(request, context) }
        }
        router.get("/api/v1/updates") { request, context in
            await APIRefusal.answer { try await self.updates(request, context) }
        }
        router.post("/api/v1/messages") { request, context in
            await APIRefusal.answer { try await self.send(request, context) }
        }
        router.post("/api/v1/messages/edit") { request, context in
            await APIRefusal.answer { try await self.edit(request, context) }
        }
        router.post("/api/v1/messages/react") { request, context in
            await APIRefusal.answer { try await self.react(request, context) }
        }
        router.post("/api/v1/messages/recall") { request, context in
            await APIRefusal.answer { try await self.recall(request, context) }
        }
        router.get("/api/v1/history") { request, context in
            await APIRefusal.answer { try await self.history(request, context) }
        }
        router.post("/api/v1/media") { request, context in
            await APIRefusal.answer { try await self.upload(request, context) }
        }
        router.put("/api/v1/webhook") { request, context in
            await APIRefusal.answer { try await self.setWebhook(request, context) }
        }
        router.get("/api/v1/webhook") { request, context in
            await APIRefusal.answer { try await self.webhookInfo(request, context) }
        }
        router.delete("/api/v1/webhook") { request, context in
            await APIRefusal.answer { try await self.removeWebhook(request, context) }
        }
        router.post("/hooks/{secret}") { request, context in
            await APIRefusal.answer { try await self.hook(request, context) }
        }
        // Any other path under /api/v1: the token first (401 without a good one), then a JSON 404.
        for method in [HTTPRequest.Method.get, .post, .put, .delete, .patch] {
            router.on("/api/v1/**", method: method) { request, context in
                await APIRefusal.answer {
                    _ = try await self.authorize(request, context)
                    throw APIRefusal(.notFound, "not-found", "no such operation: docs/openapi.yaml lists them")
                }
            }
        }
    }

    // MARK: Who is asking

    /// The device the request speaks for, once the address and then the user have a request left in their rates.
    func authorize(_ request: Request, _ context: CourierRequestContext) async throws -> DeviceSession {
        let address = AddressKey.of(ip: context.clientIP)
        try self.limiter.take(address: address)
        let session = try await APIAuth.session(of: request, context, store: self.context.store, logins: self.logins)
        try self.limiter.take(user: session.user.id)
        return session
    }

    private func me(_ request: Request, _ context: CourierRequestContext) async throws -> Response {
        let session = try await self.authorize(request, context)
        let bot = try await APIRefusal.mapping { try await self.context.store.isBot(session.user.id) }
        struct Me: Encodable {
            var user: String
            var bot: Bool
            var device: Int64
        }
        return APIRefusal.json(.ok, Me(user: session.user.name, bot: bot, device: session.device.id.rawValue))
    }

    // MARK: Writes

    private struct SendBody: Decodable {
        struct Media: Decodable {
            var sha256: String
            var size: UInt64
            var mime: String?
            var name: String?
            var kind: String?
        }
        var to: String?
        var group: String?
        /// The text; with media, its caption (may be absent).
        var text: String?
        var reply_to: UInt64?
        /// Media this user uploaded (`POST /api/v1/media`), sent without its bytes again.
        var media: Media?
    }

    /// The body of a send: its text, or its media with the text as the caption, checked as a connection's send is.
    private func body(of send: SendBody) throws -> (Courier_V1_Body, MediaReference?) {
        let maxText = self.context.configuration.limits.maxTextBytes
        let text = send.text ?? ""
        guard text.utf8.count <= maxText else {
            throw APIRefusal(.badRequest, "text-too-large", "\(text.utf8.count) bytes of text; the limit is \(maxText)")
        }
        var body = Courier_V1_Body()
        guard let given = send.media else {
            guard !text.isEmpty else { throw APIRefusal(.badRequest, "empty-message", "the text is empty") }
            body.text = text
            return (body, nil)
        }
        guard SHA256Hex.isValid(given.sha256) else {
            throw APIRefusal(.badRequest, "invalid-request", "media.sha256 is 64 lowercase hex digits")
        }
        let maxMedia = self.context.configuration.media.maxMediaBytes
        guard given.size <= UInt64(maxMedia) else {
            throw APIRefusal(.contentTooLarge, "media-too-large", "\(given.size) bytes is over the media limit")
        }
        let name = given.name ?? ""
        try Self.check(fileName: name)
        var media = Courier_V1_Media()
        media.sha256 = given.sha256
        media.size = given.size
        if let mime = given.mime, !mime.isEmpty {
            guard let canonical = MediaType.canonical(mime), canonical.utf8.count <= 127 else {
                throw APIRefusal(.badRequest, "invalid-request", "media.mime is one media type (type/subtype)")
            }
            media.mime = canonical
        }
        media.name = name
        switch given.kind ?? "file" {
        case "image": media.kind = .image
        case "voice": media.kind = .voice
        case "video": media.kind = .video
        case "file": media.kind = .file
        default: throw APIRefusal(.badRequest, "invalid-request", "media.kind is image, voice, video or file")
        }
        media.caption = text
        body.media = media
        let reference = MediaReference(
            sha256: media.sha256,
            size: Int64(media.size),
            mime: media.mime,
            name: media.name
        )
        return (body, reference)
    }

    /// A file name a message may carry: no folder, no control characters, at most 255 bytes.
    static func check(fileName name: String) throws {
        guard name.utf8.count <= 255, !name.contains("/"),
            !name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else {
            throw APIRefusal(
                .badRequest,
                "invalid-request",
                "a file name has no / and no control characters, at most 255 bytes"
            )
        }
    }

    private func send(_ request: Request, _ context: CourierRequestContext) async throws -> Response {
        let session = try await self.authorize(request, context)
        let body = try await APIRefusal.decode(SendBody.self, from: request, upTo: self.configuration.maxBodyBytes)
        let address = try Self.address(to: body.to, group: body.group)
        let (message, media) = try self.body(of: body)
        // The Idempotency-Key is the message's id: a retry with it answers the message it made, never a second.
        var id = WriteRequest.Send.assignedID()
        if let key = request.headers[HTTPField.Name("Idempotency-Key")!] {
            let maxID = self.context.configuration.store.limits.maxMessageIDBytes
            guard !key.isEmpty, key.utf8.count <= maxID, StoreText.isClean(key) else {
                throw APIRefusal(
                    .badRequest,
                    "invalid-request",
                    "an Idempotency-Key is 1 to \(maxID) bytes without control characters"
                )
            }
            id = key
        }
        var send = WriteRequest.Send(
            sender: session.user.id,
            device: session.device.id,
            id: id,
            to: address,
            body: try message.serializedBytes(),
            media: media,
            replyTo: body.reply_to.map { .seq($0) }
        )
        send.prepareSearch(body: message)
        let receipt = try await self.commit(send, as: session.user)
        struct Sent: Encodable {
            var id: String
            var seq: UInt64
            var time_ms: Int64
            var duplicate: Bool
        }
        return APIRefusal.json(
            receipt.duplicate ? .ok : .created,
            Sent(id: receipt.id, seq: receipt.seq, time_ms: receipt.timeMs, duplicate: receipt.duplicate)
        )
    }

    /// Commits a send as a connection's is: its sender's fan-out budget checked first, what it is expected to cost
    /// taken from it, and what it cost settled after.
    func commit(_ send: WriteRequest.Send, as user: User) async throws -> SendReceipt {
        if let wait = self.context.fanoutWait(of: user.id) {
            throw APIRefusal.throttled(wait, "this user's messages reached too many people lately: wait")
        }
        self.context.metrics.messagesIn.increment()
        let reserved = self.context.fanoutEstimate(of: user.id, to: send.to)
        self.context.chargeFanout(of: user.id, deliveries: reserved)
        let outcome: WriteOutcome
        do {
            outcome = try await self.context.submit(.send(send), origin: nil, userName: user.name).outcome()
        } catch {
            self.context.chargeFanout(of: user.id, deliveries: -reserved)
            throw APIRefusal(.serviceUnavailable, "storage-failed", "the message was not stored; try again")
        }
        switch outcome {
        case .sent(let receipt):
            self.context.chargeFanout(of: user.id, deliveries: receipt.recipients - reserved)
            if !receipt.duplicate {
                self.context.learnFanout(of: user.id, to: send.to, deliveries: receipt.recipients)
            }
            return receipt
        case .refused(let error):
            self.context.chargeFanout(of: user.id, deliveries: -reserved)
            throw APIRefusal(error)
        case .done:
            self.context.chargeFanout(of: user.id, deliveries: -reserved)
            throw APIRefusal(.serviceUnavailable, "storage-failed", "the message was not stored; try again")
        }
    }

    /// A message named by its conversation and seq, or by its id.
    private struct MessageTarget: Decodable {
        var to: String?
        var group: String?
        var seq: UInt64?
        var id: String?
        var text: String?
        var reaction: String?
        var on: Bool?
    }

    private func name(of target: MessageTarget) throws -> MessageName {
        let address = try Self.address(to: target.to, group: target.group)
        if let seq = target.seq, seq > 0 { return MessageName(conversation: address, seq: seq) }
        if let id = target.id, !id.isEmpty { return MessageName(id: id, in: address) }
        throw APIRefusal(.badRequest, "invalid-request", "a message is named by its seq or its id")
    }

    private func edit(_ request: Request, _ context: CourierRequestContext) async throws -> Response {
        let session = try await self.authorize(request, context)
        let target = try await APIRefusal.decode(
            MessageTarget.self,
            from: request,
            upTo: self.configuration.maxBodyBytes
        )
        let name = try self.name(of: target)
        guard let text = target.text else { throw APIRefusal(.badRequest, "invalid-request", "an edit needs a text") }
        let maxText = self.context.configuration.limits.maxTextBytes
        guard text.utf8.count <= maxText else {
            throw APIRefusal(.badRequest, "text-too-large", "\(text.utf8.count) bytes of text; the limit is \(maxText)")
        }
        let message = try await APIRefusal.mapping { try await self.context.store.message(name, for: session.user.id) }
        guard message.from == session.user.name else {
            throw APIRefusal(.forbidden, "not-sender", "only its sender may edit a message")
        }
        guard !message.recalled else { throw APIRefusal(.badRequest, "message-recalled", "the message was recalled") }
        var body = (try? Courier_V1_Body(serializedBytes: message.body)) ?? Courier_V1_Body()
        guard body.forwardedFrom.isEmpty else {
            throw APIRefusal(
                .forbidden,
                "not-sender",
                "a forwarded message is its first sender's words: it is not edited"
            )
        }
        switch body.content {
        case .media(var media)?:
            media.caption = text
            body.media = media
        case .text?, nil:
            guard !text.isEmpty else { throw APIRefusal(.badRequest, "empty-message", "the text is empty") }
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
        try await self.commit(.edit(edit), session.user, to: message.conversation)
        return Response(status: .noContent)
    }

    private func react(_ request: Request, _ context: CourierRequestContext) async throws -> Response {
        let session = try await self.authorize(request, context)
        let target = try await APIRefusal.decode(
            MessageTarget.self,
            from: request,
            upTo: self.configuration.maxBodyBytes
        )
        let name = try self.name(of: target)
        guard let key = target.reaction else {
            throw APIRefusal(.badRequest, "invalid-reaction", "a reaction needs its key (\"reaction\")")
        }
        try APIRefusal.check { _ = try ReactionKey.validate(key) }
        let message = try await APIRefusal.mapping { try await self.context.store.message(name, for: session.user.id) }
        try await self.commit(
            .react(
                .init(
                    user: session.user.id,
                    conversation: message.conversation,
                    seq: message.seq,
                    key: key,
                    on: target.on ?? true
                )
            ),
            session.user,
            to: message.conversation
        )
        return Response(status: .noContent)
    }

    private func recall(_ request: Request, _ context: CourierRequestContext) async throws -> Response {
        let session = try await self.authorize(request, context)
        let target = try await APIRefusal.decode(
            MessageTarget.self,
            from: request,
            upTo: self.configuration.maxBodyBytes
        )
        let name = try self.name(of: target)
        let message = try await APIRefusal.mapping { try await self.context.store.message(name, for: session.user.id) }
        guard message.from == session.user.name else {
            throw APIRefusal(.forbidden, "not-sender", "only its sender may recall a message")
        }
        try await self.commit(
            .recall(user: session.user.id, conversation: message.conversation, id: message.id),
            session.user,
            to: message.conversation
        )
        return Response(status: .noContent)
    }

    /// Commits a write and waits for it; its cost charged to the user's fan-out budget, as a connection's is.
    func commit(_ request: WriteRequest, _ user: User, to conversation: Conversation? = nil) async throws {
        if conversation != nil, let wait = self.context.fanoutWait(of: user.id) {
            throw APIRefusal.throttled(wait, "this user's changes reached too many people lately: wait")
        }
        let outcome: WriteOutcome
        do {
            outcome = try await self.context.submit(request, origin: nil, userName: user.name).outcome()
        } catch {
            throw APIRefusal(.serviceUnavailable, "storage-failed", "the change was not stored; try again")
        }
        if case .refused(let error) = outcome { throw APIRefusal(error) }
        if let conversation {
            self.context.chargeFanout(
                of: user.id,
                deliveries: self.context.fanoutEstimate(of: user.id, to: conversation)
            )
        }
    }

    // MARK: Media

    /// `POST /api/v1/media?name=NAME`: the body's bytes stored as this user's media (`Content-Length` needed, the
    /// size limit and the quota checked before a byte is stored, `Content-Type` its type), answered with what a
    /// send's `media` names. The bytes are stored as they come, never held whole.
    private func upload(_ request: Request, _ context: CourierRequestContext) async throws -> Response {
        let session = try await self.authorize(request, context)
        guard let length = request.headers[.contentLength].flatMap({ Int64($0) }), length > 0 else {
            throw APIRefusal(.lengthRequired, "invalid-request", "an upload states its Content-Length (1 byte or more)")
        }
        let name = request.uri.queryParameters["name"].map(String.init) ?? ""
        try Self.check(fileName: name)
        var mime = "application/octet-stream"
        if let given = request.headers[.contentType] {
            guard let canonical = MediaType.canonical(given), canonical.utf8.count <= 127 else {
                throw APIRefusal(.badRequest, "invalid-request", "Content-Type is one media type (type/subtype)")
            }
            mime = canonical
        }
        let media = self.context.media
        var upload = try await APIRefusal.mapping {
            try await media.begin(
                id: MediaService.compatUploadID(user: session.user.id),
                user: session.user.id,
                size: length,
                sha256: nil
            )
        }
        let sha256: String
        let left: Int64
        do {
            for try await bytes in request.body { try await media.write(bytes, to: &upload) }
            (sha256, left) = try await media.finish(upload)
        } catch {
            // Not resumable: what came of it goes.
            await media.release(upload, discard: true)
            if let error = error as? CourierStoreError { throw APIRefusal(error) }
            throw APIRefusal(.badRequest, "invalid-request", "the upload was cut short")
        }
        struct Stored: Encodable {
            var sha256: String
            var size: Int64
            var mime: String
            var name: String
            var quota_left: Int64
        }
        return APIRefusal.json(.created, Stored(sha256: sha256, size: length, mime: mime, name: name, quota_left: left))
    }

    // MARK: Reads

    private func history(_ request: Request, _ context: CourierRequestContext) async throws -> Response {
        let session = try await self.authorize(request, context)
        let query = request.uri.queryParameters
        let address = try Self.address(to: query["to"].map(String.init), group: query["group"].map(String.init))
        let before = query["before"].flatMap { UInt64($0) } ?? 0
        let limit = min(max(1, query["limit"].flatMap { Int($0) } ?? 50), 100)
        let page = try await APIRefusal.mapping {
            try await self.context.store.history(for: session.user.id, in: address, beforeSeq: before, limit: limit)
        }
        struct Page: Encodable {
            var messages: [APIMessage]
            var more: Bool
        }
        return APIRefusal.json(
            .ok,
            Page(messages: page.messages.map { APIMessage($0, reader: session.user.name) }, more: page.more)
        )
    }

    /// The conversation a request names: `to` a user, or `group`, one of them.
    static func address(to user: String?, group: String?) throws -> Conversation {
        switch (user, group) {
        case (let user?, nil): return .user(user)
        case (nil, let group?): return .group(group)
        default: throw APIRefusal(.badRequest, "invalid-request", "name one conversation: \"to\" a user, or \"group\"")
        }
    }
}
