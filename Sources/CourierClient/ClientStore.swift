import CourierProtocol
import Foundation
import GRDB

/// The client's local database: the outbox of messages not yet acknowledged, the messages received, and the
/// session state (token, event cursor). One SQLite file in WAL mode with `synchronous=FULL`, so that what the client
/// acknowledges to the server is on its disk first.
///
/// Several processes of one app may share the file (a chat window and a command sending beside it): SQLite
/// serializes their writes, each waiting up to `busyTimeout` for the others' (never failing at once with "database is
/// locked"). Every outbox row names the instance that sends it (``InstanceLock``); the others leave it alone until
/// that instance is gone. All work runs on GRDB's own threads: the async calls never block a task.
final class ClientStore: Sendable {
    struct OutboxEntry: Sendable, Hashable {
        var id: String
        var conversation: Conversation
        var text: String
        var media: MediaInfo? = nil
        /// The message it answers.
        var replyTo: ReplyTarget? = nil
    }

    /// An outbox row: its place in the order written, and the message.
    struct OutboxRow: Sendable, Hashable {
        var position: Int64
        var entry: OutboxEntry
    }

    let pool: DatabasePool

    init(path: String, busyTimeout: Duration) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(
            Double(busyTimeout.components.seconds) + Double(busyTimeout.components.attoseconds) / 1e18
        )
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        self.pool = try DatabasePool(path: path, configuration: configuration)
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                    -- Messages this device wrote and the server has not acknowledged, in the order written.
                    CREATE TABLE outbox (
                        position INTEGER PRIMARY KEY AUTOINCREMENT,
                        id TEXT NOT NULL UNIQUE,
                        kind TEXT NOT NULL,
                        peer TEXT NOT NULL,
                        text TEXT NOT NULL,
                        created REAL NOT NULL
                    );
                    CREATE TABLE messages (
                        conversation TEXT NOT NULL,
                        seq INTEGER NOT NULL,
                        id TEXT NOT NULL,
                        sender TEXT NOT NULL,
                        kind TEXT NOT NULL,
                        peer TEXT NOT NULL,
                        time REAL NOT NULL,
                        text TEXT NOT NULL,
                        recalled INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY (conversation, seq)
                    ) WITHOUT ROWID;
                    """
            )
        }
        migrator.registerMigration("v2-media") { db in
            // The media a message carries, as a serialized courier.v1.Media.
            try db.execute(
                sql: """
                    ALTER TABLE outbox ADD COLUMN media BLOB;
                    ALTER TABLE messages ADD COLUMN media BLOB;
                    """
            )
        }
        migrator.registerMigration("v3-instances") { db in
            // The instance (InstanceLock.id) that sends a row; NULL (rows written before): whoever connects next.
            try db.execute(
                sql: """
                    ALTER TABLE outbox ADD COLUMN instance TEXT;
                    CREATE INDEX outbox_by_instance ON outbox (instance, position);
                    """
            )
        }
        migrator.registerMigration("v4-edits") { db in
            // When the message was last edited (seconds since 1970), and what it answers (a serialized
            // courier.v1.Reply); what an outbox message answers, by seq, or by id (and sender).
            try db.execute(
                sql: """
                    ALTER TABLE messages ADD COLUMN edited REAL;
                    ALTER TABLE messages ADD COLUMN reply BLOB;
                    ALTER TABLE outbox ADD COLUMN reply_seq INTEGER;
                    ALTER TABLE outbox ADD COLUMN reply_id TEXT;
                    ALTER TABLE outbox ADD COLUMN reply_from TEXT;
                    """
            )
        }
        migrator.registerMigration("v5-reactions") { db in
            // A message's reactions as the server last said them (a page of history, or the reaction events since),
            // as JSON; and the seq of what it answers, to find the quotes an edit of the original changes.
            try db.execute(
                sql: """
                    ALTER TABLE messages ADD COLUMN reactions TEXT;
                    ALTER TABLE messages ADD COLUMN reply_seq INTEGER;
                    CREATE INDEX messages_by_reply ON messages (conversation, reply_seq) WHERE reply_seq IS NOT NULL;
                    """
            )
            let replies = try Row.fetchAll(
                db,
                sql: "SELECT conversation, seq, reply FROM messages WHERE reply IS NOT NULL"
            )
            for row in replies {
                guard let reply = try? Courier_V1_Reply(serializedBytes: row["reply"] as Data), reply.seq > 0 else {
                    continue
                }
                try db.execute(
                    sql: "UPDATE messages SET reply_seq = ? WHERE conversation = ? AND seq = ?",
                    arguments: [Int64(clamping: reply.seq), row["conversation"] as String, row["seq"] as Int64]
                )
            }
        }
        // Processes opening a store at once (the first commands after an upgrade) can race for a migration: GRDB
        // checks what is applied before its transaction, so the loser's ALTER fails. It finds it applied on retry.
        var attempt = 1
        while true {
            do {
                try migrator.migrate(self.pool)
                break
            } catch  where attempt < 5 {
                attempt += 1
                Thread.sleep(forTimeInterval: 0.05 * Double(attempt))
            }
        }
    }

    // MARK: State

    func value(_ key: String) async throws -> String? {
        try await self.pool.read { db in
            try String.fetchOne(db, sql: "SELECT value FROM state WHERE key = ?", arguments: [key])
        }
    }

    func setValue(_ value: String?, for key: String) async throws {
        try await self.pool.write { db in
            if let value {
                try db.execute(sql: "INSERT OR REPLACE INTO state (key, value) VALUES (?, ?)", arguments: [key, value])
            } else {
                try db.execute(sql: "DELETE FROM state WHERE key = ?", arguments: [key])
            }
        }
    }

    /// Forgets the stored token if it is still this one (a refused token; not one another process saved since).
    func forgetToken(_ token: String) async throws {
        try await self.pool.write { db in
            try db.execute(sql: "DELETE FROM state WHERE key = 'token' AND value = ?", arguments: [token])
        }
    }

    /// The cursor up to which this store holds the user's events (whichever process stored them); nil before any.
    func storedCursor() throws -> UInt64? {
        try self.pool.read { db in
            try String.fetchOne(db, sql: "SELECT value FROM state WHERE key = 'cursor'").flatMap { UInt64($0) }
        }
    }

    /// Sets the cursor if the store has none yet (where a new device starts).
    func setCursorIfAbsent(_ cursor: UInt64) async throws {
        try await self.pool.write { db in
            try db.execute(
                sql: "INSERT OR IGNORE INTO state (key, value) VALUES ('cursor', ?)",
                arguments: [String(cursor)]
            )
        }
    }

    // MARK: Outbox

    /// Writes messages to the outbox, in order, as `instance`'s to send.
    func enqueue(_ entries: [OutboxEntry], instance: String) async throws {
        try await self.pool.write { db in
            let now = Date().timeIntervalSince1970
            for entry in entries {
                let (kind, peer) = Self.columns(entry.conversation)
                try db.execute(
                    sql: """
                        INSERT INTO outbox (id, kind, peer, text, media, created, instance, reply_seq, reply_id,
                            reply_from)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [entry.id, kind, peer, entry.text, Self.blob(entry.media), now, instance]
                        + Self.replyColumns(entry.replyTo)
                )
            }
        }
    }

    /// `instance`'s outbox rows after `position`, in order, at most `limit`.
    func outbox(of instance: String, after position: Int64, limit: Int) async throws -> [OutboxRow] {
        try await self.pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT \(Self.outboxColumns) FROM outbox
                    WHERE instance = ? AND position > ? ORDER BY position LIMIT ?
                    """,
                arguments: [instance, position, limit]
            ).map(Self.outboxRow)
        }
    }

    /// Every outbox message, whoever sends it, oldest first.
    func outbox() async throws -> [OutboxEntry] {
        try await self.pool.read { db in
            try Row.fetchAll(db, sql: "SELECT \(Self.outboxColumns) FROM outbox ORDER BY position")
                .map { Self.outboxRow($0).entry }
        }
    }

    /// The instances other than `instance` that have rows in the outbox (nil: rows no instance owns).
    func otherInstances(than instance: String) async throws -> [String?] {
        try await self.pool.read { db in
            try String?.fetchAll(
                db,
                sql: "SELECT DISTINCT instance FROM outbox WHERE instance IS NULL OR instance != ?",
                arguments: [instance]
            )
        }
    }

    /// Makes `instance` the sender of the rows of instances found gone (nil: rows no instance owns).
    ///
    /// - Returns: The rows taken over, in order.
    func takeOver(_ gone: [String?], for instance: String) async throws -> [OutboxRow] {
        guard !gone.isEmpty else { return [] }
        return try await self.pool.write { db in
            var taken: [OutboxRow] = []
            for old in gone {
                let condition = old == nil ? "instance IS NULL" : "instance = ?"
                let arguments: StatementArguments = old.map { [$0] } ?? []
                taken += try Row.fetchAll(
                    db,
                    sql: "SELECT \(Self.outboxColumns) FROM outbox WHERE \(condition)",
                    arguments: arguments
                ).map(Self.outboxRow)
                try db.execute(
                    sql: "UPDATE outbox SET instance = ? WHERE \(condition)",
                    arguments: [instance] + arguments
                )
            }
            return taken.sorted { $0.position < $1.position }
        }
    }

    /// A server's acknowledgement of an outbox message.
    struct Acknowledgement: Sendable, Hashable {
        var id: String
        var conversation: Conversation
        var seq: UInt64
        var time: Date
        var from: String
    }

    /// The server committed these outbox messages: they move to the messages, in one transaction. A message
    /// another process of this store moved already (it sent it too) is left as it is.
    ///
    /// This bookkeeping is committed without its own fsync (`synchronous=NORMAL` for the transaction; the next
    /// `FULL` commit carries it to disk): if a crash loses it, the messages are still in the outbox, are resent,
    /// and the server answers with the original acknowledgements.
    func acknowledged(_ acknowledgements: [Acknowledgement]) async throws {
        try await self.pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            defer { try? db.execute(sql: "PRAGMA synchronous = FULL") }
            try db.inTransaction {
                for acknowledgement in acknowledgements {
                    guard
                        let row = try Row.fetchOne(
                            db,
                            sql: "SELECT text, media, reply_seq, reply_id, reply_from FROM outbox WHERE id = ?",
                            arguments: [acknowledgement.id]
                        )
                    else { continue }
                    try db.execute(sql: "DELETE FROM outbox WHERE id = ?", arguments: [acknowledgement.id])
                    let message = ChatMessage(
                        id: acknowledgement.id,
                        from: acknowledgement.from,
                        conversation: acknowledgement.conversation,
                        seq: acknowledgement.seq,
                        time: acknowledgement.time,
                        text: row["text"],
                        media: Self.media(row["media"]),
                        recalled: false,
                        replyTo: try Self.replyTarget(row).map {
                            try Self.reply(to: $0, in: acknowledgement.conversation, db)
                        }
                    )
                    try Self.insert(message, db)
                }
                return .commit
            }
        }
    }

    func remove(id: String) async throws {
        try await self.pool.write { db in try db.execute(sql: "DELETE FROM outbox WHERE id = ?", arguments: [id]) }
    }

    /// Removes `instance`'s outbox row with this id, if it is there and still `instance`'s.
    ///
    /// - Returns: Whether a row went.
    func remove(id: String, of instance: String) async throws -> Bool {
        try await self.pool.write { db in
            try db.execute(sql: "DELETE FROM outbox WHERE id = ? AND instance = ?", arguments: [id, instance])
            return db.changesCount > 0
        }
    }

    /// What a message this device sent answers, from the original as stored here (only its seq, or nothing of it
    /// named by an id, when it is not: the server's copy of the message, in history, has it all).
    static func reply(
        to target: ReplyTarget,
        in conversation: Conversation,
        _ db: Database
    ) throws -> ChatReply {
        let row: Row?
        switch target {
        case .seq(let seq):
            row = try Row.fetchOne(
                db,
                sql: "SELECT * FROM messages WHERE conversation = ? AND seq = ?",
                arguments: [conversation.key, Int64(clamping: seq)]
            )
        case .id(let id, let from):
            row = try Row.fetchOne(
                db,
                sql: """
                    SELECT * FROM messages WHERE conversation = ? AND id = ? AND (? IS NULL OR sender = ? COLLATE NOCASE)
                    ORDER BY seq DESC LIMIT 1
                    """,
                arguments: [conversation.key, id, from, from]
            )
        }
        guard let row else {
            if case .seq(let seq) = target { return ChatReply(seq: seq) }
            return ChatReply(seq: 0, visible: false)
        }
        let original = Self.message(row)
        return ChatReply(
            seq: original.seq,
            id: original.id,
            from: original.from,
            text: original.text,
            media: original.media,
            recalled: original.recalled
        )
    }

    static func outboxRow(_ row: Row) -> OutboxRow {
        OutboxRow(
            position: row["position"],
            entry: OutboxEntry(
                id: row["id"],
                conversation: Self.conversation(row["kind"], row["peer"]),
                text: row["text"],
                media: Self.media(row["media"]),
                replyTo: Self.replyTarget(row)
            )
        )
    }

    /// The columns an outbox row is read with (``outboxRow(_:)``).
    private static let outboxColumns = "position, id, kind, peer, text, media, reply_seq, reply_id, reply_from"

    /// An outbox row's reply target, from its `reply_seq`, `reply_id` and `reply_from`.
    static func replyTarget(_ row: Row) -> ReplyTarget? {
        if let seq = row["reply_seq"] as Int64? { return .seq(UInt64(max(0, seq))) }
        if let id = row["reply_id"] as String? { return .id(id, from: row["reply_from"]) }
        return nil
    }

    static func replyColumns(_ target: ReplyTarget?) -> StatementArguments {
        switch target {
        case .seq(let seq)?: [Int64(clamping: seq), nil, nil]
        case .id(let id, let from)?: [nil, id, from]
        case nil: [nil, nil, nil]
        }
    }

    static func blob(_ media: MediaInfo?) -> Data? {
        guard let media else { return nil }
        return try? Courier_V1_Media(media).serializedBytes()
    }

    static func media(_ blob: Data?) -> MediaInfo? {
        guard let blob, let media = try? Courier_V1_Media(serializedBytes: blob) else { return nil }
        return MediaInfo(media)
    }

    static func columns(_ conversation: Conversation) -> (String, String) {
        switch conversation {
        case .user(let name): ("user", name)
        case .group(let name): ("group", name)
        }
    }

    static func conversation(_ kind: String, _ peer: String) -> Conversation {
        kind == "group" ? .group(peer) : .user(peer)
    }
}
