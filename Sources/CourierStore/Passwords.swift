internal import Synchronization

/// A store's password work: hashing new passwords and checking logins at a configured cost, on threads of their own
/// (``PasswordWork``), with a check against a decoy hash when the user does not exist, so that timing does not tell
/// which names exist. Every ``CourierDatabase`` uses one.
package final class Passwords: Sendable {
    let hasher: PasswordHasher
    let work: PasswordWork
    private let decoy: Mutex<String?> = Mutex(nil)

    package init(hasher: PasswordHasher, threads: Int, maxQueued: Int) {
        self.hasher = hasher
        self.work = PasswordWork(threads: threads, maxQueued: maxQueued)
    }

    /// A slow hash of a password, to store.
    ///
    /// - Throws: `throttled` (too many password jobs waiting), or the hasher's error.
    package func hash(_ password: String) async throws -> String {
        let hasher = self.hasher
        return try await self.work.run { Result { try hasher.hash(password) } }.get()
    }

    /// Whether a password matches a stored hash. Given none (an unknown or removed user, or a name that breaks the
    /// naming rule), it checks against the decoy at the same cost and returns false.
    ///
    /// - Throws: `throttled` (too many password jobs waiting).
    package func verify(_ password: String, against stored: String?) async throws -> Bool {
        try await self.work.run {
            // The decoy is made before either branch, so that the first check costs the same for any name.
            let decoy = self.decoyHash()
            return PasswordHasher.verify(password, against: stored ?? decoy) && stored != nil
        }
    }

    /// A hash of a random password at the configured cost, made on first use (outside the lock: two first uses at
    /// once may both hash; the first stored wins).
    private func decoyHash() -> String {
        if let decoy = self.decoy.withLock({ $0 }) { return decoy }
        let hash = (try? self.hasher.hash(SessionToken.make())) ?? ""
        return self.decoy.withLock { decoy in
            if decoy == nil { decoy = hash }
            return decoy!
        }
    }
}
