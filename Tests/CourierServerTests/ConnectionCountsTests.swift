import CourierStore
import CourierTesting
import NIOEmbedded
import Testing

@testable import CourierServer

@Suite("Connection counts: room for logins on a full server (no sockets)")
struct ConnectionCountsTests {
    @Test(
        "past the cap of connections not logged in, a stranger of the address holding the most is closed; a login under way never"
    )
    func strangerYields() throws {
        var counts = ConnectionCounts(maxConnections: 100, maxUnauthenticated: 4, maxUnauthenticatedPerAddress: 3)
        var tickets: [ConnectionCounts.Ticket] = []
        for address in ["a", "a", "b", "b"] {
            let admission = counts.admit(address: address)
            guard case .admitted(let ticket, nil) = admission else {
                Issue.record("\(admission)")
                return
            }
            tickets.append(ticket)
        }
        // a's first has sent its hello: a holds one stranger, b two. b's oldest is closed for the newcomer.
        let spoke = counts.spoke(tickets[0])
        #expect(spoke)
        let newcomer = counts.admit(address: "c")
        #expect(newcomer == .admitted(.init(id: 4, address: "c"), closing: tickets[2].id))
        let closedSpoke = counts.spoke(tickets[2])
        #expect(!closedSpoke, "its place is another's")
        // It stays open until it has ended: counted among the open, not among those not logged in.
        #expect(counts.unauthenticated == 4 && counts.open == 5 && counts.closingCount == 1)
        counts.release(tickets[2], authenticated: false)
        #expect(counts.unauthenticated == 4 && counts.open == 4 && counts.closingCount == 0)
        // Now a, b and c hold one stranger each: the oldest of the three goes, whichever address is picked first
        // among equals (a's second, b's second or c's).
        let next = counts.admit(address: "d")
        guard case .admitted(_, let closing?) = next else {
            Issue.record("\(next)")
            return
        }
        #expect([tickets[1].id, tickets[3].id, 4].contains(closing))
        // An address that holds the most strangers closes its own to come in: it never has more than its share.
        for _ in 0..<3 { _ = counts.admit(address: "e") }
        let own = counts.admit(address: "e")
        guard case .admitted(let newest, let closing?) = own else {
            Issue.record("\(own)")
            return
        }
        #expect(newest.id == closing + 1, "e's previous one")
        // Logging in frees a place of those not logged in.
        let before = counts.unauthenticated
        counts.authenticated(tickets[0])
        #expect(counts.unauthenticated == before - 1)
        // Where there is room, an address at its share is refused, not made room for.
        var roomy = ConnectionCounts(maxConnections: 100, maxUnauthenticated: 100, maxUnauthenticatedPerAddress: 2)
        _ = roomy.admit(address: "a")
        _ = roomy.admit(address: "a")
        let third = roomy.admit(address: "a")
        #expect(third == .refused(.addressFull))
    }

    @Test("a full server with no stranger left refuses; with one, it closes it for the newcomer; closings are bounded")
    func fullServer() {
        var counts = ConnectionCounts(
            maxConnections: 3,
            maxUnauthenticated: 100,
            maxUnauthenticatedPerAddress: 100,
            maxClosing: 1
        )
        var logged: [ConnectionCounts.Ticket] = []
        for _ in 0..<3 {
            guard case .admitted(let ticket, nil) = counts.admit(address: "a") else {
                Issue.record("refused")
                return
            }
            let spoke = counts.spoke(ticket)
            #expect(spoke)
            logged.append(ticket)
        }
        // Three logins under way: nobody to close.
        let underWay = counts.admit(address: "b")
        #expect(underWay == .refused(.serverFull))
        for ticket in logged { counts.authenticated(ticket) }
        let loggedIn = counts.admit(address: "b")
        #expect(loggedIn == .refused(.serverFull))
        counts.release(logged[0], authenticated: true)
        guard case .admitted(let stranger, nil) = counts.admit(address: "b") else {
            Issue.record("refused with a free place")
            return
        }
        let newcomer = counts.admit(address: "c")
        guard case .admitted(let second, stranger.id) = newcomer else {
            Issue.record("\(newcomer)")
            return
        }
        // One closing and not ended yet is all it may have: the next is refused until it ends.
        let third = counts.admit(address: "d")
        #expect(third == .refused(.serverFull))
        counts.release(stranger, authenticated: false)
        let fourth = counts.admit(address: "d")
        #expect(fourth == .admitted(.init(id: second.id + 1, address: "d"), closing: second.id))
    }

    @Test("randomized: the counts always match the connections, the caps hold, the address holding the most yields")
    func randomized() {
        var random = SeededRandom(seed: TestSeed.make(for: "ConnectionCounts.randomized"))
        var counts = ConnectionCounts(
            maxConnections: 40,
            maxUnauthenticated: 16,
            maxUnauthenticatedPerAddress: 6,
            maxClosing: 4
        )
        enum Stage { case stranger, spoke, authenticated, closedForRoom }
        var live: [Int: (ticket: ConnectionCounts.Ticket, stage: Stage)] = [:]
        for _ in 0..<50_000 {
            switch random.next() % 5 {
            case 0, 1:
                let address = "10.0.0.\(random.next() % 8)"
                let held = Dictionary(grouping: live.values.filter { $0.stage == .stranger }, by: \.ticket.address)
                    .mapValues(\.count)
                switch counts.admit(address: address) {
                case .admitted(let ticket, let closing):
                    if let closing {
                        let closed = live[closing]
                        #expect(closed?.stage == .stranger, "only a stranger is closed for room")
                        #expect(held[closed?.ticket.address ?? ""] == held.values.max(), "from the address with most")
                        live[closing]?.stage = .closedForRoom
                    }
                    live[ticket.id] = (ticket, .stranger)
                case .refused(.addressFull):
                    let fromThere = live.values.filter {
                        $0.ticket.address == address && ($0.stage == .stranger || $0.stage == .spoke)
                    }
                    #expect(fromThere.count == 6)
                case .refused(.serverFull):
                    let closing = live.values.filter { $0.stage == .closedForRoom }.count
                    #expect(!live.values.contains { $0.stage == .stranger } || closing == 4)
                }
            case 2:
                guard let (id, entry) = live.randomElement(using: &random) else { continue }
                switch entry.stage {
                case .stranger:
                    let spoke = counts.spoke(entry.ticket)
                    #expect(spoke)
                    live[id]?.stage = .spoke
                case .spoke:
                    counts.authenticated(entry.ticket)
                    live[id]?.stage = .authenticated
                case .closedForRoom:
                    let spoke = counts.spoke(entry.ticket)
                    #expect(!spoke)
                case .authenticated: break
                }
            default:
                guard let (id, entry) = live.randomElement(using: &random) else { continue }
                counts.release(entry.ticket, authenticated: entry.stage == .authenticated)
                live[id] = nil
            }
            let closing = live.values.filter { $0.stage == .closedForRoom }.count
            let unauthenticated = live.values.filter { $0.stage == .stranger || $0.stage == .spoke }.count
            #expect(counts.open == live.count && counts.open - closing <= 40 && closing <= 4)
            #expect(counts.unauthenticated == unauthenticated && unauthenticated <= 16)
            #expect(counts.strangerCount == live.values.filter { $0.stage == .stranger }.count)
            #expect(counts.closingCount == closing)
            #expect(counts.orderLength <= 2 * 16 + 1025)
        }
    }

    @Test(
        "the HTTP port: the oldest waiting connection closes for room; one being answered never; one answered waits anew"
    )
    func httpRoom() {
        let connections = HTTPConnections(perAddress: 3, maxConnections: 3)
        let channels = (0..<6).map { _ in EmbeddedChannel() }
        func open(_ index: Int, from address: String = "a") -> (Bool, Int?) {
            let (admitted, closing) = connections.opened(channels[index], address: address)
            return (admitted, closing.flatMap { closing in channels.firstIndex { $0 === closing } })
        }
        #expect(open(0) == (true, nil))
        #expect(open(1) == (true, nil))
        // 0 is answering a request: 1 is the oldest waiting.
        connections.busy(channels[0])
        #expect(open(2, from: "b") == (true, 1))
        connections.closed(channels[1], address: "a")
        // 0's answer went out: it waits again, the newest; 2 is now the oldest waiting.
        let closes = connections.waiting(channels[0])
        #expect(!closes)
        #expect(open(3, from: "b") == (true, 2))
        connections.closed(channels[2], address: "b")
        // 0, waiting since its answer, is the oldest now.
        #expect(open(4) == (true, 0))
        // An address at its share is refused (it closes itself), and nothing is closed for it.
        let shared = HTTPConnections(perAddress: 1, maxConnections: 1)
        #expect(shared.opened(channels[5], address: "a").admitted)
        let refused = shared.opened(EmbeddedChannel(), address: "a")
        #expect(!refused.admitted && refused.closing == nil)
        // Every connection answering: a newcomer waits to be accepted, and the first answered closes for it.
        let full = HTTPConnections(perAddress: 10, maxConnections: 2)
        let (first, second) = (EmbeddedChannel(), EmbeddedChannel())
        _ = full.opened(first, address: "a")
        full.busy(first)
        #expect(full.opened(second, address: "b").closing == nil)
        full.busy(second)
        let answered = full.waiting(first)
        #expect(answered, "closes for the connection the port holds back")
    }

    @Test("a lease that yielded before its connection registered is refused as it registers; a password login yields")
    func hubYields() {
        let hub = Hub()
        let (user, device) = (UserID(rawValue: 1), DeviceID(rawValue: 1))
        hub.terminate(leases: [7], early: true)
        guard case .userFull = hub.register(user: user, device: device, ephemeral: false, lease: 7) else {
            Issue.record("registered a lease that yielded")
            return
        }
        guard
            case .registered(let first, _, _) = hub.register(
                user: user,
                device: device,
                ephemeral: false,
                maxPerUser: 1
            )
        else {
            Issue.record("refused")
            return
        }
        // At the limit: a token login is refused, a password login makes the first yield (it is told to close).
        guard case .userFull = hub.register(user: user, device: device, ephemeral: false, maxPerUser: 1) else {
            Issue.record("a token login past the limit")
            return
        }
        guard
            case .registered = hub.register(user: user, device: device, ephemeral: false, maxPerUser: 1, yielding: true)
        else {
            Issue.record("a password login refused")
            return
        }
        guard case .terminate(let code, _)? = first.take() else {
            Issue.record("the oldest was not told to close")
            return
        }
        #expect(code == "server-full")
        #expect(hub.placesHeld(by: user) == 1)
    }

    @Test("at most maxEarlyYields leases that yielded early are kept: past it the oldest is forgotten and registers")
    func earlyYieldsBounded() {
        let hub = Hub(maxEarlyYields: 2)
        let (user, device) = (UserID(rawValue: 1), DeviceID(rawValue: 1))
        hub.terminate(leases: [1, 2, 3], early: true)
        guard case .registered = hub.register(user: user, device: device, ephemeral: false, lease: 1) else {
            Issue.record("the oldest early yield was kept past the limit")
            return
        }
        for lease: Int64 in [2, 3] {
            guard case .userFull = hub.register(user: user, device: device, ephemeral: false, lease: lease) else {
                Issue.record("lease \(lease) yielded and registered")
                return
            }
        }
    }
}
