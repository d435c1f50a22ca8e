import CourierPostgresTesting
import CourierProcess
import CourierTesting
import Foundation
import Testing

@testable import courier

extension CommandLineTests {
    /// An OTLP/HTTP collector stand-in (Python's http.server): each body POSTed to /v1/traces goes into `folder` as a
    /// file of its own, answered 200.
    static let collector = """
        import http.server, os, sys, itertools
        folder, port = sys.argv[1], int(sys.argv[2])
        count = itertools.count()
        class Collector(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/v1/traces":
                    path = os.path.join(folder, f"{next(count)}.json")
                    with open(path + ".part", "wb") as file:
                        file.write(body)
                    os.rename(path + ".part", path)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")
            def log_message(self, *arguments):
                pass
        http.server.HTTPServer(("127.0.0.1", port), Collector).serve_forever()
        """

    /// The spans in the collector's files: name, ids and attributes (OTLP's JSON).
    struct CollectedSpan {
        var name: String
        var traceID: String
        var spanID: String
        var parentID: String
        var attributes: [String: String]
    }

    static func collectedSpans(in folder: URL) throws -> [CollectedSpan] {
        var spans: [CollectedSpan] = []
        for file in try FileManager.default.contentsOfDirectory(atPath: folder.path) where file.hasSuffix(".json") {
            let data = try Data(contentsOf: folder.appendingPathComponent(file))
            guard let root = try JSONSerialization.jsonObject(with: data) as? [String: Any] else { continue }
            for resource in root["resourceSpans"] as? [[String: Any]] ?? [] {
                for scope in resource["scopeSpans"] as? [[String: Any]] ?? [] {
                    for span in scope["spans"] as? [[String: Any]] ?? [] {
                        var attributes: [String: String] = [:]
                        for attribute in span["attributes"] as? [[String: Any]] ?? [] {
                            guard let key = attribute["key"] as? String,
                                let value = attribute["value"] as? [String: Any]
                            else { continue }
                            attributes[key] = value.values.first.map { "\($0)" }
                        }
                        spans.append(
                            CollectedSpan(
                                name: span["name"] as? String ?? "",
                                traceID: span["traceId"] as? String ?? "",
                                spanID: span["spanId"] as? String ?? "",
                                parentID: span["parentSpanId"] as? String ?? "",
                                attributes: attributes
                            )
                        )
                    }
                }
            }
        }
        return spans
    }

    /// Runs `body` with a collector stand-in on a free port (its URL) writing what it receives into a folder.
    static func withCollector(
        _ folder: URL,
        _ body: (_ url: String, _ received: URL) async throws -> Void
    ) async throws {
        let received = folder.appendingPathComponent("collected")
        try FileManager.default.createDirectory(at: received, withIntermediateDirectories: true)
        let port = try await FreePort.pick()
        let collector = try ChildProcess(
            executable: "/usr/bin/python3",
            arguments: ["-c", Self.collector, received.path, String(port)]
        )
        defer {
            collector.terminate()
            collector.waitUntilExit()
        }
        try await body("http://127.0.0.1:\(port)", received)
    }

    /// The environment that makes a server's spans come as JSON, a tenth of a second after they end.
    static let tracing = ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json", "OTEL_BSP_SCHEDULE_DELAY": "100"]

    @Test(
        "serve --otlp-endpoint on two nodes: the delivery on the receiver's node is a child of the commit on the sender's, in one trace",
        .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
    )
    func tracesAcrossNodes() async throws {
        try await withTemporaryDirectory(prefix: "courier-traces") { folder in
            try await TestDatabase.with { location in
                try await Self.withCollector(folder) { url, received in
                    let database = TestDatabase.url(of: location)
                    for name in ["alice", "bob"] {
                        let added = try await CourierExecutable.run(
                            ["user", "add", name, "--password", "pw-" + name, "--database", database]
                        )
                        #expect(added.status == 0, "\(added)")
                    }
                    var nodes: [(server: ServerProcess, native: Int)] = []
                    for index in 0..<2 {
                        let ports = (try await FreePort.pick(), try await FreePort.pick(), try await FreePort.pick())
                        let server = try await ServerProcess.start(
                            executable: CourierExecutable.url,
                            arguments: [
                                "serve", "--database", database, "--node", "节点-\(index)",
                                "--data", folder.appendingPathComponent("data-\(index)").path,
                                "--port", String(ports.0), "--compat-port", String(ports.1), "--http-port",
                                String(ports.2), "--otlp-endpoint", url,
                            ],
                            environment: Self.tracing,
                            readyPort: ports.0,
                            log: folder.appendingPathComponent("node-\(index).log")
                        )
                        nodes.append((server, ports.0))
                    }
                    let (bob, _) = try await NativeTestClient.login(port: nodes[1].native, "bob")
                    let (alice, _) = try await NativeTestClient.login(port: nodes[0].native, "alice")
                    _ = try await alice.sendText("跨节点 🛰 عبر", to: .user("bob"), id: "across-1")
                    #expect(try await bob.messages(1).map(\.id) == ["across-1"])
                    try await waitUntil("the send, its commit, and bob's delivery on the other node are collected") {
                        let names = Set(try Self.collectedSpans(in: received).map(\.name))
                        return names.isSuperset(of: ["courier.send", "courier.commit", "courier.deliver"])
                    }
                    let spans = try Self.collectedSpans(in: received)
                    let send = try #require(spans.first { $0.name == "courier.send" })
                    let commit = try #require(spans.first { $0.name == "courier.commit" })
                    let deliver = try #require(spans.first { $0.name == "courier.deliver" })
                    #expect(send.attributes["courier.node"] == "节点-0" && deliver.attributes["courier.node"] == "节点-1")
                    #expect(commit.parentID == send.spanID && commit.traceID == send.traceID)
                    #expect(deliver.parentID == commit.spanID && deliver.traceID == send.traceID, "\(spans)")
                    #expect(deliver.attributes["courier.receiver"] == "bob")
                    await alice.close()
                    await bob.close()
                    for node in nodes { #expect(await node.server.terminate() == 0) }
                }
            }
        }
    }

    @Test(
        "serve --otlp-endpoint: a message's spans reach an OTLP collector: its send, the commit under it, and its delivery under that"
    )
    func traces() async throws {
        try await withTemporaryDirectory(prefix: "courier-traces") { folder in
            try await Self.withCollector(folder) { url, received in
                let data = folder.appendingPathComponent("data")
                try await CourierExecutable.addUsers(["alice", "bob"], data: data)
                let (server, native, _) = try await Self.serve(
                    folder,
                    data: data,
                    ["--otlp-endpoint", url],
                    environment: Self.tracing
                )
                let (bob, _) = try await NativeTestClient.login(port: native, "bob")
                let (alice, _) = try await NativeTestClient.login(port: native, "alice")
                _ = try await alice.sendText("追踪这条 🔍", to: .user("bob"), id: "traced-1")
                #expect(try await bob.messages(1).map(\.id) == ["traced-1"])
                try await waitUntil("the message's three spans are collected") {
                    let names = Set(try Self.collectedSpans(in: received).map(\.name))
                    return names.isSuperset(of: ["courier.send", "courier.commit", "courier.deliver"])
                }
                let spans = try Self.collectedSpans(in: received)
                let send = try #require(spans.first { $0.name == "courier.send" })
                let commit = try #require(spans.first { $0.name == "courier.commit" })
                let deliveries = spans.filter { $0.name == "courier.deliver" }
                #expect(send.attributes["courier.message.id"] == "traced-1", "\(send.attributes)")
                #expect(send.attributes["courier.sender"] == "alice")
                #expect(send.parentID.isEmpty, "a send starts its trace")
                #expect(commit.traceID == send.traceID && commit.parentID == send.spanID)
                // bob's connection got it; alice's own connection skips its own send.
                #expect(deliveries.map { $0.attributes["courier.receiver"] } == ["bob"], "\(deliveries)")
                #expect(deliveries.allSatisfy { $0.traceID == send.traceID && $0.parentID == commit.spanID })
                await alice.close()
                await bob.close()
                #expect(await server.terminate() == 0)
            }
        }
    }
}

extension CommandLineTests {
    @Test(
        "serve --otlp-endpoint refuses the OTEL_* settings swift-otel would trap on, and a URL with a query; --print-config hides a password in it"
    )
    func tracingSettings() async throws {
        let refused: [(variable: String, value: String)] = [
            ("OTEL_PROPAGATORS", "tracecontext,baggage"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"), ("OTEL_TRACES_SAMPLER", "xray"),
            ("OTEL_TRACES_EXPORTER", "zipkin"),
        ]
        for (variable, value) in refused {
            let result = try await CourierExecutable.run(
                ["serve", "--print-config", "--otlp-endpoint", "http://127.0.0.1:4318"],
                environment: [variable: value]
            )
            #expect(result.status != 0 && result.output.contains("\(variable)="), "\(variable): \(result.output)")
        }
        let taken = try await CourierExecutable.run(
            ["serve", "--print-config", "--otlp-endpoint", "https://courier:s3cret@collector.example:4318"],
            environment: ["OTEL_PROPAGATORS": "tracecontext", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio"]
        )
        #expect(taken.status == 0, "\(taken.output)")
        #expect(!taken.output.contains("s3cret") && taken.output.contains("otlp-endpoint = \"https://courier:hidden@"))
        let query = try await CourierExecutable.run(
            ["serve", "--print-config", "--otlp-endpoint", "http://127.0.0.1:4318?x=1"]
        )
        #expect(query.status != 0 && query.output.contains("no query"), "\(query.output)")
    }
}
