import CourierProtocol
import CourierStore
import CourierTesting
import Foundation
import Testing

/// The store's half of collecting files nothing names (Rules/MediaCollection.swift), on both databases: what keeps a
/// file, dooming one, and the races with a send and an upload's record.
@Suite struct MediaCollectionTests {
    static let day: Int64 = 86_400_000

    static func digest(_ n: Int) -> String { String(format: "%064x", n) }

    /// A media message of `sha256` from `sender`.
    static func mediaSend(_ sender: UserID, _ id: String, to: Conversation, _ sha256: String) -> WriteRequest {
        var body = Courier_V1_Body()
        body.media = .with {
            $0.kind = .file
            $0.sha256 = sha256
            $0.size = 10
            $0.name = "f.bin"
        }
        return .send(
            .init(
                sender: sender,
                id: id,
                to: to,
                body: try! body.serializedBytes(),
                media: MediaReference(sha256: sha256, size: 10, mime: "application/octet-stream", name: "f.bin")
            )
        )
    }

    @Test(
        "a file is kept by a message, a profile picture or a young upload record; dooming drops the rest",
        arguments: StoreKind.allCases
    )
    func keptAndDoomed(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("alice", "bob", "carol")
            let (alice, bob, carol) = (ids["alice"]!, ids["bob"]!, ids["carol"]!)
            let t0 = StoreFixture.start
            let (sent, unsent, recalled, avatar, thumb, young, removedsPicture) = (
                Self.digest(1), Self.digest(2), Self.digest(3), Self.digest(4), Self.digest(5), Self.digest(6),
                Self.digest(7)
            )
            for sha in [sent, unsent, recalled, avatar, thumb] {
                try await store.recordUpload(user: alice, sha256: sha, size: 10, quota: 1 << 20, nowMs: t0)
            }
            try await store.recordUpload(user: bob, sha256: young, size: 10, quota: 1 << 20, nowMs: t0 + Self.day)
            try await store.recordUpload(user: carol, sha256: removedsPicture, size: 10, quota: 1 << 20, nowMs: t0)
            let batch = try await store.apply(
                [
                    Self.mediaSend(alice, "m1", to: .user("bob"), sent),
                    Self.mediaSend(alice, "m2", to: .user("bob"), recalled),
                ],
                nowMs: t0
            )
            #expect(batch.outcomes.allSatisfy { refusal($0) == nil })
            let recall = try await store.apply([.recall(user: alice, conversation: .user("bob"), id: "m2")], nowMs: t0)
            #expect(refusal(recall.outcomes[0]) == nil)
            func picture(_ sha: String, _ size: Int64 = 10) -> ProfileImage {
                ProfileImage(sha256: sha, size: size, mime: "image/png", width: 4, height: 4)
            }
            try await store.setProfile(
                of: alice,
                ProfileUpdate(avatar: .set(avatar: picture(avatar), thumbnail: picture(thumb))),
                nowMs: t0
            )
            try await store.setProfile(
                of: carol,
                ProfileUpdate(avatar: .set(avatar: picture(removedsPicture), thumbnail: picture(removedsPicture))),
                nowMs: t0
            )
            try await store.removeUser(named: "carol", nowMs: t0)

            // A day on, records of the first moment are old; bob's is young.
            let since = t0 + Self.day
            let all = [sent, unsent, recalled, avatar, thumb, young, removedsPicture]
            #expect(try await store.referencedMedia(all, ownedSinceMs: since) == [sent, avatar, thumb, young])
            // Before the day, every record keeps its file.
            #expect(try await store.referencedMedia(all, ownedSinceMs: t0) == Set(all))

            for kept in [sent, avatar, thumb, young] {
                #expect(try await store.doomMedia(kept, ownedSinceMs: since, nowMs: since) == false, "\(kept)")
            }
            let usage = try await store.mediaUsage(of: alice)
            #expect(try await store.doomMedia(unsent, ownedSinceMs: since, nowMs: since))
            #expect(try await store.doomMedia(recalled, ownedSinceMs: since, nowMs: since))
            // Another collection (another node's) dooming it again is told it is not its to delete.
            #expect(try await store.doomMedia(recalled, ownedSinceMs: since, nowMs: since) == false)
            // One doomed an hour before is left over; one doomed now may be another's, still at work.
            #expect(try await store.doomedMedia(beforeMs: since).isEmpty)
            #expect(try await store.doomedMedia(beforeMs: .max) == [unsent, recalled].sorted())
            // Alice no longer holds them: her quota counts them no more, and she cannot send them.
            #expect(try await store.mediaUsage(of: alice) == usage - 20)
            #expect(try await store.uploadedSize(by: alice, sha256: unsent) == nil)
            let refused = try await store.apply([Self.mediaSend(alice, "m3", to: .user("bob"), unsent)], nowMs: since)
            #expect(refusal(refused.outcomes[0]) == .unknownMedia)
            // Nor may anyone record an upload of them until they are gone.
            await expectCode(.uploadBusy) {
                try await store.recordUpload(user: bob, sha256: unsent, size: 10, quota: 1 << 20, nowMs: since)
            }
            try await store.forgetDoomedMedia(unsent)
            #expect(try await store.doomedMedia(beforeMs: .max) == [recalled])
            try await store.recordUpload(user: bob, sha256: unsent, size: 10, quota: 1 << 20, nowMs: since)
            #expect(try await store.uploadedSize(by: bob, sha256: unsent) == 10)
            // An upload record made young again (the same file uploaded again, or forwarded) keeps its file.
            let again = Self.digest(8)
            try await store.recordUpload(user: alice, sha256: again, size: 10, quota: 1 << 20, nowMs: t0)
            #expect(try await store.referencedMedia([again], ownedSinceMs: since).isEmpty)
            try await store.recordUpload(user: alice, sha256: again, size: 10, quota: 1 << 20, nowMs: since)
            #expect(try await store.referencedMedia([again], ownedSinceMs: since) == [again])
            #expect(try await store.doomMedia(again, ownedSinceMs: since, nowMs: since) == false)
            // A doomed file's message is as gone as before: nobody sees the recalled one.
            #expect(try await store.mediaAccess(for: bob, sha256: recalled) == nil)
        }
    }

    @Test("a send of a file and its doom race: one of them wins, never both", arguments: StoreKind.allCases)
    func sendAgainstDoom(kind: StoreKind) async throws {
        let seed = TestSeed.make(for: "sendAgainstDoom")
        var random = SeededRandom(seed: seed)
        // Each side waits a little before it goes, so that either may come first (a doom is one short transaction,
        // a send a longer one: the doom may wait longer).
        let delays = (0..<80).map { UInt64.random(in: 0...($0 % 2 == 0 ? 12_000_000 : 3_000_000), using: &random) }
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("alice", "bob")
            let (alice, _) = (ids["alice"]!, ids["bob"]!)
            let t0 = StoreFixture.start
            let since = t0 + Self.day
            var (sends, dooms) = (0, 0)
            for round in 0..<40 {
                let sha = Self.digest(1000 + round)
                try await store.recordUpload(user: alice, sha256: sha, size: 10, quota: 1 << 30, nowMs: t0)
                let delay = delays[2 * round]
                async let doomed = { () async throws -> Bool in
                    try await Task.sleep(nanoseconds: delay)
                    return try await store.doomMedia(sha, ownedSinceMs: since, nowMs: since)
                }()
                try await Task.sleep(nanoseconds: delays[2 * round + 1])
                let batch = try await store.apply(
                    [Self.mediaSend(alice, "r\(round)", to: .user("bob"), sha)],
                    nowMs: since
                )
                let wasDoomed = try await doomed
                let went = refusal(batch.outcomes[0]) == nil
                #expect(went != wasDoomed, "round \(round): sent \(went), doomed \(wasDoomed), seed \(seed)")
                if went {
                    sends += 1
                    #expect(try await store.referencedMedia([sha], ownedSinceMs: since) == [sha], "seed \(seed)")
                } else {
                    dooms += 1
                    #expect(refusal(batch.outcomes[0]) == .unknownMedia, "seed \(seed)")
                }
            }
            print("sendAgainstDoom(\(kind)): \(sends) sends won, \(dooms) dooms won, seed \(seed)")
        }
    }

    @Test(
        "an upload's record and a doom race: the record is refused, or the file is kept",
        arguments: StoreKind.allCases
    )
    func recordAgainstDoom(kind: StoreKind) async throws {
        let seed = TestSeed.make(for: "recordAgainstDoom")
        var random = SeededRandom(seed: seed)
        // Each side waits a little before it goes, so that either may come first.
        let delays = (0..<80).map { _ in UInt64.random(in: 0...3_000_000, using: &random) }
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            let t0 = StoreFixture.start
            let since = t0 + Self.day
            for round in 0..<40 {
                let sha = Self.digest(2000 + round)
                try await store.recordUpload(user: alice, sha256: sha, size: 10, quota: 1 << 30, nowMs: t0)
                let delay = delays[2 * round]
                async let doomed = { () async throws -> Bool in
                    try await Task.sleep(nanoseconds: delay)
                    return try await store.doomMedia(sha, ownedSinceMs: since, nowMs: since)
                }()
                try await Task.sleep(nanoseconds: delays[2 * round + 1])
                var recorded = true
                do {
                    try await store.recordUpload(user: bob, sha256: sha, size: 10, quota: 1 << 30, nowMs: since)
                } catch let error as CourierStoreError where error.code == .uploadBusy {
                    recorded = false
                }
                let wasDoomed = try await doomed
                #expect(
                    recorded != wasDoomed,
                    "round \(round): recorded \(recorded), doomed \(wasDoomed), seed \(seed)"
                )
                #expect(try await store.uploadedSize(by: bob, sha256: sha) == (recorded ? 10 : nil), "seed \(seed)")
            }
        }
    }
}
