/// The native and compat ports' connections as admission counts them: all of them, those not logged in yet (in all
/// and per address), and the *strangers*: connections that have sent nothing that could log them in (no `hello`, no
/// `auth`), per address, oldest first.
///
/// A full server makes room for a login rather than refuse it: when the connections reach `maxConnections`, or those
/// not logged in reach `maxUnauthenticated`, a new connection takes the place of a stranger, which is closed: the
/// oldest stranger of the address that holds the most. Sockets that only hold places are thus closed before a
/// newcomer from an address with few of them (a client about to send its `hello`), however many addresses they come
/// from. A connection whose login is under way (its `hello` came) is never closed for room, and neither is one
/// logged in. A new connection is refused (`server-full`) when no stranger is left to close, when `maxClosing`
/// closed ones have not ended yet, or when its own address has `maxUnauthenticatedPerAddress` connections not logged
/// in.
///
/// A connection closed for room counts among the open ones until it has ended (its descriptor is still open): at
/// most `maxConnections` + `maxClosing` are open at any time.
///
/// A value: ``SessionContext`` keeps it under a lock and closes the channels it names.
struct ConnectionCounts: Sendable {
    let maxConnections: Int
    let maxUnauthenticated: Int
    let maxUnauthenticatedPerAddress: Int
    /// Connections closed for room that may be still ending; past it, a newcomer is refused instead.
    let maxClosing: Int

    /// Connections counted, those closed for room and not ended yet included.
    private(set) var open = 0
    /// Of them, those not logged in (not those closed for room).
    private(set) var unauthenticated = 0
    private var unauthenticatedByAddress: [String: Int] = [:]
    /// Each address's strangers, oldest first.
    private var strangers: [String: OldestFirst<Int>] = [:]
    /// Addresses by how many strangers each has (all with at least one), and the largest such count.
    private var addressesHolding: [Int: Set<String>] = [:]
    private var most = 0
    /// Strangers closed for room whose end has not been counted yet.
    private var closedForRoom: Set<Int> = []
    private var nextID = 0

    /// A connection counted in; hand it back to ``spoke(_:)``, ``authenticated(_:)`` and ``release(_:authenticated:)``.
    struct Ticket: Sendable, Hashable {
        let id: Int
        let address: String
    }

    enum Refusal: Error, Hashable {
        /// No place, and no stranger to close for one.
        case serverFull
        /// Its address has `maxUnauthenticatedPerAddress` connections not logged in.
        case addressFull
    }

    enum Admission: Sendable, Hashable {
        /// Counted in, as a stranger; `closing`: the stranger that must be closed to make its place.
        case admitted(Ticket, closing: Int?)
        case refused(Refusal)
    }

    init(maxConnections: Int, maxUnauthenticated: Int, maxUnauthenticatedPerAddress: Int, maxClosing: Int = 256) {
        self.maxConnections = max(1, maxConnections)
        self.maxUnauthenticated = max(1, maxUnauthenticated)
        self.maxUnauthenticatedPerAddress = max(1, maxUnauthenticatedPerAddress)
        self.maxClosing = max(0, maxClosing)
    }

    /// Counts a new connection in, closing a stranger for its place when the server is full.
    mutating func admit(address: String) -> Admission {
        guard self.unauthenticatedByAddress[address, default: 0] < self.maxUnauthenticatedPerAddress else {
            return .refused(.addressFull)
        }
        var closing: Int?
        if self.open - self.closedForRoom.count >= self.maxConnections
            || self.unauthenticated >= self.maxUnauthenticated
        {
            guard self.closedForRoom.count < self.maxClosing, let stranger = self.closeStrangerForRoom(for: address)
            else {
                return .refused(.serverFull)
            }
            closing = stranger
        }
        let ticket = Ticket(id: self.nextID, address: address)
        self.nextID += 1
        self.open += 1
        self.unauthenticated += 1
        self.unauthenticatedByAddress[address, default: 0] += 1
        self.addStranger(ticket)
        return .admitted(ticket, closing: closing)
    }

    /// The connection sent what may log it in: it is no longer a stranger, and no longer closed for room.
    ///
    /// - Returns: false when it was closed for room already (it must close: its place is another's).
    mutating func spoke(_ ticket: Ticket) -> Bool {
        guard !self.closedForRoom.contains(ticket.id) else { return false }
        self.removeStranger(ticket)
        return true
    }

    /// The connection logged in: it no longer counts as not logged in.
    mutating func authenticated(_ ticket: Ticket) {
        guard !self.closedForRoom.contains(ticket.id) else { return }
        self.removeStranger(ticket)
        self.unauthenticated -= 1
        self.decrement(ticket.address)
    }

    /// The connection ended.
    mutating func release(_ ticket: Ticket, authenticated: Bool) {
        self.open -= 1
        // One closed for room was counted out of the rest when it was closed.
        if self.closedForRoom.remove(ticket.id) != nil { return }
        if !authenticated {
            self.removeStranger(ticket)
            self.unauthenticated -= 1
            self.decrement(ticket.address)
        }
    }

    /// The strangers waiting, for tests.
    var strangerCount: Int { self.strangers.values.reduce(0) { $0 + $1.count } }

    /// The connections closed for room that have not ended, for tests.
    var closingCount: Int { self.closedForRoom.count }

    /// The longest of the strangers' orders, swept ids included, for tests.
    var orderLength: Int { self.strangers.values.map(\.orderLength).max() ?? 0 }

    /// Takes the oldest stranger of the address holding the most off the books as not logged in (it stays open
    /// until it ends) and names it to be closed. Where the newcomer's own address is one of those holding the most,
    /// it pays for itself.
    private mutating func closeStrangerForRoom(for newcomer: String) -> Int? {
        guard self.most > 0 else { return nil }
        let address =
            self.strangers[newcomer]?.count == self.most ? newcomer : self.addressesHolding[self.most]?.first
        guard let address, let id = self.strangers[address]?.popOldest() else { return nil }
        self.moveAddress(address, from: self.most, to: self.most - 1)
        if self.strangers[address]?.count == 0 { self.strangers[address] = nil }
        self.closedForRoom.insert(id)
        self.unauthenticated -= 1
        self.decrement(address)
        return id
    }

    private mutating func addStranger(_ ticket: Ticket) {
        let held = self.strangers[ticket.address]?.count ?? 0
        self.strangers[ticket.address, default: OldestFirst()].insert(ticket.id)
        self.moveAddress(ticket.address, from: held, to: held + 1)
    }

    private mutating func removeStranger(_ ticket: Ticket) {
        guard var order = self.strangers[ticket.address], order.remove(ticket.id) else { return }
        self.strangers[ticket.address] = order.count == 0 ? nil : order
        self.moveAddress(ticket.address, from: order.count + 1, to: order.count)
    }

    /// An address's count of strangers went from `old` to `new` (by one).
    private mutating func moveAddress(_ address: String, from old: Int, to new: Int) {
        if old > 0 {
            self.addressesHolding[old]?.remove(address)
            if self.addressesHolding[old]?.isEmpty ?? false { self.addressesHolding[old] = nil }
        }
        if new > 0 { self.addressesHolding[new, default: []].insert(address) }
        if new > self.most { self.most = new }
        while self.most > 0, self.addressesHolding[self.most] == nil { self.most -= 1 }
    }

    private mutating func decrement(_ address: String) {
        let left = self.unauthenticatedByAddress[address, default: 0] - 1
        self.unauthenticatedByAddress[address] = left > 0 ? left : nil
    }
}
