import CourierProtocol
import CourierStore
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// The writes this node takes from its clients, each committed by its conversation's owner (``WriteRoutes``): in
/// this node's commit queue, or forwarded over a link to the owner's forward port.
///
/// Order: a connection's writes to one conversation all go where the first of them still in flight went (they
/// are pinned there until none is in flight), so a change of owner never lets a later write overtake an earlier one.
/// Once one of a connection's writes fails, its later ones fail too until ``forget(origin:)``, as the commit queue's
/// do: the session closes the connection and the client sends them again, in order, under the same ids.
final class Forwarder: Sendable {
    private let node: String
    private let commits: CommitQueue
    private let cluster: ServerConfiguration.Cluster
    private let metrics: ServerMetrics
    private let logger: Logger
    private let state: Mutex<State>

    private struct Pin {
        /// Where the writes in flight went: nil, this node.
        var link: NodeLink?
        var count: Int
    }

    private struct State {
        var routes: WriteRoutes
        var links: [String: NodeLink] = [:]
        var pins: [Int: [String: Pin]] = [:]
        var failed: Set<Int> = []
    }

    init(
        node: String,
        commits: CommitQueue,
        cluster: ServerConfiguration.Cluster,
        metrics: ServerMetrics,
        logger: Logger
    ) {
        self.node = node
        self.commits = commits
        self.cluster = cluster
        self.metrics = metrics
        self.logger = logger
        self.state = Mutex(State(routes: WriteRoutes(node: node, peers: [])))
    }

    /// The live nodes as the database lists them now: links to nodes gone, or started again, are closed.
    func update(_ peers: [ClusterPeer]) {
        let closing = self.state.withLock { state -> [NodeLink] in
            state.routes = WriteRoutes(node: self.node, peers: peers)
            var closing: [NodeLink] = []
            for (name, link) in state.links where peers.first(where: { $0.name == name })?.forward != link.endpoint {
                closing.append(link)
                state.links[name] = nil
            }
            return closing
        }
        for link in closing { link.close() }
        self.metrics.clusterNodes.set(to: Double(peers.filter { $0.forward != nil }.count))
    }

    /// Every link closed: the node is stopping.
    func stop() {
        let links = self.state.withLock { state in
            defer { state.links = [:] }
            return Array(state.links.values)
        }
        for link in links { link.close() }
    }

    /// Commits a write here or at its conversation's owner.
    ///
    /// - Parameters:
    ///   - origin: The connection it came from (``CommitQueue/newOrigin()``), whose writes keep their order; nil
    ///     for a write its caller waits for before its next (an edit, a reaction), which nothing orders.
    ///   - userName: The name of the user it is from, which names a direct conversation with the other's.
    func submit(_ request: WriteRequest, origin: Int?, userName: String) -> CommitTicket {
        guard let key = WriteRoutes.key(of: request, userName: userName) else {
            return self.commits.enqueue(request, origin: origin)
        }
        guard let origin else {
            let owner = self.state.withLock { state -> NodeLink? in
                guard let owner = state.routes.owner(of: key), owner.name != self.node else { return nil }
                return self.link(to: owner, &state)
            }
            guard let owner else { return self.commits.enqueue(request) }
            let ticket = CommitTicket()
            self.metrics.forwardsSent.increment()
            owner.send(request, origin: nil) { ticket.complete($0) }
            return ticket
        }
        enum Route {
            case failed
            case local
            case remote(NodeLink)
        }
        let route = self.state.withLock { state -> Route in
            if state.failed.contains(origin) { return .failed }
            var pin = state.pins[origin]?[key] ?? Pin(link: nil, count: 0)
            if pin.count == 0 {
                pin.link = nil
                if let owner = state.routes.owner(of: key), owner.name != self.node {
                    pin.link = self.link(to: owner, &state)
                }
            }
            pin.count += 1
            state.pins[origin, default: [:]][key] = pin
            return pin.link.map(Route.remote) ?? .local
        }
        let ticket = CommitTicket()
        switch route {
        case .failed:
            ticket.complete(.failure(CommitQueue.earlierFailure))
        case .local:
            self.commits.enqueue(request, origin: origin).whenComplete { result in
                self.finished(origin, key, result)
                ticket.complete(result)
            }
        case .remote(let link):
            self.metrics.forwardsSent.increment()
            link.send(request, origin: origin) { result in
                self.finished(origin, key, result)
                ticket.complete(result)
            }
        }
        return ticket
    }

    /// The link to a node, made when there is none yet.
    private func link(to owner: ClusterPeer, _ state: inout State) -> NodeLink? {
        guard let endpoint = owner.forward else { return nil }
        if let link = state.links[owner.name] { return link }
        let link = NodeLink(
            node: self.node,
            peer: owner.name,
            endpoint: endpoint,
            cluster: self.cluster,
            logger: self.logger
        )
        state.links[owner.name] = link
        return link
    }

    private func finished(_ origin: Int, _ key: String, _ result: Result<WriteOutcome, any Error>) {
        self.state.withLock { state in
            if case .failure = result { state.failed.insert(origin) }
            guard var pin = state.pins[origin]?[key] else { return }
            pin.count -= 1
            if pin.count > 0 {
                state.pins[origin]?[key] = pin
            } else {
                state.pins[origin]?[key] = nil
                if state.pins[origin]?.isEmpty == true { state.pins[origin] = nil }
            }
        }
    }

    /// The connection is gone and every write of it has come back.
    func forget(origin: Int) {
        self.state.withLock { state in
            state.failed.remove(origin)
            state.pins[origin] = nil
        }
    }
}

/// A link to another node's forward port: dialled at the first write for it, proved both ways, and dialled again
/// after it drops. Every write waiting on a link that drops, or that waits past
/// ``ServerConfiguration/Cluster-swift.struct/forwardTimeout``, fails with `storage-failed`.
final class NodeLink: Sendable {
    let peer: String
    let endpoint: ForwardEndpoint
    private let node: String
    private let cluster: ServerConfiguration.Cluster
    private let logger: Logger
    private let state = Mutex(LinkState())

    typealias Done = @Sendable (Result<WriteOutcome, any Error>) -> Void

    private enum Phase {
        case idle
        case connecting
        case open(any Channel)
        /// Dropped, its waiting writes being failed: a write now fails too, so that none can overtake one of them
        /// on the next connection before its origin is marked failed.
        case draining
        case closed
    }

    private struct LinkState {
        var phase = Phase.idle
        /// Written once the link is open, or at the next flush.
        var outbox: [Courier_V1_NodeWrite] = []
        var flushScheduled = false
        var pending: [UInt64: (sent: ContinuousClock.Instant, done: Done)] = [:]
        var nextID: UInt64 = 1
    }

    static let unreachable = CourierStoreError(
        .storageFailed,
        "the node that commits this conversation's writes could not be reached: send it again"
    )

    init(
        node: String,
        peer: String,
        endpoint: ForwardEndpoint,
        cluster: ServerConfiguration.Cluster,
        logger: Logger
    ) {
        self.node = node
        self.peer = peer
        self.endpoint = endpoint
        self.cluster = cluster
        self.logger = logger
    }

    func send(_ request: WriteRequest, origin: Int?, done: @escaping Done) {
        enum Action {
            case none, fail, connect
            case flush(any Channel)
        }
        let action = self.state.withLock { state -> Action in
            switch state.phase {
            case .closed, .draining: return .fail
            case .idle, .connecting, .open: break
            }
            let id = state.nextID
            state.nextID += 1
            state.pending[id] = (.now, done)
            state.outbox.append(Courier_V1_NodeWrite(request, id: id, origin: origin ?? 0))
            switch state.phase {
            case .idle:
                state.phase = .connecting
                return .connect
            case .connecting, .closed, .draining:
                return .none
            case .open(let channel):
                guard !state.flushScheduled else { return .none }
                state.flushScheduled = true
                return .flush(channel)
            }
        }
        switch action {
        case .none: break
        case .fail: done(.failure(Self.unreachable))
        case .connect: self.connect()
        case .flush(let channel): channel.eventLoop.execute { self.flush(channel) }
        }
    }

    /// Writes what waits in the outbox, with one flush: only on the link's channel still open (a flush scheduled
    /// for a channel since dropped leaves the outbox to the next).
    private func flush(_ channel: any Channel) {
        let writes = self.state.withLock { state -> [Courier_V1_NodeWrite] in
            guard case .open(let current) = state.phase, current === channel else { return [] }
            state.flushScheduled = false
            defer { state.outbox = [] }
            return state.outbox
        }
        guard !writes.isEmpty else { return }
        for write in writes {
            let frame = Courier_V1_NodeFrame.with { $0.write = write }
            channel.write(frame.buffer(channel.allocator), promise: nil)
        }
        channel.flush()
    }

    private func connect() {
        let parts = self.endpoint.address.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count >= 2, let port = Int(parts[parts.count - 1]) else {
            self.dropped(reason: "no port in \(self.endpoint.address)")
            return
        }
        // An IPv6 host is written in brackets.
        let host = parts.dropLast().joined(separator: ":").trimmingCharacters(in: ["[", "]"])
        ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.init(self.cluster.forwardHelloTimeout))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    try pipeline.addNodeFraming(maxFrameBytes: self.cluster.maxForwardFrameBytes)
                    try pipeline.addHandler(NodeDialHandler(link: self, node: self.node, cluster: self.cluster))
                }
            }
            .connect(host: host, port: port)
            .whenFailure { error in self.dropped(reason: "\(error)") }
    }

    /// The other node proved it is the one the database names: the writes waiting go.
    fileprivate func opened(_ channel: any Channel) {
        let reopen = self.state.withLock { state -> Bool in
            guard case .connecting = state.phase else { return false }
            state.phase = .open(channel)
            state.flushScheduled = false
            return true
        }
        guard reopen else {
            channel.close(promise: nil)
            return
        }
        self.flush(channel)
    }

    fileprivate func answered(_ outcome: Courier_V1_NodeOutcome) {
        let waiting = self.state.withLock { $0.pending.removeValue(forKey: outcome.id) }
        waiting?.done(outcome.outcome)
    }

    /// Whether a write has waited past the timeout: the link is then closed.
    fileprivate var overdue: Bool {
        let limit = ContinuousClock.now - self.cluster.forwardTimeout
        return self.state.withLock { state in state.pending.values.contains { $0.sent < limit } }
    }

    /// The link is down: every write waiting on it fails; the next write dials again.
    fileprivate func dropped(reason: String) {
        let waiting = self.state.withLock { state -> [Done] in
            if case .closed = state.phase {} else { state.phase = .draining }
            state.outbox = []
            state.flushScheduled = false
            defer { state.pending = [:] }
            return state.pending.values.map(\.done)
        }
        defer {
            // Every origin that had a write waiting is marked failed now: the next write may dial again.
            self.state.withLock { state in
                if case .draining = state.phase { state.phase = .idle }
            }
        }
        if !waiting.isEmpty {
            self.logger.warning(
                "a link to another node dropped: the writes waiting on it fail",
                metadata: ["node": "\(self.peer)", "writes": "\(waiting.count)", "reason": "\(reason)"]
            )
        }
        for done in waiting { done(.failure(Self.unreachable)) }
    }

    /// Closed for good (the node left, or started again elsewhere).
    func close() {
        let channel = self.state.withLock { state -> (any Channel)? in
            defer { state.phase = .closed }
            if case .open(let channel) = state.phase { return channel }
            return nil
        }
        channel?.close(promise: nil)
        self.dropped(reason: "closed")
    }
}

/// The dialling side of a forward link, on its event loop: answers the challenge, checks the welcome, then hands
/// each outcome to its link.
final class NodeDialHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private enum State {
        case awaitingChallenge
        case awaitingWelcome(nonce: [UInt8])
        case open
    }

    private let link: NodeLink
    private let node: String
    private let cluster: ServerConfiguration.Cluster
    private var state = State.awaitingChallenge
    private var watchdog: RepeatedTask?
    private var deadline: Scheduled<Void>?

    init(link: NodeLink, node: String, cluster: ServerConfiguration.Cluster) {
        self.link = link
        self.node = node
        self.cluster = cluster
    }

    func channelActive(context: ChannelHandlerContext) {
        let channel = context.channel
        self.deadline = context.eventLoop.scheduleTask(in: .init(self.cluster.forwardHelloTimeout)) {
            channel.close(promise: nil)
        }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.deadline?.cancel()
        self.watchdog?.cancel()
        self.link.dropped(reason: "the connection closed")
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard let frame = try? Courier_V1_NodeFrame(frame: self.unwrapInboundIn(data)) else {
            context.close(promise: nil)
            return
        }
        switch (self.state, frame.kind) {
        case (.awaitingChallenge, .challenge(let challenge)):
            guard challenge.node == self.link.peer, challenge.nonce.count == NodeProof.nonceBytes else {
                context.close(promise: nil)
                return
            }
            let nonce = NodeProof.nonce()
            self.state = .awaitingWelcome(nonce: nonce)
            let hello = Courier_V1_NodeFrame.with {
                $0.hello = .with {
                    $0.node = self.node
                    $0.nonce = .init(nonce)
                    $0.proof = NodeProof.proof(
                        secret: self.link.endpoint.secret,
                        nonce: challenge.nonce,
                        name: self.node
                    )
                }
            }
            context.writeAndFlush(self.wrapOutboundOut(hello.buffer(context.channel.allocator)), promise: nil)
        case (.awaitingWelcome(let nonce), .welcome(let welcome)):
            guard NodeProof.verify(welcome.proof, secret: self.link.endpoint.secret, nonce: nonce, name: self.link.peer)
            else {
                context.close(promise: nil)
                return
            }
            self.state = .open
            self.deadline?.cancel()
            self.deadline = nil
            let channel = context.channel
            let link = self.link
            let every = self.cluster.forwardTimeout / 4
            self.watchdog = context.eventLoop.scheduleRepeatedTask(initialDelay: .init(every), delay: .init(every)) {
                _ in
                if link.overdue { channel.close(promise: nil) }
            }
            self.link.opened(context.channel)
        case (.open, .outcome(let outcome)):
            self.link.answered(outcome)
        default:
            context.close(promise: nil)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
