import CourierProtocol
import CourierServerTesting
import CourierStore
import CourierTesting
import Foundation
import NIOCore
import Testing

@testable import CourierServer

/// Collecting the stored files nothing names, through a running server, on a data folder and on PostgreSQL: what is
/// deleted, what is kept (an upload in progress too), a collection left part way, and an upload of the same bytes
/// racing the collection.
@Suite struct MediaCollectionServerTests {
    static let day: Int64 = 86_400_000

    /// Where the server keeps its rows and files.
    enum Backing: CaseIterable, Sendable {
        case sqlite
        case postgres
    }

    /// Runs `body` on a server of each kind: its server, native port and store.
    static func onEither(
        _ kind: Backing,
        _ body: @escaping @Sendable (CourierServer, Int, any CourierDatabase) async throws -> Void
    ) async throws {
        switch kind {
        case .sqlite:
            try await ServerFixture.with { fixture in
                try await body(fixture.server, fixture.ports.native, fixture.store)
            }
        case .postgres:
            try await ClusterFixture.with(nodes: 1) { cluster in
                try await body(cluster.nodes[0].server, cluster.nodes[0].ports.native, cluster.store)
            }
        }
    }

    @Test(
        "an unsent upload and a recalled message's file go after the age; a sent one and one being uploaded stay",
        arguments: Backing.allCases
    )
    func collected(kind: Backing) async throws {
        try await Self.onEither(kind) { server, port, store in
            for name in ["alice", "bob"] { _ = try await store.addUser(name: name, password: "pw-" + name, nowMs: 0) }
            let media = server.media
            let (alice, _) = try await NativeTestClient.login(port: port, "alice", password: "pw-alice")
            let (bob, _) = try await NativeTestClient.login(port: port, "bob", password: "pw-bob")
            let files = (1...4).map { SeededRandom.bytes(40_000 + $0, seededFor: "collected-\($0)") }
            let (sent, unsent, recalled, uploading) = (files[0], files[1], files[2], files[3])
            for (index, file) in files.enumerated() {
                _ = try #require(try await alice.upload(file, stream: UInt32(1 + 2 * index)).done)
            }
            _ = try await alice.sendMedia(.of(sent), to: .user("bob"), id: "sent")
            _ = try await alice.sendMedia(.of(recalled), to: .user("bob"), id: "recalled")
            let aliceID = try #require(try await store.user(named: "alice")).id
            let recall = try await store.apply(
                [.recall(user: aliceID, conversation: .user("bob"), id: "recalled")],
                nowMs: 0
            )
            guard case .done = recall.outcomes[0] else {
                Issue.record("the recall was refused: \(recall.outcomes[0])")
                return
            }
            // Bob begins uploading the same bytes as one nothing names: half of them, the stream left open.
            guard case .cut = try await bob.upload(uploading, stream: 1, upTo: uploading.count / 2) else {
                Issue.record("bob's upload was not left part way")
                return
            }
            let usage = try await store.mediaUsage(of: aliceID)
            func stored(_ file: [UInt8]) async throws -> Bool {
                try await media.blobs.size(of: NativeTestClient.sha256(file)) == Int64(file.count)
            }
            // Now: every file is younger than the age, and stays.
            let now = SessionClock.systemWallMs()
            #expect(try await media.collectUnreferenced(nowMs: now).files == 0)
            for file in files { #expect(try await stored(file)) }

            // Two days on.
            let later = now + 2 * Self.day
            if let folder = (media.blobs as? BlobStore)?.folder {
                // While a backup copies the files, none goes.
                try BlobStore.markBackup(of: folder)
                #expect(try await media.collectUnreferenced(nowMs: later).files == 0)
                BlobStore.unmarkBackup(of: folder)
            }
            let collected = try await media.collectUnreferenced(nowMs: later)
            #expect(collected.files == 2 && collected.bytes == Int64(unsent.count + recalled.count), "\(collected)")
            #expect(collected.looked == 4)
            #expect(try await stored(sent))
            #expect(try await stored(uploading), "an upload of the same bytes is in progress")
            #expect(try await !stored(unsent))
            #expect(try await !stored(recalled))
            #expect(try await store.mediaUsage(of: aliceID) == usage - Int64(unsent.count + recalled.count))
            #expect(try await store.doomedMedia(beforeMs: .max).isEmpty)
            // Bob still gets the sent one.
            let fetched = try await bob.fetch(NativeTestClient.sha256(sent), stream: 7)
            #expect((try? fetched.get().1) == sent)
            // Alice may upload an unsent one again, from its first byte, and send it.
            let again = try await alice.upload(unsent, stream: 21)
            guard case .done(_, let startedAt) = again else {
                Issue.record("the upload again was refused: \(again)")
                return
            }
            #expect(startedAt == 0, "nothing of it was kept")
            #expect(try await stored(unsent))
            #expect(try await alice.sendMedia(.of(unsent), to: .user("bob"), id: "again").sendAck.seq > 0)

            // A collection that stopped after a doom: the next one deletes the file and forgets the doom.
            let lone = SeededRandom.bytes(1_000, seededFor: "collected-lone")
            _ = try #require(try await alice.upload(lone, stream: 23).done)
            // (Doomed two hours ago: a younger doom may be another node's collection, still at work.)
            let twoHoursAgo = now - 7_200_000
            #expect(try await store.doomMedia(NativeTestClient.sha256(lone), ownedSinceMs: later, nowMs: twoHoursAgo))
            let finished = try await media.collectUnreferenced(nowMs: now)
            #expect(finished.files == 1 && finished.bytes == 1_000, "\(finished)")
            #expect(try await !stored(lone))
            #expect(try await store.doomedMedia(beforeMs: .max).isEmpty)

            // An upload of a doomed file's bytes (a collection between its doom and its deletion): the file is
            // stored, so the upload drops its own bytes, and its record is refused; once the doom is over, it goes.
            let doomed = SeededRandom.bytes(2_000, seededFor: "collected-doomed")
            _ = try #require(try await alice.upload(doomed, stream: 25).done)
            #expect(try await store.doomMedia(NativeTestClient.sha256(doomed), ownedSinceMs: later, nowMs: later))
            #expect(try await bob.upload(doomed, stream: 27).error?.code == "upload-busy")
            try await store.forgetDoomedMedia(NativeTestClient.sha256(doomed))
            #expect(try await bob.upload(doomed, stream: 29).done != nil)
            #expect(try await bob.sendMedia(.of(doomed), to: .user("alice"), id: "doomed").sendAck.seq > 0)
            await alice.close()
            await bob.close()
        }
    }

    @Test(
        "the same bytes uploaded while the collection deletes them: the upload is told to go again, or keeps the file",
        arguments: Backing.allCases
    )
    func uploadAgainstCollection(kind: Backing) async throws {
        let seed = TestSeed.make(for: "uploadAgainstCollection")
        var random = SeededRandom(seed: seed)
        let delays = (0..<24).map { _ in UInt64.random(in: 0...20_000_000, using: &random) }
        try await Self.onEither(kind) { server, port, store in
            for name in ["alice", "bob"] { _ = try await store.addUser(name: name, password: "pw-" + name, nowMs: 0) }
            let media = server.media
            let (alice, _) = try await NativeTestClient.login(port: port, "alice", password: "pw-alice")
            let (bob, _) = try await NativeTestClient.login(port: port, "bob", password: "pw-bob")
            var (busy, kept, deletedFirst) = (0, 0, 0)
            for round in 0..<12 {
                let file = SeededRandom.bytes(300_000, seededFor: "race-\(seed)-\(round)")
                let sha = NativeTestClient.sha256(file)
                _ = try #require(try await alice.upload(file, stream: UInt32(1 + 2 * round)).done)
                // Alice's file and record are old from this moment on; bob's record, made later, is young.
                let cutoff = SessionClock.systemWallMs() + 1
                try await waitUntil("the clock past the cutoff") { SessionClock.systemWallMs() > cutoff }
                let delay = delays[2 * round]
                async let collected = { () async throws -> Int in
                    try await Task.sleep(nanoseconds: delay)
                    return try await media.collectUnreferenced(before: cutoff, nowMs: SessionClock.systemWallMs()).files
                }()
                try await Task.sleep(nanoseconds: delays[2 * round + 1])
                let result = try await bob.upload(file, stream: UInt32(1 + 2 * round))
                if try await collected > 0 { deletedFirst += 1 }
                if let error = result.error {
                    #expect(error.code == "upload-busy", "round \(round): \(error), seed \(seed)")
                    busy += 1
                    // Told to go again, it goes.
                    #expect(try await bob.upload(file, stream: 99).done != nil, "seed \(seed)")
                } else {
                    #expect(result.done != nil, "round \(round): \(result), seed \(seed)")
                    kept += 1
                }
                // Whatever came first, bob holds the file, and its bytes are there for the send.
                #expect(try await media.blobs.size(of: sha) == Int64(file.count), "round \(round), seed \(seed)")
                #expect(
                    try await store.uploadedSize(by: try #require(try await store.user(named: "bob")).id, sha256: sha)
                        == 300_000
                )
                let ack = try await bob.sendMedia(.of(file), to: .user("alice"), id: "race-\(round)")
                #expect(ack.sendAck.seq > 0, "round \(round): \(ack), seed \(seed)")
            }
            print(
                "uploadAgainstCollection(\(kind)): \(busy) told to upload again, \(kept) done "
                    + "(\(deletedFirst) rounds the collection deleted alice's copy first), seed \(seed)"
            )
            await alice.close()
            await bob.close()
        }
    }
}
