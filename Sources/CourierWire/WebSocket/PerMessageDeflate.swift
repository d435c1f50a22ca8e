import CompressNIO
import NIOCore
import NIOPosix

/// The permessage-deflate extension (RFC 7692) as Courier runs it: without context takeover on either side, so that
/// each message is compressed on its own. Nothing of a connection's compression outlives its message: an idle
/// connection holds no deflate state, and the zlib streams are one per thread (``DeflateStreams``), shared by every
/// connection of that event loop.
public enum PerMessageDeflate {
    /// The extension's name in `Sec-WebSocket-Extensions`.
    public static let name = "permessage-deflate"

    /// What a client offers: no context takeover either way.
    public static let clientOffer = "permessage-deflate; client_no_context_takeover; server_no_context_takeover"

    /// What a server answers to a client's `Sec-WebSocket-Extensions` headers, or nil when no offer can be taken
    /// (compression stays off).
    ///
    /// The first offer of permessage-deflate whose parameters Courier can honour is taken: each is known, given at most
    /// once, and `server_max_window_bits`, if given, is 15 (this server's deflate always uses the whole window).
    /// The answer always asks for no context takeover both ways.
    public static func negotiate(_ headers: [String]) -> String? {
        for offer in headers.flatMap({ $0.split(separator: ",") }) {
            let parts = offer.split(separator: ";").map { $0.trimmingASCIISpaces() }
            guard parts.first?.lowercased() == Self.name else { continue }
            var seen: Set<String> = []
            var acceptable = true
            var windowBits = false
            for parameter in parts.dropFirst() {
                let pair = parameter.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                    .map { $0.trimmingASCIISpaces() }
                guard let name = pair.first, !name.isEmpty else {
                    acceptable = false
                    break
                }
                let key = name.lowercased()
                let value = pair.count > 1 ? pair[1].trimmingCharacters(in: "\"") : nil
                guard seen.insert(key).inserted else {
                    acceptable = false
                    break
                }
                switch key {
                case "server_no_context_takeover", "client_no_context_takeover":
                    acceptable = value == nil
                case "client_max_window_bits":
                    // The client may compress with a smaller window: inflating takes any.
                    acceptable = value.map { Int($0).map { (8...15).contains($0) } ?? false } ?? true
                case "server_max_window_bits":
                    acceptable = value == "15"
                    windowBits = true
                default:
                    acceptable = false
                }
                if !acceptable { break }
            }
            if acceptable {
                // A window size the client asked for is confirmed (RFC 7692, 7.1.2.1).
                return "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
                    + (windowBits ? "; server_max_window_bits=15" : "")
            }
        }
        return nil
    }

    /// Whether a server's answer accepts ``clientOffer``.
    public static func accepted(_ headers: [String]) -> Bool {
        headers.flatMap { $0.split(separator: ",") }.contains {
            $0.split(separator: ";").first?.trimmingASCIISpaces().lowercased() == Self.name
        }
    }
}

/// The zlib streams one thread's connections share: a message is deflated or inflated from start to end in one call,
/// on the event loop, so one stream of each kind per thread serves them all.
final class DeflateStreams {
    private let compressor: ZlibCompressor?
    private let decompressor: ZlibDecompressor?

    // Each thread sees its own value only: nothing in it is shared between threads.
    private nonisolated(unsafe) static let perThread = ThreadSpecificVariable<DeflateStreams>()

    /// This thread's streams.
    static var current: DeflateStreams {
        if let streams = Self.perThread.currentValue { return streams }
        let streams = DeflateStreams()
        Self.perThread.currentValue = streams
        return streams
    }

    private init() {
        // Made once per thread, then reset after each message (cheaper than making them anew each time).
        self.compressor = try? ZlibCompressor(algorithm: .deflate, configuration: .init())
        self.decompressor = try? ZlibDecompressor(algorithm: .deflate, windowSize: 15)
    }

    /// The tail every flushed deflate block ends with, which RFC 7692 leaves off the wire.
    private static let tail: [UInt8] = [0x00, 0x00, 0xFF, 0xFF]

    /// `message` deflated as one message, or nil when that does not make it smaller.
    func deflate(_ message: ByteBuffer, allocator: ByteBufferAllocator) -> ByteBuffer? {
        guard let compressor = self.compressor else { return nil }
        var input = message
        defer { try? compressor.reset() }
        guard var output = try? input.compressStream(with: compressor, flush: .sync, allocator: allocator),
            input.readableBytes == 0, output.readableBytes >= 4,
            output.getBytes(at: output.writerIndex - 4, length: 4) == Self.tail
        else { return nil }
        output.moveWriterIndex(to: output.writerIndex - 4)
        return output.readableBytes < message.readableBytes ? output : nil
    }

    /// `message` (a compressed message's payload) inflated, at most `limit` bytes of it.
    ///
    /// - Throws: ``CourierWireError`` `frameTooLarge` past the limit, `inflateFailed` for bytes that are not deflate.
    func inflate(_ message: ByteBuffer, limit: Int, allocator: ByteBufferAllocator) throws -> ByteBuffer {
        guard let decompressor = self.decompressor else {
            throw CourierWireError(.inflateFailed, "no inflate stream could be made")
        }
        var input = message
        input.writeBytes(Self.tail)
        defer { try? decompressor.reset() }
        let output: ByteBuffer
        do {
            // One byte over the limit tells a message that fills it exactly from one that is larger.
            output = try input.decompressStream(with: decompressor, maxSize: limit + 1, allocator: allocator)
        } catch let error as CompressNIOError where error == .bufferOverflow {
            throw CourierWireError(.frameTooLarge, "the message inflates to more than \(limit) bytes")
        } catch {
            throw CourierWireError(.inflateFailed, "the compressed message does not inflate")
        }
        guard output.readableBytes <= limit else {
            throw CourierWireError(.frameTooLarge, "the message inflates to more than \(limit) bytes")
        }
        return output
    }
}

extension Substring {
    fileprivate func trimmingASCIISpaces() -> Substring {
        self.trimmingCharacters(in: " \t")
    }

    fileprivate func trimmingCharacters(in set: String) -> Substring {
        var trimmed = self
        while let first = trimmed.first, set.contains(first) { trimmed = trimmed.dropFirst() }
        while let last = trimmed.last, set.contains(last) { trimmed = trimmed.dropLast() }
        return trimmed
    }
}
