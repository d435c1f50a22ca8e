import CourierTesting
import NIOEmbedded
import Testing

@testable import CourierServer

@Suite("Connection counts: room for logins on a full server (no sockets)")
struct ConnectionCountsTests {
    @Test(
        "past the cap of connections not logged in, the oldest stranger is closed; one whose login is under way never"
    )
    func oldestStrangerYields() throws {
        var counts = ConnectionCounts(maxConnections: 100, maxUnauthenticated: 4, maxUnauthenticatedPerAddress: 3)
        var tickets: [ConnectionCounts.Ticket] = []
        for index in 0..<4 {
            let admission = counts.admit(address: index < 2 ? "a" : "b")
            guard case .admitted(let ticket, nil) = admission else {
                Issue.record("\(admission)")
                return
            }
            tickets.append(ticket)
        }
        // The first has sent its hello: it is not closed for room. The second, the oldest stranger, is.
        let spoke = counts.spoke(tickets[0])
        #expect(spoke)
        let newcomer = counts.admit(address: "c")
        #expect(newcomer == .admitted(.init(id: 4, address: "c"), closing: tickets[1].id))
        let closedSpoke = counts.spoke(tickets[1])
        #expect(!closedSpoke, "its place is another's")
        #expect(counts.unauthenticated == 4 && counts.open == 4)
        // Its end, when it comes, counts nothing more.
        counts.release(tickets[1], authenticated: false)
        #expect(counts.unauthenticated == 4 && counts.open == 4)
        // An address at its share is refused, not made room for.
        _ = counts.admit(address: "a")
        _ = counts.admit(address: "a")
        let third = counts.admit(address: "a")
        #expect(third == .refused(.addressFull))
        // Logging in frees a place of those not logged in.
        counts.authenticated(tickets[0])
        #expect(counts.unauthenticated == 3)
    }

    @Test("a full server with no stranger left refuses; with one, it closes it for the newcomer")
    func fullServer() {
        var counts = ConnectionCounts(maxConnections: 3, maxUnauthenticated: 100, maxUnauthenticatedPerAddress: 100)
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
        #expect(newcomer == .admitted(.init(id: stranger.id + 1, address: "c"), closing: stranger.id))
    }

    @Test("randomized: the counts always match the connections, the caps hold, and the order stays small")
    func randomized() {
        var random = SeededRandom(seed: TestSeed.make(for: "ConnectionCounts.randomized"))
        var counts = ConnectionCounts(maxConnections: 40, maxUnauthenticated: 16, maxUnauthenticatedPerAddress: 6)
        enum Stage { case stranger, spoke, authenticated, closedForRoom }
        var live: [Int: (ticket: ConnectionCounts.Ticket, stage: Stage)] = [:]
        for _ in 0..<50_000 {
            switch random.next() % 5 {
            case 0, 1:
                let address = "10.0.0.\(random.next() % 8)"
                switch counts.admit(address: address) {
                case .admitted(let ticket, let closing):
                    if let closing {
                        #expect(live[closing]?.stage == .stranger, "only a stranger is closed for room")
                        live[closing]?.stage = .closedForRoom
                    }
                    live[ticket.id] = (ticket, .stranger)
                case .refused(.addressFull):
                    let fromThere = live.values.filter {
                        $0.ticket.address == address && $0.stage != .authenticated && $0.stage != .closedForRoom
                    }
                    #expect(fromThere.count == 6)
                case .refused(.serverFull):
                    #expect(!live.values.contains { $0.stage == .stranger })
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
            let counted = live.values.filter { $0.stage != .closedForRoom }
            let unauthenticated = counted.filter { $0.stage != .authenticated }.count
            #expect(counts.open == counted.count && counts.open <= 40)
            #expect(counts.unauthenticated == unauthenticated && unauthenticated <= 16)
            #expect(counts.strangerCount == counted.filter { $0.stage == .stranger }.count)
            #expect(counts.orderLength <= 2 * counts.strangerCount + 1025)
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
        connections.waiting(channels[0])
        #expect(open(3, from: "b") == (true, 2))
        connections.closed(channels[2], address: "b")
        // 0, waiting since its answer, is the oldest now.
        #expect(open(4) == (true, 0))
        // An address at its share is refused (it closes itself), and nothing is closed for it.
        let shared = HTTPConnections(perAddress: 1, maxConnections: 1)
        #expect(shared.opened(channels[5], address: "a").admitted)
        let refused = shared.opened(EmbeddedChannel(), address: "a")
        #expect(!refused.admitted && refused.closing == nil)
    }
}
