import NIOCore
import NIOHTTP1
import NIOPosix

/// Writes one response to a player's connection, each part awaited until the connection has taken it (so a file
/// region's file can be closed after it, and a slow player slows the writer instead of filling memory).
struct ResponseWriter: Sendable {
    let channel: any Channel
    let version: HTTPVersion
    let keepAlive: Bool

    /// Queues the head: it leaves with the first part of the body (or the end), one write fewer per response. A
    /// failure to write it shows in that part's write.
    ///
    /// Every response says `Content-Security-Policy: sandbox`: whatever an origin sends (an HTML page, an SVG with
    /// a script) is shown by a browser, if at all, without scripts and from an origin of its own, never as a page of
    /// the proxy's that could call its control endpoints. Text, JSON and XML also say `X-Content-Type-Options:
    /// nosniff` (never guessed to be a page); media does not (a browser's cross-origin checks would refuse media
    /// with it whose type the origin got wrong). Players ignore both.
    func head(_ status: HTTPResponseStatus, _ headers: HTTPHeaders) async throws {
        var headers = headers
        headers.replaceOrAdd(name: "Content-Security-Policy", value: "sandbox")
        if let type = headers.first(name: "Content-Type")?.lowercased(),
            type.hasPrefix("text/") || type.contains("json") || type.contains("xml")
        {
            headers.replaceOrAdd(name: "X-Content-Type-Options", value: "nosniff")
        }
        if !self.keepAlive { headers.replaceOrAdd(name: "Connection", value: "close") }
        self.channel.write(
            HTTPServerResponsePart.head(HTTPResponseHead(version: self.version, status: status, headers: headers)),
            promise: nil
        )
    }

    func body(_ buffer: ByteBuffer) async throws {
        try await self.channel.writeAndFlush(HTTPServerResponsePart.body(.byteBuffer(buffer)))
    }

    func body(_ region: FileRegion) async throws {
        try await self.channel.writeAndFlush(HTTPServerResponsePart.body(.fileRegion(region)))
    }

    /// Writes file regions back to back and flushes them together (the socket never sits idle between two of
    /// them); the future completes once the connection has taken the last.
    func startBody(_ regions: [FileRegion]) -> EventLoopFuture<Void> {
        guard let last = regions.last else { return self.channel.eventLoop.makeSucceededVoidFuture() }
        for region in regions.dropLast() {
            self.channel.write(HTTPServerResponsePart.body(.fileRegion(region)), promise: nil)
        }
        return self.channel.writeAndFlush(HTTPServerResponsePart.body(.fileRegion(last)))
    }

    func end() async throws {
        try await self.channel.writeAndFlush(HTTPServerResponsePart.end(nil))
    }

    /// A whole response with a small body.
    func respond(
        _ status: HTTPResponseStatus,
        headers: HTTPHeaders = [:],
        body: ByteBuffer? = nil,
        headOnly: Bool = false
    ) async throws {
        var headers = headers
        // A 204 has no body, and says no length (RFC 9110).
        if status != .noContent {
            headers.replaceOrAdd(name: "Content-Length", value: String(body?.readableBytes ?? 0))
        }
        try await self.head(status, headers)
        if let body, !headOnly, body.readableBytes > 0 { try await self.body(body) }
        try await self.end()
    }

    /// A plain-text error response.
    func error(_ status: HTTPResponseStatus, _ message: String, headOnly: Bool = false) async throws {
        try await self.respond(
            status,
            headers: ["Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-store"],
            body: ByteBuffer(string: message + "\n"),
            headOnly: headOnly
        )
    }

    /// Cuts the response off: the player sees a short body, never padding or bytes of another version.
    func abort() {
        self.channel.close(promise: nil)
    }
}

/// Sends a response's cached bytes straight from one generation's block files, as file regions (sendfile). Used by
/// one response at a time.
struct BlockSender {
    let folder: String
    let blockBytes: Int64

    /// Queues `range`, each block's part as one file region, written back to back, and flushes; the future completes
    /// once the connection has taken them all, and the files are closed then.
    ///
    /// The files are opened here, on the caller's thread: a block file of the cache is local and was just written
    /// or looked up, and opening it costs less than a hop to a thread pool and back, which a first byte waits for.
    func send(_ range: Range<Int64>, writer: ResponseWriter) throws -> EventLoopFuture<Void> {
        var position = range.lowerBound
        var regions: [FileRegion] = []
        var handles: [NIOFileHandle] = []
        do {
            while position < range.upperBound {
                let block = position / self.blockBytes
                let inBlock = position - block * self.blockBytes
                let count = min(range.upperBound - position, self.blockBytes - inBlock)
                let handle = try NIOFileHandle(_deprecatedPath: self.folder + "/" + String(block), mode: .read)
                handles.append(handle)
                regions.append(
                    FileRegion(fileHandle: handle, readerIndex: Int(inBlock), endIndex: Int(inBlock + count))
                )
                position += count
            }
        } catch {
            for handle in handles { try? handle.close() }
            throw error
        }
        let written = writer.startBody(regions)
        written.whenComplete { [handles] _ in
            for handle in handles { try? handle.close() }
        }
        return written
    }
}
