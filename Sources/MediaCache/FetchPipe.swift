import NIOCore
import NIOPosix
import Synchronization

#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The bytes of one fetch between the origin's connection and the cache's files. The receiving side hands chunks
/// over without waiting for the disk; the writing side takes whatever has gathered and writes it in one job on the
/// thread pool, then tells the engine. So the origin's connection keeps flowing while a write is under way, and under
/// load the writes (and the engine's bookkeeping) come in fewer, larger batches. At most `limit` bytes wait between
/// the two sides; beyond that the receiver waits (and TCP slows the origin).
final class FetchPipe: Sendable {
    private struct State {
        var chunks: [ByteBuffer] = []
        var bytes = 0
        var received: Int64 = 0
        var finished = false
        /// Where the engine says the fetch stops; nil once it says stop now.
        var stop: Int64?
        var consumer: CheckedContinuation<Void, Never>?
        var producer: CheckedContinuation<Void, Never>?
    }

    private let state: Mutex<State>
    let limit: Int

    init(stop: Int64, limit: Int) {
        self.state = Mutex(State(stop: stop))
        self.limit = limit
    }

    /// Where the fetch stops now (nil: at once).
    var stop: Int64? { self.state.withLock { $0.stop } }

    /// Hands a chunk over (`received`: the bytes the origin sent for it, counted even when clipped). Waits while
    /// `limit` bytes wait already; false once the writer has said stop.
    func push(_ chunk: ByteBuffer, received: Int64) async -> Bool {
        while true {
            let (accepted, wake) = self.state.withLock { state -> (Bool?, CheckedContinuation<Void, Never>?) in
                guard state.stop != nil else { return (false, nil) }
                guard state.bytes < self.limit else { return (nil, nil) }
                state.chunks.append(chunk)
                state.bytes += chunk.readableBytes
                state.received += received
                defer { state.consumer = nil }
                return (true, state.consumer)
            }
            wake?.resume()
            if let accepted { return accepted }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = self.state.withLock { state -> Bool in
                    if state.stop == nil || state.bytes < self.limit { return true }
                    state.producer = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        }
    }

    /// The receiving side is done (the body ended, failed, or reached the stop).
    func finish() {
        let wake = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.finished = true
            defer { state.consumer = nil }
            return state.consumer
        }
        wake?.resume()
    }

    /// Everything gathered, waiting for something; nil once the receiving side is done and all is taken.
    func take() async -> (chunks: [ByteBuffer], received: Int64)? {
        while true {
            let (taken, done, wake) = self.state.withLock {
                state -> ((chunks: [ByteBuffer], received: Int64)?, Bool, CheckedContinuation<Void, Never>?) in
                if !state.chunks.isEmpty {
                    let taken = (state.chunks, state.received)
                    state.chunks = []
                    state.bytes = 0
                    state.received = 0
                    defer { state.producer = nil }
                    return (taken, false, state.producer)
                }
                return (nil, state.finished, nil)
            }
            wake?.resume()
            if let taken { return taken }
            if done { return nil }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = self.state.withLock { state -> Bool in
                    if !state.chunks.isEmpty || state.finished { return true }
                    state.consumer = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        }
    }

    /// The engine's answer after a write: where to stop now, or nil to stop at once (a waiting receiver is released).
    func setStop(_ stop: Int64?) {
        let wake = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.stop = stop
            guard stop == nil else { return nil }
            defer { state.producer = nil }
            return state.producer
        }
        wake?.resume()
    }
}

/// Writes a fetch's bytes into one generation's block files, keeping the current block's file open. Used by one
/// task at a time, its writes run on the thread pool.
final class BlockFiles: @unchecked Sendable {
    let folder: String
    let blockBytes: Int64
    private var block: Int64 = -1
    private var handle: NIOFileHandle?

    init(folder: String, blockBytes: Int64) {
        self.folder = folder
        self.blockBytes = blockBytes
    }

    /// Writes contiguous chunks starting at `offset` (blocking: call it on the thread pool).
    func write(_ chunks: [ByteBuffer], at offset: Int64) throws {
        var offset = offset
        for chunk in chunks {
            var bytes = chunk
            while bytes.readableBytes > 0 {
                let block = offset / self.blockBytes
                let inBlock = offset - block * self.blockBytes
                let count = Int(min(Int64(bytes.readableBytes), self.blockBytes - inBlock))
                if block != self.block || self.handle == nil {
                    try self.close()
                    self.handle = try NIOFileHandle(
                        _deprecatedPath: self.folder + "/" + String(block),
                        mode: .write,
                        flags: .allowFileCreation(posixMode: 0o600)
                    )
                    self.block = block
                }
                try self.handle!.withUnsafeFileDescriptor { descriptor in
                    try bytes.withUnsafeReadableBytes { buffer in
                        var done = 0
                        while done < count {
                            let written = pwrite(
                                descriptor,
                                buffer.baseAddress! + done,
                                count - done,
                                off_t(inBlock) + off_t(done)
                            )
                            if written < 0 {
                                if errno == EINTR { continue }
                                throw IOError(errnoCode: errno, reason: "pwrite")
                            }
                            done += written
                        }
                    }
                }
                bytes.moveReaderIndex(forwardBy: count)
                offset += Int64(count)
            }
        }
    }

    func close() throws {
        if let handle = self.handle {
            self.handle = nil
            try handle.close()
        }
    }
}
