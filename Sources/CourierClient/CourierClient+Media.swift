import CourierProtocol
import CourierWire
import Crypto
public import Foundation
import NIOCore

/// How an upload started by ``CourierClient/sendMedia(file:to:kind:mime:name:id:)`` goes.
public enum UploadProgress: Hashable, Sendable {
    /// The file is read and hashed: its digest and size.
    case hashed(sha256: String, size: Int64)
    /// Bytes the server has taken (after a broken connection it resumes at the server's offset, so this can start
    /// above zero).
    case uploading(sent: Int64, total: Int64)
    /// The server holds the whole file, and the message is in the outbox: ``ClientEvent/sent(id:conversation:seq:time:)``
    /// follows once the server commits it.
    case queued(id: String, media: MediaInfo)
}

/// How a download started by ``CourierClient/download(_:)`` goes.
public enum DownloadProgress: Hashable, Sendable {
    /// Bytes on this device so far (a resumed download starts above zero).
    case downloading(received: Int64, total: Int64)
    /// The file, checked against its digest, in the local media cache.
    case finished(URL)
}

extension CourierClient {
    /// Sends a file as a media message: uploads it in chunks on a stream of its own (under the server's window, so
    /// texts sent meanwhile are not held up), resuming from the server's offset after a broken connection, then
    /// puts the message in the outbox. The file must not change while it is sent.
    ///
    /// - Parameters:
    ///   - kind: By default from the file's extension (images, audio, video; anything else a file).
    ///   - mime: By default from the file's extension (`application/octet-stream` when unknown).
    ///   - name: By default the file's name.
    ///   - durationMs: A voice clip's or video's length, where the caller knows it (0: unknown).
    ///   - width: An image's or video's width in pixels, where known (0: unknown).
    ///   - height: Its height in pixels, where known (0: unknown).
    /// - Returns: The progress; the sequence ends after ``UploadProgress/queued(id:media:)``, or throws the server's
    ///   refusal (``CourierClientError``: `media-too-large`, `quota-exceeded`, …) or a file error.
    public func sendMedia(
        file: URL,
        to conversation: Conversation,
        kind: MediaInfo.Kind? = nil,
        mime: String? = nil,
        name: String? = nil,
        durationMs: Int = 0,
        width: Int = 0,
        height: Int = 0,
        caption: String = "",
        id: String = UUID().uuidString
    ) -> AsyncThrowingStream<UploadProgress, any Error> {
        let (progress, continuation) = AsyncThrowingStream.makeStream(
            of: UploadProgress.self,
            bufferingPolicy: .bufferingNewest(64)
        )
        let task = Task {
            do {
                let (sha256, size) = try await Self.digest(of: file)
                continuation.yield(.hashed(sha256: sha256, size: size))
                let type = MediaTypes.guess(for: file)
                let media = MediaInfo(
                    kind: kind ?? type.kind,
                    sha256: sha256,
                    size: size,
                    mime: mime ?? type.mime,
                    name: name ?? file.lastPathComponent,
                    durationMs: durationMs,
                    width: width,
                    height: height,
                    caption: caption
                )
                try await self.upload(file, media: media) { sent in
                    continuation.yield(.uploading(sent: sent, total: size))
                }
                try Task.checkCancellation()
                try await self.store.enqueue(
                    [.init(id: id, conversation: conversation, text: "", media: media)],
                    instance: self.instance.id
                )
                self.outboxChanged()
                continuation.yield(.queued(id: id, media: media))
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return progress
    }

    /// Uploads until the server has the whole file, over as many connections as it takes. One upload of a file at a
    /// time: a second waits for the first, and then finds the server holding the file already.
    func upload(_ file: URL, media: MediaInfo, progress: (Int64) -> Void) async throws {
        try await self.media.uploads.claim(media.sha256)
        defer { self.media.uploads.release(media.sha256) }
        var broken: Link?
        while true {
            try Task.checkCancellation()
            let link = try await self.waitForLink(after: broken)
            do {
                try await self.upload(file, media: media, on: link, progress: progress)
                return
            } catch let error as CourierClientError where error == .notConnected {
                // The connection broke: the next one resumes from the server's offset.
                broken = link
            } catch let error as CourierClientError where error.code == ErrorCodes.uploadBusy {
                // The server still holds the upload for a connection of ours that broke: it lets go within its idle
                // timeout.
                try await Task.sleep(for: .seconds(1))
            }
        }
    }

    private func upload(_ file: URL, media: MediaInfo, on link: Link, progress: (Int64) -> Void) async throws {
        let stream = link.openStream()
        var ended = false
        defer { if ended { link.closeStream(stream) } else { link.abandonStream(stream) } }
        var request = ClientEnvelope()
        request.upload.sha256 = media.sha256
        request.upload.size = UInt64(media.size)
        request.upload.streamID = stream
        let (ready, id) = try await link.requestAnsweredTwice(request)
        var answered = false
        defer { if !answered { link.forgetLaterAnswer(to: id) } }
        guard case .uploadReady(let start)? = ready.body else { throw Self.unexpected(ready) }
        link.grant(stream, Int(start.windowBytes))
        var offset = Int64(start.offset)
        progress(offset)
        if offset < media.size {
            let handle = try FileHandle(forReadingFrom: file)
            defer { try? handle.close() }
            try handle.seek(toOffset: UInt64(offset))
            while offset < media.size {
                try Task.checkCancellation()
                let wanted = Int(min(Int64(link.maxChunkBytes), media.size - offset))
                guard let allowed = await link.takeWindow(stream, upTo: wanted) else {
                    // The stream was reset (the server refused the upload: its error is the second answer) or the
                    // connection ended (then this throws not-connected, and the upload resumes on the next).
                    let refusal = try await link.laterAnswer(to: id)
                    answered = true
                    throw Self.unexpected(refusal)
                }
                guard let bytes = try handle.read(upToCount: allowed), bytes.count == allowed else {
                    throw CourierClientError(code: "file-changed", message: "\(file.path) is shorter than it was")
                }
                offset += Int64(allowed)
                try await link.write(
                    frame: NativeFrame(
                        kind: .mediaChunk,
                        flags: offset == media.size ? .endStream : [],
                        streamID: stream,
                        payload: ByteBuffer(bytes: bytes)
                    )
                )
                progress(offset)
            }
        }
        ended = true
        let done = try await link.laterAnswer(to: id)
        answered = true
        guard case .uploadDone(let stored)? = done.body else { throw Self.unexpected(done) }
        guard stored.sha256 == media.sha256 else {
            throw CourierClientError(code: "media-mismatch", message: "the server stored \(stored.sha256)")
        }
    }

    /// Reads a file once: its SHA-256 and size.
    static func digest(of file: URL) async throws -> (String, Int64) {
        let handle = try FileHandle(forReadingFrom: file)
        defer { try? handle.close() }
        var hasher = SHA256()
        var size: Int64 = 0
        while let chunk = try handle.read(upToCount: 1024 * 1024), !chunk.isEmpty {
            hasher.update(data: chunk)
            size += Int64(chunk.count)
            await Task.yield()
        }
        return (SHA256Hex.string(hasher.finalize()), size)
    }

    /// Waits until the client is connected, on another connection than `broken` (one that failed the caller).
    ///
    /// - Throws: `notConnected` once the client stopped; `CancellationError` when the caller's task is cancelled.
    func waitForLink(after broken: Link? = nil) async throws -> Link {
        let id = self.state.withLock { state in
            defer { state.nextLinkWaiter += 1 }
            return state.nextLinkWaiter
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Link, any Error>) in
                let now: Result<Link, any Error>? = self.state.withLock { state in
                    if let link = state.link, link !== broken { return .success(link) }
                    if state.stopped { return .failure(CourierClientError.notConnected) }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    state.linkWaiters[id] = continuation
                    return nil
                }
                if let now { continuation.resume(with: now) }
            }
        } onCancel: {
            self.state.withLock { $0.linkWaiters.removeValue(forKey: id) }?.resume(throwing: CancellationError())
        }
    }

    /// Hands a new connection, or the client's stop (nil), to the tasks waiting for a connection.
    func wakeLinkWaiters(_ link: Link?) {
        let waiters = self.state.withLock { state in
            defer { state.linkWaiters = [:] }
            return Array(state.linkWaiters.values)
        }
        for waiter in waiters {
            if let link {
                waiter.resume(returning: link)
            } else {
                waiter.resume(throwing: CourierClientError.notConnected)
            }
        }
    }

    // MARK: Downloads

    /// Downloads a message's media into the local media cache (or finds it there), resuming a download that a
    /// broken connection cut, and checks it against its digest.
    public func download(_ media: MediaInfo) -> AsyncThrowingStream<DownloadProgress, any Error> {
        self.download(sha256: media.sha256, size: media.size)
    }

    /// Downloads media by its id (the SHA-256) alone, as ``download(_:)`` does; the size comes from the server.
    public func download(sha256: String) -> AsyncThrowingStream<DownloadProgress, any Error> {
        self.download(sha256: sha256, size: nil)
    }

    private func download(sha256: String, size: Int64?) -> AsyncThrowingStream<DownloadProgress, any Error> {
        let (progress, continuation) = AsyncThrowingStream.makeStream(
            of: DownloadProgress.self,
            bufferingPolicy: .bufferingNewest(64)
        )
        let task = Task {
            do {
                guard SHA256Hex.isValid(sha256) else {
                    throw CourierClientError(code: "invalid-request", message: "a media id is 64 lowercase hex digits")
                }
                // One download of a file at a time: a second waits for the first, then finds it in the cache.
                try await self.media.downloads.claim(sha256)
                defer { self.media.downloads.release(sha256) }
                if let file = self.media.file(sha256) {
                    continuation.yield(.finished(file))
                    continuation.finish()
                    return
                }
                var broken: Link?
                while true {
                    try Task.checkCancellation()
                    let link = try await self.waitForLink(after: broken)
                    do {
                        let file = try await self.download(sha256, size: size, on: link) { received, total in
                            continuation.yield(.downloading(received: received, total: total))
                        }
                        continuation.yield(.finished(file))
                        continuation.finish()
                        return
                    } catch let error as CourierClientError where error == .notConnected {
                        // The connection broke: the next one resumes from the part already here.
                        broken = link
                    }
                }
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return progress
    }

    /// A downloaded media file's bytes, from memory for small files (thumbnails, voice clips); nil when it is not
    /// downloaded.
    public func cachedData(_ media: MediaInfo) throws -> Data? {
        try self.media.data(media.sha256)
    }

    private func download(
        _ sha256: String,
        size known: Int64?,
        on link: Link,
        progress: (Int64, Int64) -> Void
    ) async throws -> URL {
        let part = try self.media.createPartFile(sha256)
        let handle = try FileHandle(forWritingTo: part)
        defer { try? handle.close() }
        var offset = Int64(try handle.seekToEnd())
        var size = known ?? -1
        if size >= 0, offset > size {
            try handle.truncate(atOffset: 0)
            offset = 0
        }
        // Hashed as it arrives when the download starts from the first byte (no second read to check it), on a
        // queue of its own while the next bytes are written.
        let hasher: BackgroundHasher? = offset == 0 ? BackgroundHasher() : nil
        if size < 0 || offset < size {
            let stream = link.openStream()
            var ended = false
            defer { if ended { link.closeStream(stream) } else { link.abandonStream(stream) } }
            let chunks = link.receiveChunks(on: stream)
            var request = ClientEnvelope()
            request.fetch.sha256 = sha256
            request.fetch.offset = UInt64(offset)
            request.fetch.streamID = stream
            request.fetch.windowBytes = UInt32(clamping: self.configuration.fetchWindowBytes)
            let ready = try await link.request(request)
            guard case .fetchReady(let info)? = ready.body else { throw Self.unexpected(ready) }
            size = Int64(info.size)
            progress(offset, size)
            for try await chunk in chunks {
                try Task.checkCancellation()
                await hasher?.update(chunk.bytes)
                try chunk.bytes.withUnsafeReadableBytes { try handle.write(contentsOf: $0) }
                offset += Int64(chunk.bytes.readableBytes)
                progress(offset, size)
                if chunk.end {
                    ended = true
                    break
                }
                // Given back per chunk: the server may grant less than was asked for (its own cap), and does not
                // say so; a client that waited to give back more than that would wait forever.
                if chunk.bytes.readableBytes > 0 {
                    try await link.write(
                        frame: .windowUpdate(streamID: stream, increment: UInt32(chunk.bytes.readableBytes))
                    )
                }
            }
            guard offset == size else { throw CourierClientError.notConnected }
        } else {
            progress(offset, size)
        }
        try handle.synchronize()
        try handle.close()
        let digest: String
        if let hasher {
            digest = SHA256Hex.string(await hasher.finalize())
        } else {
            digest = try await Self.digest(of: part).0
        }
        guard digest == sha256 else {
            try? FileManager.default.removeItem(at: part)
            throw CourierClientError(code: "media-mismatch", message: "the download's sha256 is \(digest)")
        }
        return try self.media.insert(part: part, sha256: sha256)
    }
}

/// Kinds and MIME types guessed from a file's extension.
enum MediaTypes {
    static let byExtension: [String: (MediaInfo.Kind, String)] = [
        "jpg": (.image, "image/jpeg"), "jpeg": (.image, "image/jpeg"), "png": (.image, "image/png"),
        "gif": (.image, "image/gif"), "webp": (.image, "image/webp"), "heic": (.image, "image/heic"),
        "m4a": (.voice, "audio/mp4"), "aac": (.voice, "audio/aac"), "mp3": (.voice, "audio/mpeg"),
        "ogg": (.voice, "audio/ogg"), "opus": (.voice, "audio/opus"), "wav": (.voice, "audio/wav"),
        "mp4": (.video, "video/mp4"), "m4v": (.video, "video/mp4"), "mov": (.video, "video/quicktime"),
        "webm": (.video, "video/webm"), "mkv": (.video, "video/x-matroska"), "ts": (.video, "video/mp2t"),
        "pdf": (.file, "application/pdf"), "txt": (.file, "text/plain"), "zip": (.file, "application/zip"),
    ]

    static func guess(for file: URL) -> (kind: MediaInfo.Kind, mime: String) {
        Self.byExtension[file.pathExtension.lowercased()] ?? (.file, "application/octet-stream")
    }
}
