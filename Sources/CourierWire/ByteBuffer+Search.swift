import Foundation
import NIOCore

extension ByteBuffer {
    /// The offset (from the reader index) of the first LF in `start..<end` that follows a CR, or `nil`.
    func offsetOfCRLFTerminator(from start: Int, to end: Int) -> Int? {
        precondition(start >= 0 && end <= self.readableBytes)
        guard start < end else { return nil }
        return self.withUnsafeReadableBytes { bytes -> Int? in
            let base = bytes.baseAddress!
            var position = start
            while position < end {
                guard let hit = memchr(base + position, 0x0A, end - position) else { return nil }
                let offset = base.distance(to: UnsafeRawPointer(hit))
                if offset > 0 && bytes[offset - 1] == 0x0D {
                    return offset
                }
                position = offset + 1
            }
            return nil
        }
    }

    /// The offset (from the reader index) of the first whole occurrence of `needle` in the readable bytes, or `nil`.
    func offset(of needle: [UInt8]) -> Int? {
        let count = needle.count
        precondition(count > 0)
        let readable = self.readableBytes
        guard readable >= count else { return nil }
        return self.withUnsafeReadableBytes { bytes -> Int? in
            needle.withUnsafeBytes { needleBytes -> Int? in
                let base = bytes.baseAddress!
                let first = Int32(needle[0])
                var position = 0
                let lastStart = readable - count
                while position <= lastStart {
                    guard let hit = memchr(base + position, first, lastStart - position + 1) else { return nil }
                    let offset = base.distance(to: UnsafeRawPointer(hit))
                    if memcmp(base + offset, needleBytes.baseAddress!, count) == 0 {
                        return offset
                    }
                    position = offset + 1
                }
                return nil
            }
        }
    }

    /// Whether the readable bytes at `offset` (from the reader index) are exactly `expected`.
    func hasBytes(_ expected: [UInt8], atOffset offset: Int) -> Bool {
        guard offset >= 0, self.readableBytes - offset >= expected.count else { return false }
        return self.withUnsafeReadableBytes { bytes in
            expected.withUnsafeBytes { memcmp(bytes.baseAddress! + offset, $0.baseAddress!, expected.count) == 0 }
        }
    }
}
