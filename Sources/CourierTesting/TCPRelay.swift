import NIOCore
import NIOPosix
import Synchronization

/// A TCP relay on 127.0.0.1 to another port, which a test can cut: what a server sees of a database that goes away
/// (every connection to it ends, and new ones end at once) and comes back, without stopping the database that other
/// tests share. Or stall: what a server sees of a database whose packets are dropped (nothing closes, nothing comes).
public final class TCPRelay: Sendable {
    /// The relay's port: connect here instead of to the target.
    public let port: Int
    private let listener: any Channel
    private let state: Relayed

    private init(listener: any Channel, state: Relayed) {
        self.listener = listener
        self.port = listener.localAddress?.port ?? 0
        self.state = state
    }

    /// Starts relaying connections to `target` on 127.0.0.1.
    public static func start(to target: Int) async throws -> TCPRelay {
        let state = Relayed()
        let listener = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.autoRead, value: false)
            .childChannelInitializer { inbound in
                let admitted = state.value.withLock { state -> Bool? in
                    guard !state.cut else { return false }
                    state.channels[ObjectIdentifier(inbound)] = inbound
                    // Stalled: held open, never relayed.
                    guard !state.stalled else {
                        state.dropping.insert(ObjectIdentifier(inbound))
                        return nil
                    }
                    return true
                }
                guard admitted != false else { return inbound.close() }
                inbound.closeFuture.whenComplete { _ in
                    state.value.withLock { $0.forget(ObjectIdentifier(inbound)) }
                }
                guard admitted != nil else { return inbound.eventLoop.makeSucceededVoidFuture() }
                return ClientBootstrap(group: inbound.eventLoop)
                    .connect(host: "127.0.0.1", port: target)
                    .flatMap { outbound in
                        state.value.withLock { $0.channels[ObjectIdentifier(outbound)] = outbound }
                        outbound.closeFuture.whenComplete { _ in
                            state.value.withLock { $0.forget(ObjectIdentifier(outbound)) }
                            inbound.close(promise: nil)
                        }
                        inbound.closeFuture.whenComplete { _ in outbound.close(promise: nil) }
                        return outbound.pipeline.addHandler(Pipe(to: inbound, state: state))
                            .flatMap { inbound.pipeline.addHandler(Pipe(to: outbound, state: state)) }
                            .flatMap { inbound.setOption(.autoRead, value: true) }
                    }
                    .flatMapError { error in inbound.close().flatMapThrowing { throw error } }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return TCPRelay(listener: listener, state: state)
    }

    /// Ends every relayed connection, and every new one as it comes, until ``mend()``.
    public func cut() {
        let channels = self.state.value.withLock { state in
            state.cut = true
            defer { state.channels = [:] }
            return Array(state.channels.values)
        }
        for channel in channels { channel.close(promise: nil) }
    }

    /// Drops every byte from now on, both ways, closing nothing; new connections are accepted and never relayed.
    /// After ``mend()`` new connections are relayed again; the stalled ones stay stalled until they close.
    public func stall() {
        self.state.value.withLock { state in
            state.stalled = true
            state.dropping.formUnion(state.channels.keys)
        }
    }

    /// Relays new connections again.
    public func mend() {
        self.state.value.withLock {
            $0.cut = false
            $0.stalled = false
        }
    }

    /// Stops listening and ends every relayed connection.
    public func stop() async {
        self.cut()
        try? await self.listener.close()
    }
}

/// The relay's connections, both sides, and whether it is cut.
private final class Relayed: Sendable {
    struct State {
        var cut = false
        var stalled = false
        var channels: [ObjectIdentifier: any Channel] = [:]
        /// Connections (either side) whose bytes are dropped.
        var dropping: Set<ObjectIdentifier> = []

        /// A connection closed: nothing of it is kept (its identifier may be a new connection's next).
        mutating func forget(_ channel: ObjectIdentifier) {
            self.channels.removeValue(forKey: channel)
            self.dropping.remove(channel)
        }
    }

    let value = Mutex(State())
}

/// Writes what one side of a relay reads to the other.
private final class Pipe: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    let other: any Channel
    let state: Relayed

    init(to other: any Channel, state: Relayed) {
        self.other = other
        self.state = state
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let (from, to) = (ObjectIdentifier(context.channel), ObjectIdentifier(self.other))
        guard !self.state.value.withLock({ $0.dropping.contains(from) || $0.dropping.contains(to) }) else { return }
        self.other.writeAndFlush(self.unwrapInboundIn(data), promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.other.close(promise: nil)
        context.fireChannelInactive()
    }
}
