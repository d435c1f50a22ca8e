import Synchronization
import Testing

@testable import CourierClient

@Suite("Handoff: producers to one batching consumer")
struct HandoffTests {
    @Test("every element arrives once, in each producer's order, in batches; finish ends the consumer after a drain")
    func batches() async throws {
        let handoff = Handoff<(producer: Int, index: Int)>()
        let producers = 4
        let perProducer = 5_000
        let consumer = Task {
            var received: [(producer: Int, index: Int)] = []
            var batches = 0
            while let batch = await handoff.takeAll() {
                #expect(!batch.isEmpty)
                received += batch
                batches += 1
            }
            return (received, batches)
        }
        await withTaskGroup(of: Void.self) { group in
            for producer in 0..<producers {
                group.addTask {
                    for index in 0..<perProducer {
                        handoff.append((producer, index))
                        if index % 100 == 0 { await Task.yield() }
                    }
                }
            }
        }
        handoff.finish()
        let (received, batches) = await consumer.value
        #expect(received.count == producers * perProducer)
        for producer in 0..<producers {
            #expect(received.filter { $0.producer == producer }.map(\.index) == Array(0..<perProducer))
        }
        #expect(batches < received.count, "appends made while the consumer worked were taken together")
        #expect(await handoff.takeAll() == nil)
    }

    @Test("elements added before finish are still handed out")
    func drainAfterFinish() async {
        let handoff = Handoff<Int>()
        handoff.append(1)
        handoff.append(2)
        handoff.finish()
        #expect(await handoff.takeAll() == [1, 2])
        #expect(await handoff.takeAll() == nil)
    }
}
