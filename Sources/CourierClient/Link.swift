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
        /// Message ids sent on this connection (so the outbox loop sends each once per connection).
        var sent: Set<String> = []
        var slotWaiter: CheckedContinuation<Void, Never>?
        var closed = false
    }

    let outbound: NIOAsyncChannelOutboundWriter<NativeFrame>
    private let channel: any Channel
    private let state = Mutex(State())
    /// The most sends in flight, from the server's welcome.
    let maxInFlight: Int

    init(outbound: NIOAsyncChannelOutboundWriter<NativeFrame>, channel: any Channel, maxInFlight: Int) {
        self.outbound = outbound
        self.channel = channel
        self.maxInFlight = max(1, maxInFlight)
    }

    func write(_ envelope: ClientEnvelope) async throws {
        try await self.outbound.write(try NativeFrame(envelope: envelope))
    }

    func write(frame: NativeFrame) async throws {
        try await self.outbound.write(frame)
    }

    /// Sends a request and waits for the answer with its request id.
    func request(_ envelope: ClientEnvelope) async throws -> ServerEnvelope {
        var envelope = envelope
        return try await withCheckedThrowingContinuation { continuation in
            let id = self.state.withLock { state -> UInt64? in
                guard !state.closed else { return nil }
                defer { state.nextRequestID += 1 }
                state.waiting[state.nextRequestID] = continuation
                return state.nextRequestID
            }
            guard let id else {
                continuation.resume(throwing: CourierClientError.notConnected)
                return
            }
            envelope.requestID = id
            let request = envelope
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
        envelope.send.body.text = entry.text
        envelope.requestID = self.state.withLock { state in
            defer { state.nextRequestID += 1 }
            state.sends[state.nextRequestID] = entry.id
            state.sent.insert(entry.id)
            return state.nextRequestID
        }
        try await self.write(envelope)
    }

    /// Whether a message was already sent on this connection.
    func wasSent(_ id: String) -> Bool {
        self.state.withLock { $0.sent.contains(id) }
    }

    /// Lets the outbox loop send a message again on this connection (after a retryable refusal).
    func forget(_ id: String) {
        _ = self.state.withLock { $0.sent.remove(id) }
    }

    /// Hands an answer to the request waiting for it.
    ///
    /// - Returns: `.request` if a request took it, `.send(id)` if it answers an outbox message, nil otherwise.
    func route(_ envelope: ServerEnvelope) -> Route? {
        guard envelope.requestID != 0 else { return nil }
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
        let (waiting, slot) = self.state.withLock { state in
            state.closed = true
            defer {
                state.waiting = [:]
                state.slotWaiter = nil
            }
            return (Array(state.waiting.values), state.slotWaiter)
        }
        for waiter in waiting { waiter.resume(throwing: CourierClientError.notConnected) }
        slot?.resume()
    }

    func close() {
        self.channel.close(mode: .all, promise: nil)
    }
}
