import CourierProtocol
import NIOCore

/// Deadlines: one per session at a time, armed in the loop's ``LoopDeadlines`` wheel at the earliest instant the
/// machine may have to close the session, and re-armed when it fires.
extension SessionHandler {
    func armDeadline() {
        guard let deadlines = self.deadlines, let next = self.machine.nextDeadline else { return }
        if let armedAt = self.armedAt, armedAt <= next { return }
        deadlines.arm(self.deadlineKey, at: next)
        self.armedAt = next
    }

    func deadlineFired(_ now: ContinuousClock.Instant) {
        if let armedAt = self.armedAt, armedAt <= now { self.armedAt = nil }
        let action = self.machine.tick(now: now)
        guard action == .none else {
            self.perform(action)
            return
        }
        self.armDeadline()
    }
}
