public import CourierProtocol
import CourierVocabulary
import CourierWire
import Crypto
import Foundation
public import NIOCore

/// What became of an upload made by ``NativeTestClient/upload(_:stream:upTo:chunk:)``.
public enum UploadResult: Sendable {
    /// `upload_ready` said to start at `offset`; the server answered `upload_done`.
    case done(Courier_V1_UploadDone, startedAt: UInt64)
    /// The client stopped sending at `offset`, as asked (a cut connection).
    case cut(startedAt: UInt64, offset: Int)
    case refused(Courier_V1_Error)

    public var done: Courier_V1_UploadDone? {
        if case .done(let done, _) = self { return done }
        return nil
    }

    public var error: Courier_V1_Error? {
        if case .refused(let error) = self { return error }
        return nil
    }
}

extension [UInt8] {
    /// Appends a buffer's bytes with one copy (an element-by-element append of megabytes stalls a debug build).
    public mutating func append(_ buffer: ByteBuffer) {
        buffer.withUnsafeReadableBytes { self.append(contentsOf: $0) }
    }
}

/// Uploads and fetches as the protocol says: from the server's offset, within the windows.
extension NativeTestClient {
    public static func sha256(_ bytes: [UInt8]) -> String {
        SHA256Hex.string(bytes.withUnsafeBytes { SHA256.hash(data: $0) })
    }

    public static func sha256(_ buffer: ByteBuffer) -> String {
        SHA256Hex.string(buffer.withUnsafeReadableBytes { SHA256.hash(data: $0) })
    }

}

/// Uploads and fetches as the protocol says, on either transport.
extension EnvelopeTestClient {
    /// Uploads `bytes` on a stream, chunk by chunk within the server's window; with `upTo`, stops once that many
    /// bytes of the file are sent (with `endingThere`, ending the stream there: an upload cut short).
    public func upload(
        _ bytes: [UInt8],
        stream: UInt32,
        upTo limit: Int? = nil,
        endingThere: Bool = false,
        chunk: Int = 64 * 1024
    ) async throws
        -> UploadResult
    {
        var request = ClientEnvelope()
        request.upload.sha256 = NativeTestClient.sha256(bytes)
        request.upload.size = UInt64(bytes.count)
        request.upload.streamID = stream
        let id = try await self.send(request)
        let ready = try await self.expect(timeout: Patience.reply, "upload_ready") { $0.requestID == id ? $0 : nil }
        if case .error(let error)? = ready.body { return .refused(error) }
        let start = ready.uploadReady.offset
        var offset = Int(start)
        var window = Int(ready.uploadReady.windowBytes)
        let end = min(bytes.count, limit ?? bytes.count)
        while offset < end {
            if window == 0 {
                let update = try await self.expectFrame(timeout: Patience.reply, "a window update") {
                    $0.kind == .windowUpdate && $0.streamID == stream
                }
                window += Int(update.windowIncrement ?? 0)
                continue
            }
            let count = min(chunk, window, end - offset)
            let last = offset + count == (endingThere ? end : bytes.count)
            try await self.send(
                frame: NativeFrame(
                    kind: .mediaChunk,
                    flags: last ? .endStream : [],
                    streamID: stream,
                    payload: ByteBuffer(bytes: bytes[offset..<(offset + count)])
                )
            )
            offset += count
            window -= count
        }
        if offset < bytes.count && !endingThere { return .cut(startedAt: start, offset: offset) }
        let answer = try await self.expect(timeout: Patience.reply, "upload_done") { $0.requestID == id ? $0 : nil }
        switch answer.body {
        case .uploadDone(let done)?: return .done(done, startedAt: start)
        case .error(let error)?: return .refused(error)
        default: throw TestClientTimeout(description: "unexpected answer \(answer)")
        }
    }

    /// Fetches a range on a stream, granting the window back as chunks arrive.
    public func fetch(
        _ sha256: String,
        stream: UInt32,
        offset: UInt64 = 0,
        length: UInt64 = 0,
        window: UInt32 = 0
    ) async throws -> Result<(Courier_V1_FetchReady, [UInt8]), Courier_V1_Error> {
        let ready = try await self.startFetch(sha256, stream: stream, offset: offset, length: length, window: window)
        guard case .success(let info) = ready else { return ready.map { ($0, []) } }
        var bytes: [UInt8] = []
        while true {
            let frame = try await self.expectFrame(timeout: Patience.reply, "a chunk of stream \(stream)") {
                $0.kind == .mediaChunk && $0.streamID == stream
            }
            bytes.append(frame.payload)
            if frame.flags.contains(.endStream) { break }
            try await self.send(frame: .windowUpdate(streamID: stream, increment: UInt32(frame.payloadLength)))
        }
        return .success((info, bytes))
    }

    public func startFetch(
        _ sha256: String,
        stream: UInt32,
        offset: UInt64 = 0,
        length: UInt64 = 0,
        window: UInt32 = 0
    ) async throws -> Result<Courier_V1_FetchReady, Courier_V1_Error> {
        var request = ClientEnvelope()
        request.fetch.sha256 = sha256
        request.fetch.streamID = stream
        request.fetch.offset = offset
        request.fetch.length = length
        request.fetch.windowBytes = window
        let id = try await self.send(request)
        let ready = try await self.expect(timeout: Patience.reply, "fetch_ready") { $0.requestID == id ? $0 : nil }
        switch ready.body {
        case .fetchReady(let info)?: return .success(info)
        case .error(let error)?: return .failure(error)
        default: throw TestClientTimeout(description: "unexpected answer \(ready)")
        }
    }

    /// Sends a media message and waits for its answer.
    public func sendMedia(
        _ media: Courier_V1_Media,
        to peer: Courier_V1_Conversation,
        id: String = ""
    ) async throws -> ServerEnvelope {
        var envelope = ClientEnvelope()
        envelope.send.id = id
        envelope.send.to = peer
        envelope.send.body.media = media
        let requestID = try await self.send(envelope)
        return try await self.expect(timeout: Patience.reply, "the answer to request \(requestID)") {
            $0.requestID == requestID ? $0 : nil
        }
    }
}

extension Courier_V1_Media {
    public static func of(
        _ bytes: [UInt8],
        kind: Kind = .image,
        mime: String = "image/jpeg",
        name: String = "photo.jpg"
    )
        -> Courier_V1_Media
    {
        var media = Courier_V1_Media()
        media.kind = kind
        media.sha256 = NativeTestClient.sha256(bytes)
        media.size = UInt64(bytes.count)
        media.mime = mime
        media.name = name
        return media
    }
}

/// A refusal as the error of a `Result` (``NativeTestClient/fetch(_:stream:offset:length:window:)``).
extension Courier_V1_Error: Error {}
