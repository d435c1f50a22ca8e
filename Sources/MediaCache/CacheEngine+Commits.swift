import Foundation
import NIOPosix

/// Commits and eviction: a resource's state is made durable on the commit thread (its written blocks synced, its
/// index written, its evicted blocks and old generations deleted), one commit per resource at a time; eviction drops
/// the least recently used blocks under the cap.
extension CacheEngine {
    /// Asks for a commit of a resource's state: now, or after the one running for it.
    func scheduleCommit(_ key: String) {
        guard var entry = self.entries[key] else { return }
        switch entry.commit {
        case .running, .runningThenAgain:
            entry.commit = .runningThenAgain
            self.entries[key] = entry
        case .idle:
            if case .terminated = self.work.continuation.yield(.commit(key)) {
                // Stopped: nothing commits any more (what is on disk is what the last commit made durable).
                self.logger.debug("a commit after the stop is not made", metadata: ["key": "\(key)"])
                return
            }
            entry.commit = .running
            self.entries[key] = entry
            self.commitsUnderWay += 1
        }
    }

    /// A failed commit's time to try again came: committed now, in this child of ``run()``, unless another commit
    /// runs for the key (then it follows that one).
    func retryCommit(_ key: String) async {
        guard var entry = self.entries[key] else { return }
        guard entry.commit == .idle else {
            entry.commit = .runningThenAgain
            self.entries[key] = entry
            return
        }
        entry.commit = .running
        self.entries[key] = entry
        self.commitsUnderWay += 1
        await self.commit(key)
    }

    /// Runs a resource's commits on the commit thread (a child task of ``run()``): this one, and another after it
    /// for as long as the state changed while one ran.
    func commit(_ key: String) async {
        var again = true
        while again, self.entries[key] != nil {
            let commit = self.entries[key]!.state.commit()
            let (succeeded, missing) = await self.write(commit, key: key)
            again = self.committed(key, commit, succeeded: succeeded, missing: missing)
        }
    }

    /// Makes a commit durable: its written blocks synced, the index written (or removed), evicted blocks and old
    /// generations deleted.
    ///
    /// - Returns: Whether it succeeded, and the blocks whose files were not there (deleted by an earlier commit).
    private func write(_ commit: ResourceState.Commit, key: String) async -> (Bool, Set<Int64>) {
        let store = self.store
        do {
            let missing = try await self.commitPool.runIfActive {
                // A block file that is not there (deleted by a commit before this one) lists nothing.
                var missing = Set<Int64>()
                var record = commit.record
                for block in commit.syncBlocks {
                    let file = store.blockFile(block, for: key, generation: commit.record.generation)
                    guard let handle = try? FileHandle(forUpdating: file) else {
                        missing.insert(block)
                        let blockBytes = store.blockBytes
                        for range in commit.syncing {
                            record.ranges.remove(range.clamped(to: (block * blockBytes)..<((block + 1) * blockBytes)))
                        }
                        continue
                    }
                    defer { try? handle.close() }
                    try handle.synchronize()
                }
                if commit.writesIndex {
                    try store.writeIndex(record)
                } else {
                    store.removeIndex(for: key)
                }
                store.deleteBlocks(commit.deleting, for: key, generation: commit.record.generation)
                for generation in commit.oldGenerations { store.deleteGeneration(generation, for: key) }
                return missing
            }
            return (true, missing)
        } catch {
            self.logger.warning("cannot commit the cache index", metadata: ["key": "\(key)", "error": "\(error)"])
            return (false, [])
        }
    }

    /// A commit ended.
    ///
    /// - Returns: Whether another commit of the key follows at once (the state changed while this one ran).
    private func committed(
        _ key: String,
        _ commit: ResourceState.Commit,
        succeeded: Bool,
        missing: Set<Int64>
    )
        -> Bool
    {
        guard var entry = self.entries[key] else { return false }
        defer { self.wake(key) }
        if succeeded {
            if entry.commitFailing {
                entry.commitFailing = false
                self.failingCommits -= 1
            }
            let outcome = entry.state.committed(commit, missing: missing)
            self.doomed -= outcome.freed
            self.used -= outcome.lost
            if entry.commit == .runningThenAgain {
                entry.commit = .running
                self.entries[key] = entry
                return true
            }
            entry.commit = .idle
            self.entries[key] = entry
            self.commitsUnderWay -= 1
            return false
        }
        // Tried again after a while (a full disk may free up); meanwhile the bytes stay served from this process.
        if !entry.commitFailing {
            entry.commitFailing = true
            self.failingCommits += 1
        }
        entry.state.commitFailed(commit)
        entry.commit = .idle
        self.entries[key] = entry
        self.commitsUnderWay -= 1
        self.work.continuation.yield(.retryCommit(key, after: Self.commitRetryDelay))
        return false
    }

    /// Evicts the least recently used blocks (not pinned, not being written, not waiting for a reader) until the
    /// cache, with `incoming` bytes more, is below its cap by a twentieth (so that eviction runs in batches, not at
    /// every write).
    func evictIfNeeded(incoming: Int64 = 0) {
        guard self.used + incoming > self.configuration.maxBytes else { return }
        let target = self.configuration.maxBytes - self.configuration.maxBytes / 20 - incoming
        var candidates: [(key: String, block: Int64, lastUse: UInt64, bytes: Int64)] = []
        for (key, entry) in self.entries {
            for candidate in entry.state.evictable(readAhead: self.readAhead) {
                candidates.append((key, candidate.block, candidate.lastUse, candidate.bytes))
            }
        }
        candidates.sort { ($0.lastUse, $0.key, $0.block) < ($1.lastUse, $1.key, $1.block) }
        var touched = Set<String>()
        for candidate in candidates {
            guard self.used > target else { break }
            self.entries[candidate.key]!.state.evict(candidate.block)
            self.dropped(candidate.bytes)
            touched.insert(candidate.key)
        }
        for key in touched { self.scheduleCommit(key) }
    }
}
