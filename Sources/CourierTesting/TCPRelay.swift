import NIOCore
import NIOPosix
import Synchronization

/// A TCP relay on 127.0.0.1 to another port, which a test can cut: what a server sees of a database that goes away
/// (every connection to it ends, and new ones end at once) and comes back, without stopping the database that other
/// tests share.
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
                let admitted = state.value.withLock { state in
                    guard !state.cut else { return false }
                    state.channels[ObjectIdentifier(inbound)] = inbound
                    return true
                }
                guard admitted else { return inbound.close() }
                inbound.closeFuture.whenComplete { _ in
                    _ = state.value.withLock { $0.channels.removeValue(forKey: ObjectIdentifier(inbound)) }
                }
                return ClientBootstrap(group: inbound.eventLoop)
                    .connect(host: "127.0.0.1", port: target)
                    .flatMap { outbound in
                        state.value.withLock { $0.channels[ObjectIdentifier(outbound)] = outbound }
                        outbound.closeFuture.whenComplete { _ in
                            _ = state.value.withLock { $0.channels.removeValue(forKey: ObjectIdentifier(outbound)) }
                            inbound.close(promise: nil)
                        }
                        inbound.closeFuture.whenComplete { _ in outbound.close(promise: nil) }
                        return outbound.pipeline.addHandler(Pipe(to: inbound))
                            .flatMap { inbound.pipeline.addHandler(Pipe(to: outbound)) }
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

    /// Relays new connections again.
    public func mend() {
        self.state.value.withLock { $0.cut = false }
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
        var channels: [ObjectIdentifier: any Channel] = [:]
    }

    let value = Mutex(State())
}

/// Writes what one side of a relay reads to the other.
private final class Pipe: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    let other: any Channel

    init(to other: any Channel) {
        self.other = other
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.other.writeAndFlush(self.unwrapInboundIn(data), promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.other.close(promise: nil)
        context.fireChannelInactive()
    }
}
