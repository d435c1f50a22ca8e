import Foundation
import Synchronization
import Testing

@testable import CourierStore

@Suite("Password threads (no database)")
struct PasswordWorkTests {
    @Test("a store asked for a million password threads starts at most maxPasswordThreads")
    func threadsAreBounded() async throws {
        let work = PasswordWork(threads: 1_000_000, maxQueued: 1_000)
        #expect(work.threads == StoreSettings.maxPasswordThreads)
        let running = Running()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<200 {
                group.addTask {
                    try await work.run {
                        running.state.withLock {
                            $0.now += 1
                            $0.most = max($0.most, $0.now)
                        }
                        Thread.sleep(forTimeInterval: 0.01)
                        running.state.withLock { $0.now -= 1 }
                    }
                }
            }
            try await group.waitForAll()
        }
        let most = running.state.withLock { $0.most }
        #expect(most <= StoreSettings.maxPasswordThreads && most > 1, "\(most) at once")
    }
}

/// How many jobs run at once, and the most that did.
private final class Running: Sendable {
    let state = Mutex((now: 0, most: 0))
}
