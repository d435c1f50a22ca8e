import CourierStore
import CourierTesting
import Foundation
import Testing

@Suite("SQLite: the write-ahead log, copied back apart from the writes")
struct CheckpointTests {
    @Test("with background checkpoints, writes past 1,000 pages leave the log to checkpoint(), which copies all of it")
    func backgroundCheckpoints() async throws {
        try await withTemporaryDirectory { folder in
            // The writes' own fallback well out of reach of this test's pages.
            let fixture = try SQLiteFixture(folder: folder) {
                $0.backgroundCheckpoints = true
                $0.writerCheckpointPages = 1_000_000
            }
            let ids = try await fixture.users("alice", "bob")
            // The users were written: the first checkpoint copies them, and the next has nothing to do.
            #expect(try await fixture.store.checkpoint() != nil)
            #expect(try await fixture.store.checkpoint() == nil)
            // SQLite's own default would have the write that passes 1,000 pages copy the log back; here the log
            // keeps growing until a checkpoint.
            let text = String(repeating: "x", count: 3_000)
            for number in 0..<1_500 {
                _ = try await fixture.sent(ids["alice"]!, "m\(number)", to: .user("bob"), text)
            }
            let copied = try #require(try await fixture.store.checkpoint())
            #expect(copied.logPages > 1_000, "the writes copied the log back themselves: \(copied)")
            #expect(copied.checkpointedPages == copied.logPages)
            #expect(try await fixture.texts(ids["bob"]!).count == 1_500)
        }
    }

    @Test("without them, the store asks for no upkeep and checkpoint() does nothing")
    func noBackgroundCheckpoints() async throws {
        try await withTemporaryDirectory { folder in
            let fixture = try SQLiteFixture(folder: folder)
            try await fixture.users("alice")
            #expect(fixture.store.maintenanceInterval == nil)
            #expect(try await fixture.store.checkpoint() == nil)
        }
    }
}
