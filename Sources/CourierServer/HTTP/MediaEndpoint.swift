import CourierStore
import Hummingbird
import NIOCore

/// `GET` and `HEAD /media/<sha256>` on the HTTP port: a stored media file for a user who may see it, with byte
/// ranges (RFC 9110), so a player can seek and `courier proxy` can cache it in pieces.
///
/// The device token comes in `Authorization: Bearer <token>`, never in the URL. What can only be given a URL (a
/// player, a download link) asks `POST /media/<sha256>/ticket` for a ``MediaTickets`` ticket and puts that in the
/// `ticket` query parameter instead: one user, one file, minutes long. Media the user may not see is 404, exactly
/// like media that does not exist.
struct MediaEndpoint: Sendable {
    let store: any CourierDatabase
    let media: MediaService
    let logins: LoginThrottle
    let tickets: MediaTickets

    func register(on router: Router<CourierRequestContext>) {
        router.get("/media/{sha256}") { request, context in
            try await self.respond(to: request, context: context, bodyless: false)
        }
        router.head("/media/{sha256}") { request, context in
            try await self.respond(to: request, context: context, bodyless: true)
        }
        router.post("/media/{sha256}/ticket") { request, context in
            try await self.ticket(for: request, context: context)
        }
        // The HTTP API's name for it (docs/BOTS.md): the same answer, the token only in the header, refusals in
        // the API's JSON.
        router.get("/api/v1/media/{sha256}") { request, context in
            try await self.respond(to: request, context: context, bodyless: false, api: true)
        }
    }

    private func respond(
        to request: Request,
        context: CourierRequestContext,
        bodyless: Bool,
        api: Bool = false
    ) async throws -> Response {
        let sha256 = context.parameters.get("sha256") ?? ""
        if api {
            let session: DeviceSession
            do {
                session = try await APIAuth.session(of: request, context, store: self.store, logins: self.logins)
            } catch let refusal as APIRefusal {
                return refusal.response
            }
            do {
                guard SHA256Hex.isValid(sha256),
                    let access = try await self.store.mediaAccess(for: session.user.id, sha256: sha256)
                else {
                    return APIRefusal(.notFound, "unknown-media", "no such media").response
                }
                return try await self.serve(request, sha256: sha256, access: access, bodyless: bodyless)
            } catch {
                return APIRefusal(.serviceUnavailable, "storage-failed", "the media could not be read; try again")
                    .response
            }
        }
        let user: UserID
        if APIAuth.bearer(of: request) == nil, request.uri.queryParameters.get("token") == nil,
            let ticket = request.uri.queryParameters.get("ticket")
        {
            do {
                user = try self.tickets.user(of: ticket, sha256: sha256, nowMs: SessionClock.systemWallMs())
            } catch .expired {
                return Self.plain(.unauthorized, "ticket-expired: ask for another ticket", bearer: true)
            } catch {
                return Self.plain(.unauthorized, "auth-failed: not a ticket for this media", bearer: true)
            }
        } else {
            switch await self.session(of: request, context) {
            case .success(let session): user = session.user.id
            case .failure(let answer): return answer.response
            }
        }
        guard SHA256Hex.isValid(sha256), let access = try await self.store.mediaAccess(for: user, sha256: sha256) else {
            return Self.plain(.notFound, "no such media")
        }
        return try await self.serve(request, sha256: sha256, access: access, bodyless: bodyless)
    }

    /// The device of `Authorization: Bearer`, or the answer refusing the request. A token in the query string is
    /// refused whatever it is: it would be kept in the browser's history and the logs.
    private func session(of request: Request, _ context: CourierRequestContext) async -> Result<DeviceSession, Answer> {
        let inURL = request.uri.queryParameters.get("token") != nil
        guard let token = APIAuth.bearer(of: request), !inURL else {
            return .failure(
                Answer(
                    Self.plain(
                        .unauthorized,
                        inURL
                            ? "auth-failed: a token is never taken in the URL; send Authorization: Bearer <token>, "
                                + "or use a ticket (POST /media/<sha256>/ticket)"
                            : "a token is needed: Authorization: Bearer <token>, or ?ticket= from "
                                + "POST /media/<sha256>/ticket",
                        bearer: true
                    )
                )
            )
        }
        do {
            return .success(try await APIAuth.session(token: token, context, store: self.store, logins: self.logins))
        } catch let refusal as APIRefusal {
            var answer = Self.plain(
                refusal.status,
                "\(refusal.code): \(refusal.message)",
                bearer: refusal.status == .unauthorized
            )
            if let seconds = refusal.retryAfterSeconds { answer.headers[.retryAfter] = String(seconds) }
            return .failure(Answer(answer))
        } catch {
            return .failure(Answer(Self.plain(.serviceUnavailable, "storage-failed: try again")))
        }
    }

    /// A refusal as a `Result`'s failure.
    struct Answer: Error {
        var response: Response
        init(_ response: Response) { self.response = response }
    }

    /// `POST /media/<sha256>/ticket`: a ticket for the device's user to that file, as JSON
    /// (`{"ticket":…,"url":…,"expires_ms":…,"expires_in":…}`), or 404 when the user may not see it. Never cached.
    private func ticket(for request: Request, context: CourierRequestContext) async throws -> Response {
        let sha256 = context.parameters.get("sha256") ?? ""
        let session: DeviceSession
        switch await self.session(of: request, context) {
        case .success(let found): session = found
        case .failure(let answer): return answer.response
        }
        guard SHA256Hex.isValid(sha256),
            try await self.store.mediaAccess(for: session.user.id, sha256: sha256) != nil
        else {
            return Self.plain(.notFound, "no such media")
        }
        let now = SessionClock.systemWallMs()
        let (ticket, expires) = self.tickets.issue(user: session.user.id, sha256: sha256, nowMs: now)
        // `expires_in` (seconds, as OAuth says it) as well as the moment: a client's clock may be off.
        let body =
            "{\"ticket\":\"\(ticket)\",\"url\":\"/media/\(sha256)?ticket=\(ticket)\",\"expires_ms\":\(expires),"
            + "\"expires_in\":\((expires - now) / 1000)}\n"
        return Response(
            status: .ok,
            headers: [.contentType: "application/json", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(string: body))
        )
    }

    /// The file, or the range asked for, of media the user may see.
    private func serve(
        _ request: Request,
        sha256: String,
        access: MediaAccess,
        bodyless: Bool
    ) async throws -> Response {
        let etag = "\"\(sha256)\""
        // The type is the sender's word: only a listed picture, sound or video whose bytes begin as its type's do is
        // served as such; anything else (HTML, SVG, scripts, text, a type the bytes belie…) is a download, so a
        // message cannot plant a page or a script on the server's origin.
        let inline = try await self.inlineType(of: access, sha256: sha256)
        var headers: HTTPFields = [
            .contentType: inline ?? MediaAccess.defaultType,
            .init("X-Content-Type-Options")!: "nosniff",
            .contentSecurityPolicy: "default-src 'none'; sandbox",
            .eTag: etag,
            .acceptRanges: "bytes",
            .cacheControl: "private, max-age=31536000, immutable",
        ]
        if inline == nil { headers[.contentDisposition] = "attachment" }
        if request.ifNoneMatch(etag) {
            return Response(status: .notModified, headers: headers)
        }
        var status = HTTPResponse.Status.ok
        var range = Int64(0)..<access.size
        // If-Range with another validator: the whole file (the client's piece is of other bytes).
        let ifRange = request.headers[.ifRange]
        if let header = request.headers[.range], ifRange == nil || ifRange == etag {
            let requested = RangeRequest(header: header)
            switch requested.bytes(of: access.size) {
            case let part? where requested.isPartial:
                status = .partialContent
                range = part
                headers[.contentRange] = "bytes \(part.lowerBound)-\(part.upperBound - 1)/\(access.size)"
            case _?:
                break
            case nil:
                headers[.contentRange] = "bytes */\(access.size)"
                headers[.contentType] = "text/plain; charset=utf-8"
                return Response(
                    status: .rangeNotSatisfiable,
                    headers: headers,
                    body: .init(byteBuffer: ByteBuffer(string: "the range is outside the \(access.size) bytes\n"))
                )
            }
        }
        headers[.contentLength] = "\(range.count)"
        if bodyless || range.isEmpty {
            return Response(status: status, headers: headers)
        }
        let media = self.media
        let bytes = range
        return Response(
            status: status,
            headers: headers,
            body: ResponseBody(contentLength: Int(range.count)) { writer in
                try await media.read(sha256, range: bytes) { chunk in try await writer.write(chunk) }
                try await writer.finish(nil)
            }
        )
    }

    /// The type `access` is served as inline: its type and subtype alone (a picture, a sound or a video needs no
    /// parameter, and a quoted one may hold a comma no browser should be asked to read past) when it is one of
    /// ``InlineMedia``'s and the file begins as that type's files do; nil for a download.
    func inlineType(of access: MediaAccess, sha256: String) async throws -> String? {
        guard let type = MediaType(access.mime), InlineMedia.isListed(type) else { return nil }
        let prefix = try await self.media.prefix(of: sha256, size: access.size)
        return InlineMedia.matches(type, prefix: prefix) ? type.essence : nil
    }

    private static func plain(_ status: HTTPResponse.Status, _ text: String, bearer: Bool = false) -> Response {
        var headers: HTTPFields = [
            .contentType: "text/plain; charset=utf-8", .init("X-Content-Type-Options")!: "nosniff",
        ]
        if bearer { headers[.wwwAuthenticate] = "Bearer" }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text + "\n")))
    }
}

extension Request {
    /// Whether `If-None-Match` names `etag` (weakly or strongly) or `*`: the client's copy is current (304).
    func ifNoneMatch(_ etag: String) -> Bool {
        guard let match = self.headers[.ifNoneMatch] else { return false }
        return match.split(separator: ",").contains {
            let tag = $0.trimmingCharacters(in: .whitespaces)
            return tag == etag || tag == "W/\(etag)" || tag == "*"
        }
    }
}
