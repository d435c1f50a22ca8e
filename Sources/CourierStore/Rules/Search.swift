// The rules of search: what a user may find, in what order, a page at a time.

extension StoreBackend {
    /// The messages a user can see whose text (a caption for media) matches a query, newest first.
    ///
    /// Only conversations the user is in, and in each only what was sent after it joined; current text only (an
    /// edit re-indexes a message, a recall takes it out). The index (``SearchText``'s tokens) gives candidates, newest
    /// first; each must then pass the exact check (``SearchText/matches(in:query:)``), since tokens carry no
    /// positions. A page ends at `limit` hits, at the last candidate, or after ``StoreLimits/maxSearchScan``
    /// candidates, whichever comes first, and says where the next one starts.
    ///
    /// - Parameters:
    ///   - conversation: Only this one (as the user names it); nil for all the user's.
    ///   - cursor: The ``SearchPage/next`` of the page before; 0 for the newest.
    /// - Throws: `unknown-user`, `unknown-group`, `not-member`, `storage-failed`.
    public func search(
        for user: UserID,
        query: String,
        in conversation: Conversation?,
        before cursor: UInt64,
        limit: Int
    ) async throws -> SearchPage {
        guard query.utf8.count <= Self.maxSearchQueryBytes else {
            throw CourierStoreError(.invalidRequest, "a search query has at most \(Self.maxSearchQueryBytes) bytes")
        }
        let tokens = SearchText.queryTokens(query)
        let exact = SearchText.Query(query)
        let limit = max(1, min(limit, self.limits.maxSearchPage))
        let maxScan = max(limit, self.limits.maxSearchScan)
        let start = cursor == 0 || cursor > UInt64(Int64.max) ? Int64.max : Int64(cursor)
        guard !tokens.isEmpty else { return SearchPage(hits: [], more: false, next: 0) }
        // Everything committed through this store in the user's conversations before the search is in the index
        // first: a sender finds its own sends (``SearchIndexer``).
        if self.searchIndexer.isDeferred, self.searchIndexer.queued > 0 {
            let mine = try await self.reading(doing: "search") { try await $0.conversationIDs(of: user) }
            await self.flushSearchIndex(for: Set(mine))
        }
        return try await self.reading(doing: "search") { transaction in
            var conversations: [Int64]?
            if let conversation {
                guard let (key, _) = try await Self.membership(of: user, in: conversation, transaction) else {
                    return SearchPage(hits: [], more: false, next: 0)
                }
                conversations = [key]
            } else {
                let all = try await transaction.conversationIDs(of: user)
                conversations = all.count <= SearchIndex.maxConversationTokens ? all : nil
                if all.isEmpty { return SearchPage(hits: [], more: false, next: 0) }
            }
            var found: [(FoundMessage, SearchText.Fragment)] = []
            var position = start
            var scanned = 0
            var exhausted = false
            scanning: while found.count < limit, scanned < maxScan {
                let asked = min(maxScan - scanned, max(2 * (limit - found.count), 32))
                let candidates = try await transaction.searchCandidates(
                    tokens,
                    in: conversations,
                    for: user,
                    before: position,
                    limit: asked
                )
                // Not the messages hidden from the user (withheld, deleted for it).
                let hidden = try await transaction.hidden(
                    from: user,
                    among: candidates.map { MessagePosition(conversation: $0.conversation, seq: $0.message.seq) }
                )
                for candidate in candidates {
                    position = candidate.doc
                    scanned += 1
                    if !hidden.isEmpty,
                        hidden.contains(
                            MessagePosition(conversation: candidate.conversation, seq: candidate.message.seq)
                        )
                    {
                        continue
                    }
                    let text = SearchIndex.text(ofBody: candidate.message.body)
                    if !candidate.message.recalled, let marks = SearchText.matches(in: text, query: exact) {
                        found.append((candidate, SearchText.fragment(of: text, marks: marks)))
                        if found.count == limit { break scanning }
                    }
                }
                if candidates.count < asked {
                    exhausted = true
                    break
                }
            }
            var named: Set<UserID> = []
            for (candidate, _) in found {
                named.insert(candidate.message.sender)
                named.formUnion(Self.namedUsers(of: candidate.header, for: user))
            }
            let names = try await transaction.names(of: named)
            let hits = try found.map { candidate, fragment in
                var message = candidate.message
                message.replySeq = nil
                return SearchHit(
                    message: try Self.message(
                        message,
                        in: try Self.address(of: candidate.header, for: user, names: names),
                        names: names,
                        readerJoined: .max
                    ),
                    fragment: fragment,
                    position: UInt64(max(0, candidate.doc))
                )
            }
            return SearchPage(hits: hits, more: !exhausted, next: UInt64(max(0, position)))
        }
    }

    /// The longest query, in bytes of UTF-8: a search looks at its first ``SearchText/maxQueryCharacters``
    /// characters, and a longer one is refused before any work (one character can hold a megabyte of marks).
    public static var maxSearchQueryBytes: Int { 4_096 }

    /// Indexes up to `limit` messages left unindexed, the newest first, in one transaction: those stored before the
    /// search index existed (the migration numbered them in the order they were sent, and left them for this), and
    /// those a search index queue lost (``SearchIndexer``): at `upTo` and below by their place in the index.
    ///
    /// - Returns: How many it indexed; 0 once none is left (or those left are held by another transaction, which is
    ///   indexing, editing or recalling them).
    public func indexPending(limit: Int) async throws -> Int {
        try await self.indexPending(limit: limit, upTo: .max)
    }

    public func indexPending(limit: Int, upTo: Int64) async throws -> Int {
        let limit = max(1, limit)
        // Read, then tokenized outside any transaction (the writer is not held meanwhile), then written where no
        // edit or recall came first (a row still without tokens).
        let pending = try await self.reading(doing: "read messages to index for search") { transaction in
            try await transaction.pendingSearch(limit: limit, upTo: upTo)
        }
        guard !pending.isEmpty else { return 0 }
        let tokens = pending.map { ($0.doc, SearchIndex.tokens(ofBody: $0.body, conversation: $0.conversation)) }
        return try await self.transaction(doing: "index messages for search") { transaction in
            try await transaction.setSearchTokens(tokens)
        }
    }

    /// The highest place in the index of a row still unindexed, or nil when none is.
    public func highestPendingSearch() async throws -> Int64? {
        try await self.reading(doing: "look for messages left unindexed") { transaction in
            try await transaction.highestPendingSearch()
        }
    }
}
