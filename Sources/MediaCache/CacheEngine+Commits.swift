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
        case .idle:
            entry.commit = .running
            self.commitsUnderWay += 1
            self.work.continuation.yield(.commit(key))
        }
        self.entries[key] = entry
    }

    /// Runs a resource's commit on the commit thread (a child task of ``run()``).
    func commit(_ key: String) async {
        guard self.entries[key] != nil else { return }
        let commit = self.entries[key]!.state.commit()
        let store = self.store
        var missing = Set<Int64>()
        let succeeded: Bool
        do {
            missing = try await self.commitPool.runIfActive {
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
            succeeded = true
        } catch {
            self.logger.warning("cannot commit the cache index", metadata: ["key": "\(key)", "error": "\(error)"])
            succeeded = false
        }
        self.committed(key, commit, succeeded: succeeded, missing: missing)
    }

    private func committed(_ key: String, _ commit: ResourceState.Commit, succeeded: Bool, missing: Set<Int64>) {
        guard var entry = self.entries[key] else { return }
        let again = entry.commit == .runningThenAgain
        entry.commit = .idle
        self.commitsUnderWay -= 1
        if succeeded {
            if entry.commitFailing {
                entry.commitFailing = false
                self.failingCommits -= 1
            }
            let outcome = entry.state.committed(commit, missing: missing)
            self.doomed -= outcome.freed
            self.used -= outcome.lost
            self.entries[key] = entry
            if again { self.scheduleCommit(key) }
        } else {
            // Tried again after a while (a full disk may free up); meanwhile the bytes stay served from this process.
            if !entry.commitFailing {
                entry.commitFailing = true
                self.failingCommits += 1
            }
            entry.state.commitFailed(commit)
            self.entries[key] = entry
            self.work.continuation.yield(.retryCommit(key, after: Self.commitRetryDelay))
        }
        self.wake(key)
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
