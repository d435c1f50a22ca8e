import AsyncHTTPClient
import CourierVocabulary
import Foundation
import NIOCore
import NIOHTTP1

/// Fetches: a task per origin request, whose body is written to the block files as it arrives (within the cap and
/// the read-ahead), and whose head and end update the resource's state.
extension CacheEngine {
    func startFetch(
        key: String,
        id: Int,
        generation: Int,
        range: Range<Int64>,
        url: URL,
        forward: HTTPHeaders
    ) {
        var validator: String?
        if let record = self.entries[key]?.state.record, record.generation == generation {
            if let etag = record.etag, !etag.hasPrefix("W/") {
                validator = etag
            } else {
                validator = record.lastModified
            }
        }
        let task = Task {
            await self.runFetch(
                key: key,
                id: id,
                generation: generation,
                range: range,
                url: url,
                forward: forward,
                validator: validator
            )
            self.fetchTaskEnded(key, id)
        }
        self.update(key) { $0.fetches[id] = task }
    }

    func fetchTaskEnded(_ key: String, _ id: Int) {
        self.entries[key]?.fetches[id] = nil
    }

    enum HeadVerdict {
        case write(start: Int64, generation: Int, stop: Int64)
        case stop
    }

    nonisolated func runFetch(
        key: String,
        id: Int,
        generation: Int,
        range: Range<Int64>,
        url: URL,
        forward: HTTPHeaders,
        validator: String?
    ) async {
        var headers = Self.forwarded(forward)
        let last = range.upperBound == .max ? "" : String(range.upperBound - 1)
        headers.add(name: "Range", value: "bytes=\(range.lowerBound)-\(last)")
        if let validator { headers.add(name: "If-Range", value: validator) }
        let response: OriginResponse
        do {
            response = try await self.origin.request(url, headers: headers)
        } catch {
            await self.fetchFailed(key: key, id: id, generation: generation, .unreachable(Self.words(error)))
            return
        }
        let verdict = await self.fetchHead(
            key: key,
            id: id,
            generation: generation,
            requested: range,
            status: response.status,
            headers: response.headers,
            url: response.url
        )
        guard case .write(let start, let generation, let stop) = verdict else { return }
        let pipe = FetchPipe(stop: stop, limit: self.pipeLimit)
        async let written = self.writeLoop(pipe, key: key, id: id, generation: generation, start: start)
        // Receive: clip to where the engine says the fetch stops, hand over, go on.
        var position = start
        var stoppedEarly = false
        var receiveError: (any Error)?
        do {
            for try await var chunk in response.body {
                let received = Int64(chunk.readableBytes)
                guard let stop = pipe.stop, position < stop else {
                    stoppedEarly = true
                    break
                }
                let count = Int(min(Int64(chunk.readableBytes), stop - position))
                let slice = chunk.readSlice(length: count)!
                position += Int64(count)
                guard await pipe.push(slice, received: received), count == Int(received) else {
                    stoppedEarly = true
                    break
                }
            }
        } catch {
            receiveError = error
        }
        pipe.finish()
        let (end, writeError, writerStopped) = await written
        if let error = receiveError {
            let why = "the origin \(OriginClient.origin(of: url)) broke off: \(OriginClient.plainWords(error))"
            await self.fetchFailed(key: key, id: id, generation: generation, .unreachable(why))
            return
        }
        if let error = writeError {
            await self.fetchFailed(key: key, id: id, generation: generation, .unreachable(Self.words(error)))
            return
        }
        await self.fetchEnded(
            key: key,
            id: id,
            generation: generation,
            position: end,
            bodyComplete: !stoppedEarly && !writerStopped
        )
    }

    /// Writes what a fetch receives, in batches, and tells the engine after each; returns where the written bytes
    /// end, the error that stopped it, if any, and whether it stopped before the bytes received ran out (then the
    /// body did not end there).
    nonisolated func writeLoop(
        _ pipe: FetchPipe,
        key: String,
        id: Int,
        generation: Int,
        start: Int64
    ) async -> (Int64, (any Error)?, Bool) {
        let folder = self.store.generationFolder(for: key, generation: generation).path
        let files = BlockFiles(folder: folder, blockBytes: self.configuration.blockBytes)
        var position = start
        do {
            try await self.threadPool.runIfActive { try self.store.prepare(key: key, generation: generation) }
            while let (chunks, received) = await pipe.take() {
                let count = chunks.reduce(0) { $0 + Int64($1.readableBytes) }
                guard await self.admitWrite(key: key, id: id, generation: generation, count: count) else {
                    pipe.setStop(nil)
                    try? files.close()
                    return (position, nil, true)
                }
                let at = position
                do {
                    try await self.threadPool.runIfActive { try files.write(chunks, at: at) }
                } catch {
                    await self.admittedWriteFailed(count)
                    throw error
                }
                let next = await self.wrote(
                    key: key,
                    id: id,
                    generation: generation,
                    range: position..<(position + count),
                    received: received,
                    admitted: count
                )
                position += count
                pipe.setStop(next)
                if next == nil { break }
            }
            try? files.close()
            return (position, nil, false)
        } catch {
            try? files.close()
            pipe.setStop(nil)
            return (position, error, false)
        }
    }

    static func forwarded(_ forward: HTTPHeaders) -> HTTPHeaders {
        var headers = HTTPHeaders()
        for name in OriginClient.forwardedHeaders {
            for value in forward[name] { headers.add(name: name, value: value) }
        }
        return headers
    }

    /// An origin answered a fetch: checks its validators against what is cached, records its length, type and
    /// freshness, and says where its body starts.
    func fetchHead(
        key: String,
        id: Int,
        generation: Int,
        requested: Range<Int64>,
        status: Int,
        headers: HTTPHeaders,
        url: URL
    ) -> HeadVerdict {
        guard var state = self.entries[key]?.state, state.generation == generation, state.fetches[id] != nil else {
            return .stop
        }
        let now = Date()
        switch OriginAnswer(status: status, headers: headers, received: now) {
        case .body(let head):
            if head.freshness.noStore || (head.total ?? 0) > self.configuration.maxBytes {
                self.entries[key]?.passthroughUntil = now.addingTimeInterval(self.configuration.revalidationInterval)
                if state.headSeen { self.dropped(state.startGeneration { _ in }) }
                state.headSeen = false
                self.fail(&state, key: key, id: id, .passthrough)
                // The dropped generation's folder goes with this commit.
                self.scheduleCommit(key)
                return .stop
            }
            let fill = head.fill(storedURL: self.storedURL(url), now: now)
            if state.headSeen && head.differs(from: state.record) {
                self.logger.info("origin changed; dropping cached bytes", metadata: ["key": "\(key)"])
                self.dropped(state.startGeneration(keeping: id, fill))
            } else {
                state.update(fill)
            }
            state.headSeen = true
            self.entries[key]?.headFrom = id
            if head.start != requested.lowerBound { state.fetch(id, startsAt: head.start) }
            if head.rangesHonoured {
                state.honoursRanges(id)
            } else {
                // An origin that ignores Range sends the whole body whatever is asked: any later fetch would cost
                // the bytes before it again, so this one goes on to the end (while anyone reads).
                state.extend(id, to: head.total ?? .max)
            }
            let stop = state.stop(for: id)
            let generation = state.generation
            self.entries[key]?.state = state
            self.scheduleCommit(key)
            self.wake(key)
            guard let stop else {
                self.entries[key]?.state.finished(id, lengthKnown: false)
                return .stop
            }
            return .write(start: head.start, generation: generation, stop: stop)
        case .unsatisfiable(let total?) where !state.headSeen || state.record.totalLength == total:
            // The length only: a 416's type and validators (if any) are those of an error page.
            state.update { record in
                record.url = self.storedURL(url)
                record.totalLength = total
                record.lastValidated = now
            }
            state.headSeen = true
            state.finished(id, lengthKnown: false)
            self.entries[key]?.state = state
            self.scheduleCommit(key)
            self.wake(key)
            return .stop
        case .unusable(let reason):
            self.fail(&state, key: key, id: id, .unreachable(reason))
            return .stop
        case .unsatisfiable, .notModified, .refused:
            self.fail(&state, key: key, id: id, .upstream(status: status))
            return .stop
        }
    }

    /// A URL as the cache keeps it on disk and lists it: without credential parameters.
    func storedURL(_ url: URL) -> String {
        Credentials.stripped(url, parameters: self.configuration.credentialParameters).absoluteString
    }

    func fail(_ state: inout ResourceState, key: String, id: Int, _ failure: ResourceState.Failure) {
        state.failed(id, failure)
        self.entries[key]?.state = state
        self.entries[key]?.fetches[id] = nil
        self.wake(key)
    }

    /// A fetch wrote bytes: they are served from now on. Returns where the fetch stops now (nil: stop here).
    func wrote(
        key: String,
        id: Int,
        generation: Int,
        range: Range<Int64>,
        received: Int64,
        admitted: Int64
    ) -> Int64? {
        self.admitted -= admitted
        self.statistics.bytesFromOrigin += received
        guard self.entries[key]?.state.generation == generation, self.entries[key]?.state.fetches[id] != nil else {
            self.wakeRoomWaiters()
            return nil
        }
        self.used += self.entries[key]!.state.wrote(id, range, clock: self.tick())
        let blockBytes = self.configuration.blockBytes
        if range.upperBound % blockBytes == 0 || range.upperBound / blockBytes != range.lowerBound / blockBytes {
            self.scheduleCommit(key)
        }
        self.wake(key)
        self.evictIfNeeded()
        return self.entries[key]?.state.stop(for: id)
    }

    func fetchEnded(key: String, id: Int, generation: Int, position: Int64, bodyComplete: Bool) {
        self.entries[key]?.fetches[id] = nil
        guard var state = self.entries[key]?.state, state.generation == generation, let fetch = state.fetches[id] else {
            return
        }
        // A body that ended by itself before the bytes asked for: cut short (a reader waiting for them must not wait
        // for ever, nor be sent anything else).
        if bodyComplete, fetch.end != .max, position < fetch.end, position < (state.record.totalLength ?? .max) {
            self.fail(&state, key: key, id: id, .unreachable("the origin's response ended early"))
            self.scheduleCommit(key)
            return
        }
        state.finished(id, lengthKnown: bodyComplete && fetch.end == .max)
        self.entries[key]?.state = state
        self.scheduleCommit(key)
        self.wake(key)
    }

    func fetchFailed(key: String, id: Int, generation: Int, _ failure: ResourceState.Failure) {
        self.logger.debug("fetch failed", metadata: ["key": "\(key)", "reason": "\(failure)"])
        guard var state = self.entries[key]?.state, state.generation == generation else { return }
        if state.isAheadOfReaders(id) {
            // Held back for readers that have not caught up (a paused player), its origin may have given up on it:
            // it just ends, and a reader that gets to its end starts another fetch there.
            state.finished(id, lengthKnown: false)
            self.entries[key]?.state = state
            self.entries[key]?.fetches[id] = nil
            self.scheduleCommit(key)
            self.wake(key)
            return
        }
        self.fail(&state, key: key, id: id, failure)
        self.scheduleCommit(key)
    }

    /// Whether a fetch may write its next `count` bytes, waiting until it may; false when it should stop instead.
    ///
    /// The cap holds on disk while fetches write, not only after: bytes in use, bytes evicted whose files are not
    /// deleted yet (a commit deletes them), bytes other fetches were let write and the bytes about to be written
    /// stay within it. Short of room, a fetch first evicts, then waits for the commits under way to delete what was
    /// evicted. When nothing is left to wait for (what remains is pinned by players, or unread by the readers of a
    /// fetch), a fetch a reader waits for writes anyway (that excess is bounded by what readers hold), one running
    /// ahead of its readers waits for them to catch up, and one nobody reads stops. Independently of the cap, a
    /// fetch never runs more than the read-ahead ahead of the furthest of its readers; held there for
    /// ``MediaCacheConfiguration/heldFetchTimeout`` by an origin that honours ranges, it stops (the reader starts
    /// another where it ends), so paused players do not hold origin connections.
    func admitWrite(key: String, id: Int, generation: Int, count: Int64) async -> Bool {
        let cap = self.configuration.maxBytes
        let heldLimit = Duration.nanoseconds(self.configuration.heldFetchTimeout.nanoseconds)
        var heldSince: ContinuousClock.Instant?
        while !Task.isCancelled {
            guard let state = self.entries[key]?.state, state.generation == generation, let fetch = state.fetches[id]
            else {
                return false
            }
            let need = state.writeNeed(id, count: count, readAhead: self.readAhead)
            if need == .tooFarAhead {
                let since = heldSince ?? .now
                heldSince = since
                if fetch.rangesHonoured, ContinuousClock.now - since >= heldLimit {
                    return false
                }
                // Only a fetch whose origin honours ranges is stopped when held too long: another waits without a
                // timer (one already past would wake it at once, again and again).
                await self.waitForRoom(until: fetch.rangesHonoured ? since + heldLimit : nil)
                continue
            }
            heldSince = nil
            self.evictIfNeeded(incoming: self.admitted + count)
            if self.used + self.doomed + self.admitted + count <= cap {
                self.admitted += count
                return true
            }
            // Waiting frees something only while commits are under way (they delete what was evicted).
            if self.commitsUnderWay == 0 || self.doomed <= 0 || self.failingCommits > 0 {
                if need == .waited {
                    self.admitted += count
                    return true
                }
                if need == .unread { return false }
            }
            await self.waitForRoom()
        }
        return false
    }

    /// A write that was let through failed: its bytes are not coming.
    func admittedWriteFailed(_ count: Int64) {
        self.admitted -= count
        self.wakeRoomWaiters()
    }
}
