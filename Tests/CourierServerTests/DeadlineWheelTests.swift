import Testing

@testable import CourierServer

@Suite("Deadline wheel (one per event loop; no sockets)")
struct DeadlineWheelTests {
    /// A small generator with a seed to print, so a failure can be replayed.
    struct Random {
        var state: UInt64
        mutating func next() -> UInt64 {
            self.state &+= 0x9E37_79B9_7F4A_7C15
            var z = self.state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    @Test("10,000 sessions' deadlines: each fires once, never early, within one slot of its time; moved ones re-armed")
    func tenThousandSessions() {
        let seed = UInt64.random(in: 0...UInt64.max)
        print("DeadlineWheelTests.tenThousandSessions seed: \(seed)")
        var random = Random(state: seed)
        let origin = ContinuousClock.now
        let resolution = Duration.milliseconds(100)
        // 64 slots of 100 ms: deadlines up to 90 s go round the wheel many times.
        var wheel = DeadlineWheel(resolution: resolution, slots: 64, origin: origin)
        var deadlines: [Int: ContinuousClock.Instant] = [:]
        for key in 0..<10_000 {
            let deadline = origin + .milliseconds(Int64(random.next() % 90_000))
            deadlines[key] = deadline
            wheel.insert(key: key, at: deadline)
        }
        #expect(wheel.count == 10_000)
        var fired: [Int: ContinuousClock.Instant] = [:]
        var now = origin
        var rearmed = 0
        while now < origin + .seconds(100) {
            // Advanced unevenly, as a loaded event loop would: mostly once a slot, sometimes late by several.
            let step = random.next() % 10 == 0 ? Int64(random.next() % 3_000) : 100
            now += .milliseconds(step)
            for key in wheel.advance(to: now) {
                let deadline = deadlines[key]!
                #expect(now >= deadline, "key \(key) fired \(deadline - now) early")
                #expect(fired[key] == nil, "key \(key) fired twice")
                fired[key] = now
                // A tenth of the sessions saw activity: their deadline moved on by 30 s, and they arm again.
                if key % 10 == 0, rearmed < 1_000 {
                    rearmed += 1
                    fired[key] = nil
                    deadlines[key] = deadline + .seconds(30)
                    wheel.insert(key: key, at: deadlines[key]!)
                }
            }
        }
        #expect(fired.count == 10_000)
        #expect(wheel.count == 0)
        // On time: a key fires at the first advance at or after its deadline rounded up to a slot.
        var late = 0
        for (key, at) in fired where at - deadlines[key]! > resolution + .seconds(3) { late += 1 }
        #expect(late == 0)
    }

    @Test("every advance on time: a deadline fires in the advance of its slot, not one later")
    func exactSlots() {
        let origin = ContinuousClock.now
        var wheel = DeadlineWheel(resolution: .milliseconds(100), slots: 8, origin: origin)
        wheel.insert(key: 1, at: origin + .milliseconds(250))
        wheel.insert(key: 2, at: origin + .milliseconds(300))
        wheel.insert(key: 3, at: origin + .seconds(5))
        // A deadline already passed fires at the next advance.
        wheel.insert(key: 4, at: origin - .seconds(1))
        #expect(wheel.advance(to: origin + .milliseconds(100)) == [4])
        #expect(wheel.advance(to: origin + .milliseconds(200)) == [])
        #expect(wheel.advance(to: origin + .milliseconds(299)) == [])
        #expect(wheel.advance(to: origin + .milliseconds(300)) == [1, 2])
        #expect(wheel.advance(to: origin + .milliseconds(4_999)) == [])
        #expect(wheel.advance(to: origin + .milliseconds(5_000)) == [3])
        #expect(wheel.count == 0)
    }
}
