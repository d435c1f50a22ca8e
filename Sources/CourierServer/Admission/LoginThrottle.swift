import Synchronization

/// The server's one ``LoginGate``, shared by every port that checks credentials (native, compat, HTTP).
final class LoginThrottle: Sendable {
    private let gate: Mutex<LoginGate>

    init(_ limits: ServerConfiguration.Limits) {
        self.gate = Mutex(
            LoginGate(
                perUser: limits.maxFailedLoginsPerUser,
                perAddress: limits.maxFailedLoginsPerAddress,
                window: limits.loginWindow
            )
        )
    }

    /// A throttle of other attempts that each count, such as sign-ups: `perUser` under each "user" key, `perAddress`
    /// under each address.
    init(perUser: Int, perAddress: Int, window: Duration) {
        self.gate = Mutex(LoginGate(perUser: perUser, perAddress: perAddress, window: window))
    }

    func admit(user: String?, address: String) -> LoginGate.Admission {
        self.gate.withLock { $0.admit(user: user, address: address, now: .now) }
    }

    func finish(_ ticket: LoginGate.Ticket, failed: Bool) {
        self.gate.withLock { $0.finish(ticket, failed: failed, now: .now) }
    }

    func inFlight(user: String) -> Int {
        self.gate.withLock { $0.inFlight(user: user) }
    }
}
