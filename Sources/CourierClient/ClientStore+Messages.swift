import CourierProtocol
import Foundation
import GRDB

// The messages a client's store holds: pages of events and of history as they arrive, edits, recalls and reactions,
// and the quotes of replies kept as their originals now read.
extension ClientStore {
    // MARK: Messages

    /// Stores a page of received messages, and raises the cursor to the page's end, in one transaction. A message
    /// stored already (by conversation and sequence number, by this process or another) is left as it is.
    func store(
        _ messages: [ChatMessage],
        recalls: [(Conversation, UInt64)],
        edits: [ChatMessage] = [],
        reactions: [(change: ReactionChange, cursor: UInt64)] = [],
        hides: [(Conversation, UInt64)] = [],
        user: String = "",
        cursor: UInt64
    ) async throws {
        try await self.pool.write { db in
            let storedBefore =
                UInt64(try String.fetchOne(db, sql: "SELECT value FROM state WHERE key = 'cursor'") ?? "0") ?? 0
            for message in messages {
                try Self.insert(message, db)
            }
            // An edit of a message this device does not hold changes nothing: it is never stored as a new one.
            for edit in edits where !edit.recalled {
                try Self.edit(edit, db)
            }
            // Counted once: a reaction another client of the store stored already (its cursor is behind the store's)
            // is not counted again.
            for (change, at) in reactions where at > storedBefore {
                try Self.react(change, user: user, db)
            }
            for (conversation, seq) in recalls {
                try db.execute(
                    sql: """
                        UPDATE messages SET recalled = 1, text = '', media = NULL, reactions = NULL
                        WHERE conversation = ? AND seq = ?
                        """,
                    arguments: [conversation.key, seq]
                )
            }
            // Deleted for this user (on one of its devices): gone from this one too.
            for (conversation, seq) in hides {
                try db.execute(
                    sql: "DELETE FROM messages WHERE conversation = ? AND seq = ?",
                    arguments: [conversation.key, seq]
                )
            }
            // Raised, never lowered: another process may have stored further already.
            let stored =
                UInt64(try String.fetchOne(db, sql: "SELECT value FROM state WHERE key = 'cursor'") ?? "0") ?? 0
            if cursor > stored {
                try db.execute(
                    sql: "INSERT OR REPLACE INTO state (key, value) VALUES ('cursor', ?)",
                    arguments: [String(cursor)]
                )
            }
        }
    }

    /// Stores a page of history as the server has it now: new messages, and for those held already their text as
    /// edited, their reactions, whether they were recalled and the quote of what they answer (a page is newer news
    /// than what was stored). The quotes of replies to a message edited since are brought up to date too.
    func store(page messages: [ChatMessage]) async throws {
        guard !messages.isEmpty else { return }
        try await self.pool.write { db in
            for message in messages {
                try Self.insert(message, db)
                let key = message.conversation.key
                let seq = Int64(message.seq)
                if message.recalled {
                    try db.execute(
                        sql: """
                            UPDATE messages SET recalled = 1, text = '', media = NULL, reactions = NULL
                            WHERE conversation = ? AND seq = ?
                            """,
                        arguments: [key, seq]
                    )
                    continue
                }
                // A recall stored meanwhile stays; an edit newer than the page's stays.
                let edited = message.edited?.timeIntervalSince1970
                try db.execute(
                    sql: """
                        UPDATE messages SET text = ?, media = ?, edited = ?, reactions = ?, reply = ?
                        WHERE conversation = ? AND seq = ? AND recalled = 0
                            AND (edited IS NULL OR (? IS NOT NULL AND ? >= edited))
                        """,
                    arguments: [
                        message.text, Self.blob(message.media), edited, Self.reactionsText(message.reactions),
                        Self.replyBlob(message.replyTo), key, seq, edited, edited,
                    ]
                )
                if db.changesCount > 0, message.edited != nil { try Self.requote(message, db) }
            }
        }
    }

    static func insert(_ message: ChatMessage, _ db: Database) throws {
        let (kind, peer) = Self.columns(message.conversation)
        try db.execute(
            sql: """
                INSERT OR IGNORE INTO messages (conversation, seq, id, sender, kind, peer, time, text, media, recalled,
                    edited, reply, reactions, reply_seq)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [
                message.conversation.key, Int64(message.seq), message.id, message.from, kind, peer,
                message.time.timeIntervalSince1970, message.text, Self.blob(message.media), message.recalled,
                message.edited?.timeIntervalSince1970, Self.replyBlob(message.replyTo),
                Self.reactionsText(message.reactions),
                message.replyTo.flatMap { $0.seq > 0 ? Int64(clamping: $0.seq) : nil },
            ]
        )
    }

    /// An edit of a stored message: its text (a media message's caption), and the quotes of the replies to it.
    static func edit(_ edit: ChatMessage, _ db: Database) throws {
        try db.execute(
            sql: """
                UPDATE messages SET text = ?, media = ?, edited = ?
                WHERE conversation = ? AND seq = ? AND recalled = 0
                """,
            arguments: [
                edit.text, Self.blob(edit.media), edit.edited?.timeIntervalSince1970, edit.conversation.key,
                Int64(edit.seq),
            ]
        )
        try Self.requote(edit, db)
    }

    /// The quotes of the stored replies to a message, as the message now reads.
    static func requote(_ original: ChatMessage, _ db: Database) throws {
        let replies = try Row.fetchAll(
            db,
            sql: "SELECT seq, reply FROM messages WHERE conversation = ? AND reply_seq = ?",
            arguments: [original.conversation.key, Int64(clamping: original.seq)]
        )
        for row in replies {
            guard let data = row["reply"] as Data?, let stored = try? Courier_V1_Reply(serializedBytes: data) else {
                continue
            }
            var reply = ChatReply(stored)
            guard !reply.recalled, reply.text != original.text || reply.media != original.media else { continue }
            reply.text = original.text
            reply.media = original.media
            try db.execute(
                sql: "UPDATE messages SET reply = ? WHERE conversation = ? AND seq = ?",
                arguments: [Self.replyBlob(reply), original.conversation.key, row["seq"] as Int64]
            )
        }
    }

    /// A reaction put on a stored message or taken off, as the event log tells it (`user`: this client's user,
    /// whose own reactions are marked `mine`).
    static func react(_ change: ReactionChange, user: String, _ db: Database) throws {
        let key = change.conversation.key
        guard
            let row = try Row.fetchOne(
                db,
                sql: "SELECT reactions FROM messages WHERE conversation = ? AND seq = ? AND recalled = 0",
                arguments: [key, Int64(clamping: change.seq)]
            )
        else { return }
        var reactions = Self.reactions(row["reactions"])
        reactions.apply(change, mine: change.user.lowercased() == user.lowercased())
        try db.execute(
            sql: "UPDATE messages SET reactions = ? WHERE conversation = ? AND seq = ?",
            arguments: [Self.reactionsText(reactions), key, Int64(clamping: change.seq)]
        )
    }

    static func replyBlob(_ reply: ChatReply?) -> Data? {
        reply.flatMap { try? Courier_V1_Reply($0).serializedBytes() as Data }
    }

    /// Reactions as stored: JSON, `[{"k": key, "c": count, "m": mine}]`; nil for none.
    private struct StoredReaction: Codable {
        var k: String
        var c: Int
        var m: Bool
    }

    static func reactionsText(_ reactions: [ChatReaction]) -> String? {
        guard !reactions.isEmpty else { return nil }
        let stored = reactions.map { StoredReaction(k: $0.key, c: $0.count, m: $0.mine) }
        return (try? JSONEncoder().encode(stored)).map { String(decoding: $0, as: UTF8.self) }
    }

    static func reactions(_ text: String?) -> [ChatReaction] {
        guard let text, let stored = try? JSONDecoder().decode([StoredReaction].self, from: Data(text.utf8)) else {
            return []
        }
        return stored.map { ChatReaction(key: $0.k, count: $0.c, mine: $0.m) }
    }

    /// The messages of a conversation stored on this device, oldest first: all of them, or the newest `limit`.
    func messages(in conversation: Conversation, limit: Int? = nil) async throws -> [ChatMessage] {
        try await self.pool.read { db in
            try Row.fetchAll(
                db,
                sql: "SELECT * FROM messages WHERE conversation = ? ORDER BY seq DESC LIMIT ?",
                arguments: [conversation.key, limit ?? -1]
            ).reversed().map(Self.message)
        }
    }

    /// The conversations with messages on this device, each with its newest message.
    func conversations() async throws -> [ChatMessage] {
        try await self.pool.read { db in
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

    static func message(_ row: Row) -> ChatMessage {
        ChatMessage(
            id: row["id"],
            from: row["sender"],
            conversation: Self.conversation(row["kind"], row["peer"]),
            seq: UInt64(row["seq"] as Int64),
            time: Date(timeIntervalSince1970: row["time"]),
            text: row["text"],
            media: Self.media(row["media"]),
            recalled: row["recalled"],
            edited: (row["edited"] as Double?).map(Date.init(timeIntervalSince1970:)),
            replyTo: (row["reply"] as Data?).flatMap { try? Courier_V1_Reply(serializedBytes: $0) }.map(ChatReply.init),
            reactions: Self.reactions(row["reactions"])
        )
    }
}
