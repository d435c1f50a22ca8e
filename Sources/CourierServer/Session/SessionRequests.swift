import CourierProtocol
import CourierStore
import Logging

/// The async work of a session: what needs the store, the hub or the blob store (logging in, history and the other
/// requests, media, a connection's end). Each function runs as a task of ``SessionWork`` for one request of the
/// connection's ``SessionHandler``, writes through a ``SessionWriter``, and ends with how the session goes on (a
/// ``SessionStateMachine/WorkEnd``), which the loop hands to the machine.
///
/// By concern: logging in (`+Login`), the other requests (`+Reads`), answers to writes and pages of events
/// (`+Answers`), media (`+Media`), a connection's end and presence (`+Presence`).
struct SessionRequests<Transport: SessionTransport>: Sendable {
    let context: SessionContext
    let transport: Transport
    /// The client's address and port, for logs.
    let remoteAddress: String
    /// The client's IP address alone.
    let clientIP: String

    /// The key the client's address counts under in per-address limits.
    var addressKey: String { AddressKey.of(ip: self.clientIP) }

    var logger: Logger {
        var logger = self.context.logger
        logger[metadataKey: "peer"] = "\(self.remoteAddress)"
        logger[metadataKey: "port"] = "\(self.transport.name)"
        return logger
    }

    /// The longest prefix of `text` of at most `maxBytes` UTF-8 bytes that ends at a character boundary.
    static func prefix(_ text: String, maxBytes: Int) -> String {
        var count = 0
        var end = text.startIndex
        for index in text.indices {
            let size = text[index].utf8.count
            guard count + size <= maxBytes else { break }
            count += size
            end = text.index(after: index)
        }
        return String(text[..<end])
    }

    /// A name a client chose, made safe for a log line: at most 64 characters, control characters escaped.
    static func printable(_ text: String) -> String {
        String(text.prefix(64)).debugDescription
    }

    func errorEnvelope(
        _ requestID: UInt64,
        code: String,
        message: String,
        id: String,
        retryAfter: Duration? = nil
    ) -> ServerEnvelope {
        var envelope = ServerEnvelope()
        envelope.requestID = requestID
        envelope.error.code = code
        envelope.error.message = message
        envelope.error.id = id
        if let retryAfter {
            envelope.error.retryAfterMs = UInt32(clamping: retryAfter.wholeMilliseconds)
        }
        return envelope
    }
}

/// A request the session refuses for the protocol's reasons (a stream id taken, a range outside the file), as
/// opposed to the store's (``CourierStoreError``): answered with its code, and the session goes on.
struct SessionRefusal: Error {
    var code: String
    var message: String
    /// When the client may try again (`retry_after_ms`), for a refusal of the rate.
    var retryAfter: Duration?

    init(_ code: String, _ message: String, retryAfter: Duration? = nil) {
        self.code = code
        self.message = message
        self.retryAfter = retryAfter
    }
}
