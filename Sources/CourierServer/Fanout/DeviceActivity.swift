import CourierStore
import Synchronization

/// Keeps `devices.connected_since_ms` and `last_seen_ms` (what `courier user devices` shows) up to date, off the
/// connections' paths: the hub's edges (a device's first connection, its last) are gathered, and one task writes
/// whatever has gathered in one transaction, each device as the hub has it when written. A login never waits for
/// this write, and a quick disconnect and reconnect cannot leave the store saying the wrong one.
final class DeviceActivity: Sendable {
    private struct Edge {
        var user: UserID
        var connected: Bool
        var ms: Int64
    }

    private struct State {
        var pending: [DeviceID: Edge] = [:]
        var waiter: CheckedContinuation<Void, Never>?
        var finished = false
    }

    private let state = Mutex(State())

    /// A device's first connection came (`connected`) or its last one ended, at `ms`.
    func note(_ device: DeviceID, of user: UserID, connected: Bool, ms: Int64) {
        let waiter = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.pending[device] = Edge(user: user, connected: connected, ms: ms)
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// No more edges: ``run(hub:store:)`` writes what is left and returns.
    func finish() {
        let waiter = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Writes the edges as they gather, until ``finish()``.
    func run(hub: Hub, store: any CourierDatabase) async {
        while true {
            let (batch, finished) = await self.take()
            let changes = batch.compactMap { device, edge -> DeviceActivityChange? in
                // The hub has the last word: an edge a newer one overtook is written with that one.
                let connected = hub.isConnected(device, of: edge.user)
                guard connected == edge.connected else { return nil }
                return DeviceActivityChange(device: device, connected: connected, ms: edge.ms)
            }
            if !changes.isEmpty { try? await store.recordDeviceActivity(changes) }
            if finished { return }
        }
    }

    /// Everything gathered, waiting while there is nothing (unless finished).
    private func take() async -> ([DeviceID: Edge], Bool) {
        while true {
            let taken = self.state.withLock { state -> ([DeviceID: Edge], Bool)? in
                guard !state.pending.isEmpty || state.finished else { return nil }
                defer { state.pending = [:] }
                return (state.pending, state.finished)
            }
            if let taken { return taken }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = self.state.withLock { state -> Bool in
                    if !state.pending.isEmpty || state.finished { return true }
                    state.waiter = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        }
    }
}
