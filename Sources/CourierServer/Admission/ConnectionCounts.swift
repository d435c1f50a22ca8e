/// The native and compat ports' connections as admission counts them: all of them, those not logged in yet (in all
/// and per address), and, in the order they came, the *strangers*: connections that have sent nothing that could log
/// in (no `hello`, no `auth`).
///
/// A full server makes room for a login rather than refuse it: when the connections reach `maxConnections`, or those
/// not logged in reach `maxUnauthenticated`, a new connection takes the place of the oldest stranger, which is closed.
/// A connection whose login is under way (its `hello` came) is never closed for room, and neither is one logged in;
/// sockets that only hold a place, however many addresses they come from, keep at most the places nobody logging in
/// needs. A new connection is refused (`server-full`) only when no stranger is left to close, or when its own
/// address has `maxUnauthenticatedPerAddress` connections not logged in.
///
/// A value: ``SessionContext`` keeps it under a lock and closes the channels it names.
struct ConnectionCounts: Sendable {
    let maxConnections: Int
    let maxUnauthenticated: Int
    let maxUnauthenticatedPerAddress: Int

    /// Connections counted (the closed strangers no longer are).
    private(set) var open = 0
    /// Of them, those not logged in.
    private(set) var unauthenticated = 0
    private var unauthenticatedByAddress: [String: Int] = [:]
    /// The strangers' ids, oldest first.
    private var strangers = OldestFirst<Int>()
    /// The addresses of connections not logged in, by id.
    private var addresses: [Int: String] = [:]
    /// Strangers closed for room whose end has not been counted yet: their end counts nothing.
    private var closedForRoom: Set<Int> = []
    private var nextID = 0

    /// A connection counted in; hand it back to ``spoke(_:)``, ``authenticated(_:)`` and ``release(_:)``.
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

    init(maxConnections: Int, maxUnauthenticated: Int, maxUnauthenticatedPerAddress: Int) {
        self.maxConnections = max(1, maxConnections)
        self.maxUnauthenticated = max(1, maxUnauthenticated)
        self.maxUnauthenticatedPerAddress = max(1, maxUnauthenticatedPerAddress)
    }

    /// Counts a new connection in, closing the oldest stranger for its place when the server is full.
    mutating func admit(address: String) -> Admission {
        guard self.unauthenticatedByAddress[address, default: 0] < self.maxUnauthenticatedPerAddress else {
            return .refused(.addressFull)
        }
        var closing: Int?
        if self.open >= self.maxConnections || self.unauthenticated >= self.maxUnauthenticated {
            guard let oldest = self.takeOldestStranger() else { return .refused(.serverFull) }
            closing = oldest
        }
        let ticket = Ticket(id: self.nextID, address: address)
        self.nextID += 1
        self.open += 1
        self.unauthenticated += 1
        self.unauthenticatedByAddress[address, default: 0] += 1
        self.addresses[ticket.id] = address
        self.strangers.insert(ticket.id)
        return .admitted(ticket, closing: closing)
    }

    /// The connection sent what may log it in: it is no longer a stranger, and no longer closed for room.
    ///
    /// - Returns: false when it was closed for room already (it must close: its place is another's).
    mutating func spoke(_ ticket: Ticket) -> Bool {
        guard !self.closedForRoom.contains(ticket.id) else { return false }
        self.strangers.remove(ticket.id)
        return true
    }

    /// The connection logged in: it no longer counts as not logged in.
    mutating func authenticated(_ ticket: Ticket) {
        guard !self.closedForRoom.contains(ticket.id) else { return }
        self.strangers.remove(ticket.id)
        self.addresses[ticket.id] = nil
        self.unauthenticated -= 1
        self.decrement(ticket.address)
    }

    /// The connection ended.
    mutating func release(_ ticket: Ticket, authenticated: Bool) {
        if self.closedForRoom.remove(ticket.id) != nil { return }
        if !authenticated {
            self.strangers.remove(ticket.id)
            self.addresses[ticket.id] = nil
            self.unauthenticated -= 1
            self.decrement(ticket.address)
        }
        self.open -= 1
    }

    /// The strangers waiting, for tests.
    var strangerCount: Int { self.strangers.count }

    /// The length of the strangers' order, swept ids included, for tests.
    var orderLength: Int { self.strangers.orderLength }

    /// Takes the oldest stranger off the books (its place is free from now) and names it to be closed.
    private mutating func takeOldestStranger() -> Int? {
        guard let id = self.strangers.popOldest(), let address = self.addresses.removeValue(forKey: id) else {
            return nil
        }
        self.closedForRoom.insert(id)
        self.open -= 1
        self.unauthenticated -= 1
        self.decrement(address)
        return id
    }

    private mutating func decrement(_ address: String) {
        let left = self.unauthenticatedByAddress[address, default: 0] - 1
        self.unauthenticatedByAddress[address] = left > 0 ? left : nil
    }
}
