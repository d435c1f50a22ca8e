import NIOCore
import Synchronization

/// A test client's read timed out, or the connection closed before what it waited for.
public struct TestClientTimeout: Error, CustomStringConvertible {
    public var description: String

    public init(description: String) {
        self.description = description
    }
}

/// Things received and not yet read (frames, events), and the end of their source. Reads wait with a deadline that leaves the
/// frames in place.
public final class FrameInbox<Frame: Sendable>: Sendable {
    private struct State {
        var frames: [Frame] = []
        var closed = false
        var waiter: (id: Int, continuation: CheckedContinuation<Void, Never>)?
        var nextWaiter = 0
    }
    private let state = Mutex(State())

    public init() {}

    public func append(_ frame: Frame) {
        self.wake { $0.frames.append(frame) }
    }

    public func close() {
        self.wake { $0.closed = true }
    }

    private func wake(_ change: (inout State) -> Void) {
        let waiter = self.state.withLock { state in
            change(&state)
            defer { state.waiter = nil }
            return state.waiter?.continuation
        }
        waiter?.resume()
    }

    /// The next frame, nil once closed; throws after the timeout.
    public func next(timeout: Duration) async throws -> Frame? {
        let deadline = ContinuousClock.now + timeout
        while true {
            // A frame to return, or whether the inbox is closed; neither means wait.
            let (frame, closed) = self.state.withLock { state -> (Frame?, Bool) in
                if !state.frames.isEmpty { return (state.frames.removeFirst(), false) }
                return (nil, state.closed)
            }
            if let frame { return frame }
            if closed { return nil }
            guard ContinuousClock.now < deadline else {
                throw TestClientTimeout(description: "nothing from the server within \(timeout)")
            }
            let id = self.state.withLock { state in
                state.nextWaiter += 1
                return state.nextWaiter
            }
            // A timer wakes the wait at the deadline, leaving the inbox as it is.
            let timer = Task {
                try? await Task.sleep(until: deadline, clock: .continuous)
                let waiter = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
                    guard state.waiter?.id == id else { return nil }
                    defer { state.waiter = nil }
                    return state.waiter?.continuation
                }
                waiter?.resume()
            }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = self.state.withLock { state -> Bool in
                    if !state.frames.isEmpty || state.closed { return true }
                    state.waiter = (id, continuation)
                    return false
                }
                if ready { continuation.resume() }
            }
            timer.cancel()
        }
    }
}

/// Hands decoded frames to an inbox, and closes it when the connection ends.
final class FrameCollector<Frame: Sendable>: ChannelInboundHandler, Sendable {
    typealias InboundIn = Frame
    let inbox: FrameInbox<Frame>
    /// Whether it is added once the connection is open (after a WebSocket's upgrade), rather than before it opens.
    let addedWhenOpen: Bool

    init(_ inbox: FrameInbox<Frame>, addedWhenOpen: Bool = false) {
        self.inbox = inbox
        self.addedWhenOpen = addedWhenOpen
    }

    /// Added once open to a connection closed already (a WebSocket's upgrade can end after the server refused the
    /// session and closed): the close it missed. Frames still handed to it come first.
    func handlerAdded(context: ChannelHandlerContext) {
        if self.addedWhenOpen, !context.channel.isActive { self.inbox.close() }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.inbox.append(self.unwrapInboundIn(data))
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.inbox.close()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.inbox.close()
        context.close(promise: nil)
    }
}
