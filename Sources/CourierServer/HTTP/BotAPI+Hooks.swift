import CourierProtocol
import CourierStore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import Synchronization

/// Webhooks both ways: a bot's own (`/api/v1/webhook`), and incoming hooks (`/hooks/<secret>`).
extension BotAPI {
    // MARK: Webhooks

    func setWebhook(_ request: Request, _ context: CourierRequestContext) async throws -> Response {
        let session = try await self.authorize(request, context)
        struct Body: Decodable { var url: String }
        let body = try await APIRefusal.decode(Body.self, from: request, upTo: self.configuration.maxBodyBytes)
        try Self.check(url: body.url, allowPrivate: self.context.configuration.push.allowPrivateTargets)
        let row = try await APIRefusal.mapping {
            try await self.context.store.setWebhook(url: body.url, for: session, nowMs: SessionClock.systemWallMs())
        }
        self.webhooks?.webhookChanged()
        return APIRefusal.json(.ok, ["url": row.url, "secret": row.spelledSecret])
    }

    func webhookInfo(_ request: Request, _ context: CourierRequestContext) async throws -> Response {
        let session = try await self.authorize(request, context)
        guard let row = try await APIRefusal.mapping({ try await self.context.store.webhook(of: session.user.id) })
        else { throw APIRefusal(.notFound, "not-found", "no webhook is set: updates wait for the long poll") }
        struct Info: Encodable {
            var url: String
            var delivered_update_id: UInt64
            var failing_since_ms: Int64?
            var next_attempt_ms: Int64?
            var last_error: String?
            var disabled: Bool
        }
        return APIRefusal.json(
            .ok,
            Info(
                url: row.url,
                delivered_update_id: row.cursor,
                failing_since_ms: row.failingSinceMs,
                next_attempt_ms: row.failingSinceMs == nil ? nil : row.dueMs,
                last_error: row.lastError,
                disabled: row.disabledMs != nil
            )
        )
    }

    func removeWebhook(_ request: Request, _ context: CourierRequestContext) async throws -> Response {
        let session = try await self.authorize(request, context)
        guard
            let row = try await APIRefusal.mapping({
                try await self.context.store.removeWebhook(of: session.user.id, nowMs: SessionClock.systemWallMs())
            })
        else { throw APIRefusal(.notFound, "not-found", "no webhook is set") }
        // The node holding it stops sending at once (its next request), if it is this one.
        self.webhooks?.webhookChanged()
        // What the webhook delivered is acknowledged for this token: the long poll goes on from there.
        if row.cursor > 0 {
            try await self.commit(
                .ack(user: session.user.id, device: session.device.id, cursor: row.cursor),
                session.user
            )
        }
        return Response(status: .noContent)
    }

    /// An URL a webhook may be: printable ASCII without a fragment, absolute, `https` (or `http` when private
    /// targets are allowed). Where it resolves is checked at each delivery.
    static func check(url: String, allowPrivate: Bool) throws {
        guard url.utf8.allSatisfy({ (0x21...0x7E).contains($0) && $0 != UInt8(ascii: "#") }),
            let components = URLComponents(string: url), let host = components.percentEncodedHost, !host.isEmpty,
            !host.contains("%"), ["https", "http"].contains(components.scheme?.lowercased() ?? "")
        else {
            throw APIRefusal(.badRequest, "invalid-request", "a webhook URL is an absolute https URL")
        }
        guard components.scheme?.lowercased() == "https" || allowPrivate else {
            throw APIRefusal(.badRequest, "invalid-request", "a webhook URL is an https URL")
        }
    }

    // MARK: Incoming hooks

    /// `POST /hooks/<secret>` with `{"text": …}` (Slack's incoming-webhook shape): posted into the hook's group as its
    /// bot, answered `ok`. The hook's rate is its own; the address's and the bot's count too.
    func hook(_ request: Request, _ context: CourierRequestContext) async throws -> Response {
        let address = AddressKey.of(ip: context.clientIP)
        try self.limiter.take(address: address)
        let secret = context.parameters.get("secret") ?? ""
        guard let hook = try await APIRefusal.mapping({ try await self.context.store.incomingHook(token: secret) })
        else {
            // Counted as a failed login: guessing secrets is guessing tokens.
            try await self.countFailure(from: address)
            throw APIRefusal(.notFound, "unknown-hook", "no such hook, or it was revoked")
        }
        try self.limiter.take(hook: hook.id)
        try self.limiter.take(user: hook.bot.id)
        struct Body: Decodable { var text: String }
        let body = try await APIRefusal.decode(Body.self, from: request, upTo: self.configuration.maxHookBodyBytes)
        let text = body.text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !text.isEmpty else { throw APIRefusal(.badRequest, "empty-message", "the text is empty") }
        let maxText = self.context.configuration.limits.maxTextBytes
        guard text.utf8.count <= maxText else {
            throw APIRefusal(.badRequest, "text-too-large", "\(text.utf8.count) bytes of text; the limit is \(maxText)")
        }
        var message = Courier_V1_Body()
        message.text = text
        var send = WriteRequest.Send(
            sender: hook.bot.id,
            id: WriteRequest.Send.assignedID(),
            to: .group(hook.group),
            body: try message.serializedBytes()
        )
        send.prepareSearch(body: message)
        _ = try await self.commit(send, as: hook.bot)
        return Response(
            status: .ok,
            headers: [.contentType: "text/plain; charset=utf-8", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(string: "ok"))
        )
    }

    /// A wrong hook secret counts against the address as a wrong token does.
    func countFailure(from address: String) async throws {
        switch self.logins.admit(user: nil, address: address) {
        case .admitted(let ticket):
            self.logins.finish(ticket, failed: true)
        case .throttled(let retryAfter):
            throw APIRefusal.throttled(retryAfter, "too many failed attempts from this address")
        }
    }
}
