import Synchronization

/// The media streams open on one native connection: uploads (the client sends `mediaChunk` frames under a window
/// the server grants) and fetches (the server sends them under a window the client grants).
///
/// The connection's handler works the uploads and the windows; each fetch has its own task, which waits here for
/// window.
final class MediaStreams: Sendable {
    /// An upload stream: where the upload stands, the request its answers go to, and how many more bytes the client
    /// may send before the server grants more.
    struct UploadStream: Sendable {
        var upload: MediaService.Upload
        var requestID: UInt64
        var window: Int
    }

    private struct FetchStream {
        /// Which opening of this stream id it is: a client may reuse an id once its stream is done, and the task of
        /// the old stream must not touch the new one.
        var generation: UInt64
        var window: Int
        var waiter: CheckedContinuation<Int?, Never>?
        var wanted = 0
    }

    private struct State {
        var uploads: [UInt32: UploadStream] = [:]
        var fetches: [UInt32: FetchStream] = [:]
        var nextGeneration: UInt64 = 1
        var closed = false
    }

    private let state = Mutex(State())
    let maxStreams: Int
    let maxFetchWindow: Int

    init(maxStreams: Int, maxFetchWindow: Int) {
        self.maxStreams = maxStreams
        self.maxFetchWindow = maxFetchWindow
    }

    /// Why a stream cannot be opened, or nil when it can.
    func refusal(toOpen id: UInt32) -> String? {
        self.state.withLock { state in
            if state.uploads[id] != nil || state.fetches[id] != nil { return "stream \(id) is in use" }
            if state.uploads.count + state.fetches.count >= self.maxStreams {
                return "the connection has \(self.maxStreams) media streams open, the most it may"
            }
            return nil
        }
    }

    // MARK: Uploads

    func openUpload(_ id: UInt32, _ stream: UploadStream) {
        self.state.withLock { $0.uploads[id] = stream }
    }

    /// Takes an upload stream out to work on it; nil for a stream that is not open (never opened, reset, finished).
    func takeUpload(_ id: UInt32) -> UploadStream? {
        self.state.withLock { $0.uploads.removeValue(forKey: id) }
    }

    /// Takes out the open stream of an upload (by the upload's id), if this connection has one: its id and state.
    func takeUpload(withID uploadID: String) -> (UInt32, UploadStream)? {
        self.state.withLock { state in
            guard let (stream, _) = state.uploads.first(where: { $0.value.upload.id == uploadID }),
                let upload = state.uploads.removeValue(forKey: stream)
            else { return nil }
            return (stream, upload)
        }
    }

    /// Whether a fetch stream is still the one opened with this generation (not reset, not reused).
    func isCurrent(_ id: UInt32, generation: UInt64) -> Bool {
        self.state.withLock { $0.fetches[id]?.generation == generation }
    }

    // MARK: Fetches

    /// Opens a fetch stream.
    ///
    /// - Returns: The stream's generation, for ``take(_:generation:upTo:)`` and ``finishFetch(_:generation:)``.
    func openFetch(_ id: UInt32, window: Int) -> UInt64 {
        self.state.withLock { state in
            defer { state.nextGeneration += 1 }
            state.fetches[id] = FetchStream(generation: state.nextGeneration, window: min(window, self.maxFetchWindow))
            return state.nextGeneration
        }
    }

    /// The client grants a fetch stream more bytes; the window never exceeds ``maxFetchWindow``.
    func grant(_ id: UInt32, increment: UInt32) {
        let resumed = self.state.withLock { state -> (CheckedContinuation<Int?, Never>, Int)? in
            guard var stream = state.fetches[id] else { return nil }
            stream.window = min(self.maxFetchWindow, stream.window + Int(increment))
            defer { state.fetches[id] = stream }
            guard let waiter = stream.waiter, stream.window > 0 else { return nil }
            let taken = min(stream.window, stream.wanted)
            stream.window -= taken
            stream.waiter = nil
            return (waiter, taken)
        }
        if let (waiter, taken) = resumed { waiter.resume(returning: taken) }
    }

    /// Takes up to `count` bytes of a fetch stream's window, waiting while it is empty.
    ///
    /// - Returns: The bytes the server may now send (at least 1); nil when the stream was reset or the connection is
    ///   ending.
    func take(_ id: UInt32, generation: UInt64, upTo count: Int) async -> Int? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Int?, Never>) in
                let ready = self.state.withLock { state -> Int?? in
                    guard !state.closed, var stream = state.fetches[id], stream.generation == generation else {
                        return .some(nil)
                    }
                    defer { state.fetches[id] = stream }
                    if stream.window > 0 {
                        let taken = min(stream.window, count)
                        stream.window -= taken
                        return .some(taken)
                    }
                    stream.waiter = continuation
                    stream.wanted = count
                    return .none
                }
                if case .some(let value) = ready { continuation.resume(returning: value) }
            }
        } onCancel: {
            self.finishFetch(id, generation: generation)
        }
    }

    /// A fetch's task is done with its stream (sent, reset, or ending with the connection).
    func finishFetch(_ id: UInt32, generation: UInt64) {
        let waiter = self.state.withLock { state -> CheckedContinuation<Int?, Never>? in
            guard let stream = state.fetches[id], stream.generation == generation else { return nil }
            state.fetches[id] = nil
            return stream.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// The client reset a stream: it is closed, and a fetch waiting for window stops.
    ///
    /// - Returns: The upload that was on the stream, if it was an upload (its owner must release it).
    func close(_ id: UInt32) -> UploadStream? {
        let (upload, waiter) = self.state.withLock { state -> (UploadStream?, CheckedContinuation<Int?, Never>?) in
            defer { state.fetches[id] = nil }
            return (state.uploads.removeValue(forKey: id), state.fetches[id]?.waiter)
        }
        waiter?.resume(returning: nil)
        return upload
    }

    /// The connection is ending: every fetch waiting for window stops.
    ///
    /// - Returns: The uploads that were open (their owner must release them).
    func closeAll() -> [UploadStream] {
        let (waiters, uploads) = self.state.withLock { state in
            state.closed = true
            defer {
                state.fetches = [:]
                state.uploads = [:]
            }
            return (state.fetches.values.compactMap(\.waiter), Array(state.uploads.values))
        }
        for waiter in waiters { waiter.resume(returning: nil) }
        return uploads
    }
}
