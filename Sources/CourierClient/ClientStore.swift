import CourierProtocol
import Foundation
import GRDB

/// The client's local database: the outbox of messages not yet acknowledged, the messages received, and the
/// session state (token, event cursor). One SQLite file in WAL mode with `synchronous=FULL`, so that what the client
/// acknowledges to the server is on its disk first.
final class ClientStore: Sendable {
    struct OutboxEntry: Sendable, Hashable {
        var id: String
        var conversation: Conversation
        var text: String
        var media: MediaInfo? = nil
    }

    let queue: DatabaseQueue

    init(path: String) throws {
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        self.queue = try DatabaseQueue(path: path, configuration: configuration)
        try self.queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA journal_mode = WAL")
        }
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
        try migrator.migrate(self.queue)
    }

    // MARK: State

    func value(_ key: String) throws -> String? {
        try self.queue.read { db in
            try String.fetchOne(db, sql: "SELECT value FROM state WHERE key = ?", arguments: [key])
        }
    }

    func setValue(_ value: String?, for key: String) throws {
        try self.queue.write { db in
            if let value {
                try db.execute(sql: "INSERT OR REPLACE INTO state (key, value) VALUES (?, ?)", arguments: [key, value])
            } else {
                try db.execute(sql: "DELETE FROM state WHERE key = ?", arguments: [key])
            }
        }
    }

    var cursor: UInt64 {
        get throws { UInt64(try self.value("cursor") ?? "0") ?? 0 }
    }

    // MARK: Outbox

    func enqueue(_ entry: OutboxEntry) throws {
        try self.enqueue([entry])
    }

    func enqueue(_ entries: [OutboxEntry]) throws {
        try self.queue.write { db in
            let now = Date().timeIntervalSince1970
            for entry in entries {
                let (kind, peer) = Self.columns(entry.conversation)
                try db.execute(
                    sql: "INSERT INTO outbox (id, kind, peer, text, media, created) VALUES (?, ?, ?, ?, ?, ?)",
                    arguments: [entry.id, kind, peer, entry.text, Self.blob(entry.media), now]
                )
            }
        }
    }

    func outbox() throws -> [OutboxEntry] {
        try self.queue.read { db in
            try Row.fetchAll(db, sql: "SELECT id, kind, peer, text, media FROM outbox ORDER BY position").map { row in
                OutboxEntry(
                    id: row["id"],
                    conversation: Self.conversation(row["kind"], row["peer"]),
                    text: row["text"],
                    media: Self.media(row["media"])
                )
            }
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

    /// The server committed these outbox messages: they move to the messages, in one transaction.
    ///
    /// This bookkeeping is committed without its own fsync (`synchronous=NORMAL` for the transaction; the next
    /// `FULL` commit carries it to disk): if a crash loses it, the messages are still in the outbox, are resent,
    /// and the server answers with the original acknowledgements.
    ///
    /// - Returns: The acknowledgements whose message was in the outbox (a repeated acknowledgement is not).
    func acknowledged(_ acknowledgements: [Acknowledgement]) throws -> [Acknowledgement] {
        try self.queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            defer { try? db.execute(sql: "PRAGMA synchronous = FULL") }
            var moved: [Acknowledgement] = []
            try db.inTransaction {
                for acknowledgement in acknowledgements {
                    guard
                        let row = try Row.fetchOne(
                            db,
                            sql: "SELECT text, media FROM outbox WHERE id = ?",
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
                        recalled: false
                    )
                    try Self.insert(message, db)
                    moved.append(acknowledgement)
                }
                return .commit
            }
            return moved
        }
    }

    func remove(id: String) throws {
        try self.queue.write { db in try db.execute(sql: "DELETE FROM outbox WHERE id = ?", arguments: [id]) }
    }

    // MARK: Messages

    /// Stores a page of received messages and the cursor after them in one transaction.
    ///
    /// - Returns: The messages that were new (a message already stored, by conversation and sequence number, is
    ///   dropped).
    func store(_ messages: [ChatMessage], recalls: [(Conversation, UInt64)], cursor: UInt64) throws -> [ChatMessage] {
        try self.queue.write { db in
            var new: [ChatMessage] = []
            for message in messages where try Self.insert(message, db) {
                new.append(message)
            }
            for (conversation, seq) in recalls {
                try db.execute(
                    sql: "UPDATE messages SET recalled = 1, text = '', media = NULL WHERE conversation = ? AND seq = ?",
                    arguments: [conversation.key, seq]
                )
            }
            try db.execute(
                sql: "INSERT OR REPLACE INTO state (key, value) VALUES ('cursor', ?)",
                arguments: [String(cursor)]
            )
            return new
        }
    }

    @discardableResult
    private static func insert(_ message: ChatMessage, _ db: Database) throws -> Bool {
        let (kind, peer) = Self.columns(message.conversation)
        try db.execute(
            sql: """
                INSERT OR IGNORE INTO messages (conversation, seq, id, sender, kind, peer, time, text, media, recalled)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [
                message.conversation.key, Int64(message.seq), message.id, message.from, kind, peer,
                message.time.timeIntervalSince1970, message.text, Self.blob(message.media), message.recalled,
            ]
        )
        return db.changesCount > 0
    }

    /// The messages of a conversation stored on this device, oldest first: all of them, or the newest `limit`.
    func messages(in conversation: Conversation, limit: Int? = nil) throws -> [ChatMessage] {
        try self.queue.read { db in
            try Row.fetchAll(
                db,
                sql: "SELECT * FROM messages WHERE conversation = ? ORDER BY seq DESC LIMIT ?",
                arguments: [conversation.key, limit ?? -1]
            ).reversed().map(Self.message)
        }
    }

    /// The conversations with messages on this device, each with its newest message.
    func conversations() throws -> [ChatMessage] {
        try self.queue.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT m.* FROM messages m
                    JOIN (SELECT conversation, MAX(seq) AS seq FROM messages GROUP BY conversation) newest
                    USING (conversation, seq)
                    """
            ).map(Self.message)
        }
    }

    private static func message(_ row: Row) -> ChatMessage {
        ChatMessage(
            id: row["id"],
            from: row["sender"],
            conversation: Self.conversation(row["kind"], row["peer"]),
            seq: UInt64(row["seq"] as Int64),
            time: Date(timeIntervalSince1970: row["time"]),
            text: row["text"],
            media: Self.media(row["media"]),
            recalled: row["recalled"]
        )
    }

    private static func blob(_ media: MediaInfo?) -> Data? {
        guard let media else { return nil }
        return try? Courier_V1_Media(media).serializedBytes()
    }

    private static func media(_ blob: Data?) -> MediaInfo? {
        guard let blob, let media = try? Courier_V1_Media(serializedBytes: blob) else { return nil }
        return MediaInfo(media)
    }

    private static func columns(_ conversation: Conversation) -> (String, String) {
        switch conversation {
        case .user(let name): ("user", name)
        case .group(let name): ("group", name)
        }
    }

    private static func conversation(_ kind: String, _ peer: String) -> Conversation {
        kind == "group" ? .group(peer) : .user(peer)
    }
}
