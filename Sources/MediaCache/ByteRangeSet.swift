/// A set of byte positions kept as sorted, disjoint, non-adjacent half-open ranges: which bytes of a resource the cache
/// holds.
public struct ByteRangeSet: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The ranges, sorted, none empty, none touching another (touching ranges are merged).
    public private(set) var ranges: [Range<Int64>] = []

    public init() {}

    public init(_ ranges: some Sequence<Range<Int64>>) {
        for range in ranges { self.insert(range) }
    }

    /// How many bytes the set holds.
    public var count: Int64 { self.ranges.reduce(0) { $0 + Int64($1.count) } }

    public var isEmpty: Bool { self.ranges.isEmpty }

    /// Adds the bytes of `range`, merging with the ranges it overlaps or touches.
    public mutating func insert(_ range: Range<Int64>) {
        guard !range.isEmpty else { return }
        // The first range that ends at or after the new one's start may merge with it.
        var index = self.firstIndex(endingAtOrAfter: range.lowerBound)
        var merged = range
        while index < self.ranges.count, self.ranges[index].lowerBound <= merged.upperBound {
            merged =
                min(
                    merged.lowerBound,
                    self.ranges[index].lowerBound
                )..<max(merged.upperBound, self.ranges[index].upperBound)
            self.ranges.remove(at: index)
        }
        index = self.firstIndex(endingAtOrAfter: merged.lowerBound)
        self.ranges.insert(merged, at: index)
    }

    /// Removes the bytes of `range`.
    public mutating func remove(_ range: Range<Int64>) {
        guard !range.isEmpty else { return }
        var result: [Range<Int64>] = []
        result.reserveCapacity(self.ranges.count + 1)
        for existing in self.ranges {
            if existing.upperBound <= range.lowerBound || existing.lowerBound >= range.upperBound {
                result.append(existing)
                continue
            }
            if existing.lowerBound < range.lowerBound { result.append(existing.lowerBound..<range.lowerBound) }
            if existing.upperBound > range.upperBound { result.append(range.upperBound..<existing.upperBound) }
        }
        self.ranges = result
    }

    /// Whether every byte of `range` is in the set.
    public func contains(_ range: Range<Int64>) -> Bool {
        guard !range.isEmpty else { return true }
        let index = self.firstIndex(endingAtOrAfter: range.lowerBound + 1)
        return index < self.ranges.count && self.ranges[index].lowerBound <= range.lowerBound
            && self.ranges[index].upperBound >= range.upperBound
    }

    /// A piece of a requested range: bytes the cache holds, or bytes to fetch.
    public enum Piece: Hashable, Sendable {
        case cached(Range<Int64>)
        case missing(Range<Int64>)

        public var range: Range<Int64> {
            switch self {
            case .cached(let range), .missing(let range): range
            }
        }
    }

    /// Splits a requested range into cached and missing pieces, in order, covering it exactly: with 10..<20 and
    /// 50..<60 cached, 0..<100 is missing 0..<10, cached 10..<20, missing 20..<50, cached 50..<60, missing 60..<100.
    public func pieces(of request: Range<Int64>) -> [Piece] {
        var pieces: [Piece] = []
        var position = request.lowerBound
        var index = self.firstIndex(endingAtOrAfter: request.lowerBound + 1)
        while position < request.upperBound {
            guard index < self.ranges.count, self.ranges[index].lowerBound < request.upperBound else {
                pieces.append(.missing(position..<request.upperBound))
                break
            }
            let cached = self.ranges[index]
            if cached.lowerBound > position {
                pieces.append(.missing(position..<cached.lowerBound))
                position = cached.lowerBound
            }
            let end = min(cached.upperBound, request.upperBound)
            pieces.append(.cached(position..<end))
            position = end
            index += 1
        }
        return pieces
    }

    /// The index of the first range whose end is at or after `position` (binary search).
    private func firstIndex(endingAtOrAfter position: Int64) -> Int {
        var low = 0
        var high = self.ranges.count
        while low < high {
            let middle = (low + high) / 2
            if self.ranges[middle].upperBound < position { low = middle + 1 } else { high = middle }
        }
        return low
    }

    public var description: String {
        "[" + self.ranges.map { "\($0.lowerBound)..<\($0.upperBound)" }.joined(separator: ", ") + "]"
    }
}
