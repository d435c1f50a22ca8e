/// What a database gives the store's rules: transactions of ``StoreTransaction``s, each a narrow set of reads and
/// writes in the database's own SQL. The rules (who may log in, renew, revoke, change a group, upload, read) are
/// written once, in extensions of this protocol, and every ``CourierDatabase`` that is a backend follows them;
/// the group commit's rules are ``GroupCommit``'s.
package protocol StoreBackend: CourierDatabase {
    associatedtype Transaction: StoreTransaction

    /// The store's password hashing and checking.
    var passwords: Passwords { get }

    /// Runs `body` as one write transaction: everything it wrote commits when it returns, nothing when it throws.
    /// Where the database aborts a transaction for a conflict with another writer, `body` runs again from the
    /// start, so it must read everything it decides on through the transaction.
    ///
    /// - Throws: What `body` throws when it is a refusal (a ``CourierStoreError`` of another code than
    ///   `storage-failed`); `storage-failed` for everything else.
    func transaction<T: Sendable>(
        doing: String,
        _ body: @escaping @Sendable (Transaction) async throws -> T
    ) async throws -> T

    /// Runs reads outside a write transaction (each may see what was committed when it began).
    ///
    /// - Throws: As ``transaction(doing:_:)``.
    func reading<T: Sendable>(
        doing: String,
        _ body: @escaping @Sendable (Transaction) async throws -> T
    ) async throws -> T
}

/// The reads and writes of one transaction of a ``StoreBackend``, in its database's SQL. Each says what it reads or
/// writes and nothing of why: that is the rules'. Names are matched as the database matches them (without regard to
/// case); a method that writes is called only inside ``StoreBackend/transaction(doing:_:)``. A `locking` read
/// locks the rows it reads until the transaction ends, where the database has several writers.
package protocol StoreTransaction: Sendable {
    // MARK: Users

    /// A user by name (removed ones included), or nil. The name follows the naming rule.
    func user(named name: String) async throws -> User?
    /// Every user, removed ones included, by name.
    func users() async throws -> [User]
    /// A user's password hash, or nil when it has none (removed).
    func passwordHash(of user: UserID) async throws -> String?
    /// Adds a user, unless its name is taken (by any user, removed or not, in any case).
    ///
    /// - Returns: The new user's id, or nil when the name is taken.
    func insertUser(name: String, passwordHash: String, nowMs: Int64) async throws -> UserID?
    func setPasswordHash(_ hash: String, of user: UserID) async throws
    /// Marks a user removed and drops its password hash.
    func markRemoved(_ user: UserID, nowMs: Int64) async throws
    /// The newest cursor of a user's event log.
    func logCursor(of user: UserID) async throws -> Int64

    // MARK: Devices

    /// A user's devices, revoked ones included, oldest first.
    func devices(of user: UserID) async throws -> [Device]
    /// The device whose token has this digest, or whose previous token has it and is still good at `nowMs`
    /// (``DeviceTokens/previousUntilMs``), with its tokens and user.
    func device(holding tokenHash: [UInt8], nowMs: Int64, locking: Bool) async throws -> HeldDevice?
    /// A device's tokens, or nil when there is no such device.
    func tokens(of device: DeviceID, locking: Bool) async throws -> DeviceTokens?
    func setTokens(_ tokens: DeviceTokens, of device: DeviceID) async throws
    /// Adds a device.
    ///
    /// - Returns: Its id.
    func insertDevice(_ device: NewDevice) async throws -> DeviceID
    /// Revokes a user's devices that are not revoked yet: the ones given, or all of them (nil).
    ///
    /// - Returns: The devices revoked now, by id.
    func revokeDevices(_ devices: [DeviceID]?, of user: UserID, nowMs: Int64) async throws -> [DeviceID]

    // MARK: Changes a running server reacts to

    /// Records changes, ids given in order: a server reading after the newest id it saw never skips one that
    /// commits later (called last in a transaction, after its other writes).
    func recordChanges(_ changes: [StoreChange], nowMs: Int64) async throws
    /// The id of the newest recorded change; 0 when there is none.
    func latestChangeID() async throws -> Int64
    /// Recorded changes after an id, oldest first, at most `limit`.
    func changes(after id: Int64, limit: Int) async throws -> [(id: Int64, change: StoreChange?)]
    /// Deletes changes recorded before a time.
    func pruneChanges(olderThanMs: Int64) async throws
}

/// A device found by one of its tokens, with its tokens and its user.
package struct HeldDevice: Sendable {
    package var device: Device
    package var tokens: DeviceTokens
    package var user: User

    package init(device: Device, tokens: DeviceTokens, user: User) {
        self.device = device
        self.tokens = tokens
        self.user = user
    }
}

/// A device's session tokens, as digests: the current one, and after a renewal, the one it replaced, still good
/// for a while (``StoreLimits/renewalGrace``) unless the new one is used first.
package struct DeviceTokens: Hashable, Sendable {
    package var tokenHash: [UInt8]
    package var expiresMs: Int64
    package var previousHash: [UInt8]?
    /// Until when the previous token is good (never past its own expiry).
    package var previousUntilMs: Int64?
    /// The previous token's own expiry: the grace never makes an expired token good again.
    package var previousExpiresMs: Int64?

    package init(
        tokenHash: [UInt8],
        expiresMs: Int64,
        previousHash: [UInt8]? = nil,
        previousUntilMs: Int64? = nil,
        previousExpiresMs: Int64? = nil
    ) {
        self.tokenHash = tokenHash
        self.expiresMs = expiresMs
        self.previousHash = previousHash
        self.previousUntilMs = previousUntilMs
        self.previousExpiresMs = previousExpiresMs
    }
}

/// A device to add.
package struct NewDevice: Sendable {
    package var user: UserID
    package var name: String
    package var tokenHash: [UInt8]
    package var createdMs: Int64
    package var expiresMs: Int64
    package var ackedCursor: Int64
}

extension StoreChange {
    /// How the `changes` table keeps a change: its kind, and the user or device it is about.
    package var columns: (kind: Int64, user: UserID?, device: DeviceID?) {
        switch self {
        case .logAppended(let user): (1, user, nil)
        case .deviceRevoked(let device): (2, nil, device)
        case .userRemoved(let user): (3, user, nil)
        }
    }

    /// A change as the `changes` table keeps it; nil for a kind this version does not know.
    package init?(kind: Int64, user: UserID?, device: DeviceID?) {
        switch (kind, user, device) {
        case (1, let user?, _): self = .logAppended(user)
        case (2, _, let device?): self = .deviceRevoked(device)
        case (3, let user?, _): self = .userRemoved(user)
        default: return nil
        }
    }
}
