import Foundation
import NIOHTTP1

/// Readers (player requests): opening a resource, what to send next, releasing what was sent; the waits for news;
/// and the control endpoints' views.
extension CacheEngine {
    /// Opens a resource for a player: its head once the cache knows it (starting a fetch at `start` when it does
    /// not, revalidating when its freshness has run out).
    func open(key: String, url: URL, forward: HTTPHeaders, start: Int64, upper: Int64?) async -> Opening {
        if let until = self.entries[key]?.passthroughUntil, until > Date() { return .passthrough }
        let reader = self.nextReader
        self.nextReader += 1
        let opening = await self.open(key: key, reader: reader, url: url, forward: forward, start: start, upper: upper)
        // A reader that is not served is no fetch's reader any longer (a fetch must not go on, nor keep bytes, for
        // it).
        if case .resource = opening {} else { self.leave(key, reader: reader) }
        return opening
    }

    /// ``open(key:url:forward:start:upper:)`` for a player's request, in one call to the engine (a first byte waits
    /// for every call): `.live` for a live playlist, and with the resource, the bytes cached when it opened.
    func openToServe(
        key: String,
        url: URL,
        forward: HTTPHeaders,
        start: Int64,
        upper: Int64?
    ) async -> (Opening, cached: ByteRangeSet) {
        if self.entries[key]?.isLive ?? false { return (.live, ByteRangeSet()) }
        let opening = await self.open(key: key, url: url, forward: forward, start: start, upper: upper)
        return (opening, self.entries[key]?.state.available ?? ByteRangeSet())
    }

    private func open(
        key: String,
        reader: Int,
        url: URL,
        forward: HTTPHeaders,
        start: Int64,
        upper: Int64?
    ) async -> Opening {
        var revalidated = false
        /// The fetch this request started, if any: its answer, to this request with its own credentials, is the
        /// origin's word on the bytes when the head came from it.
        var ownFetch: Int?
        while !Task.isCancelled {
            let entry = self.entry(key)
            self.entries[key] = entry
            let state = entry.state
            if state.headSeen {
                // Revalidated at most once per request: after it, the record is fresh, or changed, or the origin is
                // unreachable and the cached bytes are served as they are. Private bytes (a request with credentials,
                // or `Cache-Control: private`) are served only once the origin has confirmed them for this request.
                let confirmedByOwnFetch = ownFetch != nil && entry.headFrom == ownFetch
                if !revalidated, !confirmedByOwnFetch, self.needsRevalidation(key, state.record) {
                    revalidated = true
                    let outcome = await self.revalidate(key: key, url: url, forward: forward)
                    if Self.isPrivate(key, state.record) {
                        switch outcome {
                        case .confirmed: break
                        case .refused(let status): return .failed(.upstream(status: status))
                        case .unreachable(let reason): return .failed(.unreachable(reason))
                        }
                    }
                    continue
                }
                return .resource(Self.head(state.record), reader: reader)
            }
            if let until = entry.passthroughUntil, until > Date() { return .passthrough }
            let step = self.update(key) {
                $0.state.step(reader: reader, generation: state.generation, position: start, upper: upper)
            }
            switch step {
            case .fetch(let id, let range):
                self.startFetch(
                    key: key,
                    id: id,
                    generation: state.generation,
                    range: range,
                    url: url,
                    forward: forward
                )
                ownFetch = id
                await self.wait(key, reader)
            case .wait:
                await self.wait(key, reader)
            case .failed(let failure):
                return .failed(failure)
            case .changed:
                continue
            case .serve, .end:
                // Bytes without a head, or a start past any length: nothing to answer but "unsatisfiable" (and
                // never a loop that holds the actor).
                self.leave(key, reader: reader)
                return .failed(.upstream(status: 416))
            }
        }
        self.leave(key, reader: reader)
        return .failed(.unreachable("cancelled"))
    }

    /// What a reader sends next at `position`: bytes on disk (pinned until released), at most `limit` of them,
    /// after waiting for a fetch (started here when none brings them) if needed.
    func next(
        key: String,
        reader: Int,
        generation: Int,
        position: Int64,
        upper: Int64?,
        limit: Int64? = nil,
        url: URL,
        forward: HTTPHeaders
    ) async -> Read {
        let most = min(limit ?? self.maxServeBytes, self.maxServeBytes)
        while !Task.isCancelled {
            guard self.entries[key] != nil else { return .changed }
            let step = self.entries[key]!.state.step(
                reader: reader,
                generation: generation,
                position: position,
                upper: upper
            )
            // A reader that moved on may let a fetch held back for it go on.
            self.wakeRoomWaiters()
            switch step {
            case .serve(let range):
                let capped = range.lowerBound..<min(range.upperBound, range.lowerBound + most)
                self.entries[key]!.state.pin(capped, clock: self.tick())
                return .serve(capped, generation: generation)
            case .end:
                return .end
            case .changed:
                return .changed
            case .failed(let failure):
                return .failed(failure)
            case .wait:
                await self.wait(key, reader)
            case .fetch(let id, let range):
                self.startFetch(key: key, id: id, generation: generation, range: range, url: url, forward: forward)
                await self.wait(key, reader)
            }
        }
        self.leave(key, reader: reader)
        return .failed(.unreachable("cancelled"))
    }

    /// Sent bytes are no longer pinned.
    func release(_ key: String, range: Range<Int64>) {
        self.entries[key]?.state.unpin(range)
        self.evictIfNeeded()
        self.wakeRoomWaiters()
    }

    /// A reader is done (or gone): the fetches it waited on may stop at their next block boundary.
    func leave(_ key: String, reader: Int) {
        self.entries[key]?.state.leave(reader: reader)
        self.entries[key]?.waiters.removeValue(forKey: reader)?.resume()
        self.wakeRoomWaiters()
    }

    /// Counts a finished request: `cached` bytes were there when asked for, `fetched` came from the origin first.
    func account(cached: Int64, fetched: Int64) {
        switch (cached > 0, fetched > 0) {
        case (true, false): self.statistics.hits += 1
        case (true, true): self.statistics.partialHits += 1
        default: self.statistics.misses += 1
        }
        self.statistics.bytesFromCache += cached
    }

    /// Marks a playlist live (its cached copy dropped), or no longer live.
    func setLive(_ key: String, _ live: Bool) {
        if live {
            self.update(key) { $0.isLive = true }
            _ = self.remove(key: key)
        } else {
            self.entries[key]?.isLive = false
        }
    }

    /// Counts bytes an origin sent that did not go through a fetch (streamed through).
    func countOriginBytes(_ count: Int64) {
        self.statistics.bytesFromOrigin += count
    }

    /// The file of a block of a resource's generation.
    nonisolated func blockFile(_ block: Int64, key: String, generation: Int) -> URL {
        self.store.blockFile(block, for: key, generation: generation)
    }

    func tick() -> UInt64 {
        self.clock += 1
        return self.clock
    }

    // MARK: Waiting for news

    func wait(_ key: String, _ reader: Int) async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                if Task.isCancelled {
                    continuation.resume()
                } else {
                    self.update(key) { $0.waiters[reader] = continuation }
                }
            }
        } onCancel: {
            Task { await self.wakeOne(key, reader) }
        }
    }

    private func wakeOne(_ key: String, _ reader: Int) {
        self.entries[key]?.waiters.removeValue(forKey: reader)?.resume()
    }

    /// Wakes the readers waiting on a resource, and the fetches waiting for room.
    func wake(_ key: String) {
        self.wakeRoomWaiters()
        guard let waiting = self.entries[key]?.waiters, !waiting.isEmpty else { return }
        self.entries[key]!.waiters = [:]
        for continuation in waiting.values { continuation.resume() }
    }

    /// Waits until something may have made room (a reader moved or left, a write or a commit ended, a fetch
    /// stopped), or until `deadline`.
    func waitForRoom(until deadline: ContinuousClock.Instant? = nil) async {
        let id = self.nextRoomWaiter
        self.nextRoomWaiter += 1
        await withTaskGroup(of: Void.self) { group in
            if let deadline {
                group.addTask {
                    guard (try? await Task.sleep(until: deadline)) != nil else { return }
                    await self.wakeRoomWaiter(id)
                }
            }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    if Task.isCancelled {
                        continuation.resume()
                    } else {
                        self.roomWaiters[id] = continuation
                    }
                }
            } onCancel: {
                Task { await self.wakeRoomWaiter(id) }
            }
            // Woken: the timer, if any, is not needed any more.
            group.cancelAll()
        }
    }

    private func wakeRoomWaiter(_ id: UInt64) {
        self.roomWaiters.removeValue(forKey: id)?.resume()
    }

    func wakeRoomWaiters() {
        guard !self.roomWaiters.isEmpty else { return }
        let waiting = self.roomWaiters
        self.roomWaiters = [:]
        for continuation in waiting.values { continuation.resume() }
    }

    /// Bytes a resource's state no longer counts as used went on the doomed list (their files are deleted by its
    /// next commit).
    func dropped(_ bytes: Int64) {
        self.used -= bytes
        self.doomed += bytes
    }

    static func head(_ record: ResourceRecord) -> ResourceHead {
        ResourceHead(
            key: record.key,
            generation: record.generation,
            totalLength: record.totalLength,
            contentType: record.contentType,
            etag: record.etag,
            lastModified: record.lastModified,
            url: record.url
        )
    }

    // MARK: Control

    func statisticsNow() -> CacheStatistics {
        var statistics = self.statistics
        statistics.resources = self.entries.values.filter { $0.state.headSeen }.count
        statistics.bytesUsed = self.used
        return statistics
    }

    func resources() -> [CachedResource] {
        self.entries.values.map(\.state).filter(\.headSeen).sorted { $0.record.key < $1.record.key }.map { state in
            let record = state.record
            return CachedResource(
                key: record.key,
                url: record.url,
                totalLength: record.totalLength,
                contentType: record.contentType,
                etag: record.etag,
                lastModified: record.lastModified,
                cachedBytes: state.available.count,
                ranges: state.available.ranges.map { [$0.lowerBound, $0.upperBound] }
            )
        }
    }

    /// Drops everything cached of a key; false when nothing was.
    func remove(key: String) -> Bool {
        guard var entry = self.entries[key], entry.state.headSeen else { return false }
        for task in entry.fetches.values { task.cancel() }
        entry.fetches = [:]
        self.dropped(entry.state.startGeneration { _ in })
        entry.state.headSeen = false
        entry.passthroughUntil = nil
        self.entries[key] = entry
        self.scheduleCommit(key)
        self.wake(key)
        return true
    }
}
