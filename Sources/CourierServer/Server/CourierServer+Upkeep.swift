import CourierProtocol
import CourierStore

/// The server's upkeep beside the sessions: the store's maintenance, the other nodes' news, and the admin commands'
/// changes.
extension CourierServer {
    /// The store's own upkeep, apart from the writes, until the server stops.
    func maintainStore() async {
        guard let interval = self.store.maintenanceInterval else { return }
        while (try? await Task.sleep(for: interval)) != nil {
            do {
                try await self.store.maintain()
            } catch {
                self.logger.warning("store upkeep failed", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Indexes for search the messages stored before the index existed, a batch at a time, until none is left (at
    /// once, on a database that never lacked it). On several nodes each takes batches the others do not hold.
    func indexForSearch() async {
        var total = 0
        // The rows unindexed at start, and no newer: on PostgreSQL new messages wait unindexed for a moment
        // (``SearchIndexer``), and under a steady load there would always be some.
        let upTo: Int64
        do {
            guard let highest = try await self.store.highestPendingSearch() else { return }
            upTo = highest
        } catch {
            self.logger.warning("looking for messages to index for search failed", metadata: ["error": "\(error)"])
            return
        }
        while !Task.isCancelled {
            do {
                let done = try await self.store.indexPending(
                    limit: max(1, self.configuration.limits.searchIndexBatch),
                    upTo: upTo
                )
                // None left, or those left held by another transaction (the follower, another node).
                if done == 0 { break }
                total += done
                // The sessions' writes go first: one batch, then whatever the commit queue holds.
                await Task.yield()
            } catch {
                self.logger.warning("indexing messages for search failed", metadata: ["error": "\(error)"])
                guard (try? await Task.sleep(for: self.configuration.limits.storageRetryAfter)) != nil else { return }
            }
        }
        if total > 0 {
            self.logger.info("indexed messages stored before search existed", metadata: ["messages": "\(total)"])
        }
    }

    /// Passes the other nodes' news to this node's connections until the feed ends; reads every online user's
    /// cursor when news may have been missed.
    ///
    /// The events of logs that grew on another node are read here (``wake(_:)``), for every connection that can
    /// take them as they are, a query per part of the news, and handed over as a commit here hands its own, where
    /// each connection read its own page (a query and a transaction of PostgreSQL's per delivery, most of the cost
    /// of a second node). A connection that is behind, or without room for them, reads from the store as before.
    func followFeed(_ feed: any StoreFeed) async {
        let hops = self.metrics.clusterHops
        feed.observe { hop, duration in
            hops[hop == .publish ? .publish : .notify]?.record(duration)
        }
        for await news in feed.news {
            switch news {
            case .logs(let cursors):
                let started = ContinuousClock.now
                await self.wake(cursors)
                hops[.wake]?.record(.now - started)
            case .notice(let bytes):
                (self.fanout as? ClusterFanout)?.received(notice: bytes)
            case .resync:
                await self.catchUpOnlineUsers()
            }
        }
    }

    /// Tells this node's connections that other nodes grew their users' logs to these cursors: at once for the
    /// users it does not read for; for the others, with their new events, read by the node for every connection of
    /// theirs that can take them as they are (caught up, with room for them all), at most
    /// ``ServerConfiguration/Cluster-swift.struct/maxUsersPerFeedRead`` users and
    /// ``ServerConfiguration/Cluster-swift.struct/maxEventsPerFeedRead`` events a read, each part's users woken as
    /// soon as it is read. When a read fails, the rest are woken without their events and read their own.
    ///
    /// A span's width is not its count of events (the logs share one stream of positions), so a read cannot be
    /// sized by its spans: each user's share of a part is limited instead (``feedReads(rooms:maxUsers:maxEvents:)``).
    /// A user whose share cut its read short, with room for more, is read again with others like it, in parts small
    /// enough for each to bring all its connections have room for. A user whose read stops short of its span's end
    /// then, or brings more than that room, is woken without events and reads its own.
    func wake(_ cursors: [UserID: UInt64]) async {
        let cluster = self.configuration.cluster
        let wanted = self.hub.freshAfter(of: cursors.keys).compactMap { user, found -> FeedRead? in
            let cursor = cursors[user] ?? 0
            guard cursor > found.after, found.room > 0 else { return nil }
            return FeedRead(user: user, span: LogSpan(after: found.after, upTo: cursor), room: found.room)
        }.sorted { $0.user < $1.user }
        guard cluster.maxUsersPerFeedRead > 0, !wanted.isEmpty else {
            self.hub.logsGrew(cursors)
            return
        }
        let read = Set(wanted.map(\.user))
        self.hub.logsGrew(cursors.filter { !read.contains($0.key) })
        // First with equal shares; then the users those cut short, each with its whole room.
        var pass = wanted
        for second in [false, true] where !pass.isEmpty {
            let rooms = pass.map(\.room)
            // The second pass: parts of as many users as can each bring their whole room (and one).
            let maxUsers =
                second
                ? max(1, min(cluster.maxUsersPerFeedRead, cluster.maxEventsPerFeedRead / (rooms.max()! + 1)))
                : cluster.maxUsersPerFeedRead
            let parts = Self.feedReads(rooms: rooms, maxUsers: maxUsers, maxEvents: cluster.maxEventsPerFeedRead)
            var cut: [FeedRead] = []
            for (range, limit) in parts {
                do {
                    let found = try await self.read(pass[range], limit: limit)
                    let woken = pass[range].filter { second || !found.cut.contains($0.user) }
                    self.hub.logsGrew(
                        Dictionary(uniqueKeysWithValues: woken.map { ($0.user, cursors[$0.user]!) }),
                        fresh: found.fresh
                    )
                    if !second { cut += pass[range].filter { found.cut.contains($0.user) } }
                } catch {
                    self.logger.warning(
                        "reading other nodes' events for this node's connections failed; they read their own",
                        metadata: ["error": "\(error)", "users": "\(pass.count - range.lowerBound + cut.count)"]
                    )
                    self.hub.logsGrew(
                        Dictionary(
                            uniqueKeysWithValues: (pass[range.lowerBound...] + cut).map { ($0.user, cursors[$0.user]!) }
                        )
                    )
                    return
                }
            }
            pass = cut
        }
    }

    /// Reads one part of a node's read of other nodes' events, at most `limit` events a user.
    ///
    /// - Returns: The runs read whole (up to the span's end, within the user's room), and the users whose reads the
    ///   limit cut short while they had room for more.
    private func read(
        _ part: ArraySlice<FeedRead>,
        limit: Int
    ) async throws -> (fresh: [UserID: FreshRun], cut: Set<UserID>) {
        let byUser = Dictionary(uniqueKeysWithValues: part.map { ($0.user, $0) })
        var fresh: [UserID: FreshRun] = [:]
        var cut: Set<UserID> = []
        for (user, events) in try await self.store.events(for: byUser.mapValues(\.span), limit: limit) {
            guard let wanted = byUser[user] else { continue }
            if events.count <= wanted.room, events.last?.cursor == wanted.span.upTo {
                fresh[user] = FreshRun(after: wanted.span.after, events: events)
            } else if events.count == limit, limit <= wanted.room {
                cut.insert(user)
            }
        }
        return (fresh, cut)
    }

    /// One user's share of a read of other nodes' events: its span, and the most events its connections can take.
    struct FeedRead {
        var user: UserID
        var span: LogSpan
        var room: Int
    }

    /// The parts a read of other nodes' events goes in, for users whose connections have room for so many events
    /// each, in order: consecutive runs of at most `maxUsers` users, each with the most events a user's read in it
    /// may bring. That is one more than the most room any of its users has (so that a read with more than its user's
    /// room is seen to have more), and no more than the part's share of `maxEvents`: a part never reads more than
    /// `maxEvents` rows (or one a user, when the part's users outnumber them).
    static func feedReads(rooms: [Int], maxUsers: Int, maxEvents: Int) -> [(range: Range<Int>, limit: Int)] {
        stride(from: 0, to: rooms.count, by: max(1, maxUsers)).map { start in
            let range = start..<min(rooms.count, start + max(1, maxUsers))
            let room = rooms[range].max() ?? 0
            return (range, max(1, min(room + 1, max(1, maxEvents) / range.count)))
        }
    }

    /// Reads the online users' cursors on an interval (``ServerConfiguration/Cluster-swift.struct/pollInterval``):
    /// what a lost hint left behind arrives within it.
    func pollOnlineUsers() async {
        while (try? await Task.sleep(for: self.configuration.cluster.pollInterval)) != nil {
            await self.catchUpOnlineUsers()
        }
    }

    /// Wakes every online user's connections with the user's newest cursor from the store (those that have it
    /// already do nothing).
    func catchUpOnlineUsers() async {
        let users = self.hub.onlineUsers()
        guard !users.isEmpty else { return }
        let slice = max(1, self.configuration.cluster.maxUsersPerPoll)
        for start in stride(from: 0, to: users.count, by: slice) {
            do {
                let cursors = try await self.store.logCursors(of: Array(users[start..<min(users.count, start + slice)]))
                self.hub.logsGrew(cursors)
            } catch {
                self.logger.warning("reading the online users' cursors failed", metadata: ["error": "\(error)"])
                return
            }
        }
    }

    /// Applies what the admin commands changed in the data folder: closes revoked devices' and removed users'
    /// connections, and wakes connections whose users' logs grew.
    func watchChanges() async {
        guard var last = try? await self.store.latestChangeID() else { return }
        var lastPrune = ContinuousClock.now
        while (try? await Task.sleep(for: self.configuration.limits.changePollInterval)) != nil {
            do {
                let (changes, latest) = try await self.store.changes(after: last)
                last = latest
                for change in changes {
                    switch change {
                    case .logAppended(let user):
                        guard self.hub.isListening(user) else { continue }
                        self.hub.logsGrew([user: try await self.store.logCursor(of: user)])
                    case .deviceRevoked(let device):
                        self.hub.terminate(
                            device: device,
                            code: ErrorCodes.tokenRevoked,
                            message: "the token was revoked"
                        )
                    case .userRemoved(let user):
                        self.hub.terminate(user: user, code: ErrorCodes.tokenRevoked, message: "the user was removed")
                    }
                }
                if ContinuousClock.now - lastPrune > .seconds(60) {
                    lastPrune = .now
                    try await self.store.pruneChanges(olderThanMs: SessionClock.systemWallMs() - 600_000)
                }
            } catch {
                self.logger.warning("reading changes failed", metadata: ["error": "\(error)"])
            }
        }
    }
}
