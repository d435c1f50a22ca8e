internal import CourierStore
internal import Logging
internal import PostgresNIO

extension PostgresTransaction {
    // MARK: The search index's rows left unindexed, and their tokens

    package func pendingSearch(
        limit: Int,
        upTo: Int64
    ) async throws -> [(doc: Int64, conversation: Int64, body: [UInt8])] {
        try await self.connection.rows(
            """
            SELECT s.doc, s.conversation_id, m.body FROM message_search s
            JOIN messages m ON m.conversation_id = s.conversation_id AND m.seq = s.seq
            WHERE s.tokens IS NULL AND s.doc <= \(upTo) ORDER BY s.doc DESC LIMIT \(Int64(limit))
            """,
            logger: self.logger
        ).map { (try $0.get("doc"), try $0.get("conversation_id"), try $0.bytes("body")) }
    }

    package func highestPendingSearch() async throws -> Int64? {
        try await self.connection.rows(
            "SELECT max(doc) AS doc FROM message_search WHERE tokens IS NULL",
            logger: self.logger
        ).first.flatMap { try $0.get("doc", as: Int64?.self) }
    }

    package func setSearchTokens(_ tokens: [(doc: Int64, tokens: [String])]) async throws -> Int {
        guard !tokens.isEmpty else { return 0 }
        return try await self.connection.rows(Self.searchTokensStatement(byDoc: tokens), logger: self.logger).count
    }

    package func setSearchTokens(at documents: [(conversation: Int64, seq: Int64, tokens: [String])]) async throws {
        guard !documents.isEmpty else { return }
        try await self.connection.run(Self.searchTokensStatement(at: documents), logger: self.logger)
    }

    // Each document's row is found by its key, one probe a document (the lateral subquery), never through
    // `message_search_pending`: that partial index keeps an entry for every row indexed since the table was last
    // vacuumed (an update leaves the old version's entry behind), so a plan that reads it to find the few rows
    // pending reads all of those, more with every batch until autovacuum runs (100,135 entries read for 800 rows in
    // a bench's database). A row another transaction holds (an edit, a recall, another node indexing it) is skipped,
    // never waited for: two writers of the index could otherwise each wait for the other.

    /// The statement of ``setSearchTokens(_:)``: each row's tokens as one string, split again (a token never holds a
    /// space).
    static func searchTokensStatement(byDoc tokens: [(doc: Int64, tokens: [String])]) -> PostgresQuery {
        """
        WITH t(doc, tokens) AS (SELECT * FROM unnest(\(tokens.map(\.doc))::bigint[],
                \(tokens.map { $0.tokens.joined(separator: " ") })::text[])),
            free AS (SELECT r.doc, t.tokens FROM t CROSS JOIN LATERAL (SELECT doc FROM message_search
                WHERE doc = t.doc AND tokens IS NULL FOR UPDATE SKIP LOCKED) r)
        UPDATE message_search SET tokens = string_to_array(free.tokens, ' ')
        FROM free WHERE message_search.doc = free.doc
        RETURNING message_search.doc
        """
    }

    /// The statement of ``setSearchTokens(at:)``, by conversation and seq.
    static func searchTokensStatement(
        at documents: [(conversation: Int64, seq: Int64, tokens: [String])]
    ) -> PostgresQuery {
        """
        WITH d(c, s, tokens) AS (SELECT * FROM unnest(\(documents.map(\.conversation))::bigint[],
                \(documents.map(\.seq))::bigint[], \(documents.map { $0.tokens.joined(separator: " ") })::text[])),
            free AS (SELECT r.doc, d.tokens FROM d CROSS JOIN LATERAL (SELECT doc FROM message_search
                WHERE conversation_id = d.c AND seq = d.s AND tokens IS NULL FOR UPDATE SKIP LOCKED) r)
        UPDATE message_search SET tokens = string_to_array(free.tokens, ' ')
        FROM free WHERE message_search.doc = free.doc
        """
    }
}
