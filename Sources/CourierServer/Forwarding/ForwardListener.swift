import CourierProtocol
import CourierStore
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// The forward port: where the other nodes send the writes of the conversations this node owns. A connection
/// must prove within ``ServerConfiguration/Cluster-swift.struct/forwardHelloTimeout`` that it knows this node's
/// secret; until then nothing but its hello is read. Then each write goes to this node's commit queue, under an
/// origin of its own for each origin on the other node (so the writes of one client connection stay in order
/// across a failed batch, as a local connection's do), and its outcome goes back on the link.
enum ForwardListener {
    /// The connections open now, for ``ServerConfiguration/Cluster-swift.struct/maxForwardConnections``.
    final class Connections: Sendable {
        let count = Atomic<Int>(0)
    }

    static func bind(
        host: String,
        port: Int,
        node: String,
        secret: String,
        cluster: ServerConfiguration.Cluster,
        commits: CommitQueue,
        metrics: ServerMetrics,
        logger: Logger
    ) async throws -> any Channel {
        let connections = Connections()
        return try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 64)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    try pipeline.addNodeFraming(maxFrameBytes: cluster.maxForwardFrameBytes)
                    try pipeline.addHandler(
                        ForwardedWritesHandler(
                            node: node,
                            secret: secret,
                            cluster: cluster,
                            commits: commits,
                            connections: connections,
                            metrics: metrics,
                            logger: logger
                        )
                    )
                }
            }
            .bind(host: host, port: port)
            .get()
    }
}

/// One connection to the forward port, on its event loop.
final class ForwardedWritesHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private enum State {
        /// The challenge is sent; the hello must answer it.
        case challenged(nonce: [UInt8])
        /// The other node proved it knows the secret.
        case open(peer: String)
        case closed
    }

    private let node: String
    private let secret: String
    private let cluster: ServerConfiguration.Cluster
    private let commits: CommitQueue
    private let connections: ForwardListener.Connections
    private let metrics: ServerMetrics
    private let logger: Logger
    private var state = State.closed
    private var counted = false
    private var helloDeadline: Scheduled<Void>?
    /// This node's origin for each origin of the other node's.
    private var origins: [UInt64: Int] = [:]
    private var inFlight = 0
    private var paused = false
    private var flushPending = false

    init(
        node: String,
        secret: String,
        cluster: ServerConfiguration.Cluster,
        commits: CommitQueue,
        connections: ForwardListener.Connections,
        metrics: ServerMetrics,
        logger: Logger
    ) {
        self.node = node
        self.secret = secret
        self.cluster = cluster
        self.commits = commits
        self.connections = connections
        self.metrics = metrics
        self.logger = logger
    }

    func channelActive(context: ChannelHandlerContext) {
        let open = self.connections.count.wrappingAdd(1, ordering: .relaxed).newValue
        self.counted = true
        guard open <= self.cluster.maxForwardConnections else {
            context.close(promise: nil)
            return
        }
        let nonce = NodeProof.nonce()
        self.state = .challenged(nonce: nonce)
        let challenge = Courier_V1_NodeFrame.with {
            $0.challenge = .with {
                $0.node = self.node
                $0.nonce = .init(nonce)
            }
        }
        context.writeAndFlush(self.wrapOutboundOut(challenge.buffer(context.channel.allocator)), promise: nil)
        let channel = context.channel
        self.helloDeadline = context.eventLoop.scheduleTask(in: .init(self.cluster.forwardHelloTimeout)) {
            channel.close(promise: nil)
        }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.helloDeadline?.cancel()
        if self.counted {
            self.connections.count.wrappingSubtract(1, ordering: .relaxed)
            self.counted = false
        }
        self.state = .closed
        self.forgetOriginsIfIdle()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame: Courier_V1_NodeFrame
        do {
            frame = try Courier_V1_NodeFrame(frame: self.unwrapInboundIn(data))
        } catch {
            context.close(promise: nil)
            return
        }
        switch (self.state, frame.kind) {
        case (.challenged(let nonce), .hello(let hello)):
            guard hello.nonce.count == NodeProof.nonceBytes,
                NodeProof.verify(hello.proof, secret: self.secret, nonce: nonce, name: hello.node)
            else {
                self.logger.warning(
                    "a connection to the forward port did not prove it is a node of the cluster",
                    metadata: ["remote": "\(context.remoteAddress?.description ?? "?")"]
                )
                context.close(promise: nil)
                return
            }
            self.helloDeadline?.cancel()
            self.helloDeadline = nil
            self.state = .open(peer: hello.node)
            let welcome = Courier_V1_NodeFrame.with {
                $0.welcome = .with {
                    $0.proof = NodeProof.proof(secret: self.secret, nonce: hello.nonce, name: self.node)
                }
            }
            context.writeAndFlush(self.wrapOutboundOut(welcome.buffer(context.channel.allocator)), promise: nil)
        case (.open, .write(let write)):
            self.take(write, context: context)
        default:
            // Anything else, or anything before the hello: not a node of this cluster, or not this version.
            context.close(promise: nil)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func take(_ write: Courier_V1_NodeWrite, context: ChannelHandlerContext) {
        let id = write.id
        guard let request = write.writeRequest else {
            self.answer(
                Courier_V1_NodeOutcome(
                    id: id,
                    .success(.refused(CourierStoreError(.invalidRequest, "not a write a node forwards")))
                ),
                context: context
            )
            return
        }
        // Origin 0: a write its node waits for before the next (an edit, a reaction), which nothing orders.
        let origin: Int?
        if write.origin == 0 {
            origin = nil
        } else if let known = self.origins[write.origin] {
            origin = known
        } else {
            let new = self.commits.newOrigin()
            self.origins[write.origin] = new
            origin = new
        }
        self.inFlight += 1
        self.metrics.forwardsTaken.increment()
        if self.inFlight >= self.cluster.maxForwardsInFlight, !self.paused {
            self.paused = true
            context.channel.setOption(.autoRead, value: false).whenComplete { _ in }
        }
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let loop = context.eventLoop
        self.commits.enqueue(request, origin: origin).whenComplete { result in
            loop.execute {
                let (handler, context) = bound.value
                handler.answered(Courier_V1_NodeOutcome(id: id, result), context: context)
            }
        }
    }

    private func answered(_ outcome: Courier_V1_NodeOutcome, context: ChannelHandlerContext) {
        self.inFlight -= 1
        if case .closed = self.state {
            self.forgetOriginsIfIdle()
            return
        }
        self.answer(outcome, context: context)
        if self.paused, self.inFlight <= self.cluster.maxForwardsInFlight / 2 {
            self.paused = false
            context.channel.setOption(.autoRead, value: true).whenComplete { _ in }
        }
    }

    /// Writes an outcome, flushed once for every outcome written in the same turn of the loop.
    private func answer(_ outcome: Courier_V1_NodeOutcome, context: ChannelHandlerContext) {
        let frame = Courier_V1_NodeFrame.with { $0.outcome = outcome }
        context.write(self.wrapOutboundOut(frame.buffer(context.channel.allocator)), promise: nil)
        guard !self.flushPending else { return }
        self.flushPending = true
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.execute {
            let (handler, context) = bound.value
            handler.flushPending = false
            context.flush()
        }
    }

    /// Once the link is closed and every write it brought has come back, its origins are done with.
    private func forgetOriginsIfIdle() {
        guard case .closed = self.state, self.inFlight == 0 else { return }
        for origin in self.origins.values { self.commits.forget(origin: origin) }
        self.origins = [:]
    }
}
