import CourierProtocol
import CourierStore
import CourierStorePostgres
import CourierStoreSQLite
import Foundation
import GRDB
import Logging
import PostgresNIO

/// `courier bench --pattern search`: the search index's cost and speed, on SQLite or on PostgreSQL.
///
/// The same messages (mixed Chinese and English, drawn from a seeded generator over a vocabulary of common words) are
/// loaded three times through the store's group commit, closed loop (each batch after the one before): without the
/// search index; with it written in each message's own transaction; and with it written beside the group commit
/// (``SearchIndexer``, as a server does), the load's time running until the last message is indexed: the index's cost
/// in throughput and in bytes per message. Then, on the indexed
/// store, searches of one and two Chinese characters, three or more, English words and mixed queries, each the first
/// page (20 hits) for a user in its own conversations, timed one after another; and the peer, in the same run: a
/// `LIKE '%…%'` scan of the same data for the same queries (fewer of them: each reads every message).
struct SearchBench {
    var messages: Int
    var users: Int
    var queries: Int
    var likeQueries: Int
    var database: String?
    var folder: URL
    var say: @Sendable (String) -> Void

    struct Load: Sendable {
        var seconds: Double
        var bytes: Int64
        var perSecond: Double
        /// With the index written beside the group commit: what its queue did.
        var indexer: SearchIndexer.Figures? = nil
    }

    /// How the load writes the index.
    enum Index {
        case none
        case inCommit
        case deferred

        var name: String {
            switch self {
            case .none: "without the index"
            case .inCommit: "index in the transaction"
            case .deferred: "index beside the commit"
            }
        }
    }

    struct Result: Sendable {
        var backend: String
        var messages: Int
        var withoutIndex: Load
        var inCommit: Load
        var withIndex: Load
        var search: [String: [Double]]
        var like: [String: [Double]]
        var hits: [String: Double]
    }

    /// Common words the texts are made of: two-character Chinese words (the commonest kind), single characters,
    /// longer phrases, English words and emoji.
    static let chinese = [
        "我们", "今天", "明天", "上海", "北京", "开会", "项目", "时间", "问题", "工作", "晚上", "周末", "电影", "吃饭",
        "天气", "朋友", "公司", "手机", "电脑", "下午", "会议", "计划", "文件", "消息", "地方", "学校", "老师", "同事",
        "的", "了", "在", "是", "有", "和", "不", "我", "你", "他", "好", "去", "来", "看", "说",
        "东边", "西边", "火车站", "飞机场", "图书馆", "咖啡馆",
    ]
    static let english = [
        "meeting", "tomorrow", "project", "deadline", "coffee", "lunch", "release", "review", "weekend", "train",
        "report", "budget", "design", "server", "search", "message", "photo", "video", "call", "team", "the", "a",
        "is", "at", "to", "and", "ok", "thanks", "please", "today",
    ]
    static let emoji = ["👍", "😂", "🎉", "❤️", "🙏"]

    /// Query kinds and examples of each, as users type them.
    static let kinds: [(String, [String])] = [
        ("zh 1 char", ["好", "去", "看", "说", "来"]),
        ("zh 2 chars", ["上海", "开会", "项目", "周末", "电影", "会议", "文件", "朋友"]),
        ("zh 3+ chars", ["火车站", "图书馆", "咖啡馆", "明天开会", "上海东边"]),
        ("english", ["meeting", "deadline", "coffee", "release", "budget review"]),
        ("mixed", ["项目 deadline", "明天 meeting", "上海 train", "周末 coffee"]),
    ]

    /// A seeded text of 6 to 20 pieces.
    static func text(_ random: inout SplitMix) -> String {
        var text = ""
        for _ in 0..<(6 + Int(random.next() % 15)) {
            switch random.next() % 10 {
            case 0..<6: text += Self.chinese[Int(random.next() % UInt64(Self.chinese.count))]
            case 6..<9: text += " " + Self.english[Int(random.next() % UInt64(Self.english.count))] + " "
            default: text += Self.emoji[Int(random.next() % UInt64(Self.emoji.count))]
            }
        }
        return text
    }

    func run() async throws -> Result {
        var logger = Logger(label: "courier.bench")
        logger.logLevel = .warning
        if let database {
            let location = try PostgresLocation(url: database)
            var configuration = PostgresStore.Configuration()
            configuration.passwordHasher = BenchProvisioning.hasher
            configuration.maxConnections = 4
            configuration.node = "bench-search"
            // Without the index first, in a database of its own; then with it, in another.
            let without = try await self.postgres(location, name: "plain", index: .none, logger: logger)
            let inCommit = try await self.postgres(location, name: "incommit", index: .inCommit, logger: logger)
            let with = try await self.postgres(location, name: "index", index: .deferred, logger: logger)
            return Result(
                backend: "postgresql",
                messages: self.messages,
                withoutIndex: without.load,
                inCommit: inCommit.load,
                withIndex: with.load,
                search: with.search,
                like: with.like,
                hits: with.hits
            )
        }
        let without = try await self.sqlite(self.folder.appendingPathComponent("plain"), index: .none, logger: logger)
        let inCommit = try await self.sqlite(
            self.folder.appendingPathComponent("incommit"),
            index: .inCommit,
            logger: logger
        )
        let with = try await self.sqlite(
            self.folder.appendingPathComponent("indexed"),
            index: .deferred,
            logger: logger
        )
        return Result(
            backend: "sqlite",
            messages: self.messages,
            withoutIndex: without.load,
            inCommit: inCommit.load,
            withIndex: with.load,
            search: with.search,
            like: with.like,
            hits: with.hits
        )
    }

    typealias Measured = (load: Load, search: [String: [Double]], like: [String: [Double]], hits: [String: Double])

    private func sqlite(_ folder: URL, index: Index, logger: Logger) async throws -> Measured {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        var configuration = SQLiteStore.Configuration()
        configuration.passwordHasher = BenchProvisioning.hasher
        configuration.indexesForSearch = index != .none
        configuration.searchIndex.deferred = index == .deferred
        configuration.backgroundCheckpoints = true
        let store = try SQLiteStore(folder: folder, configuration: configuration, logger: logger)
        defer { try? store.close() }
        // The write-ahead log copied back apart from the writes, every 100 ms, as a server does.
        let checkpoints = Task {
            while (try? await Task.sleep(for: configuration.checkpointInterval)) != nil { try? await store.maintain() }
        }
        let (users, seconds) = try await self.load(store, index: index)
        checkpoints.cancel()
        let file = folder.appendingPathComponent(SQLiteStore.databaseFileName)
        try await store.maintain()
        let bytes = try self.sqliteBytes(file)
        var load = Load(seconds: seconds, bytes: bytes, perSecond: Double(self.messages) / seconds)
        if index == .deferred { load.indexer = store.searchIndexer.figures }
        self.say("sqlite \(index.name): \(Self.format(load))")
        guard index == .deferred else { return (load, [:], [:], [:]) }
        let like = try DatabaseQueue(path: file.path)
        let (search, hits) = try await self.searches(store, users: users)
        let scans = try await self.likes(users: users) { user, query in
            // The same rows a search may see: the user's conversations, after it joined, not recalled; the text is in
            // the body's bytes.
            try await like.read { db in
                try Int.fetchAll(
                    db,
                    sql: """
                        SELECT m.seq FROM messages m
                        JOIN members j ON j.conversation_id = m.conversation_id AND j.user_id = ?
                        WHERE m.seq > j.joined_seq AND m.recalled = 0 AND m.body LIKE ?
                        ORDER BY m.time_ms DESC LIMIT 20
                        """,
                    arguments: [user.rawValue, "%" + query + "%"]
                ).count
            }
        }
        try like.close()
        return (load, search, scans, hits)
    }

    /// The database file's bytes, with its write-ahead log copied back.
    private func sqliteBytes(_ file: URL) throws -> Int64 {
        let queue = try DatabaseQueue(path: file.path)
        try queue.writeWithoutTransaction { try $0.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
        try queue.close()
        let attributes = try FileManager.default.attributesOfItem(atPath: file.path)
        return (attributes[.size] as? NSNumber)?.int64Value ?? 0
    }

    private func postgres(
        _ location: PostgresLocation,
        name: String,
        index: Index,
        logger: Logger
    ) async throws -> Measured {
        // A database of the run's own beside the one given (dropped before and after): the bench's rows never mix
        // with anyone's. The user needs CREATEDB.
        let database = "\(location.database)_search_\(name)"
        let quoted = "\"" + database.replacingOccurrences(of: "\"", with: "\"\"") + "\""
        let admin = try await PostgresConnection.connect(
            configuration: location.connectionConfiguration,
            id: 1,
            logger: logger
        )
        try await admin.run(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(quoted)"), logger: logger)
        try await admin.run(PostgresQuery(unsafeSQL: "CREATE DATABASE \(quoted)"), logger: logger)
        var scoped = location
        scoped.database = database
        let connection = try await PostgresConnection.connect(
            configuration: scoped.connectionConfiguration,
            id: 2,
            logger: logger
        )
        var configuration = PostgresStore.Configuration()
        configuration.passwordHasher = BenchProvisioning.hasher
        configuration.maxConnections = 4
        configuration.node = "bench-search"
        configuration.indexesForSearch = index != .none
        configuration.searchIndex.deferred = index == .deferred
        let store = PostgresStore(location: scoped, configuration: configuration, logger: logger)
        try await store.migrate()
        let measured: Measured = try await store.withRunning {
            let (users, seconds) = try await self.load(store, index: index)
            try await connection.run("VACUUM ANALYZE", logger: logger)
            var bytes: Int64 = 0
            for try await size in try await connection.query(
                "SELECT pg_database_size(current_database())::bigint",
                logger: logger
            ).decode(Int64.self) {
                bytes = size
            }
            var load = Load(seconds: seconds, bytes: bytes, perSecond: Double(self.messages) / seconds)
            if index == .deferred { load.indexer = store.searchIndexer.figures }
            self.say("postgresql \(index.name): \(Self.format(load))")
            guard index == .deferred else { return (load, [:], [:], [:]) }
            let (search, hits) = try await self.searches(store, users: users)
            let scans = try await self.likes(users: users) { user, query in
                let rows = try await connection.query(
                    """
                    SELECT m.seq FROM messages m
                    JOIN members j ON j.conversation_id = m.conversation_id AND j.user_id = \(user.rawValue)
                    WHERE m.seq > j.joined_seq AND NOT m.recalled
                        AND position(convert_to(\(query), 'UTF8') in m.body) > 0
                    ORDER BY m.time_ms DESC LIMIT 20
                    """,
                    logger: logger
                )
                var count = 0
                for try await _ in rows { count += 1 }
                return count
            }
            return (load, search, scans, hits)
        }
        try? await connection.close()
        try await admin.run(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(quoted)"), logger: logger)
        try? await admin.close()
        return measured
    }

    /// Users in pairs and groups of 8, and the messages, in batches through the group commit, closed loop; with the
    /// index written beside the commit, until the last one is indexed.
    ///
    /// - Returns: The users, and the seconds the messages took.
    private func load(
        _ store: any CourierDatabase,
        index: Index
    ) async throws -> (users: [UserID], seconds: Double) {
        let indexed = index != .none
        var added: [UserID] = []
        for index in 0..<self.users {
            added.append(try await store.addUser(name: "s\(index)", password: "pw", nowMs: 1).id)
        }
        // Each user in two direct conversations (its neighbours) and one group of 8.
        for group in 0..<(self.users / 8) {
            let members = (1..<8).map { "s\(group * 8 + $0)" }
            try await store.createGroup(
                name: "g\(group)",
                owner: "s\(group * 8)",
                members: members,
                byOwner: false,
                nowMs: 1
            )
        }
        var random = SplitMix(seed: 0x5EA4C4)
        let batch = 2_000
        let users = added
        // A batch's requests: the senders' work, done while the batch before is written (as a server's sessions do
        // it on their event loops, beside the one writer), search tokens included when the index is written.
        func build(from first: Int) throws -> [WriteRequest] {
            var requests: [WriteRequest] = []
            for index in first..<min(first + batch, self.messages) {
                let sender = Int(random.next() % UInt64(self.users))
                // Users past the last whole group of 8 write in their direct conversations only.
                let to: Conversation =
                    switch random.next() % 3 {
                    case 0: .user("s\((sender + 1) % self.users)")
                    case 2 where sender / 8 < self.users / 8: .group("g\(sender / 8)")
                    default: .user("s\((sender + self.users - 1) % self.users)")
                    }
                var body = Courier_V1_Body()
                body.text = Self.text(&random)
                var send = WriteRequest.Send(
                    sender: users[sender],
                    id: "b\(index)",
                    to: to,
                    body: try body.serializedBytes()
                )
                if indexed { send.prepareSearch() }
                requests.append(.send(send))
            }
            return requests
        }
        let clock = ContinuousClock()
        let start = clock.now
        // The index's queue written as a server writes it, on a task beside the commits.
        let follower = index == .deferred ? Task { await store.followSearchIndex(logger: Logger(label: "bench")) } : nil
        var sent = 0
        var lastSaid = start
        var next = try build(from: 0)
        var building = Duration.zero
        while !next.isEmpty {
            let requests = next
            let nowMs = Int64(1_800_000_000_000 + sent)
            async let applying = store.apply(requests, nowMs: nowMs)
            let built = clock.now
            next = try build(from: sent + requests.count)
            building += clock.now - built
            for outcome in try await applying.outcomes {
                if case .refused(let error) = outcome { throw BenchError("a bench message was refused: \(error)") }
            }
            sent += requests.count
            if clock.now - lastSaid > .seconds(10) {
                lastSaid = clock.now
                self.say("loaded \(sent) of \(self.messages)")
            }
        }
        if let follower {
            store.searchIndexer.finish()
            await follower.value
        }
        let elapsed = clock.now - start
        self.say("building the requests took \(building) of \(elapsed)")
        return (users, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }

    /// Each query kind's first pages, timed one at a time (milliseconds), and the mean hits of a page.
    private func searches(
        _ store: any CourierDatabase,
        users: [UserID]
    ) async throws -> ([String: [Double]], [String: Double]) {
        var random = SplitMix(seed: 0x5EA4C5)
        var times: [String: [Double]] = [:]
        var hits: [String: Double] = [:]
        let clock = ContinuousClock()
        // A few warm-up searches: the first reads pages from the disk.
        for query in Self.kinds.flatMap(\.1) {
            _ = try await store.search(for: users[0], query: query, in: nil, before: 0, limit: 20)
        }
        for (kind, examples) in Self.kinds {
            var found = 0
            for _ in 0..<self.queries {
                let user = users[Int(random.next() % UInt64(users.count))]
                let query = examples[Int(random.next() % UInt64(examples.count))]
                let start = clock.now
                let page = try await store.search(for: user, query: query, in: nil, before: 0, limit: 20)
                let elapsed = clock.now - start
                times[kind, default: []].append(Self.milliseconds(elapsed))
                found += page.hits.count
            }
            hits[kind] = Double(found) / Double(max(1, self.queries))
            self.say("search \(kind): p50 \(String(format: "%.2f", Self.percentile(times[kind]!, 50))) ms")
        }
        return (times, hits)
    }

    /// The LIKE scan's times for each kind (milliseconds).
    private func likes(
        users: [UserID],
        _ scan: (UserID, String) async throws -> Int
    ) async throws -> [String: [Double]] {
        var random = SplitMix(seed: 0x5EA4C6)
        var times: [String: [Double]] = [:]
        let clock = ContinuousClock()
        for (kind, examples) in Self.kinds {
            for _ in 0..<self.likeQueries {
                let user = users[Int(random.next() % UInt64(users.count))]
                // A LIKE finds one substring: the query's first word.
                let query = String(examples[Int(random.next() % UInt64(examples.count))].split(separator: " ")[0])
                let start = clock.now
                _ = try await scan(user, query)
                times[kind, default: []].append(Self.milliseconds(clock.now - start))
            }
            self.say("LIKE \(kind): p50 \(String(format: "%.1f", Self.percentile(times[kind]!, 50))) ms")
        }
        return times
    }
}

/// A small seeded generator (SplitMix64): the same texts every run.
struct SplitMix {
    var state: UInt64

    init(seed: UInt64) { self.state = seed }

    mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
