import CourierProtocol
import NIOCore

/// Deadlines: one per session at a time, armed in the loop's ``LoopDeadlines`` wheel at the earliest instant something
/// may have to be done, and re-armed when it fires.
extension SessionHandler {
    /// The earliest instant something may have to be done: the session's deadline, or a client that stopped
    /// reading.
    private var nextDeadline: ContinuousClock.Instant? {
        let session = self.shared.withMachine { $0.nextDeadline }
        guard let unwritableSince else { return session }
        let slow = unwritableSince + self.server.configuration.limits.slowConsumerTimeout
        return session.map { min($0, slow) } ?? slow
    }

    func armDeadline() {
        guard let deadlines = self.deadlines, let next = self.nextDeadline else { return }
        if let armedAt = self.armedAt, armedAt <= next { return }
        deadlines.arm(self.deadlineKey, at: next)
        self.armedAt = next
    }

    func deadlineFired(_ now: ContinuousClock.Instant) {
        if let armedAt = self.armedAt, armedAt <= now { self.armedAt = nil }
        guard !self.closed else { return }
        if let unwritableSince,
            now - unwritableSince >= self.server.configuration.limits.slowConsumerTimeout
        {
            self.requests.logger.notice(
                "closing: the client stopped reading",
                metadata: ["code": "\(ErrorCodes.slowConsumer)"]
            )
            self.closeQuietly()
            return
        }
        if case .close(let code, let message) = self.shared.withMachine({ $0.tick(now: now) }) {
            self.requests.logger.info("closing", metadata: ["code": "\(code)"])
            self.close(code: code, message: message)
            return
        }
        self.armDeadline()
    }
}
