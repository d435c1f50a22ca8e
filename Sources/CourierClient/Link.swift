import CourierProtocol
import CourierWire
import NIOCore
import Synchronization

/// One connection to the server: writes envelopes, matches answers to requests, and tracks the outbox messages
/// sent on it.
final class Link: Sendable {
    private struct State {
        var nextRequestID: UInt64 = 1
        var waiting: [UInt64: CheckedContinuation<ServerEnvelope, any Error>] = [:]
        /// Request id → message id, for sends waiting for their acknowledgement.
        var sends: [UInt64: String] = [:]
        /// The newest message ids sent on this connection (so that a send is made once per connection, and its own
        /// event, if the server passes it back, is known for ours).
        var sent = RecentSet<String>(capacity: Link.recentSends)
        var slotWaiter: CheckedContinuation<Void, Never>?
        var closed = false
        /// Requests answered twice (uploads): the second answer, or who waits for it.
        var laterAnswers: [UInt64: LaterAnswer] = [:]
        var nextStreamID: UInt32 = 1
        /// Upload streams: the bytes the server lets this side send, and who waits for more.
        var windows: [UInt32: Int] = [:]
        var windowWaiters: [UInt32: (CheckedContinuation<Int?, Never>, wanted: Int)] = [:]
        /// Fetch streams: where their chunks go.
        var downloads: [UInt32: AsyncThrowingStream<MediaChunk, any Error>.Continuation] = [:]
    }

    enum LaterAnswer {
        case expected
        case arrived(ServerEnvelope)
        case waiting(CheckedContinuation<ServerEnvelope, any Error>)
    }

    /// A piece of a fetched file.
    struct MediaChunk: Sendable {
        var bytes: ByteBuffer
        var end: Bool
    }

    /// How many of the newest message ids sent a link remembers.
    static let recentSends = 4096

    let outbound: NIOAsyncChannelOutboundWriter<NativeFrame>
    private let channel: any Channel
    private let state = Mutex(State())
    /// The most sends in flight, and the largest media chunk, from the server's welcome.
    let maxInFlight: Int
    let maxChunkBytes: Int

    init(
        outbound: NIOAsyncChannelOutboundWriter<NativeFrame>,
        channel: any Channel,
        maxInFlight: Int,
        maxChunkBytes: Int = 256 * 1024
    ) {
        self.outbound = outbound
        self.channel = channel
        self.maxInFlight = max(1, maxInFlight)
        self.maxChunkBytes = max(1024, maxChunkBytes)
    }

    /// Writes an envelope; a connection that broke is ``CourierClientError/notConnected``.
    func write(_ envelope: ClientEnvelope) async throws {
        try await self.write(frame: try NativeFrame(envelope: envelope))
    }

    /// Writes a frame; a connection that broke is ``CourierClientError/notConnected``.
    func write(frame: NativeFrame) async throws {
        do {
            try await self.outbound.write(frame)
        } catch {
            throw CourierClientError.notConnected
        }
    }

    /// Sends a request and waits for the answer with its request id.
    func request(_ envelope: ClientEnvelope) async throws -> ServerEnvelope {
        try await self.request(
            envelope,
            id: self.state.withLock { state in
                defer { state.nextRequestID += 1 }
                return state.nextRequestID
            }
        )
    }

    /// Sends a request the server answers twice (an upload: `upload_ready`, then `upload_done` or an error), and waits
    /// for the first answer; ``laterAnswer(to:)`` gives the second.
    func requestAnsweredTwice(_ envelope: ClientEnvelope) async throws -> (first: ServerEnvelope, id: UInt64) {
        let id = self.state.withLock { state in
            defer { state.nextRequestID += 1 }
            state.laterAnswers[state.nextRequestID] = .expected
            return state.nextRequestID
        }
        return (try await self.request(envelope, id: id), id)
    }

    /// Sends a request with the given id and waits for its (first) answer.
    private func request(_ envelope: ClientEnvelope, id: UInt64) async throws -> ServerEnvelope {
        var envelope = envelope
        envelope.requestID = id
        let request = envelope
        return try await withCheckedThrowingContinuation { continuation in
            let open = self.state.withLock { state -> Bool in
                guard !state.closed else { return false }
                state.waiting[id] = continuation
                return true
            }
            guard open else {
                continuation.resume(throwing: CourierClientError.notConnected)
                return
            }
            Task {
                do {
                    try await self.write(request)
                } catch {
                    let waiter = self.state.withLock { $0.waiting.removeValue(forKey: id) }
                    waiter?.resume(throwing: CourierClientError.notConnected)
                }
            }
        }
    }

    /// No second answer will come (the first was a refusal): forgets the request.
    func forgetLaterAnswer(to id: UInt64) {
        _ = self.state.withLock { $0.laterAnswers.removeValue(forKey: id) }
    }

    /// The second answer to a request sent with ``requestAnsweredTwice(_:)``.
    func laterAnswer(to id: UInt64) async throws -> ServerEnvelope {
        try await withCheckedThrowingContinuation { continuation in
            let outcome = self.state.withLock { state -> Result<ServerEnvelope, any Error>? in
                switch state.laterAnswers[id] {
                case .arrived(let envelope)?:
                    state.laterAnswers[id] = nil
                    return .success(envelope)
                case .expected?:
                    if state.closed { return .failure(CourierClientError.notConnected) }
                    state.laterAnswers[id] = .waiting(continuation)
                    return nil
                case .waiting?, nil:
                    return .failure(CourierClientError.notConnected)
                }
            }
            if let outcome { continuation.resume(with: outcome) }
        }
    }

    // MARK: Streams

    /// A new stream id (odd, as a client's are).
    func openStream() -> UInt32 {
        self.state.withLock { state in
            defer { state.nextStreamID += 2 }
            return state.nextStreamID
        }
    }

    /// The server granted an upload stream more bytes (its `upload_ready` window, or a `windowUpdate`).
    func grant(_ stream: UInt32, _ increment: Int) {
        let resumed = self.state.withLock { state -> (CheckedContinuation<Int?, Never>, Int)? in
            let window = (state.windows[stream] ?? 0) + increment
            guard let (waiter, wanted) = state.windowWaiters[stream], window > 0 else {
                state.windows[stream] = window
                return nil
            }
            state.windowWaiters[stream] = nil
            let taken = min(window, wanted)
            state.windows[stream] = window - taken
            return (waiter, taken)
        }
        if let (waiter, taken) = resumed { waiter.resume(returning: taken) }
    }

    /// Takes up to `count` bytes of an upload stream's window, waiting while it is empty.
    ///
    /// - Returns: How many bytes may be sent now; nil when the stream was reset or the connection ended.
    func takeWindow(_ stream: UInt32, upTo count: Int) async -> Int? {
        await withCheckedContinuation { (continuation: CheckedContinuation<Int?, Never>) in
            let now = self.state.withLock { state -> Int?? in
                guard !state.closed, let window = state.windows[stream] else { return .some(nil) }
                if window > 0 {
                    let taken = min(window, count)
                    state.windows[stream] = window - taken
                    return .some(taken)
                }
                state.windowWaiters[stream] = (continuation, count)
                return .none
            }
            if case .some(let value) = now { continuation.resume(returning: value) }
        }
    }

    /// Registers a fetch stream; its chunks come out of the returned sequence.
    func receiveChunks(on stream: UInt32) -> AsyncThrowingStream<MediaChunk, any Error> {
        let (chunks, continuation) = AsyncThrowingStream.makeStream(of: MediaChunk.self)
        let closed = self.state.withLock { state in
            if !state.closed { state.downloads[stream] = continuation }
            return state.closed
        }
        if closed { continuation.finish(throwing: CourierClientError.notConnected) }
        return chunks
    }

    /// A chunk of a fetch stream arrived.
    func deliver(_ bytes: ByteBuffer, on stream: UInt32, end: Bool) {
        let sink = self.state.withLock { state in
            defer { if end { state.downloads[stream] = nil } }
            return state.downloads[stream]
        }
        sink?.yield(MediaChunk(bytes: bytes, end: end))
        if end { sink?.finish() }
    }

    /// This side gives a stream up before its end (cancelled, or failed here): it is closed, and the server is told
    /// with a `resetStream`, so that it stops sending and frees the stream.
    func abandonStream(_ stream: UInt32) {
        self.closeStream(stream)
        Task { try? await self.write(frame: .resetStream(streamID: stream, code: .cancel)) }
    }

    /// The server reset a stream, or this side is done with it.
    func closeStream(_ stream: UInt32, reset: Bool = false) {
        let (waiter, sink) = self.state.withLock { state in
            state.windows[stream] = nil
            defer {
                state.windowWaiters[stream] = nil
                state.downloads[stream] = nil
            }
            return (state.windowWaiters[stream]?.0, state.downloads[stream])
        }
        waiter?.resume(returning: nil)
        if reset {
            sink?.finish(throwing: CourierClientError(code: "stream-reset", message: "the server reset the stream"))
        } else {
            sink?.finish()
        }
    }

    /// Sends an outbox message, waiting first while `maxInFlight` sends are unanswered.
    func send(_ entry: ClientStore.OutboxEntry) async throws {
        while true {
            let ready = self.state.withLock { $0.sends.count < self.maxInFlight || $0.closed }
            if ready { break }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = self.state.withLock { state -> Bool in
                    if state.sends.count < self.maxInFlight || state.closed { return true }
                    state.slotWaiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        }
        var envelope = ClientEnvelope()
        envelope.send.id = entry.id
        envelope.send.to = Courier_V1_Conversation(entry.conversation)
        if let media = entry.media {
            envelope.send.body.media = Courier_V1_Media(media)
        } else {
            envelope.send.body.text = entry.text
        }
        switch entry.replyTo {
        case .seq(let seq)?:
            envelope.send.replyTo.seq = seq
        case .id(let id, let from)?:
            envelope.send.replyTo.id = id
            envelope.send.replyTo.from = from ?? ""
        case nil:
            break
        }
        envelope.requestID = self.state.withLock { state in
            defer { state.nextRequestID += 1 }
            state.sends[state.nextRequestID] = entry.id
            state.sent.insert(entry.id)
            return state.nextRequestID
        }
        try await self.write(envelope)
    }

    /// Whether a message was sent on this connection (waiting for its answer, or among the newest sent).
    func wasSent(_ id: String) -> Bool {
        self.state.withLock { $0.sent.contains(id) || $0.sends.values.contains(id) }
    }

    /// Lets the outbox loop send a message again on this connection (after a retryable refusal).
    func forget(_ id: String) {
        self.state.withLock { $0.sent.remove(id) }
    }

    /// Hands an answer to the request waiting for it.
    ///
    /// - Returns: `.request` if a request took it, `.send(id)` if it answers an outbox message, nil otherwise.
    func route(_ envelope: ServerEnvelope) -> Route? {
        guard envelope.requestID != 0 else { return nil }
        if let later = self.state.withLock({ state -> CheckedContinuation<ServerEnvelope, any Error>?? in
            // The second answer of a request answered twice.
            guard state.waiting[envelope.requestID] == nil, let later = state.laterAnswers[envelope.requestID] else {
                return nil
            }
            switch later {
            case .expected:
                state.laterAnswers[envelope.requestID] = .arrived(envelope)
                return .some(nil)
            case .waiting(let continuation):
                state.laterAnswers[envelope.requestID] = nil
                return .some(continuation)
            case .arrived:
                return .some(nil)
            }
        }) {
            later?.resume(returning: envelope)
            return .request
        }
        let (waiter, send, slot) = self.state.withLock { state in
            let waiter = state.waiting.removeValue(forKey: envelope.requestID)
            let send = state.sends.removeValue(forKey: envelope.requestID)
            defer { if send != nil { state.slotWaiter = nil } }
            return (waiter, send, send != nil ? state.slotWaiter : nil)
        }
        slot?.resume()
        if let waiter {
            waiter.resume(returning: envelope)
            return .request
        }
        return send.map(Route.send)
    }

    enum Route: Equatable {
        case request
        case send(String)
    }

    /// Fails every waiting request; later ones fail at once.
    func failAll() {
        let (waiting, slot, windowWaiters, downloads) = self.state.withLock { state in
            state.closed = true
            var waiting = Array(state.waiting.values)
            for case .waiting(let continuation) in state.laterAnswers.values { waiting.append(continuation) }
            defer {
                state.waiting = [:]
                state.laterAnswers = [:]
                state.slotWaiter = nil
                state.windowWaiters = [:]
                state.downloads = [:]
            }
            return (waiting, state.slotWaiter, state.windowWaiters.values.map(\.0), Array(state.downloads.values))
        }
        for waiter in waiting { waiter.resume(throwing: CourierClientError.notConnected) }
        slot?.resume()
        for waiter in windowWaiters { waiter.resume(returning: nil) }
        for download in downloads { download.finish(throwing: CourierClientError.notConnected) }
    }

    func close() {
        self.channel.close(mode: .all, promise: nil)
    }
}
