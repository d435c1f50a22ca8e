import CourierStore
import Foundation
import Synchronization

/// Admits login attempts per user name and per client address.
///
/// Against each limit count the failures in a sliding window *and* the attempts still in flight, and an attempt is
/// checked and counted in one step (``admit(user:address:now:)``), so a hundred attempts that arrive at once for one
/// user cannot all pass a check made before any of them has failed: at most `perUser` of them run, and once they
/// have failed the rest wait for the window. Attempts for names that do not exist count the same as the others.
///
/// Memory is bounded: a name that breaks the name rule (which no user has: a megabyte of text, say) counts under one
/// shared key, each key keeps at most its limit of timestamps, keys with no attempt in flight and no failure left in
/// the window are dropped once a window (and whenever the table is full), failed tokens take at most a quarter of
/// `maxKeys` (beyond it a failed token from a new address is not recorded), and while the rest is still full a
/// password attempt that needs a new key is refused (a token attempt never is).
struct LoginGate: Sendable {
    let perUser: Int
    let perAddress: Int
    let window: Duration
    let maxKeys: Int
    /// How long a client is told to wait when the limit is taken by attempts still in flight (their outcome is
    /// not known yet; a password check takes about a tenth of a second).
    let inFlightRetry: Duration
    private var entries: [Key: Entry] = [:]
    /// How many of `entries` are token keys: at most a quarter of `maxKeys`, so that failed tokens (a lookup each,
    /// no hash: cheap to send from many addresses) cannot fill the table that password attempts need.
    private var tokenKeys = 0
    private var lastPrune: ContinuousClock.Instant?

    private enum Key: Hashable {
        case user(String)
        /// Password attempts from an address.
        case address(String)
        /// Token attempts from an address: counted apart, so that a password storm from an address (a NAT, a
        /// shared network) does not lock out the devices there that reconnect with their tokens.
        case tokens(String)
    }

    private struct Entry {
        var failures: [ContinuousClock.Instant] = []
        var inFlight = 0
    }

    /// An admitted attempt; hand it back to ``finish(_:failed:now:)`` exactly once.
    struct Ticket: Sendable, Hashable {
        /// The user name, lowercased; nil for a token.
        fileprivate let user: String?
        fileprivate let address: String
    }

    enum Admission: Equatable {
        case admitted(Ticket)
        /// Refused; the client may try again after this long.
        case throttled(retryAfter: Duration)
    }

    init(
        perUser: Int,
        perAddress: Int,
        window: Duration,
        maxKeys: Int = 100_000,
        inFlightRetry: Duration = .seconds(1)
    ) {
        self.perUser = perUser
        self.perAddress = perAddress
        self.window = window
        self.maxKeys = maxKeys
        self.inFlightRetry = inFlightRetry
    }

    /// Checks both limits and, if the attempt may go ahead, counts it in flight against both.
    ///
    /// - Parameters:
    ///   - user: The user name tried (compared without regard to case), or nil for a token. A token is checked
    ///     against the failed tokens of its address only and is not counted in flight: checking one costs a lookup,
    ///     not a hash, and a token cannot be guessed, so reconnecting devices behind one address are held up neither
    ///     by each other nor by a password storm from there.
    ///   - address: The client's address key (``AddressKey``).
    mutating func admit(user: String?, address: String, now: ContinuousClock.Instant) -> Admission {
        let userKey = user.map(Self.userKey)
        let keys = Self.keys(user: userKey, address: address, perUser: self.perUser, perAddress: self.perAddress)
        var wait: Duration?
        for (key, limit) in keys {
            guard let entry = self.entries[key] else { continue }
            let recent = entry.failures.filter { now - $0 < self.window }
            let inFlight = user == nil ? 0 : entry.inFlight
            guard recent.count + inFlight >= limit else { continue }
            let keyWait =
                recent.count >= limit
                ? self.window - (now - recent[recent.count - limit]) : self.inFlightRetry
            wait = max(wait ?? .zero, keyWait)
        }
        if let wait { return .throttled(retryAfter: wait) }
        if self.entries.count - self.tokenKeys >= self.maxKeys - self.maxKeys / 4
            || self.lastPrune.map({ now - $0 >= self.window }) ?? true
        {
            self.prune(now: now)
        }
        // A full table refuses password attempts that need a new key. Tokens are not refused for it: a token
        // attempt makes no key unless it fails (and a token cannot be guessed), so devices reconnecting from new
        // addresses are not locked out by whoever filled the table.
        if user != nil, self.entries.count - self.tokenKeys >= self.maxKeys - self.maxKeys / 4,
            keys.contains(where: { self.entries[$0.0] == nil })
        {
            return .throttled(retryAfter: self.inFlightRetry)
        }
        if user != nil {
            for (key, _) in keys { self.entries[key, default: Entry()].inFlight += 1 }
        }
        return .admitted(Ticket(user: userKey, address: address))
    }

    /// An admitted attempt ended; a failure is recorded against both its keys.
    mutating func finish(_ ticket: Ticket, failed: Bool, now: ContinuousClock.Instant) {
        let keys = Self.keys(
            user: ticket.user,
            address: ticket.address,
            perUser: self.perUser,
            perAddress: self.perAddress
        )
        guard ticket.user != nil || failed else { return }
        for (key, limit) in keys {
            // A failed token from a new address is not recorded once token keys have their share of the table.
            if ticket.user == nil, self.entries[key] == nil {
                guard self.tokenKeys < self.maxKeys / 4 else { continue }
                self.tokenKeys += 1
            }
            var entry = self.entries[key] ?? Entry()
            if ticket.user != nil { entry.inFlight = max(0, entry.inFlight - 1) }
            if failed {
                entry.failures = Array((entry.failures.filter { now - $0 < self.window } + [now]).suffix(limit))
            }
            self.entries[key] = entry
        }
    }

    /// The key a user name counts under (``LoginLimits/userKey(_:)``, as across nodes).
    static func userKey(_ user: String) -> String {
        LoginLimits.userKey(user)
    }

    /// The keys an attempt counts under, with their limits: a password attempt under its address and its user name
    /// (lowercased), a token under its address's token key.
    private static func keys(user: String?, address: String, perUser: Int, perAddress: Int) -> [(Key, Int)] {
        guard let user else { return [(.tokens(address), perAddress)] }
        return [(.address(address), perAddress), (.user(user), perUser)]
    }

    /// Attempts in flight for a user name, for tests.
    func inFlight(user: String) -> Int {
        self.entries[.user(Self.userKey(user))]?.inFlight ?? 0
    }

    /// How many keys the table holds, for tests.
    var keyCount: Int { self.entries.count }

    private mutating func prune(now: ContinuousClock.Instant) {
        self.lastPrune = now
        self.entries = self.entries.filter { _, entry in
            entry.inFlight > 0 || entry.failures.contains { now - $0 < self.window }
        }
        self.tokenKeys = self.entries.keys.filter { if case .tokens = $0 { true } else { false } }.count
    }
}
