import CourierPostgresTesting
import CourierProtocol
import CourierServerTesting
import CourierStore
import CourierStorePostgres
import CourierTesting
import Foundation
import NIOCore
import NIOPosix
import PostgresNIO
import Testing

@testable import CourierServer

@Suite("Forwarding: which node owns a conversation, and what goes on a forward link")
struct WriteRoutesTests {
    static func peers(_ names: [String]) -> [ClusterPeer] {
        names.map { ClusterPeer(name: $0, forward: ForwardEndpoint(address: "127.0.0.1:1", secret: "s-" + $0)) }
    }

    @Test("a direct conversation has one key whichever member names it, in any case; an acknowledgement has none")
    func keys() {
        let body = Array("你好 👋".utf8)
        let alice = WriteRoutes.key(
            of: .send(.init(sender: UserID(rawValue: 1), id: "m", to: .user("Bob"), body: body)),
            userName: "alice"
        )
        let bob = WriteRoutes.key(
            of: .markRead(user: UserID(rawValue: 2), conversation: .user("ALICE"), upToSeq: 3),
            userName: "bob"
        )
        #expect(alice == bob && alice != nil)
        let group = WriteRoutes.key(
            of: .recall(user: UserID(rawValue: 2), conversation: .group("Tea"), id: "m"),
            userName: "bob"
        )
        #expect(
            group
                == WriteRoutes.key(
                    of: .react(
                        .init(user: UserID(rawValue: 1), conversation: .group("tea"), seq: 1, key: "👍", on: true)
                    ),
                    userName: "alice"
                )
        )
        #expect(group != alice)
        #expect(
            WriteRoutes.key(
                of: .ack(user: UserID(rawValue: 1), device: DeviceID(rawValue: 1), cursor: 9),
                userName: "a"
            ) == nil
        )
    }

    @Test(
        "owners: every node computes the same; a node that leaves moves only its own, one that joins takes only from others"
    )
    func owners() {
        let seed = TestSeed.make(for: "WriteRoutesTests.owners")
        var random = SeededRandom(seed: seed)
        let keys = (0..<2_000).map { _ in "d:u\(random.next() % 100_000)/u\(random.next() % 100_000)" }
        let three = WriteRoutes(node: "node0", peers: Self.peers(["node0", "node1", "node2"]))
        let again = WriteRoutes(node: "node2", peers: Self.peers(["node2", "node0", "node1"]).reversed())
        let owners = keys.map { three.owner(of: $0)?.name }
        #expect(owners == keys.map { again.owner(of: $0)?.name }, "seed \(seed)")
        // Each node owns a fair share (a third, give or take a fifth of it).
        for node in ["node0", "node1", "node2"] {
            let share = owners.filter { $0 == node }.count
            #expect(share > 530 && share < 800, "\(node) owns \(share) of 2,000 (seed \(seed))")
        }
        let two = WriteRoutes(node: "node0", peers: Self.peers(["node0", "node2"]))
        for (key, owner) in zip(keys, owners) where owner != "node1" {
            #expect(two.owner(of: key)?.name == owner, "a key of \(owner ?? "-") moved (seed \(seed))")
        }
        let four = WriteRoutes(node: "node0", peers: Self.peers(["node0", "node1", "node2", "node3"]))
        for (key, owner) in zip(keys, owners) {
            let now = four.owner(of: key)?.name
            #expect(now == owner || now == "node3", "a key moved between old nodes (seed \(seed))")
        }
        // A node with no forward port owns nothing.
        var noPort = Self.peers(["node0", "node1"])
        noPort[1].forward = nil
        #expect(keys.allSatisfy { WriteRoutes(node: "node0", peers: noPort).owner(of: $0)?.name == "node0" })
    }

    @Test("every kind of write, and every outcome, reads back as it was written")
    func frames() throws {
        let user = UserID(rawValue: 7)
        var send = WriteRequest.Send(
            sender: user,
            device: DeviceID(rawValue: 3),
            id: "s-1",
            to: .group("tea"),
            body: Array("お茶をどうぞ 🍵 مرحبا".utf8),
            media: MediaReference(
                sha256: String(repeating: "ab", count: 32),
                size: 1_234,
                mime: "image/png",
                name: "猫.png"
            ),
            replyTo: .id("m-0", from: "alice")
        )
        send.prepareSearch()
        var direct = WriteRequest.Send(sender: user, id: "s-2", to: .user("bob"), body: [], replyTo: .seq(4))
        direct.searchTokens = nil
        var edit = WriteRequest.Edit(
            user: user,
            device: DeviceID(rawValue: 3),
            conversation: .user("bob"),
            seq: 2,
            body: Array("改".utf8)
        )
        edit.prepareSearch()
        let requests: [WriteRequest] = [
            .send(send),
            .send(direct),
            .send(.init(sender: user, id: "s-3", to: .group("tea"), body: [1, 2], replyTo: .id("x", from: nil))),
            .markRead(user: user, conversation: .group("tea"), upToSeq: 9),
            .recall(user: user, conversation: .user("bob"), id: "s-2"),
            .edit(edit),
            .react(.init(user: user, conversation: .group("tea"), seq: 1, key: "👍🏽", on: false)),
        ]
        for (index, request) in requests.enumerated() {
            let frame = Courier_V1_NodeFrame.with {
                $0.write = Courier_V1_NodeWrite(request, id: UInt64(index), origin: 42)
            }
            let read = try Courier_V1_NodeFrame(frame: frame.buffer(ByteBufferAllocator()))
            guard case .write(let write) = read.kind else {
                Issue.record("not a write")
                continue
            }
            #expect(write.id == UInt64(index) && write.origin == 42)
            #expect(write.writeRequest == request)
        }
        let outcomes: [Result<WriteOutcome, any Error>] = [
            .success(
                .sent(
                    SendReceipt(
                        id: "s-1",
                        conversation: .group("tea"),
                        seq: 5,
                        timeMs: 99,
                        duplicate: true,
                        recipients: 3
                    )
                )
            ),
            .success(.done),
            .success(.refused(CourierStoreError(.notMember, "not a member of tea"))),
            .failure(CourierStoreError(.storageFailed, "the disk is full")),
        ]
        for outcome in outcomes {
            let read = Courier_V1_NodeOutcome(id: 1, outcome).outcome
            switch (read, outcome) {
            case (.success(let a), .success(let b)): #expect(a == b)
            case (.failure(let a), .failure(let b)): #expect(a as? CourierStoreError == b as? CourierStoreError)
            default: Issue.record("\(read) is not \(outcome)")
            }
        }
        #expect(Courier_V1_NodeWrite().writeRequest == nil, "a frame with no request carries none")
    }

    @Test("a proof holds only for its secret, its nonce and its name")
    func proofs() {
        let nonce = NodeProof.nonce()
        let proof = NodeProof.proof(secret: "s3cret", nonce: nonce, name: "node1")
        #expect(NodeProof.verify(proof, secret: "s3cret", nonce: nonce, name: "node1"))
        #expect(!NodeProof.verify(proof, secret: "s3cret!", nonce: nonce, name: "node1"))
        #expect(!NodeProof.verify(proof, secret: "s3cret", nonce: NodeProof.nonce(), name: "node1"))
        #expect(!NodeProof.verify(proof, secret: "s3cret", nonce: nonce, name: "node2"))
        #expect(NodeProof.nonce() != nonce)
    }
}

@Suite(
    "Forwarding between nodes on one PostgreSQL database",
    .serialized,
    .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
)
struct ForwardingClusterTests {
    @Test(
        "two nodes that forward: partners on different nodes chat both ways; every message arrives once, in order, and some were forwarded"
    )
    func partnersApart() async throws {
        try await ClusterFixture.with(nodes: 2) { cluster in
            // Both nodes route by the same two nodes before anyone sends.
            try await waitUntil("both nodes route by both") {
                let first = try await cluster.metric("courier_cluster_nodes", of: 0)
                let second = try await cluster.metric("courier_cluster_nodes", of: 1)
                return first == 2 && second == 2
            }
            let names = (0..<8).map { "user\($0)" }
            for name in names { try await cluster.user(name) }
            // Four pairs, each partner on the other node: whichever node owns a pair's conversation, one partner's
            // sends are forwarded to it.
            var clients: [NativeTestClient] = []
            for (index, name) in names.enumerated() {
                let (client, _) = try await NativeTestClient.login(port: cluster.nodes[index % 2].ports.native, name)
                clients.append(client)
            }
            let count = 15
            for round in 0..<count {
                for index in 0..<names.count {
                    let peer = names[index ^ 1]
                    let sent = try await clients[index].sendText(
                        "第\(round)条 ✉️",
                        to: .user(peer),
                        id: "\(names[index])-\(round)"
                    )
                    #expect(sent.body.isSent)
                }
            }
            for index in 0..<names.count {
                let got = try await clients[index].messages(count)
                #expect(got.map(\.id) == (0..<count).map { "\(names[index ^ 1])-\($0)" }, "\(names[index])")
                #expect(got.allSatisfy { $0.seq > 0 })
            }
            var (sent, taken) = (0, 0)
            for node in 0..<2 {
                sent += try await cluster.metric("courier_forwards_sent_total", of: node)
                taken += try await cluster.metric("courier_forwards_taken_total", of: node)
            }
            #expect(sent == names.count / 2 * count, "one partner of each pair forwards every send")
            #expect(taken == sent)
            for client in clients { await client.close() }
        } configure: { configuration in
            configuration.cluster.forwardWrites = true
            configuration.cluster.routesRefreshInterval = .milliseconds(100)
        }
    }

    @Test(
        "the forward port closes a connection that does not prove it knows the node's secret, and reads nothing from it"
    )
    func strangersRefused() async throws {
        try await ClusterFixture.with(nodes: 1) { cluster in
            let port = try await Self.forwardPort(cluster)
            // A hello whose proof is made with a wrong secret: no welcome, closed.
            var guesser = try await FrameClient.connect(port: port)
            guard case .challenge(let challenge) = try await guesser.next()?.kind else {
                Issue.record("no challenge first")
                return
            }
            #expect(challenge.node == "node0" && challenge.nonce.count == 32)
            try await guesser.send(
                .with {
                    $0.hello = .with {
                        $0.node = "node9"
                        $0.nonce = Data(NodeProof.nonce())
                        $0.proof = NodeProof.proof(secret: "a guess", nonce: challenge.nonce, name: "node9")
                    }
                }
            )
            #expect(try await guesser.next() == nil, "closed without a welcome")
            // A write before any hello: closed, nothing committed.
            var eager = try await FrameClient.connect(port: port)
            _ = try await eager.next()
            try await eager.send(
                .with {
                    $0.write = Courier_V1_NodeWrite(
                        .markRead(user: UserID(rawValue: 1), conversation: .user("x"), upToSeq: 1),
                        id: 1,
                        origin: 1
                    )
                }
            )
            #expect(try await eager.next() == nil)
            #expect(try await cluster.metric("courier_forwards_taken_total", of: 0) == 0)
        } configure: { configuration in
            configuration.cluster.forwardWrites = true
        }
    }
}

extension ForwardingClusterTests {
    @Test("the forward port's limits: connections at once, the hello's deadline, a frame's size")
    func forwardPortLimits() async throws {
        try await ClusterFixture.with(nodes: 1) { cluster in
            let port = try await Self.forwardPort(cluster)
            // Two connections at once (neither has said hello): a third is closed before any challenge.
            var first = try await FrameClient.connect(port: port)
            var second = try await FrameClient.connect(port: port)
            guard case .challenge = try await first.next()?.kind, case .challenge = try await second.next()?.kind
            else {
                Issue.record("no challenge")
                return
            }
            var third = try await FrameClient.connect(port: port)
            #expect(try await third.next() == nil, "a third connection at once is closed")
            // A connection that says nothing is closed once the hello's deadline has passed.
            #expect(try await first.next() == nil)
            #expect(try await second.next() == nil)
            // A frame over the limit closes the link, before it is read whole.
            var large = try await FrameClient.connect(port: port)
            _ = try await large.next()
            try await large.send(
                .with {
                    $0.hello = .with {
                        $0.node = String(repeating: "节点🛰️", count: 200)
                        $0.nonce = Data(NodeProof.nonce())
                    }
                }
            )
            #expect(try await large.next() == nil, "closed for a frame over max-forward-frame-bytes")
        } configure: { configuration in
            configuration.cluster.forwardWrites = true
            configuration.cluster.maxForwardConnections = 2
            configuration.cluster.forwardHelloTimeout = .seconds(3)
            configuration.cluster.maxForwardFrameBytes = 1_024
        }
    }

    /// The port node0 takes forwarded writes on, as it wrote it in the database.
    static func forwardPort(_ cluster: ClusterFixture) async throws -> Int {
        let address = try await TestDatabase.admin(cluster.location) { connection in
            var found: [String] = []
            let rows = try await connection.query(
                "SELECT forward_address FROM cluster_nodes WHERE name = 'node0'",
                logger: TestDatabase.logger
            )
            for try await address in rows.decode(String.self) { found.append(address) }
            return found.first ?? ""
        }
        return try #require(Int(address.split(separator: ":").last ?? ""))
    }
}

/// A raw connection to a forward port, frame by frame.
struct FrameClient {
    let channel: any Channel
    var frames: AsyncStream<Courier_V1_NodeFrame>.AsyncIterator

    final class Collector: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let continuation: AsyncStream<Courier_V1_NodeFrame>.Continuation

        init(_ continuation: AsyncStream<Courier_V1_NodeFrame>.Continuation) { self.continuation = continuation }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            if let frame = try? Courier_V1_NodeFrame(frame: self.unwrapInboundIn(data)) {
                self.continuation.yield(frame)
            }
        }

        func channelInactive(context: ChannelHandlerContext) { self.continuation.finish() }
    }

    static func connect(port: Int) async throws -> FrameClient {
        let (stream, continuation) = AsyncStream.makeStream(of: Courier_V1_NodeFrame.self)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addNodeFraming(maxFrameBytes: 1 << 20)
                    try channel.pipeline.syncOperations.addHandler(Collector(continuation))
                }
            }
            .connect(host: "127.0.0.1", port: port)
            .get()
        return FrameClient(channel: channel, frames: stream.makeAsyncIterator())
    }

    /// The next frame; nil once the other side has closed.
    mutating func next() async throws -> Courier_V1_NodeFrame? {
        await self.frames.next()
    }

    func send(_ frame: Courier_V1_NodeFrame) async throws {
        try await self.channel.writeAndFlush(frame.buffer(self.channel.allocator))
    }
}
