import CourierPostgresTesting
import CourierProtocol
import CourierStore
import CourierTesting
import Foundation
import GRDB
import PostgresNIO
import Testing

@testable import CourierStorePostgres
@testable import CourierStoreSQLite

@Suite("Migration v11-media-types: media types stored before they were parsed strictly, on both databases")
struct MediaTypeMigrationTests {
    /// (seq, the type stored before, the type after)
    static let cases: [(seq: Int64, before: String, after: String)] = [
        (1, "image/png, text/html", ""),
        (2, "IMAGE/PNG ; Name=\"x\"", "image/png; name=x"),
        (3, "image/png", "image/png"),
        (4, "", ""),
        (5, "image/png,text/javascript", ""),
        (6, "text/html", "text/html"),
    ]

    static func body(_ mime: String, caption: String = "") -> [UInt8] {
        var body = Courier_V1_Body()
        body.media.kind = .image
        body.media.sha256 = String(repeating: "a", count: 64)
        body.media.mime = mime
        body.media.name = caption.isEmpty ? "cat.png" : caption
        return try! body.serializedBytes()
    }

    static func mime(ofBody bytes: [UInt8]) throws -> String {
        try Courier_V1_Body(serializedBytes: bytes).media.mime
    }

    static func sha(_ seq: Int64) -> String { String(repeating: "\(seq % 10)", count: 64) }

    @Test("SQLite: message_media, the bodies and their earlier versions, respelled or dropped")
    func sqlite() async throws {
        let queue = try DatabaseQueue()
        try Schema.migrator.migrate(queue, upTo: "v10-quiet")
        try await queue.write { db in
            try db.execute(sql: "INSERT INTO users (id, name, created_ms) VALUES (1, 'alice', 0), (2, 'bob', 0)")
            try db.execute(
                sql: "INSERT INTO conversations (id, kind, user_a, user_b, created_ms) VALUES (1, 1, 1, 2, 0)"
            )
            for (seq, before, _) in Self.cases {
                try db.execute(
                    sql:
                        "INSERT INTO message_media (sha256, conversation_id, seq, mime, name) VALUES (?, 1, ?, ?, 'x')",
                    arguments: [Self.sha(seq), seq, before]
                )
                try db.execute(
                    sql: """
                        INSERT INTO messages (conversation_id, seq, sender_id, client_id, time_ms, body)
                        VALUES (1, ?, 1, ?, 0, ?)
                        """,
                    arguments: [seq, "m\(seq)", Data(Self.body(before))]
                )
                try db.execute(
                    sql: """
                        INSERT INTO message_versions (conversation_id, seq, version, body, replaced_ms)
                        VALUES (1, ?, 0, ?, 0)
                        """,
                    arguments: [seq, Data(Self.body(before, caption: "first"))]
                )
            }
        }
        try Schema.migrator.migrate(queue)
        try await queue.read { db in
            for (seq, _, after) in Self.cases {
                let stored = try String.fetchOne(
                    db,
                    sql: "SELECT mime FROM message_media WHERE seq = ?",
                    arguments: [seq]
                )
                #expect(stored == after, "seq \(seq)")
                let body = try #require(
                    try Data.fetchOne(db, sql: "SELECT body FROM messages WHERE seq = ?", arguments: [seq])
                )
                #expect(try Self.mime(ofBody: [UInt8](body)) == after, "seq \(seq)")
                let version = try #require(
                    try Data.fetchOne(db, sql: "SELECT body FROM message_versions WHERE seq = ?", arguments: [seq])
                )
                #expect(try Self.mime(ofBody: [UInt8](version)) == after, "seq \(seq)")
                #expect(try Courier_V1_Body(serializedBytes: [UInt8](version)).media.name == "first")
            }
        }
    }

    @Test(
        "PostgreSQL: the same rule over the same rows",
        .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
    )
    func postgres() async throws {
        try await TestDatabase.with { location in
            let store = PostgresStore(location: location, logger: TestDatabase.logger)
            #expect(try await store.migrate().contains("v11-media-types"))
            try await TestDatabase.admin(location) { connection in
                let logger = TestDatabase.logger
                try await connection.run(
                    "INSERT INTO users (id, name, created_ms) VALUES (1, 'alice', 0), (2, 'bob', 0)",
                    logger: logger
                )
                try await connection.run(
                    "INSERT INTO conversations (id, kind, user_a, user_b, created_ms) VALUES (1, 1, 1, 2, 0)",
                    logger: logger
                )
                for (seq, before, _) in Self.cases {
                    try await connection.run(
                        """
                        INSERT INTO message_media (sha256, conversation_id, seq, mime, name)
                        VALUES (\(Self.sha(seq)), 1, \(seq), \(before), 'x')
                        """,
                        logger: logger
                    )
                    try await connection.run(
                        """
                        INSERT INTO messages (conversation_id, seq, sender_id, client_id, time_ms, body)
                        VALUES (1, \(seq), 1, \("m\(seq)"), 0, \(ByteBuffer(bytes: Self.body(before))))
                        """,
                        logger: logger
                    )
                    try await connection.run(
                        """
                        INSERT INTO message_versions (conversation_id, seq, version, body, replaced_ms)
                        VALUES (1, \(seq), 0, \(ByteBuffer(bytes: Self.body(before, caption: "first"))), 0)
                        """,
                        logger: logger
                    )
                }
                // The migration's rule, as `v11-media-types` runs it (inside the migrations' transaction).
                try await PostgresSchema.repairMediaTypes(on: connection, logger: logger)
                for (seq, _, after) in Self.cases {
                    let stored = try await connection.value(
                        "SELECT mime FROM message_media WHERE seq = \(seq)",
                        as: String.self,
                        logger: logger
                    )
                    #expect(stored == after, "seq \(seq)")
                    let body = try #require(
                        try await connection.row("SELECT body FROM messages WHERE seq = \(seq)", logger: logger)
                    )
                    #expect(try Self.mime(ofBody: try body.bytes("body")) == after, "seq \(seq)")
                    let version = try #require(
                        try await connection.row(
                            "SELECT body FROM message_versions WHERE seq = \(seq)",
                            logger: logger
                        )
                    )
                    #expect(try Self.mime(ofBody: try version.bytes("body")) == after, "seq \(seq)")
                }
            }
        }
    }
}
