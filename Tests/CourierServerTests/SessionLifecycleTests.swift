import CourierProtocol
import CourierStore
import Testing

@testable import CourierServer

/// The session's lifecycle as the machine keeps it: when requests may be taken, the closes that wait for writes, and
/// the deadlines that hand over from the login to the session (no sockets).
@Suite("Session lifecycle in the state machine (no sockets)")
struct SessionLifecycleTests {
    typealias Machine = SessionStateMachineTests
    static let start = Machine.start

    static func ack(_ cursor: UInt64) -> ClientEnvelope {
        var envelope = ClientEnvelope()
        envelope.ack.cursor = cursor
        return envelope
    }

    static func history() -> ClientEnvelope {
        var envelope = ClientEnvelope()
        envelope.requestID = 9
        envelope.history.conversation.user = "bob"
        return envelope
    }

    /// Sends a write through the machine as the handler does: admitted, then recorded as sent.
    static func write(_ envelope: ClientEnvelope, into machine: inout SessionStateMachine) -> UInt64? {
        guard case .write(let request, let requestID, let answers) = machine.received(envelope, now: start) else {
            return nil
        }
        var serial: UInt64?
        for admitted in machine.admit(request) {
            serial = machine.sent(
                admitted.request,
                requestID: requestID,
                answers: answers,
                reservedFanout: 0,
                isRequest: admitted.isRequest
            )
        }
        return serial
    }

    @Test("a request's work holds the requests after it until its end; a held send until the hold ends")
    func intake() {
        var machine = Machine.active()
        #expect(machine.mayTakeRequest)
        guard case .request = machine.received(Self.history(), now: Self.start) else {
            Issue.record("history is not a request")
            return
        }
        #expect(!machine.mayTakeRequest && machine.takesInput)
        guard case .takeNext = machine.workEnded(.goOn, now: Self.start, nowMs: 0) else {
            Issue.record("the work's end does not take the next request")
            return
        }
        #expect(machine.mayTakeRequest)
        var limited = Machine.active {
            $0.sendsPerSecond = 1
            $0.sendBurst = 1
        }
        _ = limited.received(Machine.send("a"), now: Self.start)
        guard case .pause = limited.received(Machine.send("b"), now: Self.start) else {
            Issue.record("not held")
            return
        }
        #expect(!limited.mayTakeRequest)
        limited.holdEnded(now: Self.start + .seconds(1))
        #expect(limited.mayTakeRequest)
        // A stream's bytes are work too.
        limited.workStarted()
        #expect(!limited.mayTakeRequest)
    }

    @Test("a close that waits for the writes in flight comes once they are answered, after their answers")
    func closeWhenAnswered() throws {
        var machine = Machine.active()
        let serial = try #require(Self.write(Machine.send("m"), into: &machine))
        #expect(machine.closeWhenAnswered(code: ErrorCodes.tokenRevoked, message: "revoked") == .none)
        #expect(!machine.takesInput && !machine.isClosed)
        let answered = machine.writesAnswered([(serial, .success(.done))])
        #expect(answered.count == 1 && !machine.isClosed, "the answer is written before the close")
        #expect(machine.closeIfAnswered() == .close(code: ErrorCodes.tokenRevoked, message: "revoked"))
        #expect(machine.isClosed && machine.closeIfAnswered() == .none)
    }

    @Test("a write the database failed stops the intake; the connection closes with storage-failed once answered")
    func storageFailed() throws {
        var machine = Machine.active()
        let first = try #require(Self.write(Machine.send("m1"), into: &machine))
        let second = try #require(Self.write(Machine.send("m2", id: "m2"), into: &machine))
        let failure = CourierStoreError(.storageFailed, "disk full")
        _ = machine.writesAnswered([(first, .failure(failure))])
        #expect(!machine.takesInput && !machine.isClosed)
        #expect(machine.closeIfAnswered() == .none, "m2 is in flight")
        _ = machine.writesAnswered([(second, .failure(failure))])
        guard case .close(ErrorCodes.storageFailed, _) = machine.closeIfAnswered() else {
            Issue.record("no storage-failed close")
            return
        }
    }

    @Test("once stopped, nothing reopens the intake: not a held send's end, not a work's end")
    func stoppedStaysStopped() throws {
        var machine = Machine.active {
            $0.sendsPerSecond = 1
            $0.sendBurst = 1
        }
        _ = try #require(Self.write(Machine.send("a"), into: &machine))
        #expect(machine.closeWhenAnswered(code: ErrorCodes.tokenRevoked, message: "revoked") == .none)
        // A send handed in after the stop (a compat media packet's, say) and over the rate.
        guard case .pause = machine.received(Machine.send("b", id: "b"), now: Self.start) else {
            Issue.record("not held")
            return
        }
        machine.holdEnded(now: Self.start + .seconds(1))
        #expect(!machine.takesInput && !machine.mayTakeRequest)
        _ = machine.received(Self.history(), now: Self.start + .seconds(1))
        _ = machine.workEnded(.goOn, now: Self.start + .seconds(1), nowMs: 0)
        #expect(!machine.takesInput && !machine.mayTakeRequest)
    }

    @Test(
        "a client that leaves its buffer full is closed after slowConsumerTimeout, named in the log; reading again resets it"
    )
    func slowConsumer() {
        var machine = Machine.active {
            $0.slowConsumerTimeout = .seconds(30)
            $0.idleTimeout = .seconds(3_600)
        }
        machine.writabilityChanged(writable: false, now: Self.start)
        #expect(machine.nextDeadline == Self.start + .seconds(30))
        machine.writabilityChanged(writable: true, now: Self.start + .seconds(20))
        machine.writabilityChanged(writable: false, now: Self.start + .seconds(25))
        #expect(machine.tick(now: Self.start + .seconds(50)) == .none)
        #expect(
            machine.tick(now: Self.start + .seconds(55))
                == .closeQuietly(code: ErrorCodes.slowConsumer, reason: "the client stopped reading")
        )
        #expect(machine.isClosed && machine.nextDeadline == nil)
    }

    @Test("the login's deadline ends when the login registers the connection, not when its work ends")
    func loginHandsOverDeadlines() {
        var machine = Machine.machine {
            $0.authTimeout = .seconds(10)
            $0.idleTimeout = .seconds(60)
        }
        _ = machine.received(Machine.hello(), now: Self.start + .seconds(9))
        #expect(machine.nextDeadline == Self.start + .seconds(10))
        // Registered at 9.5 s; the welcome and presence take a while longer.
        machine.authenticated(Machine.session, now: Self.start + .milliseconds(9_500), nowMs: 0)
        #expect(machine.tick(now: Self.start + .seconds(11)) == .none)
        // Silence counts from the hello, the last thing the client sent.
        #expect(machine.nextDeadline == Self.start + .seconds(69))
        #expect(!machine.mayTakeRequest, "the requests after the login wait for its end")
    }
}
