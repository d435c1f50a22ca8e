import Testing

@testable import MediaCache

@Suite("MediaCache: a resource's readers and fetches, without sockets")
struct ResourceStateTests {
    static let block: Int64 = 100

    func state(total: Int64? = 1000, cached: [Range<Int64>] = []) -> ResourceState {
        var record = ResourceRecord(key: "k")
        record.totalLength = total
        record.ranges = ByteRangeSet(cached)
        record.lastValidated = .now
        return ResourceState(record: record, blockBytes: Self.block, coalesceBytes: 2 * Self.block)
    }

    @Test("a reader starts a fetch up to the next cached byte, rounded to a block only when nothing is cached there")
    func fetchBounds() {
        var state = self.state(cached: [450..<500])
        #expect(state.step(reader: 1, generation: 0, position: 10, upper: nil) == .fetch(id: 0, range: 10..<450))
        var other = self.state()
        #expect(other.step(reader: 1, generation: 0, position: 10, upper: 21) == .fetch(id: 0, range: 10..<100))
        #expect(other.step(reader: 2, generation: 0, position: 990, upper: nil) == .fetch(id: 1, range: 990..<1000))
    }

    @Test("cached bytes are served as they are; the end of what was asked is the end")
    func serveAndEnd() {
        var state = self.state(cached: [0..<300])
        #expect(state.step(reader: 1, generation: 0, position: 20, upper: 250) == .serve(20..<250))
        #expect(state.step(reader: 1, generation: 0, position: 250, upper: 250) == .end)
        #expect(state.step(reader: 1, generation: 0, position: 1000, upper: nil) == .end)
    }

    @Test("a second reader near a running fetch waits on it; one far ahead starts its own and stops the first there")
    func coalescing() {
        var state = self.state()
        #expect(state.step(reader: 1, generation: 0, position: 0, upper: nil) == .fetch(id: 0, range: 0..<1000))
        #expect(state.step(reader: 2, generation: 0, position: 0, upper: nil) == .wait)
        _ = state.wrote(0, 0..<50, clock: 1)
        #expect(state.step(reader: 3, generation: 0, position: 60, upper: nil) == .wait)
        #expect(state.fetches[0]?.readers == [1, 2, 3])
        // A seek beyond the coalescing distance: a new fetch; the first now stops where it starts.
        #expect(state.step(reader: 4, generation: 0, position: 600, upper: nil) == .fetch(id: 1, range: 600..<1000))
        #expect(state.fetches[0]?.end == 600)
        // Bytes the first fetch wrote are served to a reader that comes later, whoever fetched them.
        #expect(state.step(reader: 5, generation: 0, position: 10, upper: nil) == .serve(10..<50))
    }

    @Test("a fetch nobody reads any longer stops at its next block boundary")
    func abandonedFetchStops() {
        var state = self.state()
        #expect(state.step(reader: 1, generation: 0, position: 0, upper: 2) == .fetch(id: 0, range: 0..<100))
        _ = state.wrote(0, 0..<30, clock: 1)
        #expect(state.stop(for: 0) == 100)
        state.leave(reader: 1)
        #expect(state.stop(for: 0) == 100)
        var open = self.state()
        #expect(open.step(reader: 1, generation: 0, position: 0, upper: nil) == .fetch(id: 0, range: 0..<1000))
        _ = open.wrote(0, 0..<230, clock: 1)
        #expect(open.stop(for: 0) == 1000)
        open.leave(reader: 1)
        #expect(open.stop(for: 0) == 300)
        _ = open.wrote(0, 230..<300, clock: 2)
        #expect(open.stop(for: 0) == nil)
    }

    @Test("a failed fetch fails its readers once; a changed resource tells old readers, never serves them new bytes")
    func failureAndChange() {
        var state = self.state(cached: [0..<100])
        #expect(state.step(reader: 1, generation: 0, position: 100, upper: nil) == .fetch(id: 0, range: 100..<1000))
        state.failed(0, .unreachable("reset"))
        #expect(state.step(reader: 1, generation: 0, position: 100, upper: nil) == .failed(.unreachable("reset")))
        #expect(state.step(reader: 1, generation: 0, position: 100, upper: nil) == .fetch(id: 1, range: 100..<1000))
        let dropped = state.startGeneration(keeping: 1) { $0.etag = "\"new\"" }
        #expect(dropped == 100)
        #expect(state.generation == 1 && state.available.isEmpty && state.record.etag == "\"new\"")
        #expect(state.step(reader: 1, generation: 0, position: 0, upper: nil) == .changed)
        #expect(state.oldGenerations == [0])
    }

    @Test("eviction skips pinned blocks and blocks a fetch is writing; evicted bytes are neither served nor listed")
    func evictionRules() {
        var state = self.state(cached: [0..<300])
        state.touchAll(clock: 0)
        state.pin(0..<50, clock: 5)
        #expect(state.step(reader: 1, generation: 0, position: 300, upper: nil) == .fetch(id: 0, range: 300..<1000))
        _ = state.wrote(0, 300..<350, clock: 6)
        let candidates = state.evictable(readAhead: 1_000).map(\.block).sorted()
        #expect(candidates == [1, 2])
        state.evict(1)
        #expect(!state.available.contains(100..<200) && !state.record.ranges.contains(100..<200))
        #expect(state.deleting == [1])
        // Not fetched again until its file is gone.
        #expect(state.step(reader: 2, generation: 0, position: 120, upper: 180) == .wait)
        let commit = state.commit()
        #expect(commit.deleting == [1])
        #expect(commit.record.ranges.ranges == [0..<100, 200..<350])
        state.committed(commit)
        #expect(state.deleting.isEmpty)
        #expect(state.step(reader: 2, generation: 0, position: 120, upper: 180) == .fetch(id: 1, range: 120..<200))
    }

    @Test("a fetch runs at most the read-ahead ahead of its furthest reader; what the reader has not read stays")
    func readAhead() {
        var state = self.state(total: nil)
        #expect(state.step(reader: 1, generation: 0, position: 0, upper: nil) == .fetch(id: 0, range: 0..<Int64.max))
        #expect(state.writeNeed(0, count: 50, readAhead: 300) == .waited)
        _ = state.wrote(0, 0..<250, clock: 1)
        // The reader has not asked again: it is at 0, the fetch at 250.
        #expect(state.writeNeed(0, count: 50, readAhead: 300) == .ahead)
        #expect(state.writeNeed(0, count: 51, readAhead: 300) == .tooFarAhead)
        #expect(state.evictable(readAhead: 1_000).isEmpty, "every block holds bytes the reader has yet to read")
        // Read up to 200: blocks 0 and 1 may go, block 2 is unread (and being written).
        #expect(state.step(reader: 1, generation: 0, position: 200, upper: nil) == .serve(200..<250))
        #expect(state.evictable(readAhead: 1_000).map(\.block).sorted() == [0, 1])
        #expect(state.writeNeed(0, count: 250, readAhead: 300) == .ahead)
        #expect(state.isAheadOfReaders(0))
        // At the fetch's position, the reader waits for it.
        #expect(state.step(reader: 1, generation: 0, position: 250, upper: nil) == .wait)
        #expect(state.writeNeed(0, count: 1_000, readAhead: 300) == .waited)
        #expect(!state.isAheadOfReaders(0))
        // A reader far behind keeps only a read-ahead's worth: here 100 bytes after it, its block.
        #expect(state.step(reader: 2, generation: 0, position: 0, upper: nil) == .serve(0..<250))
        state.leave(reader: 1)
        #expect(state.writeNeed(0, count: 1, readAhead: 300) == .unread, "reader 2 reads cached bytes, no fetch")
        var far = self.state(total: nil)
        #expect(far.step(reader: 1, generation: 0, position: 0, upper: nil) == .fetch(id: 0, range: 0..<Int64.max))
        _ = far.wrote(0, 0..<450, clock: 1)
        #expect(far.evictable(readAhead: 100).map(\.block).sorted() == [1, 2, 3])
        #expect(far.evictable(readAhead: 1_000).isEmpty)
    }

    @Test("evicted and dropped bytes count as on disk until the commit that deletes their files")
    func doomedBytes() {
        var state = self.state(cached: [0..<300])
        state.touchAll(clock: 0)
        state.evict(1)
        #expect(state.doomedBytes == 100)
        let commit = state.commit()
        state.evict(2)
        // The commit taken before block 2 was evicted deletes block 1 only.
        #expect(state.committed(commit).freed == 100)
        #expect(state.doomedBytes == 100)
        #expect(state.startGeneration { _ in } == 100, "block 0 was still in use")
        #expect(state.doomedBytes == 200)
        // The old generation's folder goes whole, block 2's file with it.
        #expect(state.committed(state.commit()).freed == 200)
        #expect(state.doomedBytes == 0)
    }

    @Test("a reader behind a fetch's frontier, its bytes evicted, starts its own fetch instead of waiting on that one")
    func readerBehindTheFrontier() {
        var state = self.state()
        #expect(state.step(reader: 1, generation: 0, position: 0, upper: nil) == .fetch(id: 0, range: 0..<1000))
        _ = state.wrote(0, 0..<450, clock: 1)
        state.evict(2)
        state.committed(state.commit())
        // Reader 1 read up to 200; its next bytes were evicted; the fetch is at 450.
        #expect(state.step(reader: 1, generation: 0, position: 200, upper: nil) == .fetch(id: 1, range: 200..<300))
        // A reader arriving before a running fetch's start fetches up to that start, not over it.
        var other = self.state()
        #expect(other.step(reader: 1, generation: 0, position: 600, upper: nil) == .fetch(id: 0, range: 600..<1000))
        #expect(other.step(reader: 2, generation: 0, position: 100, upper: nil) == .fetch(id: 1, range: 100..<600))
    }

    @Test("bytes written past a fetch's moved end, or into a block waiting to be deleted, are never listed")
    func strayWritesAreNotListed() {
        var state = self.state(cached: [400..<500])
        state.touchAll(clock: 0)
        #expect(state.step(reader: 1, generation: 0, position: 0, upper: nil) == .fetch(id: 0, range: 0..<400))
        #expect(state.step(reader: 2, generation: 0, position: 300, upper: nil) == .fetch(id: 1, range: 300..<400))
        #expect(state.fetches[0]?.end == 300)
        // The first fetch had received bytes up to 350 before its end moved back to 300.
        #expect(state.wrote(0, 0..<350, clock: 1) == 300)
        #expect(state.available.ranges == [0..<300, 400..<500])
        state.evict(4)
        #expect(state.wrote(1, 300..<400, clock: 2) == 100)
        // An origin that ignored Range sends from 0 again, over the evicted block 4: not listed.
        state.extend(1, to: 1000)
        #expect(state.wrote(1, 400..<520, clock: 3) == 20)
        #expect(state.available.ranges == [0..<400, 500..<520])
        #expect(state.commit().record.ranges.ranges == [0..<400, 500..<520])
    }

    @Test("an origin without a length: the fetch's natural end is the length")
    func unknownLength() {
        var state = self.state(total: nil)
        #expect(state.step(reader: 1, generation: 0, position: 0, upper: nil) == .fetch(id: 0, range: 0..<Int64.max))
        _ = state.wrote(0, 0..<777, clock: 1)
        state.finished(0, lengthKnown: true)
        #expect(state.record.totalLength == 777)
        #expect(state.step(reader: 1, generation: 0, position: 777, upper: nil) == .end)
    }
}
