import CourierProtocol
import CourierStore
import CourierWire
import Foundation
import Logging
import NIOCore

/// A compat media packet whose bytes are arriving: the send it becomes, and its upload (nil once refused: the rest
/// of its bytes are skipped).
struct InlineUpload: Sendable {
    var envelope: ClientEnvelope
    var upload: MediaService.Upload?
}

extension SessionRequests {
    // MARK: Native uploads

    /// Starts or resumes an upload on a stream: answers `upload_ready` with the offset to send from, then takes the
    /// stream's chunks as they come (``receive(_:on:end:session:writer:)``).
    func startUpload(
        sha256: String,
        size: Int64,
        streamID: UInt32,
        requestID: UInt64,
        user: UserID,
        session: SessionWork,
        writer: SessionWriter<Transport>
    ) async throws {
        if let refusal = session.streams.refusal(toOpen: streamID) {
            throw SessionRefusal(ErrorCodes.invalidRequest, refusal)
        }
        let media = self.context.media
        var ready = ServerEnvelope()
        ready.requestID = requestID
        if try await self.context.store.uploadedSize(by: user, sha256: sha256) == size {
            // This user stored this file before: nothing to send.
            ready.uploadReady.offset = UInt64(size)
            try await writer.write(ready)
            var done = ServerEnvelope()
            done.requestID = requestID
            done.uploadDone.sha256 = sha256
            done.uploadDone.size = UInt64(size)
            done.uploadDone.quotaLeftBytes = UInt64(try await media.quotaLeft(for: user))
            try await writer.write(done)
            return
        }
        let id = MediaService.nativeUploadID(user: user, sha256: sha256)
        // Asked again on this connection (the client lost track of its stream): the new stream takes it over, and
        // the old one is reset and told.
        if let (previousID, previous) = session.streams.takeUpload(withID: id) {
            await media.release(previous.upload)
            if let frame = self.transport.frame(for: .reset(streamID: previousID, code: .cancel)) {
                try await writer.write(frame)
            }
            try await writer.write(
                self.errorEnvelope(
                    previous.requestID,
                    code: ErrorCodes.uploadBusy,
                    message: "stream \(streamID) took this upload over",
                    id: ""
                )
            )
        }
        let upload = try await media.begin(id: id, user: user, size: size, sha256: sha256)
        let window = media.configuration.uploadWindowBytes
        ready.uploadReady.offset = UInt64(upload.offset)
        ready.uploadReady.windowBytes = upload.isComplete ? 0 : UInt32(clamping: window)
        if upload.isComplete {
            do {
                try await writer.write(ready)
            } catch {
                await media.release(upload)
                throw error
            }
            // Every byte arrived before the connection broke: only the check is left.
            // The connection ended meanwhile: the upload is released, as its end would have.
            if !session.spawn({ await self.finishUpload(upload, requestID: requestID, writer: writer) }) {
                await self.context.media.release(upload)
            }
        } else {
            // On the connection's books before the answer goes out: if the write fails, the connection's end
            // releases the upload.
            session.streams.openUpload(
                streamID,
                MediaStreams.UploadStream(upload: upload, requestID: requestID, window: window)
            )
            try await writer.write(ready)
        }
    }

    /// A chunk of an upload stream: written to the blob store, then granted back to the client's window. Chunks on a
    /// stream that is not open (reset, refused, finished) are dropped.
    func receive(
        _ bytes: ByteBuffer,
        on streamID: UInt32,
        end: Bool,
        session: SessionWork,
        writer: SessionWriter<Transport>
    ) async throws {
        guard var stream = session.streams.takeUpload(streamID) else { return }
        let count = bytes.readableBytes
        func fail(_ code: String, _ message: String, reset: NativeErrorCode) async throws {
            // The stream is over; what is on disk stays for a resume.
            await self.context.media.release(stream.upload)
            self.context.metrics.refusals.increment()
            self.logger.info("upload refused", metadata: ["code": "\(code)", "reason": "\(message)"])
            if let frame = self.transport.frame(for: .reset(streamID: streamID, code: reset)) {
                try await writer.write(frame)
            }
            try await writer.write(
                self.errorEnvelope(stream.requestID, code: code, message: message, id: "")
            )
        }
        let maxChunk = self.context.media.configuration.maxChunkBytes
        if count > stream.window || count > maxChunk {
            try await fail(
                ErrorCodes.mediaMismatch,
                "\(count) bytes on stream \(streamID), whose window is \(stream.window) (and chunks at most \(maxChunk))",
                reset: .flowControlError
            )
            return
        }
        do {
            try await self.context.media.write(bytes, to: &stream.upload)
        } catch let error as CourierStoreError {
            try await fail("\(error.code)", error.message, reset: .cancel)
            return
        }
        // The window shrinks by what arrived and grows by what is granted back below, once it is stored (or gathered,
        // for storage that takes larger pieces: see MediaService.write).
        stream.window -= count
        guard !end else {
            let (upload, requestID) = (stream.upload, stream.requestID)
            // The connection ended meanwhile: the upload is released, as its end would have.
            if !session.spawn({ await self.finishUpload(upload, requestID: requestID, writer: writer) }) {
                await self.context.media.release(upload)
            }
            return
        }
        if count > 0, let frame = self.transport.frame(for: .window(streamID: streamID, increment: UInt32(count))) {
            stream.window += count
            session.streams.openUpload(streamID, stream)
            try await writer.write(frame)
        } else {
            session.streams.openUpload(streamID, stream)
        }
    }

    /// Checks and files a complete upload, and answers its request a second time: `upload_done` or an error.
    private func finishUpload(
        _ upload: MediaService.Upload,
        requestID: UInt64,
        writer: SessionWriter<Transport>
    ) async {
        var answer = ServerEnvelope()
        answer.requestID = requestID
        do {
            let (sha256, left) = try await self.context.media.finish(upload)
            answer.uploadDone.sha256 = sha256
            answer.uploadDone.size = UInt64(upload.size)
            answer.uploadDone.quotaLeftBytes = UInt64(left)
        } catch let error as CourierStoreError {
            self.context.metrics.refusals.increment()
            answer = self.errorEnvelope(requestID, code: "\(error.code)", message: error.message, id: "")
        } catch {
            answer = self.errorEnvelope(requestID, code: ErrorCodes.internalError, message: "\(error)", id: "")
        }
        try? await writer.write(answer)
    }

    // MARK: Native fetches

    /// Answers `fetch_ready` and starts sending the range on the stream, as the client's window allows.
    func startFetch(
        sha256: String,
        range: (offset: Int64, length: Int64),
        streamID: UInt32,
        window: Int,
        requestID: UInt64,
        user: UserID,
        session: SessionWork,
        writer: SessionWriter<Transport>
    ) async throws {
        if let refusal = session.streams.refusal(toOpen: streamID) {
            throw SessionRefusal(ErrorCodes.invalidRequest, refusal)
        }
        guard let access = try await self.context.store.mediaAccess(for: user, sha256: sha256) else {
            throw SessionRefusal(ErrorCodes.unknownMedia, "no media \(sha256) that this user may see")
        }
        // Checked before any sum: offset and length are each at most Int64.max, their sum need not be.
        guard range.offset <= access.size, range.length <= access.size - range.offset else {
            throw SessionRefusal(
                ErrorCodes.invalidRequest,
                "\(range.length) bytes from \(range.offset) are outside the \(access.size) bytes of \(sha256)"
            )
        }
        let end = range.length == 0 ? access.size : range.offset + range.length
        let media = self.context.media.configuration
        let generation = session.streams.openFetch(
            streamID,
            window: window == 0 ? media.defaultFetchWindowBytes : window
        )
        var ready = ServerEnvelope()
        ready.requestID = requestID
        ready.fetchReady.size = UInt64(access.size)
        ready.fetchReady.offset = UInt64(range.offset)
        ready.fetchReady.length = UInt64(end - range.offset)
        ready.fetchReady.mime = access.mime
        ready.fetchReady.name = access.name
        try await writer.write(ready)
        let bytes = range.offset..<end
        session.spawn {
            await self.send(sha256, bytes, on: streamID, generation: generation, session: session, writer: writer)
        }
    }

    /// Sends a range of a stored file as `mediaChunk` frames, never more than the stream's window, until it is done,
    /// reset, or the connection ends.
    private func send(
        _ sha256: String,
        _ range: Range<Int64>,
        on streamID: UInt32,
        generation: UInt64,
        session: SessionWork,
        writer: SessionWriter<Transport>
    ) async {
        defer { session.streams.finishFetch(streamID, generation: generation) }
        let chunk = Int64(self.context.media.configuration.maxChunkBytes)
        var position = range.lowerBound
        do {
            if range.isEmpty,
                let frame = self.transport.frame(for: .chunk(streamID: streamID, bytes: .init(), end: true))
            {
                try await writer.write(frame)
            }
            while position < range.upperBound {
                guard
                    let allowed = await session.streams.take(
                        streamID,
                        generation: generation,
                        upTo: Int(min(chunk, range.upperBound - position))
                    )
                else { return }
                try await self.context.media.read(sha256, range: position..<(position + Int64(allowed))) { bytes in
                    position += Int64(bytes.readableBytes)
                    let last = position == range.upperBound
                    // Reset while this chunk was read: the id may be another stream's now.
                    guard session.streams.isCurrent(streamID, generation: generation) else { return }
                    if let frame = self.transport.frame(for: .chunk(streamID: streamID, bytes: bytes, end: last)) {
                        try await writer.write(frame)
                    }
                }
            }
        } catch {
            self.logger.info("fetch ended", metadata: ["stream": "\(streamID)", "error": "\(error)"])
            if let frame = self.transport.frame(for: .reset(streamID: streamID, code: .internalError)) {
                try? await writer.write(frame)
            }
        }
    }

    // MARK: Compat media packets

    /// A compat media packet begins: starts its upload, or refuses it (its bytes are then skipped).
    func beginInline(
        _ envelope: ClientEnvelope,
        size: Int64,
        user: UserID,
        session: SessionWork,
        writer: SessionWriter<Transport>
    ) async throws -> SessionStateMachine.WorkEnd {
        var inline = InlineUpload(envelope: envelope, upload: nil)
        do {
            inline.upload = try await self.context.media.begin(
                id: MediaService.compatUploadID(user: user),
                user: user,
                size: size,
                sha256: nil
            )
        } catch let error as CourierStoreError {
            try await self.refuseInline(inline, error, writer: writer)
        }
        session.inline = inline
        return .goOn
    }

    /// The next bytes of a compat media packet; once the last are stored, the packet's send.
    func receiveInline(
        _ bytes: ByteBuffer,
        isLast: Bool,
        session: SessionWork,
        writer: SessionWriter<Transport>
    ) async throws -> SessionStateMachine.WorkEnd {
        guard var inline = session.inline else { return .goOn }
        if var upload = inline.upload {
            do {
                try await self.context.media.write(bytes, to: &upload)
                inline.upload = upload
            } catch let error as CourierStoreError {
                // A compat packet cannot be resumed: what came of it goes.
                await self.context.media.release(upload, discard: true)
                inline.upload = nil
                try await self.refuseInline(inline, error, writer: writer)
            }
        }
        guard isLast else {
            session.inline = inline
            return .goOn
        }
        session.inline = nil
        guard let upload = inline.upload else { return .goOn }
        // Complete: checked and filed, then sent as a message like any other (answered with `ack` or `error`).
        var envelope = inline.envelope
        do {
            envelope.send.body.media.sha256 = try await self.context.media.finish(upload).sha256
        } catch let error as CourierStoreError {
            try await self.refuseInline(InlineUpload(envelope: envelope), error, writer: writer)
            return .goOn
        }
        return .submit(envelope)
    }

    /// The compat media packet was broken off: what came of it goes, and the error is answered.
    func abandonInline(
        code: String,
        message: String,
        session: SessionWork,
        writer: SessionWriter<Transport>
    ) async throws -> SessionStateMachine.WorkEnd {
        let inline = session.inline
        session.inline = nil
        if let upload = inline?.upload { await self.context.media.release(upload, discard: true) }
        self.context.metrics.refusals.increment()
        try await writer.write(
            self.errorEnvelope(inline?.envelope.requestID ?? 0, code: code, message: message, id: "")
        )
        return .goOn
    }

    private func refuseInline(
        _ inline: InlineUpload,
        _ error: CourierStoreError,
        writer: SessionWriter<Transport>
    ) async throws {
        self.context.metrics.refusals.increment()
        self.logger.info("media packet refused", metadata: ["code": "\(error.code)", "reason": "\(error.message)"])
        try await writer.write(
            self.errorEnvelope(
                inline.envelope.requestID,
                code: "\(error.code)",
                message: error.message,
                id: inline.envelope.send.id
            )
        )
    }
}

extension InlineUpload {
    init(envelope: ClientEnvelope) {
        self.init(envelope: envelope, upload: nil)
    }
}
