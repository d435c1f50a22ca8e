import CourierPush
import CourierStore
import Foundation
import Hummingbird
import NIOCore

/// `POST` and `DELETE /api/v1/push/subscriptions` on the HTTP port: a device registers the browser's Web Push
/// subscription (`PushSubscription.toJSON()`) or removes it, with its device token in `Authorization: Bearer`; and
/// `POST` and `DELETE /api/v1/push/gateways`: a phone app registers its pushkey with the operator's push gateway.
///
/// Nothing is stored that a push could not use: the endpoint must be an absolute `https://` URL (or `http://` when the
/// server allows private targets, for tests), the keys a P-256 point and a 16-byte secret. Refusals are JSON,
/// `{"error": {"code", "message"}}`, with the status that matches the code.
struct PushEndpoint: Sendable {
    /// The largest request body read: a subscription is a few hundred bytes.
    static let maxBodyBytes = 8192

    let store: any CourierDatabase
    let logins: LoginThrottle
    let allowPrivateTargets: Bool
    /// The HTTP API's rates, per address before the token and per user after it.
    var limiter: APIRateLimiter?

    func register(on router: Router<CourierRequestContext>) {
        router.post("/api/v1/push/subscriptions") { request, context in
            await self.answer { try await self.subscribe(request, context) }
        }
        router.delete("/api/v1/push/subscriptions") { request, context in
            await self.answer { try await self.unsubscribe(request, context) }
        }
        router.post("/api/v1/push/gateways") { request, context in
            await self.answer { try await self.registerGateway(request, context) }
        }
        router.delete("/api/v1/push/gateways") { request, context in
            await self.answer { try await self.removeGateway(request, context) }
        }
    }

    /// A phone's registration with a push gateway (Matrix's Push Gateway API): its app, its pushkey, and the
    /// gateway's `notify` URL.
    private struct Gateway: Decodable {
        var app_id: String
        var pushkey: String
        var url: String
    }

    private struct GatewayRemoval: Decodable {
        var app_id: String
        var pushkey: String
    }

    private func registerGateway(_ request: Request, _ context: CourierRequestContext) async throws -> Response {
        let session = try await self.authorize(request, context)
        let body = try await APIRefusal.decode(Gateway.self, from: request, upTo: Self.maxBodyBytes)
        try self.check(endpoint: body.url, what: "a gateway URL")
        // Printed into logs and JSON only by the gateway: no control characters, no spaces.
        guard body.app_id.unicodeScalars.allSatisfy({ (0x21...0x7E).contains($0.value) }),
            body.pushkey.unicodeScalars.allSatisfy({ (0x21...0x7E).contains($0.value) })
        else {
            throw APIRefusal(.badRequest, "invalid-request", "an app id and a pushkey are printable ASCII")
        }
        try await APIRefusal.mapping {
            try await self.store.addPushGateway(
                PushGateway(appID: body.app_id, pushkey: body.pushkey, url: body.url),
                for: session,
                nowMs: SessionClock.systemWallMs()
            )
        }
        return APIRefusal.json(.created, ["app_id": body.app_id, "url": body.url])
    }

    private func removeGateway(_ request: Request, _ context: CourierRequestContext) async throws -> Response {
        let session = try await self.authorize(request, context)
        let body = try await APIRefusal.decode(GatewayRemoval.self, from: request, upTo: Self.maxBodyBytes)
        let removed = try await APIRefusal.mapping {
            try await self.store.removePushGateway(appID: body.app_id, pushkey: body.pushkey, for: session)
        }
        guard removed else { throw APIRefusal(.notFound, "not-found", "no such pushkey of this user") }
        return Response(status: .noContent)
    }

    private struct Subscription: Decodable {
        struct Keys: Decodable {
            var p256dh: String
            var auth: String
        }
        var endpoint: String
        var keys: Keys
    }

    private struct Removal: Decodable {
        var endpoint: String
    }

    private func subscribe(_ request: Request, _ context: CourierRequestContext) async throws -> Response {
        let session = try await self.authorize(request, context)
        let body = try await APIRefusal.decode(Subscription.self, from: request, upTo: Self.maxBodyBytes)
        try self.check(endpoint: body.endpoint)
        let keys: PushSubscriptionKeys
        do {
            keys = try PushSubscriptionKeys(p256dh: body.keys.p256dh, auth: body.keys.auth)
        } catch let error as PushError {
            throw APIRefusal(.badRequest, "invalid-request", error.description)
        }
        try await APIRefusal.mapping {
            try await self.store.addPushSubscription(
                endpoint: body.endpoint,
                p256dh: keys.p256dh,
                auth: keys.auth,
                for: session,
                nowMs: SessionClock.systemWallMs()
            )
        }
        return APIRefusal.json(.created, ["endpoint": body.endpoint])
    }

    private func unsubscribe(_ request: Request, _ context: CourierRequestContext) async throws -> Response {
        let session = try await self.authorize(request, context)
        let body = try await APIRefusal.decode(Removal.self, from: request, upTo: Self.maxBodyBytes)
        let removed = try await APIRefusal.mapping {
            try await self.store.removePushSubscription(endpoint: body.endpoint, for: session)
        }
        guard removed else { throw APIRefusal(.notFound, "not-found", "no such push subscription of this user") }
        return Response(status: .noContent)
    }

    /// An endpoint a push can go to: printable ASCII (no space, no fragment, no percent-encoded host), absolute, with
    /// a host, `https` (or `http` when private targets are allowed), so that what is stored is what a push will be
    /// sent to. Where it resolves to is checked when a push is sent, not here: a name may point elsewhere later.
    private func check(endpoint: String, what: String = "a push endpoint") throws {
        guard endpoint.utf8.allSatisfy({ (0x21...0x7E).contains($0) && $0 != UInt8(ascii: "#") }),
            let host = URLComponents(string: endpoint)?.percentEncodedHost, !host.contains("%"),
            let audience = VAPIDKey.audience(of: endpoint)
        else {
            throw APIRefusal(.badRequest, "invalid-request", "\(what) is an absolute https URL")
        }
        guard audience.hasPrefix("https://") || self.allowPrivateTargets else {
            throw APIRefusal(.badRequest, "invalid-request", "\(what) is an https URL")
        }
    }

    /// The device a request speaks for, within the API's rates.
    private func authorize(_ request: Request, _ context: CourierRequestContext) async throws -> DeviceSession {
        try self.limiter?.take(address: AddressKey.of(ip: context.clientIP))
        let session = try await APIAuth.session(of: request, context, store: self.store, logins: self.logins)
        try self.limiter?.take(user: session.user.id)
        return session
    }

    private func answer(_ body: () async throws -> Response) async -> Response {
        do {
            return try await body()
        } catch let refusal as APIRefusal {
            return refusal.response
        } catch {
            return APIRefusal(.serviceUnavailable, "storage-failed", "the request failed; try again").response
        }
    }
}

/// The device a request on the HTTP port speaks for, by its token. An unknown token counts against the address as a
/// failed login does on the other ports.
enum APIAuth {
    /// The token of `Authorization: Bearer <token>`, or nil.
    static func bearer(of request: Request) -> String? {
        guard let authorization = request.headers[.authorization] else { return nil }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        return parts.count == 2 && parts[0].lowercased() == "bearer" ? String(parts[1]) : nil
    }

    /// The device a request to `/api/v1` speaks for: its token only in `Authorization: Bearer` (never in the URL,
    /// where logs keep it).
    static func session(
        of request: Request,
        _ context: CourierRequestContext,
        store: any CourierDatabase,
        logins: LoginThrottle
    ) async throws -> DeviceSession {
        guard let token = Self.bearer(of: request) else {
            throw APIRefusal(.unauthorized, "auth-failed", "a device token is needed: Authorization: Bearer <token>")
        }
        return try await Self.session(token: token, context, store: store, logins: logins)
    }

    /// The device a token belongs to, the address's failed attempts counted.
    ///
    /// - Throws: ``APIRefusal``: 429 `throttled` (with when to retry) past the address's failures, 401 for a token
    ///   unknown, expired or revoked.
    static func session(
        token: String,
        _ context: CourierRequestContext,
        store: any CourierDatabase,
        logins: LoginThrottle
    ) async throws -> DeviceSession {
        let address = AddressKey.of(ip: context.clientIP)
        let ticket: LoginGate.Ticket
        switch logins.admit(user: nil, address: address) {
        case .admitted(let admitted):
            ticket = admitted
        case .throttled(let retryAfter):
            var refusal = APIRefusal(.tooManyRequests, "throttled", "too many failed logins from this address")
            refusal.retryAfterSeconds = max(1, Int(retryAfter.components.seconds))
            throw refusal
        }
        do {
            let session = try await store.authenticate(token: token, nowMs: SessionClock.systemWallMs())
            logins.finish(ticket, failed: false)
            return session
        } catch let error as CourierStoreError {
            logins.finish(ticket, failed: error.code == .authFailed)
            throw APIRefusal(error)
        }
    }
}

/// A refusal of `/api/v1`: the protocol's error code, a message for people, and the HTTP status that matches.
struct APIRefusal: Error {
    var status: HTTPResponse.Status
    var code: String
    var message: String
    /// For 429: when to ask again.
    var retryAfterSeconds: Int?

    init(_ status: HTTPResponse.Status, _ code: String, _ message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    init(_ error: CourierStoreError) {
        let status: HTTPResponse.Status =
            switch error.code {
            case .authFailed, .tokenExpired, .tokenRevoked: .unauthorized
            case .notMember, .notSender, .notOwner, .notAdmin, .notContact: .forbidden
            case .unknownUser, .unknownGroup, .unknownMessage, .unknownMedia, .unknownUpload: .notFound
            case .throttled: .tooManyRequests
            case .uploadBusy: .conflict
            case .quotaExceeded, .mediaTooLarge: .contentTooLarge
            case .storageFailed: .serviceUnavailable
            default: .badRequest
            }
        self.init(status, error.code.description, error.message)
    }

    /// 429 `rate-limited`, with when to ask again.
    static func throttled(_ wait: Duration, _ message: String) -> APIRefusal {
        var refusal = APIRefusal(.tooManyRequests, "rate-limited", message)
        let (seconds, attoseconds) = wait.components
        refusal.retryAfterSeconds = max(1, Int(seconds) + (attoseconds > 0 ? 1 : 0))
        return refusal
    }

    /// Runs a check of the store's, its refusal turned into an ``APIRefusal``.
    static func check(_ body: () throws -> Void) throws {
        do {
            try body()
        } catch let error as CourierStoreError {
            throw APIRefusal(error)
        }
    }

    /// The answer to a request: what `body` returns, or its refusal as JSON (anything else is 503 `storage-failed`).
    static func answer(_ body: () async throws -> Response) async -> Response {
        do {
            return try await body()
        } catch let refusal as APIRefusal {
            return refusal.response
        } catch let error as CourierStoreError {
            return APIRefusal(error).response
        } catch {
            return APIRefusal(.serviceUnavailable, "storage-failed", "the request failed; try again").response
        }
    }

    var response: Response {
        var response = Self.json(self.status, ["error": ["code": self.code, "message": self.message]])
        if self.status == .unauthorized { response.headers[.wwwAuthenticate] = "Bearer" }
        // A 429 always says when to ask again (the store's own throttling does not: a second).
        if let seconds = self.retryAfterSeconds ?? (self.status == .tooManyRequests ? 1 : nil) {
            response.headers[.retryAfter] = String(seconds)
        }
        return response
    }

    /// Runs a store call, its refusals turned into ``APIRefusal``s.
    static func mapping<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as CourierStoreError {
            throw APIRefusal(error)
        }
    }

    /// The request's body as JSON of a type, read up to `limit` bytes.
    static func decode<T: Decodable>(_ type: T.Type, from request: Request, upTo limit: Int) async throws -> T {
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: limit)
        } catch {
            throw APIRefusal(.contentTooLarge, "invalid-request", "the body is larger than \(limit) bytes")
        }
        do {
            return try JSONDecoder().decode(T.self, from: Data(buffer.readableBytesView))
        } catch {
            throw APIRefusal(.badRequest, "invalid-request", "the body is not the JSON this request takes")
        }
    }

    /// A JSON answer.
    static func json(_ status: HTTPResponse.Status, _ object: some Encodable) -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let body = (try? encoder.encode(object)) ?? Data("{}".utf8)
        return Response(
            status: status,
            headers: [
                .contentType: "application/json", .cacheControl: "no-store",
                .init("X-Content-Type-Options")!: "nosniff",
            ],
            body: .init(byteBuffer: ByteBuffer(bytes: body + Data("\n".utf8)))
        )
    }
}
