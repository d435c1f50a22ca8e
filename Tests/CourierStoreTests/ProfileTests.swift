import CourierStore
import CourierTesting
import Foundation
import Testing

@Suite("Profiles: display names, avatars, and the events that carry them")
struct ProfileTests {
    static let now = StoreFixture.start

    /// The profile events in a user's log, as (whose, display name).
    static func profileEvents(_ fixture: StoreFixture, _ user: UserID) async throws -> [(String, String?)] {
        try await fixture.log(user).compactMap {
            guard case .profile(let profile) = $0.kind else { return nil }
            return (profile.user, profile.displayName)
        }
    }

    @Test(
        "display names take every script, within the limits, and refuse what would mislead",
        arguments: StoreKind.allCases
    )
    func displayNames(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let alice = try #require(try await fixture.users("alice")["alice"])
            func set(_ name: String) async throws {
                try await store.setProfile(of: alice, ProfileUpdate(displayName: name), nowMs: Self.now)
            }
            func shown() async throws -> String? { try await store.profiles(of: ["alice"]).first?.displayName }
            for name in [
                "王小明", "田中 太郎", "محمد علي", "Zoë 🐉", "👩🏽‍💻", String(repeating: "字", count: 64), "❤️ 김민준",
                // Vietnamese, its marks combining (two on one letter), and a subdivision flag (tags, in their place).
                "Nguye\u{302}\u{303}n", "🏴\u{E0067}\u{E0062}\u{E0065}\u{E006E}\u{E0067}\u{E007F} Gareth",
                "नमस्ते", "שָׁלוֹם",
            ] {
                try await set(name)
                #expect(try await shown() == name)
            }
            try await set("  李雷\u{3000} ")
            #expect(try await shown() == "李雷", "the white space around it (an ideographic space too) dropped")
            for bad in [
                String(repeating: "字", count: 65),
                // 64 characters, each of many bytes: past the byte limit.
                String(repeating: "👨‍👩‍👧‍👦", count: 64),
                "\u{202E}nimda", "ad\u{2066}min", "two\nlines", "tab\there", "\u{200B}\u{200B}", "\u{2060}",
                "nul\u{0}",
                // Marks that turn what follows around, characters that show nothing beside ones that do, fillers,
                // hidden tags, the braille blank, private use, and a tower of marks.
                "\u{200F}alice", "alice\u{061C}", "a\u{00AD}lice", "\u{FEFF}alice", "alice\u{3164}", "\u{3164}",
                "\u{115F}", "alice\u{E0041}\u{E0042}", "\u{2800}", "\u{2800}\u{2800}", "\u{E000}boss", "\u{0301}",
                "a" + String(repeating: "\u{0301}", count: 5), "line\u{2028}break",
            ] {
                do {
                    try await set(bad)
                    Issue.record("\(bad.debugDescription) was taken")
                } catch let error as CourierStoreError {
                    #expect(error.code == .invalidProfile, "\(bad.debugDescription): \(error)")
                }
            }
            #expect(try await shown() == "李雷", "refusals change nothing")
            try await set("")
            #expect(try await shown() == nil)
            #expect(try await store.profiles(of: ["ALICE", "nobody", "alice"]).map(\.user) == ["alice"])
        }
    }

    @Test(
        "a change reaches the user and everyone who sees it as an event, read as the profile now is; nothing changed tells no one",
        arguments: StoreKind.allCases
    )
    func events(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("alice", "bob", "carol", "dave", "erin")
            let (alice, bob, carol, dave, erin) = (
                ids["alice"]!, ids["bob"]!, ids["carol"]!, ids["dave"]!, ids["erin"]!
            )
            try await store.createGroup(name: "team", owner: "alice", members: ["bob"], byOwner: false, nowMs: Self.now)
            // carol and alice have written to each other; erin wrote to alice, who never answered nor read.
            _ = try await fixture.sent(alice, "a1", to: .user("carol"), "你好")
            _ = try await fixture.sent(carol, "c1", to: .user("alice"), "こんにちは")
            _ = try await fixture.sent(erin, "e1", to: .user("alice"), "hi, stranger")

            let grown = try await store.setProfile(of: alice, ProfileUpdate(displayName: "爱丽丝"), nowMs: Self.now)
            #expect(Set(grown.keys) == [alice, bob, carol])
            for user in [alice, bob, carol] {
                #expect(try await Self.profileEvents(fixture, user).map(\.1) == ["爱丽丝"])
            }
            for user in [dave, erin] { #expect(try await Self.profileEvents(fixture, user).isEmpty) }

            // The same again: nothing to tell.
            #expect(try await store.setProfile(of: alice, ProfileUpdate(displayName: " 爱丽丝 "), nowMs: Self.now).isEmpty)
            #expect(try await Self.profileEvents(fixture, bob).count == 1)
            // An event is read as the profile now is: the first one, read after a second change, says the second.
            try await store.setProfile(of: alice, ProfileUpdate(displayName: "Алиса"), nowMs: Self.now + 1)
            #expect(try await Self.profileEvents(fixture, bob).map(\.1) == ["Алиса", "Алиса"])
            // Others see only the profiles of those they share a conversation with: erin wrote to alice, dave never.
            #expect(try await store.profiles(of: ["alice", "bob"], for: dave).isEmpty)
            #expect(try await store.profiles(of: ["alice"], for: erin).map(\.displayName) == ["Алиса"])
            #expect(try await store.profiles(of: ["dave", "alice"], for: dave).map(\.user) == ["dave"])
            // A deleted account's profile goes with it, and those who saw it are told (an empty profile).
            try await store.deleteAccount(alice, password: "pw-alice", nowMs: Self.now + 2)
            #expect(try await Self.profileEvents(fixture, bob).map(\.1) == [nil, nil, nil])
            #expect(try await Self.profileEvents(fixture, carol).count == 3)
            #expect(try await Self.profileEvents(fixture, dave).isEmpty)
            #expect(try await store.profiles(of: ["alice"]).isEmpty)
        }
    }

    @Test(
        "an avatar is an image the user uploaded, with a small thumbnail; anyone may fetch them while they are shown",
        arguments: StoreKind.allCases
    )
    func avatars(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("alice", "dave")
            let (alice, dave) = (ids["alice"]!, ids["dave"]!)
            let big = ProfileImage(
                sha256: String(repeating: "a", count: 64),
                size: 300_000,
                mime: "image/jpeg",
                width: 800,
                height: 600
            )
            let small = ProfileImage(
                sha256: String(repeating: "b", count: 64),
                size: 9_000,
                mime: "image/jpeg",
                width: 128,
                height: 96
            )
            func set(_ avatar: ProfileImage, _ thumbnail: ProfileImage) async throws {
                try await store.setProfile(
                    of: alice,
                    ProfileUpdate(avatar: .set(avatar: avatar, thumbnail: thumbnail)),
                    nowMs: Self.now
                )
            }
            // Not uploaded yet.
            await expectCode(.unknownMedia) { try await set(big, small) }
            for picture in [big, small] {
                _ = try await store.recordUpload(
                    user: alice,
                    sha256: picture.sha256,
                    size: picture.size,
                    quota: 1 << 30,
                    nowMs: Self.now
                )
            }
            #expect(
                try await store.mediaAccess(for: dave, sha256: small.sha256) == nil,
                "not shown: dave may not see it"
            )
            var wrongSize = big
            wrongSize.size += 1
            await expectCode(.unknownMedia) { try await set(wrongSize, small) }
            var text = big
            text.mime = "text/html"
            await expectCode(.invalidProfile) { try await set(text, small) }
            // The big one as a thumbnail: over the thumbnail's limit.
            await expectCode(.invalidProfile) { try await set(big, big) }
            var badDigest = small
            badDigest.sha256 = "../etc/passwd"
            await expectCode(.invalidProfile) { try await set(big, badDigest) }

            try await set(big, small)
            let shown = try #require(try await store.profiles(of: ["alice"]).first)
            #expect(shown.avatar == big && shown.thumbnail == small)
            // Anyone may fetch the pictures shown, a stranger too, with their type.
            #expect(try await store.mediaAccess(for: dave, sha256: small.sha256)?.mime == "image/jpeg")
            #expect(try await store.mediaAccess(for: dave, sha256: big.sha256)?.size == big.size)
            try await store.setProfile(of: alice, ProfileUpdate(avatar: .remove), nowMs: Self.now + 1)
            #expect(try await store.profiles(of: ["alice"]).first?.avatar == nil)
            #expect(try await store.mediaAccess(for: dave, sha256: small.sha256) == nil)
            // Its owner still may (it uploaded it).
            #expect(try await store.mediaAccess(for: alice, sha256: small.sha256) != nil)
        }
    }
}
