import Logging
import Testing

@testable import CourierServer

@Suite("Login gate (no sockets)")
struct LoginGateTests {
    static let start = ContinuousClock.now

    @Test("attempts in flight count against the limit: a burst for one user admits only the limit")
    func burst() {
        var gate = LoginGate(perUser: 5, perAddress: 1_000, window: .seconds(60))
        var tickets: [LoginGate.Ticket] = []
        var refused = 0
        for _ in 0..<100 {
            switch gate.admit(user: "alice", address: "10.0.0.1", now: Self.start) {
            case .admitted(let ticket): tickets.append(ticket)
            case .throttled(let wait):
                #expect(wait == gate.inFlightRetry)
                refused += 1
            }
        }
        #expect(tickets.count == 5 && refused == 95)
        #expect(gate.inFlight(user: "ALICE") == 5)
        // They fail: the user is throttled for the window, counted from the failures.
        for ticket in tickets { gate.finish(ticket, failed: true, now: Self.start + .seconds(1)) }
        #expect(gate.inFlight(user: "alice") == 0)
        guard case .throttled(let wait) = gate.admit(user: "Alice", address: "10.0.0.2", now: Self.start + .seconds(2))
        else {
            Issue.record("admitted after five failures")
            return
        }
        #expect(wait == .seconds(59))
        // After the window, one may try again.
        guard case .admitted = gate.admit(user: "alice", address: "10.0.0.2", now: Self.start + .seconds(61)) else {
            Issue.record("still throttled after the window")
            return
        }
    }

    @Test("a success frees its place; an address's limit counts every name tried from it, and its failed tokens apart")
    func addressLimit() {
        var gate = LoginGate(perUser: 2, perAddress: 3, window: .seconds(60))
        for _ in 0..<10 {
            guard case .admitted(let ticket) = gate.admit(user: "bob", address: "a", now: Self.start) else {
                Issue.record("a success should not use up the limit")
                return
            }
            gate.finish(ticket, failed: false, now: Self.start)
        }
        for name in ["x", "y"] {
            guard case .admitted(let ticket) = gate.admit(user: name, address: "a", now: Self.start) else {
                Issue.record("refused \(name)")
                return
            }
            gate.finish(ticket, failed: true, now: Self.start)
        }
        // Tokens are not counted in flight: any number may be checked at once.
        var tokens: [LoginGate.Ticket] = []
        for _ in 0..<50 {
            guard case .admitted(let token) = gate.admit(user: nil, address: "a", now: Self.start) else {
                Issue.record("refused a token")
                return
            }
            tokens.append(token)
        }
        // Two failures and a password check in flight take the address's three places.
        guard case .admitted(let password) = gate.admit(user: "w", address: "a", now: Self.start) else {
            Issue.record("refused w")
            return
        }
        #expect(gate.admit(user: "z", address: "a", now: Self.start) == .throttled(retryAfter: gate.inFlightRetry))
        gate.finish(password, failed: true, now: Self.start)
        // Three password failures refuse names from "a", not tokens: a password storm does not lock out the devices
        // behind that address. Failed tokens count apart, three of them refuse tokens from "a".
        #expect(gate.admit(user: "z", address: "a", now: Self.start) == .throttled(retryAfter: .seconds(60)))
        guard case .admitted(let reconnect) = gate.admit(user: nil, address: "a", now: Self.start) else {
            Issue.record("a token refused for password failures")
            return
        }
        gate.finish(reconnect, failed: false, now: Self.start)
        for token in tokens.prefix(3) { gate.finish(token, failed: true, now: Self.start) }
        for token in tokens.dropFirst(3) { gate.finish(token, failed: false, now: Self.start) }
        #expect(gate.admit(user: nil, address: "a", now: Self.start) == .throttled(retryAfter: .seconds(60)))
        // Another address is not affected.
        guard case .admitted = gate.admit(user: "z", address: "b", now: Self.start) else {
            Issue.record("another address refused")
            return
        }
    }

    @Test("the table stays small: names no user can have share one key, old keys go, a full table refuses new ones")
    func boundedTable() {
        var gate = LoginGate(perUser: 5, perAddress: 1_000_000, window: .seconds(60), maxKeys: 100)
        // A thousand different long (or otherwise invalid) names: one key for them all, and the per-user
        // limit applies to them together.
        var admitted = 0
        for index in 0..<1_000 {
            let name = index % 2 == 0 ? String(repeating: "n", count: 100_000) + "\(index)" : "bad\u{0}\(index)"
            if case .admitted(let ticket) = gate.admit(user: name, address: "a", now: Self.start) {
                admitted += 1
                gate.finish(ticket, failed: true, now: Self.start)
            }
        }
        #expect(admitted == 5)
        #expect(gate.keyCount == 2, "the address and the one key of invalid names")
        // Failed tokens from many addresses take at most a quarter of the table.
        for index in 0..<100 {
            guard case .admitted(let token) = gate.admit(user: nil, address: "t\(index)", now: Self.start) else {
                Issue.record("a token refused")
                return
            }
            gate.finish(token, failed: true, now: Self.start)
        }
        #expect(gate.keyCount == 2 + 25)
        // Valid names fill the rest (75 keys); once it is full, a new name is refused, a known one is not.
        for index in 0..<73 {
            guard case .admitted(let ticket) = gate.admit(user: "user\(index)", address: "a", now: Self.start) else {
                Issue.record("user\(index) refused")
                return
            }
            gate.finish(ticket, failed: true, now: Self.start)
        }
        #expect(gate.keyCount == 100)
        #expect(
            gate.admit(user: "newcomer", address: "a", now: Self.start) == .throttled(retryAfter: gate.inFlightRetry)
        )
        // A token from a new address is still checked (and its failure, with no room, not recorded).
        guard case .admitted(let token) = gate.admit(user: nil, address: "b", now: Self.start) else {
            Issue.record("a token refused because the table is full")
            return
        }
        gate.finish(token, failed: true, now: Self.start)
        #expect(gate.keyCount == 100)
        guard case .admitted(let known) = gate.admit(user: "user1", address: "a", now: Self.start) else {
            Issue.record("a known name refused while the table is full")
            return
        }
        gate.finish(known, failed: false, now: Self.start)
        // After the window the failures are old: the next attempt prunes them.
        guard case .admitted = gate.admit(user: "newcomer", address: "a", now: Self.start + .seconds(61)) else {
            Issue.record("still full after the window")
            return
        }
        #expect(gate.keyCount == 2, "only the attempt in flight's keys are left")
    }

    @Test("IPv6 addresses count by their /64; IPv4-mapped ones as IPv4")
    func addressKeys() {
        #expect(AddressKey.of(ip: "127.0.0.1") == "127.0.0.1")
        #expect(AddressKey.of(ip: "2001:db8:1:2:aaaa::1") == AddressKey.of(ip: "2001:db8:1:2:bbbb:cccc:dddd:eeee"))
        #expect(AddressKey.of(ip: "2001:db8:1:2::1") == "2001:db8:1:2::/64")
        #expect(AddressKey.of(ip: "2001:db8:1:3::1") != AddressKey.of(ip: "2001:db8:1:2::1"))
        #expect(AddressKey.of(ip: "::1") == "0:0:0:0::/64")
        #expect(AddressKey.of(ip: "::ffff:10.1.2.3") == "10.1.2.3")
    }

    @Test("the connection limits shrink to fit the open-file limit, in proportion, and are kept when they fit")
    func descriptorBudget() {
        var configuration = ServerConfiguration()
        configuration.limits.maxConnections = 10_000
        configuration.http.maxConnections = 1_000
        configuration.reservedDescriptors = 500
        let logger = Logger(label: "test")
        let kept = CourierServer.fitted(configuration, openFiles: 20_000, logger: logger)
        #expect(kept.limits.maxConnections == 10_000 && kept.http.maxConnections == 1_000)
        let fitted = CourierServer.fitted(configuration, openFiles: 1_600, logger: logger)
        #expect(fitted.limits.maxConnections + fitted.http.maxConnections == 1_100)
        #expect(fitted.http.maxConnections == 100)
        // Limits as large as an Int holds (a library user's, say) are fitted too, not overflowed.
        configuration.limits.maxConnections = .max
        configuration.http.maxConnections = .max
        let huge = CourierServer.fitted(configuration, openFiles: 1_600, logger: logger)
        #expect(huge.limits.maxConnections + huge.http.maxConnections == 1_100, "\(huge.limits.maxConnections)")
        #expect(huge.http.maxConnections >= 1 && huge.limits.maxConnections >= 1)
    }
}
