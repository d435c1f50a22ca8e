import CourierProtocol
import CourierStore
import CourierStorePostgres
import CourierStoreSQLite
import CourierTesting
import Foundation
import Testing

@Suite("Search, on both databases: every script, membership, edits, recalls, pages, and the index built afterwards")
struct SearchTests {
    static let now = StoreFixture.start

    /// A text body, as a client sends it.
    static func body(_ text: String) -> [UInt8] {
        var body = Courier_V1_Body()
        body.text = text
        return (try? body.serializedBytes()) ?? []
    }

    static func send(
        _ fixture: StoreFixture,
        _ sender: UserID,
        _ id: String,
        to: Conversation,
        _ text: String,
        at time: Int64 = now
    ) async throws {
        let outcome = try await fixture.store.apply(
            [.send(.init(sender: sender, id: id, to: to, body: Self.body(text)))],
            nowMs: time
        ).outcomes[0]
        guard case .sent = outcome else { throw FixtureError(message: "\(id): \(outcome)") }
    }

    /// The ids a search finds, newest first, every page followed.
    static func ids(
        _ fixture: StoreFixture,
        _ user: UserID,
        _ query: String,
        in conversation: Conversation? = nil,
        limit: Int = 5
    ) async throws -> [String] {
        var ids: [String] = []
        var cursor: UInt64 = 0
        for _ in 0..<100 {
            let page = try await fixture.store.search(
                for: user,
                query: query,
                in: conversation,
                before: cursor,
                limit: limit
            )
            ids += page.hits.map(\.message.id)
            guard page.more else { return ids }
            cursor = page.next
        }
        Issue.record("more than 100 pages for \(query)")
        return ids
    }

    @Test(
        "Chinese and Japanese queries of one, two and three or more characters, accents, case, mixed scripts, emoji",
        arguments: StoreKind.allCases
    )
    func everyScript(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            let texts: [(String, String)] = [
                ("zh1", "我家在上海东边"),
                ("zh2", "上海的天气很好"),
                ("zh3", "海东是青海的一个地方"),
                ("zh4", "上 海 分开写"),
                ("ja1", "東京タワーに行きました"),
                ("ja2", "カタカナとひらがな、がぎぐ"),
                ("ja3", "ｶﾀｶﾅ (half-width)"),
                ("fr", "Un café à Paris, très CRÈME"),
                ("de", "Die Straße ist groß"),
                ("mix", "Meeting 明天 at 10am 在会议室B"),
                ("emoji", "生日快乐 🎂 happy birthday 👨‍👩‍👧"),
                ("ar", "مرحبا بالعالم"),
                ("ko", "안녕하세요 세계"),
            ]
            for (index, (id, text)) in texts.enumerated() {
                let (sender, peer) = index % 2 == 0 ? (alice, "bob") : (bob, "alice")
                try await Self.send(fixture, sender, id, to: .user(peer), text)
            }
            // Each query and what it finds, newest first; bob and alice see the same conversation.
            let expected: [(String, [String])] = [
                ("上海", ["zh2", "zh1"]),  // two characters: a bigram, not "上 海" apart
                ("上", ["zh4", "zh2", "zh1"]),  // one character
                ("海", ["zh4", "zh3", "zh2", "zh1"]),
                ("上海东", ["zh1"]),  // three: both bigrams, and the run whole (zh3 has 海东, no 上海)
                ("海东", ["zh3", "zh1"]),
                ("东京", []),  // 東京 is not 东京: no mapping between simplified and traditional
                ("東京", ["ja1"]),
                ("タワー", ["ja1"]),
                ("カタカナ", ["ja3", "ja2"]),  // half-width katakana folds to full width
                ("が", ["ja2"]),  // kana keep their voicing marks
                ("か", []),
                ("cafe", ["fr"]),  // accents folded
                ("CAFÉ", ["fr"]),
                ("creme paris", ["fr"]),  // every word, any order
                ("strasse", ["de"]),  // ß is ss
                ("GROSS", ["de"]),
                ("明天 meeting", ["mix"]),  // mixed scripts
                ("会议室", ["mix"]),
                ("10am", ["mix"]),
                ("🎂", ["emoji"]),
                ("👨‍👩‍👧", ["emoji"]),
                ("生日 birthday", ["emoji"]),
                ("بالعالم", ["ar"]),
                ("세계", ["ko"]),
                ("nothing here", []),
                ("  ,.!  ", []),  // asks for nothing
            ]
            for (query, found) in expected {
                #expect(try await Self.ids(fixture, bob, query) == found, "\(kind) \(query)")
                #expect(try await Self.ids(fixture, alice, query, in: .user("bob")) == found, "\(kind) \(query)")
            }
            // The fragment and its marks, in Unicode scalars of the fragment.
            let page = try await fixture.store.search(for: bob, query: "上海东", in: nil, before: 0, limit: 5)
            let hit = try #require(page.hits.first)
            #expect(hit.fragment.text == "我家在上海东边" && hit.fragment.marks == [3..<6])
            #expect(hit.message.conversation == .user("alice") && hit.message.from == "alice")
        }
    }

    @Test(
        "only conversations the user is in, only what came after it joined; edits re-index, recalls remove",
        arguments: StoreKind.allCases
    )
    func whatAUserMayFind(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob", "carol")
            let (alice, bob, carol) = (ids["alice"]!, ids["bob"]!, ids["carol"]!)
            try await fixture.store.createGroup(
                name: "team",
                owner: "alice",
                members: ["bob"],
                byOwner: false,
                nowMs: Self.now
            )
            try await Self.send(fixture, alice, "t1", to: .group("team"), "项目计划 draft")
            try await Self.send(fixture, alice, "d1", to: .user("bob"), "项目 secret")
            try await fixture.store.changeMembers(of: "team", actor: nil, add: ["carol"], remove: [], nowMs: Self.now)
            try await Self.send(fixture, bob, "t2", to: .group("team"), "项目进度 update")
            #expect(try await Self.ids(fixture, bob, "项目") == ["t2", "d1", "t1"])
            // Carol sees only what came after she joined, and nothing of alice and bob's direct conversation.
            #expect(try await Self.ids(fixture, carol, "项目") == ["t2"])
            #expect(try await Self.ids(fixture, carol, "项目", in: .group("team")) == ["t2"])
            await #expect {
                try await fixture.store.search(for: carol, query: "项目", in: .group("nope"), before: 0, limit: 5)
            } throws: {
                ($0 as? CourierStoreError)?.code == .unknownGroup
            }

            // An edit re-indexes: the old words are gone, the new found.
            let edit = try await fixture.store.apply(
                [.edit(.init(user: bob, conversation: .group("team"), seq: 2, body: Self.body("进展 update v2")))],
                nowMs: Self.now
            )
            #expect(refusal(edit.outcomes[0]) == nil)
            #expect(try await Self.ids(fixture, carol, "项目") == [])
            #expect(try await Self.ids(fixture, carol, "进展") == ["t2"])
            // A recall takes it out.
            _ = try await fixture.store.apply(
                [.recall(user: alice, conversation: .user("bob"), id: "d1")],
                nowMs: Self.now
            )
            #expect(try await Self.ids(fixture, bob, "项目") == ["t1"])
            // Carol leaves: she finds nothing of the group.
            try await fixture.store.changeMembers(of: "team", actor: nil, add: [], remove: ["carol"], nowMs: Self.now)
            #expect(try await Self.ids(fixture, carol, "进展") == [])
        }
    }

    @Test(
        "pages: newest first, each match once, a bounded scan says where to go on, and the same in one batch as in many",
        arguments: StoreKind.allCases
    )
    func pages(kind: StoreKind) async throws {
        var limits = StoreLimits()
        limits.maxSearchScan = 8
        try await StoreFixture.with(kind, limits: limits) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            // 40 messages: every third matches 上海东 whole; the others hold 上海 and 海东 apart (candidates that
            // fail the exact check).
            var requests: [WriteRequest] = []
            var expected: [String] = []
            for index in 0..<40 {
                let text = index % 3 == 0 ? "第\(index)条: 上海东站" : "第\(index)条: 上海, 海东"
                if index % 3 == 0 { expected.insert("m\(index)", at: 0) }
                requests.append(.send(.init(sender: alice, id: "m\(index)", to: .user("bob"), body: Self.body(text))))
            }
            // Half in one batch, half one by one: the order is the order sent either way.
            _ = try await fixture.store.apply(Array(requests.prefix(20)), nowMs: Self.now)
            for request in requests.dropFirst(20) { _ = try await fixture.store.apply([request], nowMs: Self.now) }
            #expect(try await Self.ids(fixture, bob, "上海东", limit: 3) == expected)
            // A scan of 8 candidates (m39 down to m32) finds 3 of the 5 asked, and says there is more.
            let first = try await fixture.store.search(for: bob, query: "上海东", in: nil, before: 0, limit: 5)
            #expect(first.more && first.hits.map(\.message.id) == ["m39", "m36", "m33"])
            #expect(try await Self.ids(fixture, bob, "海东", limit: 7).count == 40)
        }
    }

    @Test(
        "messages stored before the index: numbered in the order sent, indexed in batches while new ones arrive",
        arguments: StoreKind.allCases
    )
    func indexBuiltAfterwards(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            for index in 0..<10 {
                let (sender, peer) = index % 2 == 0 ? (alice, "bob") : (bob, "alice")
                try await Self.send(fixture, sender, "old\(index)", to: .user(peer), "旧消息 \(index)")
            }
            try await Self.send(fixture, alice, "gone", to: .user("bob"), "旧消息 recalled")
            _ = try await fixture.store.apply(
                [.recall(user: alice, conversation: .user("bob"), id: "gone")],
                nowMs: Self.now
            )
            // As the migration leaves a database that had messages before the index.
            switch fixture.store {
            case let store as SQLiteStore: try await store.resetSearchIndex()
            case let store as PostgresStore: try await store.resetSearchIndex()
            default: Issue.record("a store of another kind")
            }
            #expect(try await Self.ids(fixture, bob, "旧消息") == [])
            // New messages meanwhile are indexed at once, and come first.
            try await Self.send(fixture, bob, "new", to: .user("alice"), "新旧消息")
            #expect(try await Self.ids(fixture, bob, "消息") == ["new"])
            var batches = 0
            while try await fixture.store.indexPending(limit: 3) > 0 { batches += 1 }
            #expect(batches == 4)
            #expect(try await fixture.store.indexPending(limit: 3) == 0)
            #expect(
                try await Self.ids(fixture, bob, "消息", limit: 20) == ["new"] + (0..<10).reversed().map { "old\($0)" }
            )
        }
    }

    @Test(
        "hostile queries: a prepended letter taking a space into its grapheme, FTS syntax, a huge query; both databases alike",
        arguments: StoreKind.allCases
    )
    func hostileQueries(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            try await Self.send(fixture, alice, "m1", to: .user("bob"), "\u{0D4E} x and NEAR(a b) \"quoted\" * ^ : -")
            for query in ["\u{0D4E} x", "NEAR(a b)", "\"quoted\"", "x OR y", "a*", "^x", "col:x", "\"", "'", "-x"] {
                // Never a database error: at worst nothing found.
                _ = try await Self.ids(fixture, bob, query)
            }
            #expect(try await Self.ids(fixture, bob, "quoted") == ["m1"])
            #expect(try await Self.ids(fixture, bob, "x") == ["m1"])
            await #expect {
                try await fixture.store.search(
                    for: bob,
                    query: "a" + String(repeating: "\u{0301}", count: 100_000),
                    in: nil,
                    before: 0,
                    limit: 5
                )
            } throws: {
                ($0 as? CourierStoreError)?.code == .invalidRequest
            }
        }
    }

    @Test(
        "a long text is searched in its first 4,096 characters only, on both databases",
        arguments: StoreKind.allCases
    )
    func longText(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            // 开头 at the start, then 4,100 characters, then 结尾 past the limit.
            let text = "开头 " + String(repeating: "字", count: 4_100) + " 结尾"
            try await Self.send(fixture, ids["alice"]!, "long", to: .user("bob"), text)
            #expect(try await Self.ids(fixture, ids["bob"]!, "开头") == ["long"])
            #expect(try await Self.ids(fixture, ids["bob"]!, "结尾") == [])
        }
    }
    @Test(
        "a match older than a conversation's newest thousand messages is found, and pages go on past them; both alike",
        arguments: StoreKind.allCases
    )
    func pastTheWindow(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            try await Self.send(fixture, alice, "old", to: .user("bob"), "我家在上海东边")
            // 1,050 more (PostgreSQL checks a conversation's newest 1,000 one by one before it turns to its index),
            // one of them in the middle a match too.
            for batch in stride(from: 0, to: 1_050, by: 50) {
                let sends = (batch..<batch + 50).map { index in
                    WriteRequest.send(
                        .init(
                            sender: index % 2 == 0 ? alice : bob,
                            id: index == 500 ? "mid" : "f\(index)",
                            to: index % 2 == 0 ? .user("bob") : .user("alice"),
                            body: Self.body(index == 500 ? "上海东边的火车站" : "火车站 \(index)")
                        )
                    )
                }
                _ = try await fixture.store.apply(sends, nowMs: Self.now)
            }
            // Three tokens (上海, 海东, 东边): one match among the newest thousand, the other before them.
            #expect(try await Self.ids(fixture, bob, "上海东边") == ["mid", "old"])
            #expect(try await Self.ids(fixture, alice, "上海东边", limit: 1) == ["mid", "old"])
            // Every one of the 1,050 found once, newest first, across pages of 50.
            let all = try await Self.ids(fixture, bob, "火车站", limit: 50)
            #expect(all.count == 1_050 && Set(all).count == 1_050)
            #expect(all.first == "f1049" && all.last == "f0")
        }
    }

    @Test(
        "a word is found by its beginning in any script that spaces its words; a file by its name; both alike",
        arguments: StoreKind.allCases
    )
    func beginningsAndFileNames(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            try await Self.send(fixture, alice, "en", to: .user("bob"), "See you TOMORROW at the Café 👋")
            try await Self.send(fixture, alice, "ru", to: .user("bob"), "Привет, увидимся завтра")
            try await Self.send(fixture, alice, "zh", to: .user("bob"), "明天见")
            try await fixture.store.recordUpload(
                user: alice,
                sha256: String(repeating: "ab", count: 32),
                size: 3,
                quota: 1 << 20,
                nowMs: Self.now
            )
            var media = Courier_V1_Body()
            media.media = .with {
                $0.kind = .file
                $0.sha256 = String(repeating: "ab", count: 32)
                $0.size = 3
                $0.name = "Quarterly-Report_2026 季度报告.pdf"
                $0.caption = "the numbers"
            }
            let sent = try await fixture.store.apply(
                [
                    .send(
                        .init(
                            sender: alice,
                            id: "file",
                            to: .user("bob"),
                            body: try media.serializedBytes(),
                            media: MediaReference(
                                sha256: String(repeating: "ab", count: 32),
                                size: 3,
                                mime: "application/pdf",
                                name: "Quarterly-Report_2026 季度报告.pdf"
                            )
                        )
                    )
                ],
                nowMs: Self.now
            )
            #expect(refusal(sent.outcomes[0]) == nil)
            #expect(try await Self.ids(fixture, bob, "tomor") == ["en"])
            #expect(try await Self.ids(fixture, bob, "see tomorr caf") == ["en"])
            #expect(try await Self.ids(fixture, bob, "tomorrows") == [])
            #expect(try await Self.ids(fixture, bob, "morrow") == [], "a word's middle is not its beginning")
            #expect(try await Self.ids(fixture, bob, "при зав") == ["ru"])
            #expect(try await Self.ids(fixture, bob, "明天") == ["zh"])
            // A file by its name (a beginning of a word of it, a run of Chinese in it), and its caption still.
            #expect(try await Self.ids(fixture, bob, "quarter") == ["file"])
            #expect(try await Self.ids(fixture, bob, "report pdf") == ["file"])
            #expect(try await Self.ids(fixture, bob, "季度") == ["file"])
            #expect(try await Self.ids(fixture, bob, "numbers") == ["file"])
            let page = try await fixture.store.search(for: bob, query: "quar", in: nil, before: 0, limit: 5)
            #expect(page.hits.first?.fragment.text.contains("Quarterly") == true)
            // Rebuilt from scratch (as the migration that brought beginnings leaves it), the same is found.
            switch fixture.store {
            case let store as SQLiteStore: try await store.resetSearchIndex()
            case let store as PostgresStore: try await store.resetSearchIndex()
            default: Issue.record("a store of another kind")
            }
            #expect(try await Self.ids(fixture, bob, "tomor") == [])
            while try await fixture.store.indexPending(limit: 2) > 0 {}
            #expect(try await Self.ids(fixture, bob, "tomor") == ["en"])
            #expect(try await Self.ids(fixture, bob, "quarter") == ["file"])
        }
    }
}
