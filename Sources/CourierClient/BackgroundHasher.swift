import Crypto
import Dispatch
import NIOCore
import Synchronization

/// Hashes a download's bytes on a queue of its own while the next bytes arrive and are written, so that the digest
/// is not paid for on the way to the disk. At most `maxPendingBytes` (8 MiB) wait to be hashed: past that,
/// ``update(_:)`` waits for the queue (a hasher slower than the network slows the download instead of filling memory).
final class BackgroundHasher: @unchecked Sendable {
    let maxPendingBytes: Int

    private let queue = DispatchQueue(label: "courier.download-hash")
    /// Touched on `queue` only.
    private var hasher = SHA256()
    private let pending = Mutex<Pending>(Pending())

    init(maxPendingBytes: Int = 8 * 1024 * 1024) {
        self.maxPendingBytes = maxPendingBytes
    }

    private struct Pending {
        var bytes = 0
        var waiter: CheckedContinuation<Void, Never>?
    }

    /// Queues `bytes` to be hashed after those queued before; returns at once unless too many wait.
    func update(_ bytes: ByteBuffer) async {
        let count = bytes.readableBytes
        guard count > 0 else { return }
        let full = self.pending.withLock { pending in
            pending.bytes += count
            return pending.bytes > self.maxPendingBytes
        }
        self.queue.async {
            bytes.withUnsafeReadableBytes { self.hasher.update(bufferPointer: $0) }
            let waiter = self.pending.withLock { pending -> CheckedContinuation<Void, Never>? in
                pending.bytes -= count
                guard pending.bytes <= self.maxPendingBytes else { return nil }
                defer { pending.waiter = nil }
                return pending.waiter
            }
            waiter?.resume()
        }
        guard full else { return }
        await withCheckedContinuation { continuation in
            let resumeNow = self.pending.withLock { pending in
                guard pending.bytes > self.maxPendingBytes else { return true }
                pending.waiter = continuation
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    /// The digest of every byte queued, once they are all hashed.
    func finalize() async -> SHA256Digest {
        await withCheckedContinuation { continuation in
            self.queue.async { continuation.resume(returning: self.hasher.finalize()) }
        }
    }
}
