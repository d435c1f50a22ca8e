import CourierPostgresTesting
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import Foundation
import Testing

@Suite(
    "The HTTP API for bots: tokens, the long poll with offsets, sends with Idempotency-Key, edits, reactions, recalls"
)
struct BotAPITests {
    /// An answer of the API: its status and JSON body.
    struct Answer: CustomStringConvertible {
        var status: Int
        var body: String
        var headers: [String: String]

        var json: [String: Any] {
            (try? JSONSerialization.jsonObject(with: Data(self.body.utf8))) as? [String: Any] ?? [:]
        }
        var code: String? { (self.json["error"] as? [String: Any])?["code"] as? String }
        var description: String { "\(self.status) \(self.body)" }
    }

    /// A request with curl: a method, a path with its query, a token, a JSON body, more headers.
    static func call(
        _ port: Int,
        _ method: String,
        _ path: String,
        token: String?,
        json: Any? = nil,
        raw: String? = nil,
        headers: [String] = []
    ) async throws -> Answer {
        let folder = try TemporaryDirectory(prefix: "courier-api")
        defer { folder.remove() }
        let headerFile = folder.url.appendingPathComponent("headers").path
        var arguments = [
            "--silent", "--show-error", "--max-time", "120", "--request", method, "--dump-header", headerFile,
            "--write-out", "\n%{http_code}",
        ]
        if let token { arguments += ["--header", "Authorization: Bearer \(token)"] }
        for header in headers { arguments += ["--header", header] }
        let encoded = try json.map { String(decoding: try JSONSerialization.data(withJSONObject: $0), as: UTF8.self) }
        if let body = raw ?? encoded {
            let typed = headers.contains { $0.lowercased().hasPrefix("content-type:") }
            arguments += (typed ? [] : ["--header", "Content-Type: application/json"]) + ["--data-binary", body]
        }
        let output = try await ExternalProgram.curl(arguments + ["http://127.0.0.1:\(port)\(path)"])
        let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
        var headers: [String: String] = [:]
        for line in (try? String(contentsOfFile: headerFile, encoding: .utf8))?.split(separator: "\r\n") ?? [] {
            let parts = line.split(separator: ":", maxSplits: 1)
            if parts.count == 2 {
                headers[parts[0].lowercased()] = parts[1].trimmingCharacters(in: .whitespaces)
            }
        }
        return Answer(
            status: Int(lines.last ?? "") ?? 0,
            body: lines.dropLast().joined(separator: "\n"),
            headers: headers
        )
    }

    /// The updates of an answer of `GET /api/v1/updates`.
    static func updates(_ answer: Answer) -> [[String: Any]] {
        answer.json["updates"] as? [[String: Any]] ?? []
    }

    static func message(_ update: [String: Any]) -> [String: Any] {
        update["message"] as? [String: Any] ?? [:]
    }

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    @Test("a bot's token: /me says who and that it is a bot; no token, a wrong one or a revoked one is 401 everywhere")
    func tokens() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            let token = try await fixture.store.addBot(name: "helper", owner: "alice", nowMs: Self.now())
            #expect(token.hasPrefix("ct_") && !token.contains(" "))
            let port = fixture.ports.http
            let me = try await Self.call(port, "GET", "/api/v1/me", token: token)
            #expect(me.status == 200, "\(me)")
            #expect(me.json["user"] as? String == "helper" && me.json["bot"] as? Bool == true)
            // A bot's profile says so, to every client.
            let profiles = try await fixture.store.profiles(of: ["helper", "alice"], for: nil)
            #expect(profiles.map(\.bot) == [true, false])
            let bots = try await fixture.store.bots(nowMs: Self.now())
            #expect(bots.map(\.name) == ["helper"] && bots[0].owner == "alice" && bots[0].tokens == 1)

            // A bot cannot own a bot; a name is a user name, taken once.
            await #expect(throws: CourierStoreError.self) {
                _ = try await fixture.store.addBot(name: "helper2", owner: "helper", nowMs: Self.now())
            }
            await #expect(throws: CourierStoreError.self) {
                _ = try await fixture.store.addBot(name: "ALICE", owner: "alice", nowMs: Self.now())
            }

            let paths: [(String, String)] = [
                ("GET", "/api/v1/me"), ("GET", "/api/v1/updates"), ("POST", "/api/v1/messages"),
                ("POST", "/api/v1/messages/edit"), ("POST", "/api/v1/messages/react"),
                ("POST", "/api/v1/messages/recall"), ("GET", "/api/v1/history?to=alice"),
            ]
            let revokedLater = token
            for (method, path) in paths {
                for wrong in [nil, "ct_wrong", "Bearer"] as [String?] {
                    let body = ["to": "alice", "text": "x"]
                    let answer = try await Self.call(port, method, path, token: wrong, json: body)
                    #expect(answer.status == 401, "\(method) \(path) with \(wrong ?? "no token"): \(answer)")
                    #expect(answer.headers["www-authenticate"] == "Bearer")
                }
            }
            // Any other path under /api/v1: 401 without a good token, a JSON 404 with one.
            let elsewhere = try await Self.call(port, "GET", "/api/v1/nothing/here", token: nil)
            #expect(elsewhere.status == 401 && elsewhere.code == "auth-failed", "\(elsewhere)")
            let notFound = try await Self.call(port, "DELETE", "/api/v1/nothing", token: token)
            #expect(notFound.status == 404 && notFound.code == "not-found", "\(notFound)")

            // A message not acknowledged yet survives the token's renewal: the new token goes on from the old one.
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            _ = try await alice.sendText("before the new token", to: .user("helper"), id: "t-1")
            await alice.close()
            // A new token ends the old one; revoking ends them all.
            let second = try #require(
                try await fixture.store.revokeBotTokens(of: "helper", replacing: true, nowMs: Self.now())
            )
            #expect(try await Self.call(port, "GET", "/api/v1/me", token: revokedLater).status == 401)
            #expect(try await Self.call(port, "GET", "/api/v1/me", token: second).status == 200)
            let kept = Self.updates(try await Self.call(port, "GET", "/api/v1/updates", token: second))
            #expect(kept.map { Self.message($0)["id"] as? String } == ["t-1"])
            try await fixture.store.revokeBotTokens(of: "helper", replacing: false, nowMs: Self.now())
            let revoked = try await Self.call(port, "GET", "/api/v1/me", token: second)
            #expect(revoked.status == 401 && revoked.code == "token-revoked", "\(revoked)")
        }
    }

    @Test(
        "the long poll: an update for each message from others, woken by a send; offset acknowledges for good; unacknowledged ones come again"
    )
    func longPoll() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            let token = try await fixture.store.addBot(name: "helper", owner: "alice", nowMs: Self.now())
            try await fixture.store.createGroup(
                name: "team",
                owner: "alice",
                members: ["bob", "helper"],
                byOwner: false,
                nowMs: Self.now()
            )
            let port = fixture.ports.http
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            _ = try await alice.sendText("你好, helper 🤖", to: .user("helper"), id: "a-1")
            let first = try await Self.call(port, "GET", "/api/v1/updates?timeout=0", token: token)
            #expect(first.status == 200, "\(first)")
            let listed = Self.updates(first)
            #expect(listed.count == 1)
            let update = try #require(listed.first)
            let message = Self.message(update)
            #expect(message["id"] as? String == "a-1" && message["text"] as? String == "你好, helper 🤖")
            #expect(message["from"] as? String == "alice" && message["to"] as? String == "helper")
            #expect(message["group"] == nil && (message["seq"] as? Int ?? 0) > 0)
            let updateID = try #require(update["update_id"] as? Int)

            // Not acknowledged: it comes again.
            let again = Self.updates(try await Self.call(port, "GET", "/api/v1/updates", token: token))
            #expect(again.map { $0["update_id"] as? Int } == [updateID])

            // A poll that waits is answered by the next message, from any conversation the bot is in.
            let waiting = "/api/v1/updates?offset=\(updateID + 1)&timeout=50"
            async let waited = Self.call(port, "GET", waiting, token: token)
            let device = try #require(try await fixture.store.devices(of: "helper").first)
            try await waitUntil("the poll acknowledged the first") {
                try await fixture.store.ackedCursor(of: device.id) >= UInt64(updateID)
            }
            _ = try await alice.sendText("@helper 开会了", to: .group("team"), id: "g-1")
            let woken = Self.updates(try await waited)
            #expect(woken.count == 1)
            #expect(Self.message(woken.first ?? [:])["group"] as? String == "team")
            #expect(Self.message(woken.first ?? [:])["to"] == nil)

            // The offset acknowledged the first for good: without an offset, only the group's message comes.
            let after = Self.updates(try await Self.call(port, "GET", "/api/v1/updates", token: token))
            #expect(after.map { Self.message($0)["id"] as? String } == ["g-1"])

            // The bot's own messages are no updates; an edit of another's is.
            let lastID = try #require(after.last?["update_id"] as? Int)
            let sent = try await Self.call(
                port,
                "POST",
                "/api/v1/messages",
                token: token,
                json: ["group": "team", "text": "收到"]
            )
            #expect(sent.status == 201, "\(sent)")
            let editing = try await alice.request { envelope in
                envelope.edit.message.id = "g-1"
                envelope.edit.message.conversation = .group("team")
                envelope.edit.text = "@helper 开会了！"
            }
            #expect(editing.error.code.isEmpty, "\(editing)")
            let edited = Self.updates(
                try await Self.call(port, "GET", "/api/v1/updates?offset=\(lastID + 1)&timeout=50", token: token)
            )
            #expect(edited.count == 1)
            let change = edited.first?["edited_message"] as? [String: Any] ?? [:]
            #expect(change["id"] as? String == "g-1" && change["text"] as? String == "@helper 开会了！")

            // A poll woken by what is no update (a reaction on the bot's message, a receipt) waits on, and is woken
            // again by the next message (not left to its timeout).
            let seen = (edited.first?["update_id"] as? Int ?? 0) + 1
            async let polledAgain = Self.call(port, "GET", "/api/v1/updates?offset=\(seen)&timeout=50", token: token)
            try await waitUntil("the second poll waits") {
                let metrics = try await Self.call(port, "GET", "/metrics", token: nil)
                return metrics.body.contains("courier_api_polls_waiting 1")
            }
            let reply = try await Self.call(
                port,
                "POST",
                "/api/v1/messages",
                token: token,
                json: ["to": "alice", "text": "react to me"]
            )
            let replySeq = try #require(reply.json["seq"] as? Int)
            let reacted = try await alice.request { envelope in
                envelope.react.message.conversation = .user("helper")
                envelope.react.message.seq = UInt64(replySeq)
                envelope.react.key = "👍"
            }
            #expect(reacted.error.code.isEmpty, "\(reacted)")
            _ = try await alice.sendText("the real one", to: .user("helper"), id: "r-1")
            let waitedAgain = Self.updates(try await polledAgain)
            #expect(waitedAgain.map { Self.message($0)["id"] as? String } == ["r-1"])

            // Bad parameters are refused, not guessed at.
            let bad = try await Self.call(port, "GET", "/api/v1/updates?offset=-1", token: token)
            #expect(bad.status == 400 && bad.code == "invalid-request", "\(bad)")
            await alice.close()
        }
    }

    @Test("sends: 201 with id and seq; a retry with the same Idempotency-Key returns the same message; errors are JSON")
    func sends() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            let token = try await fixture.store.addBot(name: "helper", owner: "alice", nowMs: Self.now())
            let port = fixture.ports.http
            let (alice, _) = try await NativeTestClient.login(fixture, "alice")
            let body: [String: Any] = ["to": "alice", "text": "مرحبا 👋 from a bot"]
            let first = try await Self.call(
                port,
                "POST",
                "/api/v1/messages",
                token: token,
                json: body,
                headers: ["Idempotency-Key: order-42"]
            )
            #expect(first.status == 201, "\(first)")
            #expect(first.json["id"] as? String == "order-42")
            let seq = try #require(first.json["seq"] as? Int)
            let retry = try await Self.call(
                port,
                "POST",
                "/api/v1/messages",
                token: token,
                json: body,
                headers: ["Idempotency-Key: order-42"]
            )
            #expect(retry.status == 200 && retry.json["seq"] as? Int == seq && retry.json["duplicate"] as? Bool == true)
            let received = try await alice.messages(1)
            #expect(received.map(\.body.text) == ["مرحبا 👋 from a bot"])

            // A reply, then an edit, a reaction and a recall of the bot's own, as history shows them.
            let reply = try await Self.call(
                port,
                "POST",
                "/api/v1/messages",
                token: token,
                json: ["to": "alice", "text": "second", "reply_to": seq]
            )
            #expect(reply.status == 201, "\(reply)")
            let replySeq = try #require(reply.json["seq"] as? Int)
            let edit = try await Self.call(
                port,
                "POST",
                "/api/v1/messages/edit",
                token: token,
                json: ["to": "alice", "seq": replySeq, "text": "second, edited"]
            )
            #expect(edit.status == 204, "\(edit)")
            let react = try await Self.call(
                port,
                "POST",
                "/api/v1/messages/react",
                token: token,
                json: ["to": "alice", "id": "order-42", "reaction": "👍"]
            )
            #expect(react.status == 204, "\(react)")
            let recall = try await Self.call(
                port,
                "POST",
                "/api/v1/messages/recall",
                token: token,
                json: ["to": "alice", "id": "order-42"]
            )
            #expect(recall.status == 204, "\(recall)")
            let history = try await Self.call(port, "GET", "/api/v1/history?to=alice", token: token)
            #expect(history.status == 200, "\(history)")
            let messages = history.json["messages"] as? [[String: Any]] ?? []
            #expect(messages.count == 2)
            let newest = messages.first { $0["seq"] as? Int == replySeq } ?? [:]
            let oldest = messages.first { $0["seq"] as? Int == seq } ?? [:]
            #expect(newest["text"] as? String == "second, edited" && newest["edited_ms"] != nil)
            #expect((newest["reply_to"] as? [String: Any])?["seq"] as? Int == seq)
            #expect(oldest["recalled"] as? Bool == true && oldest["text"] == nil)

            // Refusals: the protocol's code with the matching status.
            let cases: [(Any?, String?, Int, String)] = [
                (["to": "nobody", "text": "x"], nil, 404, "unknown-user"),
                (["group": "nowhere", "text": "x"], nil, 404, "unknown-group"),
                (["to": "alice", "group": "team", "text": "x"], nil, 400, "invalid-request"),
                (["to": "alice", "text": ""], nil, 400, "empty-message"),
                (nil, "{not json", 400, "invalid-request"),
                (["to": "alice", "text": String(repeating: "长", count: 30_000)], nil, 400, "text-too-large"),
            ]
            for (json, raw, status, code) in cases {
                let answer = try await Self.call(port, "POST", "/api/v1/messages", token: token, json: json, raw: raw)
                #expect(answer.status == status && answer.code == code, "\(answer)")
            }
            let notMine = try await Self.call(
                port,
                "POST",
                "/api/v1/messages/edit",
                token: token,
                json: ["to": "alice", "id": "nope", "text": "x"]
            )
            #expect(notMine.status == 404 && notMine.code == "unknown-message", "\(notMine)")
            await alice.close()
        }
    }

    @Test("media: uploaded as it streams (size and quota checked first), sent by digest, downloaded by the recipient")
    func media() async throws {
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                let token = try await fixture.store.addBot(name: "helper", owner: "alice", nowMs: Self.now())
                let port = fixture.ports.http
                let folder = try TemporaryDirectory(prefix: "courier-api-media")
                defer { folder.remove() }
                let bytes = SeededRandom.bytes(300_000, seededFor: "BotAPITests.media")
                let file = folder.url.appendingPathComponent("report.bin")
                try Data(bytes).write(to: file)
                let uploaded = try await Self.call(
                    port,
                    "POST",
                    "/api/v1/media?name=%E6%8A%A5%E5%91%8A.pdf",
                    token: token,
                    raw: "@" + file.path,
                    headers: ["Content-Type: application/pdf"]
                )
                #expect(uploaded.status == 201, "\(uploaded)")
                let sha256 = try #require(uploaded.json["sha256"] as? String)
                #expect(uploaded.json["size"] as? Int == bytes.count && uploaded.json["name"] as? String == "报告.pdf")
                let sent = try await Self.call(
                    port,
                    "POST",
                    "/api/v1/messages",
                    token: token,
                    json: [
                        "to": "alice", "text": "这是报告",
                        "media": [
                            "sha256": sha256, "size": bytes.count, "mime": "application/pdf", "name": "报告.pdf",
                            "kind": "file",
                        ] as [String: Any],
                    ]
                )
                #expect(sent.status == 201, "\(sent)")
                let (alice, welcome) = try await NativeTestClient.login(fixture, "alice")
                let history = try await Self.call(port, "GET", "/api/v1/history?to=helper", token: welcome.token)
                let media = (history.json["messages"] as? [[String: Any]])?.first?["media"] as? [String: Any]
                #expect(media?["sha256"] as? String == sha256 && media?["caption"] as? String == "这是报告")
                let copy = folder.url.appendingPathComponent("copy")
                _ = try await ExternalProgram.curl([
                    "--silent", "--fail", "--header", "Authorization: Bearer \(welcome.token)", "--output", copy.path,
                    "http://127.0.0.1:\(port)/api/v1/media/\(sha256)",
                ])
                #expect(try Data(contentsOf: copy) == Data(bytes))

                // Over the quota: refused before a byte is stored; media not uploaded cannot be sent.
                let large = folder.url.appendingPathComponent("large.bin")
                try Data(count: 2_000_000).write(to: large)
                let refused = try await Self.call(
                    port,
                    "POST",
                    "/api/v1/media",
                    token: token,
                    raw: "@" + large.path,
                    headers: ["Content-Type: application/octet-stream"]
                )
                #expect(refused.status == 413 && refused.code == "quota-exceeded", "\(refused)")
                let unknown = try await Self.call(
                    port,
                    "POST",
                    "/api/v1/messages",
                    token: token,
                    json: [
                        "to": "alice",
                        "media": ["sha256": String(repeating: "ab", count: 32), "size": 10, "kind": "file"],
                    ]
                )
                #expect(unknown.status == 404 && unknown.code == "unknown-media", "\(unknown)")
                await alice.close()
            },
            configure: { $0.media.quotaBytesPerUser = 1_000_000 }
        )
    }

    @Test(
        "two nodes on PostgreSQL: a poll on one node is woken by a message committed on the other; the bot's send reaches a user on the first",
        .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
    )
    func acrossNodes() async throws {
        try await ClusterFixture.with(nodes: 2) { cluster in
            try await cluster.user("alice")
            let token = try await cluster.store.addBot(name: "helper", owner: "alice", nowMs: Self.now())
            let ports = cluster.nodes.map(\.ports)
            let (alice, _) = try await NativeTestClient.login(port: ports[0].native, "alice")
            // The poll waits on node 1; alice writes through node 0.
            async let waited = Self.call(ports[1].http, "GET", "/api/v1/updates?timeout=50", token: token)
            try await waitUntil("the poll is waiting on node 1") {
                let metrics = try await Self.call(ports[1].http, "GET", "/metrics", token: nil)
                return metrics.body.contains("courier_api_polls_waiting 1")
            }
            _ = try await alice.sendText("跨节点 hello", to: .user("helper"), id: "x-1")
            let updates = Self.updates(try await waited)
            #expect(updates.map { Self.message($0)["id"] as? String } == ["x-1"])
            let updateID = try #require(updates.first?["update_id"] as? Int)
            // Acknowledged on node 0: node 1 does not send it again.
            let none = try await Self.call(ports[0].http, "GET", "/api/v1/updates?offset=\(updateID + 1)", token: token)
            #expect(Self.updates(none).isEmpty, "\(none)")
            #expect(Self.updates(try await Self.call(ports[1].http, "GET", "/api/v1/updates", token: token)).isEmpty)

            // The bot answers through node 1; alice, on node 0, gets it once, even when the request is retried.
            for _ in 0..<2 {
                let sent = try await Self.call(
                    ports[1].http,
                    "POST",
                    "/api/v1/messages",
                    token: token,
                    json: ["to": "alice", "text": "收到 ✅"],
                    headers: ["Idempotency-Key: reply-x-1"]
                )
                #expect([200, 201].contains(sent.status), "\(sent)")
            }
            let received = try await alice.messages(1)
            #expect(received.map(\.body.text) == ["收到 ✅"])
            let history = try await cluster.store.history(
                for: try #require(try await cluster.store.user(named: "alice")).id,
                in: .user("helper"),
                beforeSeq: 0,
                limit: 10
            )
            #expect(history.messages.map(\.id) == ["reply-x-1", "x-1"])
            await alice.close()
        }
    }
}
