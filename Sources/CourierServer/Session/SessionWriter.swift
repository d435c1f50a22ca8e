import CourierProtocol
import CourierStore
import NIOCore

/// How a connection's async work writes to it: each write hops to the channel's event loop, where the handler
/// writes it in order with everything else, and returns once it has reached the socket (so a client that does not
/// read holds the work back).
struct SessionWriter<Transport: SessionTransport>: Sendable {
    let eventLoop: any EventLoop
    let handler: NIOLoopBound<SessionHandler<Transport>>

    func write(_ envelope: ServerEnvelope) async throws {
        let promise = self.eventLoop.makePromise(of: Void.self)
        let handler = self.handler
        self.eventLoop.execute { handler.value.emit(envelope, promise: promise) }
        try await promise.futureResult.get()
    }

    func write(_ frame: Transport.Outbound) async throws {
        try await self.write([.frame(frame)])
    }

    private func write(_ outputs: [TransportOutput<Transport.Outbound>]) async throws {
        let promise = self.eventLoop.makePromise(of: Void.self)
        let handler = self.handler
        self.eventLoop.execute { handler.value.emit(outputs, promise: promise) }
        try await promise.futureResult.get()
    }

    /// Writes a frame of the media being streamed (past the queue that waits for it).
    func writeDirect(_ frame: Transport.Outbound) async throws {
        let promise = self.eventLoop.makePromise(of: Void.self)
        let handler = self.handler
        self.eventLoop.execute { handler.value.write(frame, promise: promise) }
        try await promise.futureResult.get()
    }

    /// Makes the session active on the loop, and returns once it is (the login registered the connection: the
    /// welcome that follows is written to an active session, whose deadlines are no longer the login's).
    func activate(_ session: DeviceSession) async {
        let promise = self.eventLoop.makePromise(of: Void.self)
        let handler = self.handler
        self.eventLoop.execute {
            handler.value.activate(session)
            promise.succeed()
        }
        try? await promise.futureResult.get()
    }

    /// Closes without a word (a stream broke off: nothing may follow what was written of it).
    func closeQuietly(reason: String) {
        let handler = self.handler
        self.eventLoop.execute { handler.value.closeQuietly(reason: reason) }
    }
}
