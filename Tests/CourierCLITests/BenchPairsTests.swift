import CourierBench
import Testing

@Suite("courier bench's pairs: who sends to whom, and on which node")
struct BenchPairsTests {
    @Test(
        "each partner's partner is the user itself; with --partners-on-one-node both are on one node, without on two",
        arguments: [1, 2, 3, 4]
    )
    func partners(nodes: Int) {
        let count = 48
        for together in [false, true] where nodes > 1 || !together {
            let span = together ? nodes : 1
            for index in 0..<count {
                guard let partner = BenchProvisioning.partner(of: index, count: count, span: span) else {
                    Issue.record("user \(index) of \(count) has no partner (span \(span))")
                    continue
                }
                #expect(partner != index)
                #expect(BenchProvisioning.partner(of: partner, count: count, span: span) == index)
                if nodes > 1 {
                    #expect((partner % nodes == index % nodes) == together, "\(index) and \(partner), \(nodes) nodes")
                }
            }
        }
        // An odd user out has no partner.
        #expect(BenchProvisioning.partner(of: 4, count: 5, span: 1) == nil)
    }
}
