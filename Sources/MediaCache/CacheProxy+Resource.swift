import CourierVocabulary
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

extension CacheProxy {
    /// The response headers passed on from an origin when a resource streams through uncached.
    static let passedHeaders = [
        "Content-Type", "Content-Length", "Content-Range", "Accept-Ranges", "ETag", "Last-Modified", "Cache-Control",
        "Expires", "Content-Disposition",
    ]

    /// Serves a resource: from the cache, fetching what is missing; false when the response was cut off.
    func serveResource(_ url: URL, request: HTTPRequestHead, writer: ResponseWriter) async throws -> Bool {
        let headOnly = request.method == .HEAD
        do {
            try self.origin.check(url)
        } catch let error as MediaCacheError {
            try await writer.error(
                error.code == .notAllowed ? .forbidden : .badRequest,
                error.message,
                headOnly: headOnly
            )
            return true
        }
        let key = self.cacheKey(for: url, headers: request.headers)
        var range = RangeRequest(header: request.headers.first(name: "Range"))
        let blockBytes = self.configuration.blockBytes
        // Where a first fetch starts, for a resource the cache has not seen. Numbers past any real length (a Range
        // header may say anything up to Int64.max) are kept from overflowing.
        let (start, upper): (Int64, Int64?) =
            switch range {
            case _ where headOnly: (0, blockBytes)
            case .whole: (0, nil)
            case .from(let first, let last):
                (min(first, Int64.max / 2), last.flatMap { $0 >= Int64.max / 2 ? nil : $0 + 1 })
            case .suffix: (0, blockBytes)
            }
        let (opening, cachedAtOpen) = await self.engine.openToServe(
            key: key,
            url: url,
            forward: request.headers,
            start: start,
            upper: upper
        )
        let head: ResourceHead
        let reader: Int
        switch opening {
        case .resource(let opened, let opener):
            head = opened
            reader = opener
        case .live:
            try await self.serveLivePlaylist(url, key: key, request: request, writer: writer)
            return true
        case .passthrough, .failed(.passthrough):
            return try await self.passthrough(url, request: request, writer: writer)
        case .failed(.upstream(let status)):
            try await writer.error(
                HTTPResponseStatus(statusCode: status),
                "the origin \(OriginClient.origin(of: url)) answered \(status)",
                headOnly: headOnly
            )
            return true
        case .failed(.unreachable(let reason)):
            self.logger.notice(
                "origin failed",
                metadata: ["origin": "\(OriginClient.origin(of: url))", "why": "\(reason)"]
            )
            try await writer.error(.badGateway, reason, headOnly: headOnly)
            return true
        }
        if HLSPlaylist.isPlaylist(contentType: head.contentType, url: url) {
            return try await self.servePlaylist(url, head: head, reader: reader, request: request, writer: writer)
        }
        // If-Range: a validator other than the cached one asks for the whole resource (a strong comparison: a weak
        // ETag never matches).
        if let ifRange = request.headers.first(name: "If-Range"),
            ifRange.hasPrefix("W/") || (ifRange != head.etag && ifRange != head.lastModified)
        {
            range = .whole
        }
        var headers = HTTPHeaders()
        headers.add(name: "Accept-Ranges", value: "bytes")
        headers.add(name: "Content-Type", value: head.contentType ?? "application/octet-stream")
        if let etag = head.etag { headers.add(name: "ETag", value: etag) }
        if let lastModified = head.lastModified { headers.add(name: "Last-Modified", value: lastModified) }
        let status: HTTPResponseStatus
        let bytes: Range<Int64>
        if let total = head.totalLength {
            if range.isPartial {
                guard let satisfiable = range.bytes(of: total) else {
                    await self.engine.leave(key, reader: reader)
                    headers.add(name: "Content-Range", value: "bytes */\(total)")
                    try await writer.respond(.rangeNotSatisfiable, headers: headers)
                    return true
                }
                bytes = satisfiable
                status = .partialContent
                headers.add(
                    name: "Content-Range",
                    value: "bytes \(bytes.lowerBound)-\(bytes.upperBound - 1)/\(total)"
                )
            } else {
                bytes = 0..<total
                status = .ok
            }
            headers.add(name: "Content-Length", value: String(bytes.count))
        } else {
            // The origin gave no length (a chunked body): the whole resource, chunked, as it arrives.
            bytes = 0..<Int64.max
            status = .ok
            if headOnly { headers.add(name: "Transfer-Encoding", value: "chunked") }
        }
        try await writer.head(status, headers)
        if headOnly {
            await self.engine.leave(key, reader: reader)
            try await writer.end()
            return true
        }
        var tally = Tally(cachedAtStart: cachedAtOpen)
        let completed: Bool
        do {
            completed = try await self.stream(
                bytes,
                of: head,
                reader: reader,
                url: url,
                request: request,
                writer: writer,
                tally: &tally
            )
        } catch {
            await self.engine.leave(key, reader: reader)
            await self.engine.account(cached: tally.cached, fetched: tally.fetched)
            throw error
        }
        await self.engine.leave(key, reader: reader)
        await self.engine.account(cached: tally.cached, fetched: tally.fetched)
        // The end goes out after the statistics count the request: whoever reads /_stats after the response sees it.
        if completed { try await writer.end() }
        return completed
    }

    /// Bytes sent that the cache held when the request came (`cached`), and the others (`fetched`).
    struct Tally {
        var cachedAtStart: ByteRangeSet
        var cached: Int64 = 0
        var fetched: Int64 = 0

        mutating func sent(_ range: Range<Int64>) {
            let held = self.cachedAtStart.intersection(count: range)
            self.cached += held
            self.fetched += Int64(range.count) - held
        }
    }

    /// Sends `bytes` of a resource (to its end when the range is open), as they become available, all but the
    /// response's end; false when the response was cut off.
    ///
    /// Two answers of the engine are in flight when an answer may hold two blocks or more: the next is asked for, and
    /// its files opened and queued, while the socket still sends the one before, so it never drains while the engine
    /// answers. Each is then half of what one answer may pin, so what a reader pins does not grow.
    private func stream(
        _ bytes: Range<Int64>,
        of head: ResourceHead,
        reader: Int,
        url: URL,
        request: HTTPRequestHead,
        writer: ResponseWriter,
        tally: inout Tally
    ) async throws -> Bool {
        let key = head.key
        let upperBound = bytes.upperBound == .max ? nil : bytes.upperBound
        var position = bytes.lowerBound
        let blockBytes = self.configuration.blockBytes
        let pipelined = self.engine.maxServeBytes >= 2 * blockBytes
        let limit = pipelined ? self.engine.maxServeBytes / 2 : self.engine.maxServeBytes
        let sender = BlockSender(
            folder: self.engine.store.generationFolder(for: key, generation: head.generation).path,
            blockBytes: blockBytes
        )
        /// The answer being sent, released (and counted) once the connection has taken it all.
        var sending: (piece: Range<Int64>, written: EventLoopFuture<Void>)?
        func finish(_ piece: Range<Int64>, _ written: EventLoopFuture<Void>) async throws {
            let failure: (any Error)?
            do {
                try await written.get()
                failure = nil
            } catch {
                failure = error
            }
            await self.engine.release(key, range: piece)
            if let failure { throw failure }
            tally.sent(piece)
        }
        func settle() async throws {
            guard let (piece, written) = sending else { return }
            sending = nil
            try await finish(piece, written)
        }
        do {
            while upperBound.map({ position < $0 }) ?? true {
                if !pipelined { try await settle() }
                let read = await self.engine.next(
                    key: key,
                    reader: reader,
                    generation: head.generation,
                    position: position,
                    upper: upperBound,
                    limit: limit,
                    url: url,
                    forward: request.headers
                )
                switch read {
                case .serve(let piece, _):
                    let written: EventLoopFuture<Void>
                    do {
                        written = try sender.send(piece, writer: writer)
                    } catch {
                        await self.engine.release(key, range: piece)
                        throw error
                    }
                    let previous = sending
                    sending = (piece, written)
                    position = piece.upperBound
                    // This answer is queued behind the one before: wait for that one only.
                    if let previous { try await finish(previous.piece, previous.written) }
                case .end:
                    if let upperBound, position < upperBound {
                        writer.abort()
                        try? await settle()
                        return false
                    }
                    try await settle()
                    return true
                case .changed, .failed:
                    self.logger.info("response cut off", metadata: ["key": "\(head.key)", "why": "\(read)"])
                    writer.abort()
                    try? await settle()
                    return false
                }
            }
            try await settle()
            return true
        } catch {
            // The connection failed or went: what is in flight fails with it, and is released.
            writer.abort()
            try? await settle()
            throw error
        }
    }

    /// Reads cached bytes into memory (playlists, preloads).
    func read(_ range: Range<Int64>, key: String, generation: Int) async throws -> ByteBuffer {
        var buffer = ByteBuffer()
        for piece in self.engine.store.pieces(of: range) {
            let path = self.engine.blockFile(piece.block, key: key, generation: generation).path
            let handle = try await self.engine.threadPool.runIfActive {
                try NIOFileHandle(_deprecatedPath: path, mode: .read)
            }
            defer { try? handle.close() }
            var bytes = try await self.engine.fileIO.read(
                fileHandle: handle,
                fromOffset: piece.offset,
                byteCount: piece.range.count,
                allocator: ByteBufferAllocator()
            )
            guard bytes.readableBytes == piece.range.count else {
                throw MediaCacheError(.changed, "a cached block is shorter than its index says")
            }
            buffer.writeBuffer(&bytes)
        }
        return buffer
    }

    /// Streams a resource from the origin uncached (`no-store`, or larger than the cache), the player's range
    /// passed on as it is.
    func passthrough(_ url: URL, request: HTTPRequestHead, writer: ResponseWriter) async throws -> Bool {
        var headers = HTTPHeaders()
        for name in OriginClient.forwardedHeaders + ["Range", "If-Range"] {
            for value in request.headers[name] { headers.add(name: name, value: value) }
        }
        let response: OriginResponse
        do {
            response = try await self.origin.request(url, method: request.method, headers: headers)
        } catch let error as MediaCacheError {
            try await writer.error(.badGateway, error.message, headOnly: request.method == .HEAD)
            return true
        }
        var passed = HTTPHeaders()
        for name in Self.passedHeaders {
            for value in response.headers[name] { passed.add(name: name, value: value) }
        }
        try await writer.head(HTTPResponseStatus(statusCode: response.status), passed)
        var total: Int64 = 0
        do {
            for try await chunk in response.body {
                total += Int64(chunk.readableBytes)
                try await writer.body(chunk)
            }
        } catch {
            writer.abort()
            await self.engine.countOriginBytes(total)
            await self.engine.account(cached: 0, fetched: total)
            return false
        }
        await self.engine.countOriginBytes(total)
        await self.engine.account(cached: 0, fetched: total)
        try await writer.end()
        return true
    }
}
