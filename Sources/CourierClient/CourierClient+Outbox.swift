import CourierProtocol
import CourierWire
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle

// The outbox: sent in the order written, once per connection, again when the server says; outboxes of gone clients taken over.
extension CourierClient {

    /// Sends this client's outbox messages in the order written, each once per connection, then each new one as it
    /// is written; takes over the outbox of clients of the store that are gone (on connecting, then every
    /// `takeoverInterval`); sends again what the server refused with a retryable code, when it said, and nothing
    /// written after it before it.
    func sendOutbox(on link: Link, takenOver: [ClientStore.OutboxRow]) async throws {
        let me = self.instance.id
        var position: Int64 = 0
        var nextTakeover = ContinuousClock.now + self.configuration.takeoverInterval
        for row in takenOver where self.willSend(row.entry.id, on: link) {
            try await link.send(row.entry)
        }
        while true {
            let stopped = self.state.withLock { state in
                state.outboxDirty = false
                return state.stopped
            }
            // Stopped: the connection is closing and the reader ends the session.
            if stopped { return }
            if ContinuousClock.now >= nextTakeover {
                for row in try await self.takeOverOutboxes() where self.willSend(row.entry.id, on: link) {
                    try await link.send(row.entry)
                }
                nextTakeover = .now + self.configuration.takeoverInterval
            }
            // Retries come due: the outbox is read again from its start, so that they go in the order written
            // (the server refuses, with the same retryable code, every send of a connection behind one it could not
            // store), and what was sent on this link already is skipped.
            let due = self.dueRetries()
            if !due.isEmpty {
                for id in due { link.forget(id) }
                position = 0
            }
            let rows = try await self.store.outbox(of: me, after: position, limit: Self.outboxBatch)
            var held = false
            for row in rows {
                // Nothing written later goes before a message waiting to be sent again.
                if self.isWaitingForRetry(row.entry.id) {
                    held = true
                    break
                }
                position = row.position
                if self.willSend(row.entry.id, on: link) { try await link.send(row.entry) }
            }
            if !held, rows.count == Self.outboxBatch { continue }
            let wake = self.state.withLock { state in state.retries.values.min() }.map { min($0, nextTakeover) }
            await self.waitForOutbox(until: wake ?? nextTakeover)
            try Task.checkCancellation()
        }
    }

    /// Whether an outbox message is due on this link: not sent on it yet, not waiting for a retry, not acknowledged
    /// already (its bookkeeping under way), not withdrawn. If so, it counts as sent by this client from now on
    /// (decided in one step with ``withdraw(id:)``).
    func willSend(_ id: String, on link: Link) -> Bool {
        guard !link.wasSent(id) else { return false }
        return self.state.withLock { state in
            guard state.retries[id] == nil, !state.recording.contains(id), !state.withdrawn.contains(id) else {
                return false
            }
            state.sentByThisClient.insert(id)
            return true
        }
    }

    /// Whether a message waits to be sent again (a retryable refusal, until its time).
    func isWaitingForRetry(_ id: String) -> Bool {
        self.state.withLock { $0.retries[id] != nil }
    }

    /// The retries whose time has come (taken out of the list).
    func dueRetries() -> [String] {
        let now = ContinuousClock.now
        return self.state.withLock { state in
            let due = state.retries.filter { $0.value <= now }.map(\.key)
            for id in due { state.retries[id] = nil }
            return due
        }
    }

    /// Makes this client the sender of the outbox rows of the store's clients that are gone.
    ///
    /// - Returns: The rows taken over, in the order written.
    func takeOverOutboxes() async throws -> [ClientStore.OutboxRow] {
        let others = try await self.store.otherInstances(than: self.instance.id)
        let alive = await InstanceLock.held(others.compactMap { $0 }, in: self.instancesFolder)
        let gone = others.filter { other in other.map { !alive.contains($0) } ?? true }
        // Marks of clients that are gone go too (those of commands killed with nothing left in the outbox).
        await InstanceLock.sweep(self.instancesFolder, keeping: self.instance.id)
        guard !gone.isEmpty else { return [] }
        let rows = try await self.store.takeOver(gone, for: self.instance.id)
        self.state.withLock { state in
            for row in rows { state.takenOver[row.entry.id] = row.entry }
        }
        if !rows.isEmpty {
            self.logger.debug(
                "took over outbox messages of clients that are gone",
                metadata: ["count": "\(rows.count)"]
            )
        }
        return rows
    }

    /// Waits until the outbox changes, the client stops, the task is cancelled, or `deadline`.
    func waitForOutbox(until deadline: ContinuousClock.Instant) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitForOutboxSignal() }
            group.addTask { try? await Task.sleep(until: deadline) }
            await group.next()
            group.cancelAll()
        }
    }

    func waitForOutboxSignal() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // Checked under the lock the cancellation handler takes: a cancellation either is seen here or
                // finds the stored continuation.
                let now = self.state.withLock { state -> Bool in
                    if state.outboxDirty || state.stopped || Task.isCancelled { return true }
                    state.outboxSignal = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            let signal = self.state.withLock { state in
                defer { state.outboxSignal = nil }
                return state.outboxSignal
            }
            signal?.resume()
        }
    }
}
