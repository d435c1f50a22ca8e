import Foundation

/// A small, fast, seedable random number generator (SplitMix64), so a randomized test can be replayed.
public struct SeededRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// Creates a generator from a seed.
    public init(seed: UInt64) { self.state = seed }

    public mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A size from 0 to `maximum`, log-uniform: each power of two up to `maximum` is as likely as any other.
    public mutating func logUniformSize(upTo maximum: Int) -> Int {
        let exponent = Double.random(in: 0...log2(Double(maximum) + 1), using: &self)
        return min(maximum, Int(pow(2, exponent)) - 1)
    }

    /// `count` random bytes, appended to `bytes`.
    public mutating func appendBytes(_ count: Int, to bytes: inout [UInt8]) {
        // Whole words at a time, little-endian: the same bytes as one at a time, at a fraction of the cost in
        // debug builds (tests make files of many megabytes).
        var words = [UInt64](repeating: 0, count: (count + 7) / 8)
        for index in words.indices { words[index] = self.next().littleEndian }
        words.withUnsafeBytes { raw in bytes.append(contentsOf: raw.prefix(count)) }
    }
}

/// The seed of a randomized test: `COURIER_TEST_SEED` if set (to replay a failure), otherwise a fresh one.
/// Either way it is printed, so any failing run can be replayed.
extension SeededRandom {
    /// `count` random bytes from the seed of the test named `name` (printed; see ``TestSeed/make(for:)``).
    public static func bytes(_ count: Int, seededFor name: String) -> [UInt8] {
        var random = SeededRandom(seed: TestSeed.make(for: name))
        var bytes: [UInt8] = []
        random.appendBytes(count, to: &bytes)
        return bytes
    }
}

public enum TestSeed {
    /// Returns the seed for the test named `name`, printing it.
    public static func make(for name: String) -> UInt64 {
        let seed: UInt64
        if let text = ProcessInfo.processInfo.environment["COURIER_TEST_SEED"], let value = UInt64(text) {
            seed = value
        } else {
            seed = UInt64.random(in: 0...UInt64.max)
        }
        print("\(name): seed \(seed) (replay with COURIER_TEST_SEED=\(seed))")
        return seed
    }
}
