import Foundation
import NIOCore
import NIOHTTP1

/// What `POST /_preload` did.
public struct PreloadResult: Sendable, Codable, Hashable {
    public var url: String
    /// Bytes of the resource now cached (for a playlist: of its segments preloaded).
    public var bytes: Int64 = 0
    public var playlists = 0
    public var segments = 0
    public var keys = 0
}

extension CacheProxy {
    /// Serves a playlist rewritten so that every URI in it comes back to the proxy. A VOD or master playlist stays
    /// cached; a live one is dropped after serving, so the next request fetches it fresh.
    func servePlaylist(
        _ url: URL,
        head: ResourceHead,
        reader: Int,
        request: HTTPRequestHead,
        writer: ResponseWriter
    ) async throws -> Bool {
        let text: String
        do {
            text = try await self.readPlaylist(url, head: head, reader: reader, forward: request.headers)
        } catch let error as MediaCacheError {
            try await writer.error(.badGateway, error.message, headOnly: request.method == .HEAD)
            return true
        }
        let base = URL(string: head.url ?? "") ?? url
        let proxy = self.proxyBase(request)
        let rewritten = HLSPlaylist.rewrite(text, base: base) { resolved, reference in
            reference == .key ? proxy.key(for: resolved) : proxy.path(for: resolved)
        }
        try await writer.respond(
            .ok,
            headers: [
                "Content-Type": head.contentType ?? "application/vnd.apple.mpegurl",
                "Cache-Control": "no-cache",
            ],
            body: ByteBuffer(string: rewritten),
            headOnly: request.method == .HEAD
        )
        return true
    }

    /// The whole text of a playlist (read through the cache); a live one is dropped from the cache after.
    func readPlaylist(_ url: URL, head: ResourceHead, reader: Int, forward: HTTPHeaders) async throws -> String {
        let limit = Int64(self.configuration.maxPlaylistBytes)
        if let total = head.totalLength, total > limit {
            await self.engine.leave(head.key, reader: reader)
            throw MediaCacheError(.tooLarge, "the playlist is larger than \(limit) bytes")
        }
        var buffer = ByteBuffer()
        var position: Int64 = 0
        reading: while true {
            let read = await self.engine.next(
                key: head.key,
                reader: reader,
                generation: head.generation,
                position: position,
                upper: head.totalLength ?? (limit + 1),
                url: url,
                forward: forward
            )
            switch read {
            case .serve(let piece, let generation):
                var bytes: ByteBuffer
                do {
                    bytes = try await self.read(piece, key: head.key, generation: generation)
                } catch {
                    await self.engine.release(head.key, range: piece)
                    await self.engine.leave(head.key, reader: reader)
                    throw MediaCacheError(.changed, "a cached piece of the playlist cannot be read: \(error)")
                }
                await self.engine.release(head.key, range: piece)
                buffer.writeBuffer(&bytes)
                position = piece.upperBound
                if position > limit {
                    await self.engine.leave(head.key, reader: reader)
                    throw MediaCacheError(.tooLarge, "the playlist is larger than \(limit) bytes")
                }
            case .end:
                break reading
            case .changed:
                throw MediaCacheError(.changed, "the playlist changed while it was read")
            case .failed(let failure):
                throw MediaCacheError(.upstream, "the playlist could not be fetched: \(failure)")
            }
        }
        let text = String(decoding: buffer.readableBytesView, as: UTF8.self)
        if HLSPlaylist.isLive(text) { await self.engine.setLive(head.key, true) }
        return text
    }

    /// Serves a live playlist straight from the origin, rewritten; once it has ended (`EXT-X-ENDLIST`), the next
    /// request caches it again.
    func serveLivePlaylist(_ url: URL, key: String, request: HTTPRequestHead, writer: ResponseWriter) async throws {
        let headOnly = request.method == .HEAD
        var headers = HTTPHeaders()
        for name in OriginClient.forwardedHeaders {
            for value in request.headers[name] { headers.add(name: name, value: value) }
        }
        let response: OriginResponse
        let body: ByteBuffer
        do {
            response = try await self.origin.request(url, headers: headers)
            body = try await response.body.collect(upTo: self.configuration.maxPlaylistBytes)
        } catch let error as MediaCacheError {
            try await writer.error(.badGateway, error.message, headOnly: headOnly)
            return
        } catch {
            try await writer.error(.badGateway, "the live playlist could not be read: \(error)", headOnly: headOnly)
            return
        }
        await self.engine.countOriginBytes(Int64(body.readableBytes))
        await self.engine.account(cached: 0, fetched: Int64(body.readableBytes))
        guard response.status == 200 else {
            try await writer.error(
                HTTPResponseStatus(statusCode: response.status),
                "the origin answered \(response.status)",
                headOnly: headOnly
            )
            return
        }
        let text = String(decoding: body.readableBytesView, as: UTF8.self)
        if !HLSPlaylist.isLive(text) { await self.engine.setLive(key, false) }
        let proxy = self.proxyBase(request)
        let rewritten = HLSPlaylist.rewrite(text, base: response.url) { resolved, reference in
            reference == .key ? proxy.key(for: resolved) : proxy.path(for: resolved)
        }
        try await writer.respond(
            .ok,
            headers: [
                "Content-Type": response.headers.first(name: "Content-Type") ?? "application/vnd.apple.mpegurl",
                "Cache-Control": "no-cache",
            ],
            body: ByteBuffer(string: rewritten),
            headOnly: headOnly
        )
    }

    /// Where the rewritten URIs point: the address the player used (its Host header), else the configured one.
    func proxyBase(_ request: HTTPRequestHead) -> ProxyURL {
        if let host = request.headers.first(name: "Host"), let colon = host.lastIndex(of: ":"),
            let port = Int(host[host.index(after: colon)...])
        {
            return ProxyURL(host: String(host[..<colon]), port: port)
        }
        return ProxyURL(host: self.configuration.host, port: self.configuration.port)
    }

    /// Serves an HLS key: from the app's key provider, or the memory store, or the origin (then kept in memory).
    /// Never written to disk, never cacheable by the player.
    func serveKey(query: String?, request: HTTPRequestHead, writer: ResponseWriter) async throws {
        let headOnly = request.method == .HEAD
        guard let url = Self.parameter("url", in: query).flatMap(URL.init(string:)) else {
            try await writer.error(.badRequest, "/_key needs ?url=<key URI>", headOnly: headOnly)
            return
        }
        let key: [UInt8]
        do {
            key = try await self.key(for: url, forward: request.headers)
        } catch let error as MediaCacheError {
            let status: HTTPResponseStatus =
                switch error.code {
                case .notAllowed: .forbidden
                case .badOrigin: .badRequest
                default: .badGateway
                }
            try await writer.error(status, error.message, headOnly: headOnly)
            return
        }
        try await writer.respond(
            .ok,
            headers: ["Content-Type": "application/octet-stream", "Cache-Control": "no-store"],
            body: ByteBuffer(bytes: key),
            headOnly: headOnly
        )
    }

    func key(for url: URL, forward: HTTPHeaders) async throws -> [UInt8] {
        if let provider = self.configuration.keyProvider {
            do {
                if let key = try await provider(url) { return key }
            } catch {
                throw MediaCacheError(.upstream, "the key provider failed: \(error)")
            }
        }
        // Held under the URL without its credentials, apart for each credential (a key fetched with one request's
        // token or cookie is never handed to a request without it); not under the app's cache-key hook, which may
        // merge URLs that name different keys.
        let parameters = self.configuration.credentialParameters
        let memoryKey = Credentials(url: url, headers: forward, parameters: parameters)
            .key(Credentials.stripped(url, parameters: parameters).absoluteString)
        if let key = await self.keys.key(for: memoryKey) { return key }
        try self.origin.check(url)
        var headers = HTTPHeaders()
        for name in OriginClient.forwardedHeaders {
            for value in forward[name] { headers.add(name: name, value: value) }
        }
        let response = try await self.origin.request(url, headers: headers)
        guard response.status == 200 else {
            throw MediaCacheError(.upstream, "the key's origin answered \(response.status)")
        }
        let body: ByteBuffer
        do {
            body = try await response.body.collect(upTo: self.configuration.maxKeyBytes)
        } catch {
            throw MediaCacheError(.tooLarge, "the key is larger than \(self.configuration.maxKeyBytes) bytes")
        }
        let key = Array(body.readableBytesView)
        // A key someone's credentials fetched, or one the origin marks private, is fetched again at every request
        // (as cached private media is revalidated): a revoked token gets no key from memory.
        let isPrivate = response.headers["Cache-Control"].contains { $0.lowercased().contains("private") }
        if !Credentials.isPrivate(key: memoryKey) && !isPrivate {
            await self.keys.store(key, for: memoryKey)
        }
        return key
    }

    /// `POST /_preload?url=&bytes=N&segments=M`: caches the first `bytes` of a resource (default one block), or a
    /// playlist, its first variant's playlist, and the first `segments` segments with their keys (in memory) and
    /// initialization sections.
    func preload(query: String?, forward: HTTPHeaders, writer: ResponseWriter) async throws {
        guard let url = Self.parameter("url", in: query).flatMap(URL.init(string:)) else {
            try await writer.error(.badRequest, "POST /_preload needs ?url=<origin URL>")
            return
        }
        let bytes = Self.parameter("bytes", in: query).flatMap { Int64($0) } ?? self.configuration.blockBytes
        let segments = Self.parameter("segments", in: query).flatMap { Int($0) } ?? self.configuration.preloadSegments
        guard bytes > 0, segments >= 0 else {
            try await writer.error(.badRequest, "bytes must be positive and segments not negative")
            return
        }
        var result = PreloadResult(url: url.absoluteString)
        do {
            try self.origin.check(url)
            try await self.preload(url, bytes: bytes, segments: segments, forward: forward, depth: 0, into: &result)
        } catch let error as MediaCacheError {
            try await writer.error(error.code == .notAllowed ? .forbidden : .badGateway, error.message)
            return
        }
        try await writer.json(result)
    }

    private func preload(
        _ url: URL,
        bytes: Int64,
        segments: Int,
        forward: HTTPHeaders,
        depth: Int,
        into result: inout PreloadResult
    ) async throws {
        let key = self.cacheKey(for: url, headers: forward)
        let opening = await self.engine.open(key: key, url: url, forward: forward, start: 0, upper: bytes)
        guard case .resource(let head, let reader) = opening else {
            if case .failed(let failure) = opening, failure != .passthrough {
                throw MediaCacheError(.upstream, "\(url.absoluteString): \(failure)")
            }
            return  // not cacheable: nothing to preload
        }
        guard HLSPlaylist.isPlaylist(contentType: head.contentType, url: url) else {
            result.bytes += try await self.fill(head, reader: reader, upTo: bytes, url: url, forward: forward)
            return
        }
        let text = try await self.readPlaylist(url, head: head, reader: reader, forward: forward)
        result.playlists += 1
        let references = HLSPlaylist.references(in: text, base: URL(string: head.url ?? "") ?? url)
        if depth == 0, let variant = references.first(where: { $0.reference == .variant }) {
            try await self.preload(
                variant.url,
                bytes: bytes,
                segments: segments,
                forward: forward,
                depth: 1,
                into: &result
            )
            return
        }
        var seen = Set<URL>()
        var keysSeen = Set<URL>()
        var segmentsLeft = segments
        for reference in references where segmentsLeft > 0 {
            switch reference.reference {
            case .key:
                guard keysSeen.insert(reference.url).inserted else { continue }
                _ = try await self.key(for: reference.url, forward: forward)
                result.keys += 1
            case .map, .segment:
                if reference.reference == .segment { segmentsLeft -= 1 }
                guard seen.insert(reference.url).inserted else { continue }
                let segmentKey = self.cacheKey(for: reference.url, headers: forward)
                let opened = await self.engine.open(
                    key: segmentKey,
                    url: reference.url,
                    forward: forward,
                    start: 0,
                    upper: nil
                )
                guard case .resource(let segmentHead, let segmentReader) = opened else { continue }
                result.bytes += try await self.fill(
                    segmentHead,
                    reader: segmentReader,
                    upTo: .max,
                    url: reference.url,
                    forward: forward
                )
                if reference.reference == .segment { result.segments += 1 }
            case .variant, .other:
                continue
            }
        }
    }

    /// Makes the cache hold a resource's first `limit` bytes (reading through it as a player would, sending
    /// nothing); returns how many it holds.
    private func fill(
        _ head: ResourceHead,
        reader: Int,
        upTo limit: Int64,
        url: URL,
        forward: HTTPHeaders
    ) async throws -> Int64 {
        let upper = min(limit, head.totalLength ?? .max)
        var position: Int64 = 0
        while position < upper {
            let read = await self.engine.next(
                key: head.key,
                reader: reader,
                generation: head.generation,
                position: position,
                upper: upper == .max ? nil : upper,
                url: url,
                forward: forward
            )
            switch read {
            case .serve(let piece, _):
                await self.engine.release(head.key, range: piece)
                position = piece.upperBound
            case .end:
                return position
            case .changed:
                throw MediaCacheError(.changed, "\(url.absoluteString) changed while it was preloaded")
            case .failed(let failure):
                throw MediaCacheError(.upstream, "\(url.absoluteString): \(failure)")
            }
        }
        await self.engine.leave(head.key, reader: reader)
        return position
    }
}

extension ProxyURL {
    /// The proxy URL of an HLS key.
    func key(for url: URL) -> URL {
        URL(string: "http://\(self.host):\(self.port)/_key?url=\(Self.percentEncode(url.absoluteString))")!
    }
}
