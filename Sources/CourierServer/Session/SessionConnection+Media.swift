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

extension SessionConnection {
    // MARK: Native uploads

    /// Starts or resumes an upload on a stream: answers `upload_ready` with the offset to send from, then takes the
    /// stream's chunks as they come (``receive(_:on:end:outbound:session:group:)``).
    func startUpload(
        sha256: String,
        size: Int64,
        streamID: UInt32,
        requestID: UInt64,
        user: UserID,
        outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>,
        session: SessionShared,
        group: inout ThrowingDiscardingTaskGroup<any Error>
    ) async throws {
        if let refusal = session.streams.refusal(toOpen: streamID) {
            throw CourierStoreError(.invalidRequest, refusal)
        }
        let media = self.context.media
        var ready = ServerEnvelope()
        ready.requestID = requestID
        if try await self.context.store.uploadedSize(by: user, sha256: sha256) == size {
            // This user stored this file before: nothing to send.
            ready.uploadReady.offset = UInt64(size)
            try await session.write(ready, transport: self.transport, to: outbound)
            var done = ServerEnvelope()
            done.requestID = requestID
            done.uploadDone.sha256 = sha256
            done.uploadDone.size = UInt64(size)
            done.uploadDone.quotaLeftBytes = UInt64(try await media.quotaLeft(for: user))
            try await session.write(done, transport: self.transport, to: outbound)
            return
        }
        let id = MediaService.nativeUploadID(user: user, sha256: sha256)
        // Asked again on this connection (the client lost track of its stream): the new stream takes it over, and
        // the old one is reset and told.
        if let (previousID, previous) = session.streams.takeUpload(withID: id) {
            await media.release(previous.upload)
            if let frame = self.transport.frame(for: .reset(streamID: previousID, code: .cancel)) {
                try await session.write(frame, to: outbound)
            }
            try await session.write(
                self.errorEnvelope(
                    previous.requestID,
                    code: ErrorCodes.uploadBusy,
                    message: "stream \(streamID) took this upload over",
                    id: ""
                ),
                transport: self.transport,
                to: outbound
            )
        }
        let upload = try await media.begin(id: id, user: user, size: size, sha256: sha256)
        let window = media.configuration.uploadWindowBytes
        ready.uploadReady.offset = UInt64(upload.offset)
        ready.uploadReady.windowBytes = upload.isComplete ? 0 : UInt32(clamping: window)
        if upload.isComplete {
            do {
                try await session.write(ready, transport: self.transport, to: outbound)
            } catch {
                await media.release(upload)
                throw error
            }
            // Every byte arrived before the connection broke: only the check is left.
            group.addTask {
                await self.finishUpload(upload, requestID: requestID, session: session, outbound: outbound)
            }
        } else {
            // On the connection's books before the answer goes out: if the write fails, the connection's end
            // releases the upload.
            session.streams.openUpload(
                streamID,
                MediaStreams.UploadStream(upload: upload, requestID: requestID, window: window)
            )
            try await session.write(ready, transport: self.transport, to: outbound)
        }
    }

    /// A chunk of an upload stream: written to the blob store, then granted back to the client's window. Chunks on a
    /// stream that is not open (reset, refused, finished) are dropped.
    func receive(
        _ bytes: ByteBuffer,
        on streamID: UInt32,
        end: Bool,
        outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>,
        session: SessionShared,
        group: inout ThrowingDiscardingTaskGroup<any Error>
    ) async throws {
        guard var stream = session.streams.takeUpload(streamID) else { return }
        let count = bytes.readableBytes
        func fail(_ code: String, _ message: String, reset: NativeErrorCode) async throws {
            // The stream is over; what is on disk stays for a resume.
            await self.context.media.release(stream.upload)
            self.context.metrics.refusals.increment()
            self.logger.info("upload refused", metadata: ["code": "\(code)", "reason": "\(message)"])
            if let frame = self.transport.frame(for: .reset(streamID: streamID, code: reset)) {
                try await session.write(frame, to: outbound)
            }
            try await session.write(
                self.errorEnvelope(stream.requestID, code: code, message: message, id: ""),
                transport: self.transport,
                to: outbound
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
        // The window shrinks by what arrived and grows by what is granted back below, once it is on disk.
        stream.window -= count
        guard !end else {
            let upload = stream.upload
            group.addTask {
                await self.finishUpload(upload, requestID: stream.requestID, session: session, outbound: outbound)
            }
            return
        }
        if count > 0, let frame = self.transport.frame(for: .window(streamID: streamID, increment: UInt32(count))) {
            stream.window += count
            session.streams.openUpload(streamID, stream)
            try await session.write(frame, to: outbound)
        } else {
            session.streams.openUpload(streamID, stream)
        }
    }

    /// Checks and files a complete upload, and answers its request a second time: `upload_done` or an error.
    private func finishUpload(
        _ upload: MediaService.Upload,
        requestID: UInt64,
        session: SessionShared,
        outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>
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
        try? await session.write(answer, transport: self.transport, to: outbound)
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
        outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>,
        session: SessionShared,
        group: inout ThrowingDiscardingTaskGroup<any Error>
    ) async throws {
        if let refusal = session.streams.refusal(toOpen: streamID) {
            throw CourierStoreError(.invalidRequest, refusal)
        }
        guard let access = try await self.context.store.mediaAccess(for: user, sha256: sha256) else {
            throw CourierStoreError(.unknownMedia, "no media \(sha256) that this user may see")
        }
        // Checked before any sum: offset and length are each at most Int64.max, their sum need not be.
        guard range.offset <= access.size, range.length <= access.size - range.offset else {
            throw CourierStoreError(
                .invalidRequest,
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
        try await session.write(ready, transport: self.transport, to: outbound)
        let bytes = range.offset..<end
        group.addTask {
            await self.send(sha256, bytes, on: streamID, generation: generation, session: session, outbound: outbound)
        }
    }

    /// Sends a range of a stored file as `mediaChunk` frames, never more than the stream's window, until it is done,
    /// reset, or the connection ends.
    private func send(
        _ sha256: String,
        _ range: Range<Int64>,
        on streamID: UInt32,
        generation: UInt64,
        session: SessionShared,
        outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>
    ) async {
        defer { session.streams.finishFetch(streamID, generation: generation) }
        let chunk = Int64(self.context.media.configuration.maxChunkBytes)
        var position = range.lowerBound
        do {
            if range.isEmpty,
                let frame = self.transport.frame(for: .chunk(streamID: streamID, bytes: .init(), end: true))
            {
                try await session.write(frame, to: outbound)
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
                        try await session.write(frame, to: outbound)
                    }
                }
            }
        } catch {
            self.logger.info("fetch ended", metadata: ["stream": "\(streamID)", "error": "\(error)"])
            if let frame = self.transport.frame(for: .reset(streamID: streamID, code: .internalError)) {
                try? await session.write(frame, to: outbound)
            }
        }
    }

    // MARK: Compat media packets

    /// A compat media packet begins: starts its upload, or refuses it (its bytes are then skipped).
    func beginInline(
        _ envelope: ClientEnvelope,
        size: Int64,
        user: UserID,
        session: SessionShared,
        _ outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>
    ) async throws -> InlineUpload {
        var inline = InlineUpload(envelope: envelope, upload: nil)
        do {
            let id = MediaService.compatUploadID(user: user)
            inline.upload = try await self.context.media.begin(id: id, user: user, size: size, sha256: nil)
        } catch let error as CourierStoreError {
            try await self.refuseInline(inline, error, session: session, outbound)
        }
        return inline
    }

    /// The next bytes of a compat media packet.
    func receiveInline(
        _ bytes: ByteBuffer,
        into inline: inout InlineUpload,
        session: SessionShared,
        _ outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>
    ) async throws {
        guard var upload = inline.upload else { return }
        do {
            try await self.context.media.write(bytes, to: &upload)
            inline.upload = upload
        } catch let error as CourierStoreError {
            // A compat packet cannot be resumed: what came of it goes.
            await self.context.media.release(upload, discard: true)
            inline.upload = nil
            try await self.refuseInline(inline, error, session: session, outbound)
        }
    }

    /// A compat media packet is complete: its upload is checked and filed, then it is sent as a message like any
    /// other (answered with `ack` or `error`).
    ///
    /// - Returns: false when the connection must stop reading.
    func finishInline(
        _ envelope: ClientEnvelope,
        upload: MediaService.Upload,
        outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>,
        session: SessionShared,
        group: inout ThrowingDiscardingTaskGroup<any Error>
    ) async throws -> Bool {
        var envelope = envelope
        do {
            envelope.send.body.media.sha256 = try await self.context.media.finish(upload).sha256
        } catch let error as CourierStoreError {
            try await self.refuseInline(InlineUpload(envelope: envelope), error, session: session, outbound)
            return true
        }
        return try await self.submit(envelope, outbound: outbound, session: session, group: &group)
    }

    private func refuseInline(
        _ inline: InlineUpload,
        _ error: CourierStoreError,
        session: SessionShared,
        _ outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>
    ) async throws {
        self.context.metrics.refusals.increment()
        self.logger.info("media packet refused", metadata: ["code": "\(error.code)", "reason": "\(error.message)"])
        try await session.write(
            self.errorEnvelope(
                inline.envelope.requestID,
                code: "\(error.code)",
                message: error.message,
                id: inline.envelope.send.id
            ),
            transport: self.transport,
            to: outbound
        )
    }
}

extension InlineUpload {
    init(envelope: ClientEnvelope) {
        self.init(envelope: envelope, upload: nil)
    }
}
