import CourierProtocol
import CourierStore
import NIOCore
import Synchronization

/// The state a connection's reader, delivery loop, ticker and write tasks share.
final class SessionShared: Sendable {
    /// A write in flight, waiting to be answered.
    struct Answer: Sendable {
        var request: WriteRequest
        var ticket: CommitTicket
        var requestID: UInt64
        var answers: Bool
        /// The deliveries reserved from the sender's fan-out budget when the send was enqueued (0 for other writes).
        var reservedFanout: Int = 0
    }

    /// The writes in flight, in the order they were enqueued; bounded by the limit on writes in flight, since the
    /// reader waits for a slot before reading another request.
    let answers: AsyncStream<Answer>
    private let answersContinuation: AsyncStream<Answer>.Continuation
    private struct State {
        var handle: ConnectionHandle?
        var slotWaiter: CheckedContinuation<Void, Never>?
        var drainWaiters: [CheckedContinuation<Void, Never>] = []
        var pendingWrites: [Int: ContinuousClock.Instant] = [:]
        var nextWrite = 0
        var inlineUpload: MediaService.Upload?
    }

    private let machine: Mutex<SessionStateMachine>
    private let state = Mutex(State())
    private let channel: any Channel
    /// Where inline media is read from when an envelope's frames carry it.
    private let media: MediaService
    /// The connection's media streams.
    let streams: MediaStreams
    /// Held while an envelope's outputs are written, where they must reach the socket together (the compat port: a
    /// media packet is written as a head, body parts and an end, and nothing else may come between them); nil where
    /// writes need no order between them (the native port).
    private let writeLock: AsyncLock?

    init(machine: SessionStateMachine, channel: any Channel, media: MediaService, serializesWrites: Bool = false) {
        self.machine = Mutex(machine)
        self.channel = channel
        self.media = media
        self.writeLock = serializesWrites ? AsyncLock() : nil
        self.streams = MediaStreams(
            maxStreams: media.configuration.maxStreamsPerConnection,
            maxFetchWindow: media.configuration.maxFetchWindowBytes
        )
        (self.answers, self.answersContinuation) = AsyncStream.makeStream(of: Answer.self)
    }

    /// Hands a write in flight to the answering loop.
    func answer(_ answer: Answer) {
        self.answersContinuation.yield(answer)
    }

    /// No more writes will come: the answering loop ends after the last.
    func finishAnswers() {
        self.answersContinuation.finish()
    }

    func withMachine<T>(_ body: (inout SessionStateMachine) -> T) -> T {
        self.machine.withLock { body(&$0) }
    }

    /// The compat media packet being received, if any: released (and deleted) if the connection ends before it does.
    var inlineUpload: MediaService.Upload? {
        get { self.state.withLock { $0.inlineUpload } }
        set { self.state.withLock { $0.inlineUpload = newValue } }
    }

    /// Whether the connection's channel is still open.
    var isOpen: Bool { self.channel.isActive }

    /// The connection's entry in the hub, once authenticated.
    var handle: ConnectionHandle? {
        get { self.state.withLock { $0.handle } }
        set { self.state.withLock { $0.handle = newValue } }
    }

    /// Waits while the session has as many writes in flight as it may.
    func waitForWriteSlot() async {
        while !self.machine.withLock({ $0.mayReadMore }) {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = self.state.withLock { state -> Bool in
                    if self.machine.withLock({ $0.mayReadMore }) { return true }
                    state.slotWaiter = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        }
    }

    /// A write to the group commit finished.
    func writeFinished() {
        let (slot, drained) = self.state.withLock { state in
            let idle = self.machine.withLock { machine in
                machine.writeFinished()
                return machine.writesInFlight == 0
            }
            defer {
                state.slotWaiter = nil
                if idle { state.drainWaiters = [] }
            }
            return (state.slotWaiter, idle ? state.drainWaiters : [])
        }
        slot?.resume()
        for waiter in drained { waiter.resume() }
    }

    /// Waits until no write to the group commit is in flight, so their answers go out before the connection closes.
    func waitForWritesToFinish() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let idle = self.state.withLock { state -> Bool in
                if self.machine.withLock({ $0.writesInFlight == 0 }) { return true }
                state.drainWaiters.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
    }

    /// Writes an envelope's frames, tracking how long each write waits for the client to read.
    func write<Transport: SessionTransport>(
        _ envelope: ServerEnvelope,
        transport: Transport,
        to outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>
    ) async throws {
        try await self.write(outputs: try transport.frames(for: envelope), to: outbound)
    }

    /// Writes a transport's outputs in order, tracking how long each write waits for the client to read.
    private func write<Outbound: Sendable>(
        outputs: [TransportOutput<Outbound>],
        to outbound: NIOAsyncChannelOutboundWriter<Outbound>
    ) async throws {
        await self.writeLock?.lock()
        defer { self.writeLock?.unlock() }
        do {
            for output in outputs {
                switch output {
                case .frame(let frame):
                    try await self.writeLocked(frame, to: outbound)
                case .media(let sha256, let size, let wrap, let end):
                    try await self.media.read(sha256, range: 0..<size) { bytes in
                        try await self.writeLocked(wrap(bytes), to: outbound)
                    }
                    try await self.writeLocked(end, to: outbound)
                }
            }
        } catch {
            // Part of a packet may be out: nothing else may follow it on this connection. Closed before the lock
            // goes to the next writer.
            if self.writeLock != nil { self.closeChannel() }
            throw error
        }
    }

    /// Writes several small envelopes (the typing and presence notices that gathered) with one write and one
    /// flush, tracking how long the write waits for the client to read.
    func write<Transport: SessionTransport>(
        _ envelopes: [ServerEnvelope],
        transport: Transport,
        to outbound: NIOAsyncChannelOutboundWriter<Transport.Outbound>
    ) async throws {
        let outputs = try envelopes.flatMap { try transport.frames(for: $0) }
        let frames = outputs.compactMap { output -> Transport.Outbound? in
            if case .frame(let frame) = output { frame } else { nil }
        }
        // One that streams media (none of the notices does): the outputs in order, one write each.
        guard frames.count == outputs.count else {
            try await self.write(outputs: outputs, to: outbound)
            return
        }
        guard !frames.isEmpty else { return }
        await self.writeLock?.lock()
        defer { self.writeLock?.unlock() }
        let id = self.state.withLock { state in
            state.nextWrite += 1
            state.pendingWrites[state.nextWrite] = .now
            return state.nextWrite
        }
        defer { _ = self.state.withLock { $0.pendingWrites.removeValue(forKey: id) } }
        try await outbound.write(contentsOf: frames)
    }

    /// Writes one frame, tracking how long it waits for the client to read.
    func write<Outbound: Sendable>(_ frame: Outbound, to outbound: NIOAsyncChannelOutboundWriter<Outbound>) async throws
    {
        await self.writeLock?.lock()
        defer { self.writeLock?.unlock() }
        try await self.writeLocked(frame, to: outbound)
    }

    private func writeLocked<Outbound: Sendable>(
        _ frame: Outbound,
        to outbound: NIOAsyncChannelOutboundWriter<Outbound>
    ) async throws {
        let id = self.state.withLock { state in
            state.nextWrite += 1
            state.pendingWrites[state.nextWrite] = .now
            return state.nextWrite
        }
        defer { _ = self.state.withLock { $0.pendingWrites.removeValue(forKey: id) } }
        try await outbound.write(frame)
    }

    /// Whether a write has waited longer than a bound for the client to read.
    func writeBlocked(longerThan bound: Duration) -> Bool {
        let now = ContinuousClock.now
        return self.state.withLock { state in state.pendingWrites.values.contains { now - $0 > bound } }
    }

    /// Closes the connection; the reader's loop then ends.
    func closeChannel() {
        self.channel.close(mode: .all, promise: nil)
    }
}
