import CourierTesting
import Crypto
import NIOCore
import Testing

@testable import CourierClient

/// The download's hash on a queue of its own: the same digest as hashing in place, whatever the chunks, and never
/// more than its bound waiting.
@Suite("A download's background hash")
struct BackgroundHasherTests {
    @Test(
        "the digest is the whole's, with chunks that each overrun a small bound (every update waits) and empty ones",
        arguments: [1, 1000, 8 * 1024 * 1024]
    )
    func digest(bound: Int) async throws {
        var random = SeededRandom(seed: TestSeed.make(for: "backgroundHasher-\(bound)"))
        var whole: [UInt8] = []
        random.appendBytes(300_000, to: &whole)
        let hasher = BackgroundHasher(maxPendingBytes: bound)
        var offset = 0
        var sizes = [0, 1, 4096, 0, 65_537, 3]
        while offset < whole.count {
            let size = min(sizes.removeFirst(), whole.count - offset)
            sizes.append(size == 0 ? 0 : size * 2 + 7)
            await hasher.update(ByteBuffer(bytes: whole[offset..<(offset + size)]))
            offset += size
        }
        let digest = await hasher.finalize()
        #expect(Array(digest) == Array(SHA256.hash(data: whole)))
    }
}
