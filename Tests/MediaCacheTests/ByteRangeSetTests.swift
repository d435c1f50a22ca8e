import CourierTesting
import Foundation
import Testing

@testable import MediaCache

@Suite("MediaCache: the set of cached byte ranges")
struct ByteRangeSetTests {
    @Test("the notes' example: 0-100 with 10-20 and 50-60 cached is five pieces, in order")
    func notesExample() {
        let cached = ByteRangeSet([10..<20, 50..<60])
        #expect(
            cached.pieces(of: 0..<100) == [
                .missing(0..<10), .cached(10..<20), .missing(20..<50), .cached(50..<60), .missing(60..<100),
            ]
        )
        #expect(cached.pieces(of: 15..<55) == [.cached(15..<20), .missing(20..<50), .cached(50..<55)])
        #expect(cached.pieces(of: 12..<18) == [.cached(12..<18)])
        #expect(cached.pieces(of: 60..<70) == [.missing(60..<70)])
        #expect(ByteRangeSet().pieces(of: 0..<5) == [.missing(0..<5)])
        #expect(cached.pieces(of: 7..<7).isEmpty)
    }

    @Test("inserting merges overlapping and touching ranges; removing splits them")
    func mergeAndSplit() {
        var set = ByteRangeSet([0..<10, 20..<30])
        set.insert(10..<20)
        #expect(set.ranges == [0..<30], "touching ranges become one")
        set.insert(40..<50)
        set.insert(45..<60)
        #expect(set.ranges == [0..<30, 40..<60])
        set.remove(5..<45)
        #expect(set.ranges == [0..<5, 45..<60])
        #expect(set.count == 20)
        #expect(set.contains(46..<60) && !set.contains(4..<6) && set.contains(0..<5))
    }

    @Test("random inserts, removes and requests agree with a byte-by-byte model")
    func againstAModel() {
        let seed = TestSeed.make(for: "ByteRangeSet model")
        var random = SeededRandom(seed: seed)
        let size = 300
        for _ in 0..<200 {
            var set = ByteRangeSet()
            var model = [Bool](repeating: false, count: size)
            for _ in 0..<12 {
                let start = Int.random(in: 0..<size, using: &random)
                let end = Int.random(in: start...min(size, start + 60), using: &random)
                if Bool.random(using: &random) {
                    set.insert(Int64(start)..<Int64(end))
                    for index in start..<end { model[index] = true }
                } else {
                    set.remove(Int64(start)..<Int64(end))
                    for index in start..<end { model[index] = false }
                }
                // Sorted, disjoint, never touching, never empty.
                for (a, b) in zip(set.ranges, set.ranges.dropFirst()) {
                    #expect(a.upperBound < b.lowerBound, "seed \(seed): \(set)")
                }
                #expect(set.ranges.allSatisfy { !$0.isEmpty })
                #expect(set.count == Int64(model.filter { $0 }.count), "seed \(seed)")
                let from = Int.random(in: 0..<size, using: &random)
                let to = Int.random(in: from...size, using: &random)
                let pieces = set.pieces(of: Int64(from)..<Int64(to))
                // The pieces cover the request in order, alternate, and say for each byte what the model says.
                var position = Int64(from)
                for (index, piece) in pieces.enumerated() {
                    #expect(piece.range.lowerBound == position && !piece.range.isEmpty, "seed \(seed)")
                    position = piece.range.upperBound
                    if index > 0 {
                        let previousCached = if case .cached = pieces[index - 1] { true } else { false }
                        let thisCached = if case .cached = piece { true } else { false }
                        #expect(previousCached != thisCached, "seed \(seed): \(pieces)")
                    }
                    for byte in piece.range {
                        let cached = if case .cached = piece { true } else { false }
                        #expect(model[Int(byte)] == cached, "seed \(seed), byte \(byte)")
                    }
                }
                #expect(position == Int64(to), "seed \(seed)")
                #expect(set.contains(Int64(from)..<Int64(to)) == model[from..<to].allSatisfy { $0 })
            }
        }
    }
}
