import Synchronization

/// The media streams open on one native connection: uploads (the client sends `mediaChunk` frames under a window
/// the server grants) and fetches (the server sends them under a window the client grants).
///
/// The reader works the uploads and the windows; each fetch has its own task, which waits here for window.
final class MediaStreams: Sendable {
    /// An upload stream: where the upload stands, the request its answers go to, and how many more bytes the client
    /// may send before the server grants more.
    struct UploadStream: Sendable {
        var upload: MediaService.Upload
        var requestID: UInt64
        var window: Int
    }

    private struct FetchStream {
        var window: Int
        var waiter: CheckedContinuation<Int?, Never>?
        var wanted = 0
        var closed = false
    }

    private struct State {
        var uploads: [UInt32: UploadStream] = [:]
        var fetches: [UInt32: FetchStream] = [:]
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

    /// Streams open now (uploads and fetches).
    var openCount: Int { self.state.withLock { $0.uploads.count + $0.fetches.count } }

    // MARK: Uploads

    func openUpload(_ id: UInt32, _ stream: UploadStream) {
        self.state.withLock { $0.uploads[id] = stream }
    }

    /// Takes an upload stream out to work on it; nil for a stream that is not open (never opened, reset, finished).
    func takeUpload(_ id: UInt32) -> UploadStream? {
        self.state.withLock { $0.uploads.removeValue(forKey: id) }
    }

    // MARK: Fetches

    func openFetch(_ id: UInt32, window: Int) {
        self.state.withLock { $0.fetches[id] = FetchStream(window: min(window, self.maxFetchWindow)) }
    }

    /// The client grants a fetch stream more bytes; the window never exceeds ``maxFetchWindow``.
    func grant(_ id: UInt32, increment: UInt32) {
        let resumed = self.state.withLock { state -> (CheckedContinuation<Int?, Never>, Int)? in
            guard var stream = state.fetches[id], !stream.closed else { return nil }
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
    func take(_ id: UInt32, upTo count: Int) async -> Int? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Int?, Never>) in
                let ready = self.state.withLock { state -> Int?? in
                    guard !state.closed, var stream = state.fetches[id], !stream.closed else { return .some(nil) }
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
            self.close(id)
        }
    }

    /// The client reset a stream, or a fetch finished: it is closed, and a fetch waiting for window stops.
    func close(_ id: UInt32) {
        let waiter = self.state.withLock { state -> CheckedContinuation<Int?, Never>? in
            state.uploads[id] = nil
            defer { state.fetches[id] = nil }
            return state.fetches[id]?.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// The connection is ending: every fetch waiting for window stops.
    func closeAll() {
        let waiters = self.state.withLock { state in
            state.closed = true
            defer {
                state.fetches = [:]
                state.uploads = [:]
            }
            return state.fetches.values.compactMap(\.waiter)
        }
        for waiter in waiters { waiter.resume(returning: nil) }
    }
}
