import CourierPostgresTesting
import CourierProcess
import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierStorePostgres
import CourierTesting
import CourierWire
import Foundation
import PostgresNIO
import Testing

@Suite(
    "Several nodes on one PostgreSQL database",
    .serialized,
    .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
)
struct ClusterTests {
    @Test(
        "three nodes: native and compat clients spread over them chat 1:1 and in a group; every message arrives once, in order, on every device",
        arguments: PostgresFeed.Mode.allCases
    )
    func threeNodes(fanout: PostgresFeed.Mode) async throws {
        try await ClusterFixture.with(nodes: 3, fanout: fanout) { cluster in
            for name in ["alice", "bob", "carol"] { try await cluster.user(name) }
            try await cluster.store.createGroup(name: "trio", owner: "alice", members: ["bob", "carol"], nowMs: 0)
            let (node0, node1, node2) = (cluster.nodes[0].ports, cluster.nodes[1].ports, cluster.nodes[2].ports)

            let (phone, _) = try await NativeTestClient.login(port: node0.native, "alice", device: "phone")
            let (laptop, _) = try await NativeTestClient.login(port: node2.native, "alice", device: "laptop")
            let (carol, _) = try await NativeTestClient.login(port: node1.native, "carol")
            let bob = try await CompatTestClient.connect(port: node1.compat)
            try await bob.write(try CompatTestClient.packet("auth", ["user": "bob", "password": "pw-bob"]))
            _ = try await bob.expect("welcome")

            // Interleaved: alice (node 0) to bob, bob (compat, node 1) to the group, carol (node 1) to alice.
            let count = 20
            for index in 0..<count {
                #expect(try await phone.sendText("a\(index)", to: .user("bob"), id: "a\(index)").body.isSent)
                try await bob.write(
                    try CompatTestClient.packet(
                        "txt",
                        ["group": "trio", "id": .string("b\(index)")],
                        payload: Array("b\(index)".utf8)
                    )
                )
                _ = try await bob.expect("ack")
                #expect(try await carol.sendText("c\(index)", to: .user("alice"), id: "c\(index)").body.isSent)
            }
            let a = (0..<count).map { "a\($0)" }
            let b = (0..<count).map { "b\($0)" }
            let c = (0..<count).map { "c\($0)" }

            // Each device: exactly the messages it should get, each sender's in the order sent.
            func bySender(_ messages: [Courier_V1_Message]) -> [String: [String]] {
                Dictionary(grouping: messages, by: \.from).mapValues { $0.map(\.id) }
            }
            let onPhone = try await phone.messages(2 * count)
            #expect(bySender(onPhone) == ["bob": b, "carol": c])
            let onLaptop = try await laptop.messages(3 * count)
            #expect(bySender(onLaptop) == ["alice": a, "bob": b, "carol": c])
            let onCarol = try await carol.messages(count)
            #expect(bySender(onCarol) == ["bob": b])
            var onBob: [String] = []
            while onBob.count < count {
                let frame = try await bob.expect("txt")
                if case .string(let id)? = frame.header["id"] { onBob.append(id) }
            }
            #expect(onBob == a)

            // Nothing more comes: a last message from each side arrives next, on every device.
            _ = try await carol.sendText("last", to: .group("trio"), id: "last")
            for client in [phone, laptop] {
                #expect(try await client.messages(1).map(\.id) == ["last"])
            }
            let next = try await bob.expect("txt")
            #expect(next.header["id"] == .string("last"))
            for client in [phone, laptop, carol] { await client.close() }
            await bob.close()
        } configure: {
            // Each way alone must deliver: notifications without polling (an hour), polling alone every 50 ms.
            $0.cluster.pollInterval = fanout == .notify ? .seconds(3600) : .milliseconds(50)
        }
    }

    @Test(
        "media on PostgreSQL: an upload cut on one node resumes on another, and every node serves it (native and HTTP); the same file again is stored once"
    )
    func mediaAcrossNodes() async throws {
        try await ClusterFixture.with(nodes: 3) { cluster in
            for name in ["alice", "bob"] { try await cluster.user(name) }
            let carolID = try await cluster.user("carol").id
            let ports = cluster.nodes.map(\.ports)
            let file = SeededRandom.bytes(3 * 1024 * 1024 + 17, seededFor: "mediaAcrossNodes")
            let sha = NativeTestClient.sha256(file)

            let (bob, bobWelcome) = try await NativeTestClient.login(port: ports[2].native, "bob")
            // Half of it through node 0, and the connection goes.
            let (phone, welcome) = try await NativeTestClient.login(port: ports[0].native, "alice")
            guard case .cut = try await phone.upload(file, stream: 1, upTo: file.count / 2) else {
                Issue.record("the first half was not sent")
                return
            }
            await phone.close()
            // The rest through node 1, from where the database says it stands. Node 0 may still be storing what it
            // gathered when the connection went: the upload is busy until then, and tried again (as the SDK does).
            let (laptop, _) = try await NativeTestClient.resume(port: ports[1].native, token: welcome.token)
            var stream: UInt32 = 1
            var result = try await laptop.upload(file, stream: stream)
            while result.error?.code == ErrorCodes.uploadBusy {
                // Node 0 stores what it held once it sees the close: a few tries at most, never for ever.
                try #require(stream < 200, "still busy after \(stream / 2) tries")
                try await Task.sleep(for: .milliseconds(50))
                stream += 2
                result = try await laptop.upload(file, stream: stream)
            }
            guard case .done(let done, let startedAt) = result else {
                Issue.record("the upload did not finish: \(result)")
                return
            }
            #expect(done.sha256 == sha)
            #expect(startedAt > 0 && startedAt <= UInt64(file.count / 2), "resumed at \(startedAt)")
            #expect(try await laptop.sendMedia(.of(file), to: .user("bob"), id: "m1").body.isSent)

            // Bob, on node 2, gets the message and fetches the file there, whole and in part.
            #expect(try await bob.messages(1).map(\.id) == ["m1"])
            let whole = try await bob.fetch(sha, stream: 1, window: 1 << 20).get()
            #expect(whole.1 == file)
            let part = try await bob.fetch(sha, stream: 3, offset: 1_000_000, length: 70_000, window: 1 << 20).get()
            #expect(part.1 == Array(file[1_000_000..<1_070_000]))
            try await withTemporaryDirectory { folder in
                let body = folder.appendingPathComponent("body")
                for node in [0, 2] {
                    let status = try await HTTPTests.curl([
                        "--output", body.path, "--write-out", "%{http_code}", "--range", "5-2000004",
                        "--header", "Authorization: Bearer \(bobWelcome.token)",
                        "http://127.0.0.1:\(ports[node].http)/media/\(sha)",
                    ])
                    #expect(status == "206", "node \(node)")
                    #expect(try Data(contentsOf: body) == Data(file[5...2_000_004]), "node \(node)")
                }
            }

            // Carol uploads the same bytes through node 2: hers too, stored once.
            let (carol, _) = try await NativeTestClient.login(port: ports[2].native, "carol")
            let again = try await carol.upload(file, stream: 1)
            #expect(again.done?.sha256 == sha, "\(again)")
            var blobs: [Int64] = []
            try await TestDatabase.admin(cluster.location) { connection in
                let rows = try await connection.query(
                    "SELECT count(*)::bigint FROM media_blobs UNION ALL SELECT count(*)::bigint FROM media_uploads",
                    logger: TestDatabase.logger
                )
                for try await count in rows.decode(Int64.self) { blobs.append(count) }
            }
            #expect(blobs == [1, 0], "one blob, no upload left")
            #expect(try await cluster.store.uploadedSize(by: carolID, sha256: sha) == Int64(file.count))
            for client in [laptop, bob, carol] { await client.close() }
        }
    }

    @Test("two strangers on two nodes: when the recipient opens the conversation, each is told the other is online")
    func presenceOnceOpened() async throws {
        try await ClusterFixture.with(nodes: 2) { cluster in
            try await cluster.user("carol")
            try await cluster.user("dave")
            try await ConversationTests.introduced(
                carolPort: cluster.nodes[0].ports.native,
                davePort: cluster.nodes[1].ports.native
            )
        }
    }

    @Test(
        "bytes gathered for PostgreSQL's rows are stored once the node holds maxPendingUploadBytes, though the upload stalls"
    )
    func pendingUploadBudget() async throws {
        try await ClusterFixture.with(nodes: 1) { cluster in
            try await cluster.user("alice")
            let (alice, _) = try await NativeTestClient.login(port: cluster.nodes[0].ports.native, "alice")
            let file = SeededRandom.bytes(1 << 20, seededFor: "pendingUploadBudget")
            // 200 KB in 10 KB chunks, less than a row (256 KiB); then the client stops, its connection open.
            guard case .cut = try await alice.upload(file, stream: 1, upTo: 200_000, chunk: 10_000) else {
                Issue.record("the upload did not stop where asked")
                return
            }
            // Nothing released it: only the budget can have stored what came, all but less than the budget and a
            // chunk.
            var received: Int64 = 0
            try await waitUntil("the node stored what passed its budget") {
                try await TestDatabase.admin(cluster.location) { connection in
                    let rows = try await connection.query(
                        "SELECT received FROM media_uploads",
                        logger: TestDatabase.logger
                    )
                    for try await value in rows.decode(Int64.self) { received = value }
                }
                return received >= 200_000 - 50_000 - 10_000
            }
            #expect(received <= 200_000)
            await alice.close()
        } configure: {
            $0.media.maxPendingUploadBytes = 50_000
        }
    }

    @Test(
        "behind nginx's stream module as the README has it: clients of one address are spread over both nodes and chat"
    )
    func behindNginx() async throws {
        try await ClusterFixture.with(nodes: 2) { cluster in
            for name in ["alice", "bob", "carol", "dave"] { try await cluster.user(name) }
            let (native, compat) = (try await FreePort.pick(), try await FreePort.pick())
            let nodes = cluster.nodes.map(\.ports)
            // README's example, with this test's ports.
            let stream = """
                upstream courier_native { least_conn; server 127.0.0.1:\(nodes[0].native); server 127.0.0.1:\(nodes[1].native); }
                upstream courier_compat { least_conn; server 127.0.0.1:\(nodes[0].compat); server 127.0.0.1:\(nodes[1].compat); }
                server { listen 127.0.0.1:\(native); proxy_pass courier_native; proxy_timeout 10m; }
                server { listen 127.0.0.1:\(compat); proxy_pass courier_compat; proxy_timeout 10m; }
                """
            let folder = try TemporaryDirectory(prefix: "courier-nginx")
            defer { folder.remove() }
            let nginx = try await Nginx.start(stream: stream, ports: [native, compat], folder: folder.url)
            do {
                let (alice, _) = try await NativeTestClient.login(port: native, "alice")
                let (bob, _) = try await NativeTestClient.login(port: native, "bob")
                var compats: [CompatTestClient] = []
                for name in ["carol", "dave"] {
                    let client = try await CompatTestClient.connect(port: compat)
                    try await client.write(
                        try CompatTestClient.packet("auth", ["user": .string(name), "password": .string("pw-" + name)])
                    )
                    _ = try await client.expect("welcome")
                    compats.append(client)
                }
                // Least connections: each node holds one connection of each port.
                for node in 0..<2 {
                    try await waitUntil("node \(node) holds two connections") {
                        try await cluster.health(of: node).contains("\"connections\":2,")
                    }
                }
                // Whichever node each is on, every message arrives, through nginx both ways.
                #expect(try await alice.sendText("to bob", to: .user("bob"), id: "a1").body.isSent)
                #expect(try await bob.messages(1).map(\.id) == ["a1"])
                #expect(try await bob.sendText("to carol", to: .user("carol"), id: "b1").body.isSent)
                let carolGot = try await compats[0].expect("txt")
                #expect(CompatTests.string(carolGot, "id") == "b1")
                try await compats[1].write(
                    try CompatTestClient.packet("txt", ["to": "alice", "id": .string("d1")], payload: Array("hi".utf8))
                )
                _ = try await compats[1].expect("ack")
                #expect(try await alice.messages(1).map(\.id) == ["d1"])
                await alice.close()
                await bob.close()
                for client in compats { await client.close() }
            } catch {
                await nginx.stop()
                throw error
            }
            await nginx.stop()
        }
    }

    @Test("a message between two nodes is timed hop by hop: its news published, received and woken, in /metrics")
    func hopsInMetrics() async throws {
        try await ClusterFixture.with(nodes: 2) { cluster in
            try await cluster.user("alice")
            try await cluster.user("bob")
            let (alice, _) = try await NativeTestClient.login(port: cluster.nodes[0].ports.native, "alice")
            let (bob, _) = try await NativeTestClient.login(port: cluster.nodes[1].ports.native, "bob")
            try await waitUntil("both nodes listen") { cluster.nodes.allSatisfy { $0.feed.isListening } }
            func count(_ hop: String, _ node: Int) async throws -> Int {
                try await cluster.metric("courier_cluster_hop_seconds_count{hop=\"\(hop)\"}", of: node)
            }
            let before = (try await count("notify", 1), try await count("wake", 1), try await count("publish", 0))
            _ = try await alice.sendText("你好，مرحبا 👋", to: .user("bob"), id: "m1")
            #expect(try await bob.messages(1).map(\.id) == ["m1"])
            // Only the notification can have brought it (no polling: an hour); each hop is recorded once it ended.
            try await waitUntil("node 0 timed its publishing") { try await count("publish", 0) > before.2 }
            try await waitUntil("node 1 timed the news' arrival and its wake") {
                let (notify, wake) = (try await count("notify", 1), try await count("wake", 1))
                return notify > before.0 && wake > before.1
            }
            await alice.close()
            await bob.close()
        } configure: {
            $0.cluster.pollInterval = .seconds(3600)
        }
    }

    @Test(
        "a node reads other nodes' news for its connections: each message from another node is handed to bob as that read found it, not read back by his connection"
    )
    func feedReadsHanded() async throws {
        try await ClusterFixture.with(nodes: 2) { cluster in
            try await cluster.user("alice")
            try await cluster.user("bob")
            let (alice, _) = try await NativeTestClient.login(port: cluster.nodes[0].ports.native, "alice")
            let (bob, _) = try await NativeTestClient.login(port: cluster.nodes[1].ports.native, "bob")
            _ = try await bob.expect("caught up") { $0.events.caughtUp ? true : nil }
            try await waitUntil("both nodes listen") { cluster.nodes.allSatisfy { $0.feed.isListening } }
            // The log's cursors are positions shared by every user (alice's own entries sit between bob's): the
            // node's read must take each span as the events in it, not as its width.
            let before = try await cluster.metric("courier_events_handed_total", of: 1)
            for (index, text) in ["你好", "こんにちは", "👋🏽", "مرحبا", "שלום"].enumerated() {
                _ = try await alice.sendText(text, to: .user("bob"), id: "m\(index)")
                #expect(try await bob.messages(1).map(\.body.text) == [text])
            }
            #expect(try await cluster.metric("courier_events_handed_total", of: 1) >= before + 5)
            await alice.close()
            await bob.close()
        } configure: {
            $0.cluster.pollInterval = .seconds(3600)
        }
    }

    @Test(
        "a node's read gives each user an equal share of a part; users it cut short are read again with their whole room, not left to read their own"
    )
    func feedReadsCutShortReadAgain() async throws {
        try await ClusterFixture.with(nodes: 2) { cluster in
            var ids: [String: UserID] = [:]
            for name in ["alice", "bob", "carol"] { ids[name] = try await cluster.user(name).id }
            // Contacts of alice's (only they can be put in her group): both have written to each other.
            for name in ["bob", "carol"] {
                let (owner, member) = (ids["alice"]!, ids[name]!)
                _ = try await cluster.store.apply(
                    [
                        .send(.init(sender: owner, id: "hi-\(name)", to: .user(name), body: Array("你好".utf8))),
                        .send(.init(sender: member, id: "hi", to: .user("alice"), body: Array("こんにちは".utf8))),
                    ],
                    nowMs: 0
                )
            }
            // Listening first: the listener's first resync then finds nobody online to wake.
            try await waitUntil("both nodes listen") { cluster.nodes.allSatisfy { $0.feed.isListening } }
            let (alice, _) = try await NativeTestClient.login(port: cluster.nodes[0].ports.native, "alice")
            let (bob, _) = try await NativeTestClient.login(port: cluster.nodes[1].ports.native, "bob")
            let (carol, _) = try await NativeTestClient.login(port: cluster.nodes[1].ports.native, "carol")
            for client in [bob, carol] { _ = try await client.expect("caught up") { $0.events.caughtUp ? true : nil } }
            let before = try await cluster.metric("courier_events_handed_total", of: 1)
            // One transaction puts several entries in each member's log (who joined); node 1 reads bob's and carol's
            // together with 3 events a read: one each at first, which cuts both short, then each alone with room.
            let created = try await alice.request {
                $0.manageGroup.group = "tea-party"
                $0.manageGroup.create.users = ["bob", "carol"]
            }
            #expect(created.body.isDone, "\(created)")
            let entries = try await cluster.store.events(for: ids["bob"]!, after: 0, limit: 100)
                .filter { if case .membership = $0.kind { true } else { false } }
            #expect((2...3).contains(entries.count), "\(entries.count) entries: the test's limit of 3 needs 2 or 3")
            try await waitUntil("node 1 hands both members their entries as it read them") {
                try await cluster.metric("courier_events_handed_total", of: 1) >= before + 2 * entries.count
            }
            for client in [alice, bob, carol] { await client.close() }
        } configure: {
            // Only the feed's read may bring the members their entries: no poll of the log, and no poll of the
            // changes table, which records the group's creation too and would wake them to read it themselves.
            $0.cluster.pollInterval = .seconds(3600)
            $0.limits.changePollInterval = .seconds(3600)
            $0.cluster.maxEventsPerFeedRead = 3
        }
    }

    @Test("a listener cut off catches up when it reconnects: what was sent meanwhile arrives; /health says so")
    func listenerReconnects() async throws {
        var feed = PostgresFeed.Configuration()
        // Long enough for /health to be asked while node 1 is away, however loaded the machine.
        feed.reconnectDelay = .seconds(15)
        feed.maxReconnectDelay = .seconds(15)
        try await ClusterFixture.with(nodes: 2, feed: feed) { cluster in
            try await cluster.user("alice")
            try await cluster.user("bob")
            let (alice, _) = try await NativeTestClient.login(port: cluster.nodes[0].ports.native, "alice")
            let (bob, _) = try await NativeTestClient.login(port: cluster.nodes[1].ports.native, "bob")
            try await waitUntil("both nodes listen") { cluster.nodes.allSatisfy { $0.feed.isListening } }
            #expect(try await cluster.health(of: 1).contains("\"database\":\"postgres\",\"listening\":true"))
            _ = try await alice.sendText("before", to: .user("bob"), id: "m1")
            #expect(try await bob.messages(1).map(\.id) == ["m1"])

            // Every listener's connection is ended by the server; node 1 waits 15 s before it reconnects.
            try await TestDatabase.admin(cluster.location) { connection in
                _ = try await connection.query(
                    """
                    SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                    WHERE datname = current_database() AND query LIKE 'LISTEN%'
                    """,
                    logger: TestDatabase.logger
                ).collect()
            }
            try await waitUntil("node 1 notices") { !cluster.nodes[1].feed.isListening }
            #expect(try await cluster.health(of: 1).contains("\"listening\":false"))
            // Its notification is lost: only the resync after reconnecting can bring it (no polling: an hour).
            _ = try await alice.sendText("while away", to: .user("bob"), id: "m2")
            #expect(try await bob.messages(1).map(\.id) == ["m2"])
            #expect(cluster.nodes[1].feed.isListening)
            await alice.close()
            await bob.close()
        } configure: {
            $0.cluster.pollInterval = .seconds(3600)
        }
    }
}

extension Optional where Wrapped == ServerEnvelope.OneOf_Body {
    var isSent: Bool { if case .sendAck? = self { true } else { false } }
}
