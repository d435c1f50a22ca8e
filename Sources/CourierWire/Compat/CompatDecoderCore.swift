import Foundation
import NIOCore

/// The state machine behind both compat decoders: headers, payloads, end markers and resynchronisation.
///
/// It never consumes a header until it can act on the whole of it, so a corrupt header is skipped from its own first
/// byte. In collecting mode it waits until a whole packet is readable and hands out a slice of it (no copy).
struct CompatDecoderCore: Sendable {
    enum Mode {
        case streaming
        case collecting
        /// Streams the packets whose type is in the set; collects the others.
        case selective(Set<String>)
    }

    enum Output {
        case head(CompatHeader)
        case body(ByteBuffer, isLast: Bool)
        case frame(CompatFrame)
        case skipped(CompatSkip)
    }

    private enum State {
        /// Waiting for a header; the first `scanned` readable bytes hold no CRLF.
        case header(scanned: Int)
        /// A header is parsed but not consumed; `headerLength` counts its CRLF.
        case parsed(CompatHeader, headerLength: Int)
        /// Streaming a payload: `remaining` bytes to come; `packetBytes` of this packet consumed so far.
        case payload(remaining: Int, packetBytes: Int)
        /// Discarding bytes up to and including the next end marker.
        case skipping(Resync)
        /// A fatal error was thrown; every later call throws it again.
        case failed(CourierWireError)
    }

    /// What a resynchronisation knows while it looks for the next end marker.
    private struct Resync: Sendable {
        /// Why the packet is corrupt.
        var reason: CourierWireError
        /// Bytes of the packet discarded so far.
        var discarded: Int
        /// How many readable bytes are known to hold no header-ending CRLF, so that they are not scanned again.
        var crlfFree: Int
        /// Where the corrupt header ended (just past its LF), if its CRLF was found.
        var headerEnd: Int?

        /// Accounts for `count` bytes dropped from the front of the buffer.
        mutating func advance(by count: Int) {
            self.discarded += count
            self.crlfFree = max(0, self.crlfFree - count)
            self.headerEnd = self.headerEnd.flatMap { $0 - count > 0 ? $0 - count : nil }
        }
    }

    private let mode: Mode
    private let maxHeaderBytes: Int
    /// The largest payload of a streamed packet, and of a collected one.
    private let payloadLimit: Int
    private let collectedLimit: Int
    private let marker: [UInt8]?
    private var state: State = .header(scanned: 0)
    /// Whether decoding already resumed once at a marker inside a corrupt header. A second corrupt header ending at
    /// the same CRLF is then skipped whole, so a header full of markers costs two parses, not one per marker.
    private var resumedInsideHeader = false

    init(mode: Mode, configuration: CompatFraming.Configuration) {
        precondition(
            configuration.maxHeaderBytes > 0 && configuration.maxHeaderBytes <= 1 << 30,
            "maxHeaderBytes must be from 1 to 2^30"
        )
        precondition(
            configuration.maxPayloadBytes >= 0 && configuration.maxPayloadBytes <= 1 << 62,
            "maxPayloadBytes must be from 0 to 2^62"
        )
        precondition(configuration.maxCollectedPayloadBytes >= 0, "maxCollectedPayloadBytes must not be negative")
        precondition(configuration.endMarker.map { !$0.isEmpty } ?? true, "an end marker must have at least one byte")
        self.mode = mode
        self.maxHeaderBytes = configuration.maxHeaderBytes
        self.marker = configuration.endMarker
        self.payloadLimit = configuration.maxPayloadBytes
        self.collectedLimit = min(configuration.maxPayloadBytes, configuration.maxCollectedPayloadBytes)
    }

    /// Whether this packet's payload is handed out in parts as it arrives, rather than whole.
    private func streams(_ header: CompatHeader) -> Bool {
        switch self.mode {
        case .streaming: true
        case .collecting: false
        case .selective(let types): types.contains(header.type)
        }
    }

    private var markerLength: Int { self.marker?.count ?? 0 }

    /// Whether the payload-end check passes at `offset`: trivially without a marker.
    private func markerFollows(in buffer: ByteBuffer, atOffset offset: Int) -> Bool {
        guard let marker = self.marker else { return true }
        return buffer.hasBytes(marker, atOffset: offset)
    }

    /// Handles corruption: without a marker it is fatal; with one, the decoder skips to the next marker.
    /// - Parameters:
    ///   - discarded: bytes of the packet already consumed.
    ///   - crlfFree: readable bytes known to hold no header-ending CRLF.
    ///   - headerEnd: where the corrupt header ended, if its CRLF was found.
    private mutating func corrupt(
        _ error: CourierWireError,
        discarded: Int,
        crlfFree: Int = 0,
        headerEnd: Int? = nil
    ) throws(CourierWireError) {
        guard self.marker != nil else {
            self.state = .failed(error)
            throw error
        }
        self.state = .skipping(Resync(reason: error, discarded: discarded, crlfFree: crlfFree, headerEnd: headerEnd))
    }

    mutating func decode(buffer: inout ByteBuffer) throws(CourierWireError) -> Output? {
        while true {
            switch self.state {
            case .header(let scanned):
                let readable = buffer.readableBytes
                let searchEnd = min(readable, self.maxHeaderBytes + 2)
                guard let lf = buffer.offsetOfCRLFTerminator(from: scanned, to: searchEnd) else {
                    if readable >= self.maxHeaderBytes + 2 {
                        try self.corrupt(
                            CourierWireError(.headerTooLong, "no CRLF within \(self.maxHeaderBytes) header bytes"),
                            discarded: 0,
                            crlfFree: searchEnd
                        )
                        continue
                    }
                    self.state = .header(scanned: searchEnd)
                    return nil
                }
                let header: CompatHeader
                do {
                    header = try buffer.withUnsafeReadableBytes { bytes throws(CourierWireError) in
                        try CompatHeader.parse(UnsafeRawBufferPointer(rebasing: bytes[..<(lf - 1)]))
                    }
                } catch {
                    try self.corrupt(error, discarded: 0, crlfFree: lf, headerEnd: lf + 1)
                    continue
                }
                let limit = self.streams(header) ? self.payloadLimit : self.collectedLimit
                guard header.size <= limit else {
                    try self.corrupt(
                        CourierWireError(
                            .sizeOverLimit,
                            "size \(header.size) is over the limit of \(limit)"
                        ),
                        discarded: 0,
                        crlfFree: lf,
                        headerEnd: lf + 1
                    )
                    continue
                }
                self.resumedInsideHeader = false
                self.state = .parsed(header, headerLength: lf + 1)

            case .parsed(let header, let headerLength):
                let streams = self.streams(header)
                if streams && header.size > 0 {
                    buffer.moveReaderIndex(forwardBy: headerLength)
                    self.state = .payload(remaining: header.size, packetBytes: headerLength)
                    return .head(header)
                }
                // A whole packet at once: collecting mode, or a zero-size packet while streaming.
                guard buffer.readableBytes >= headerLength + header.size + self.markerLength else { return nil }
                buffer.moveReaderIndex(forwardBy: headerLength)
                let payload = buffer.readSlice(length: header.size)!
                guard self.markerFollows(in: buffer, atOffset: 0) else {
                    try self.corrupt(
                        CourierWireError(.endMarkerMissing, "the end marker does not follow the payload"),
                        discarded: headerLength + header.size
                    )
                    continue
                }
                buffer.moveReaderIndex(forwardBy: self.markerLength)
                self.state = .header(scanned: 0)
                return streams ? .head(header) : .frame(CompatFrame(header: header, payload: payload))

            case .payload(let remaining, let packetBytes):
                let readable = buffer.readableBytes
                if readable >= remaining + self.markerLength {
                    let chunk = buffer.readSlice(length: remaining)!
                    guard self.markerFollows(in: buffer, atOffset: 0) else {
                        try self.corrupt(
                            CourierWireError(.endMarkerMissing, "the end marker does not follow the payload"),
                            discarded: packetBytes + remaining
                        )
                        continue
                    }
                    buffer.moveReaderIndex(forwardBy: self.markerLength)
                    self.state = .header(scanned: 0)
                    return .body(chunk, isLast: true)
                }
                // The payload's last bytes wait until its end marker can be checked.
                guard readable > 0 && readable < remaining else { return nil }
                self.state = .payload(remaining: remaining - readable, packetBytes: packetBytes + readable)
                return .body(buffer.readSlice(length: readable)!, isLast: false)

            case .skipping(var resync):
                let marker = self.marker!
                guard let offset = buffer.offset(of: marker) else {
                    // Keep what could be the start of a marker split across reads.
                    let drop = max(0, buffer.readableBytes - (marker.count - 1))
                    buffer.moveReaderIndex(forwardBy: drop)
                    resync.advance(by: drop)
                    self.state = .skipping(resync)
                    return nil
                }
                let resume = offset + marker.count
                if let headerEnd = resync.headerEnd, resume < headerEnd {
                    // The marker is inside the corrupt header. What follows it may be a good header whose start was
                    // lost with the end of the packet before; try that once, and skip the whole header next time.
                    if self.resumedInsideHeader {
                        buffer.moveReaderIndex(forwardBy: headerEnd)
                        resync.advance(by: headerEnd)
                        self.state = .skipping(resync)
                        continue
                    }
                    self.resumedInsideHeader = true
                } else {
                    self.resumedInsideHeader = false
                }
                buffer.moveReaderIndex(forwardBy: resume)
                resync.advance(by: resume)
                self.state = .header(scanned: resync.crlfFree)
                return .skipped(CompatSkip(byteCount: resync.discarded, reason: resync.reason))

            case .failed(let error):
                throw error
            }
        }
    }

    mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws(CourierWireError) -> Output? {
        if let output = try self.decode(buffer: &buffer) {
            return output
        }
        // Without EOF (the decoder is being removed) the rest of the bytes stay in the buffer for whoever reads next.
        guard seenEOF else { return nil }
        let rest = buffer.readableBytes
        let discarded: Int
        switch self.state {
        case .header where rest == 0:
            return nil
        case .header, .parsed:
            discarded = rest
        case .payload(_, let packetBytes):
            discarded = packetBytes + rest
        case .skipping(let resync):
            discarded = resync.discarded + rest
        case .failed(let error):
            throw error
        }
        // The stream ended inside a packet. With a marker that packet is reported skipped, like any corrupt one.
        let reason: CourierWireError
        if case .skipping(let resync) = self.state {
            reason = resync.reason
        } else {
            reason = CourierWireError(.truncated, "the stream ended inside a packet")
        }
        buffer.moveReaderIndex(forwardBy: rest)
        guard self.marker != nil else {
            self.state = .failed(reason)
            throw reason
        }
        self.state = .header(scanned: 0)
        return .skipped(CompatSkip(byteCount: discarded, reason: reason))
    }
}
