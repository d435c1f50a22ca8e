import CourierPostgresTesting
import CourierProtocol
import CourierStore
import CourierTesting
import Foundation
import GRDB
import PostgresNIO
import Testing

@testable import CourierStorePostgres
@testable import CourierStoreSQLite

@Suite("Titles, mentions, mute and names that read alike, on both databases")
struct QuietTests {
    static let now = StoreFixture.start

    /// A text body, as a client sends it.
    static func body(_ text: String) -> [UInt8] { SearchTests.body(text) }

    static func send(
        _ fixture: StoreFixture,
        _ sender: UserID,
        _ id: String,
        to: Conversation,
        _ text: String
    ) async throws -> WriteOutcome {
        try await fixture.store.apply(
            [.send(.init(sender: sender, id: id, to: to, body: Self.body(text)))],
            nowMs: Self.now
        ).outcomes[0]
    }

    /// A user's unread count in a conversation.
    static func count(
        _ fixture: StoreFixture,
        _ user: UserID,
        _ conversation: Conversation
    ) async throws -> UnreadCount? {
        try await fixture.store.unreadCounts(for: user).first { $0.conversation == conversation }
    }

    /// A user's unread mentions in #team.
    static func mentions(_ fixture: StoreFixture, _ user: UserID) async throws -> UInt64? {
        try await Self.count(fixture, user, .group("team"))?.mentions
    }

    /// A group of four: alice owns it, bob is an admin, carol and dave are members.
    static func team(_ fixture: StoreFixture) async throws -> [String: UserID] {
        let ids = try await fixture.users("alice", "bob", "carol", "dave", "erin")
        try await fixture.store.createGroup(
            name: "team",
            owner: "alice",
            members: ["bob", "carol", "dave"],
            byOwner: false,
            nowMs: Self.now
        )
        try await fixture.store.setRole(in: "team", of: "bob", to: .admin, by: nil, nowMs: Self.now)
        return ids
    }

    @Test(
        "a group's title: any script, set by admins and the owner, an event to every member, in counts and rosters",
        arguments: StoreKind.allCases
    )
    func titles(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await Self.team(fixture)
            let (alice, bob, carol, erin) = (ids["alice"]!, ids["bob"]!, ids["carol"]!, ids["erin"]!)
            await expectCode(.notAdmin) {
                try await store.setGroupTitle("carol's", of: "team", by: carol, nowMs: Self.now)
            }
            await expectCode(.notMember) {
                try await store.setGroupTitle("erin's", of: "team", by: erin, nowMs: Self.now)
            }
            await expectCode(.unknownGroup) {
                try await store.setGroupTitle("x", of: "no-such", by: alice, nowMs: Self.now)
            }
            // What a display name may not hold, a title may not: a bidi override, a line break, nothing visible,
            // more than 64 characters.
            for bad in ["abc\u{202E}fdp.exe", "two\nlines", "\u{200B}\u{200B}", String(repeating: "字", count: 65)] {
                await expectCode(.invalidRequest) {
                    try await store.setGroupTitle(bad, of: "team", by: bob, nowMs: Self.now)
                }
            }
            let title = "读书会 📚 مرحبا"
            let grown = try await store.setGroupTitle("  \(title)  ", of: "team", by: bob, nowMs: Self.now)
            #expect(Set(grown.keys) == Set(["alice", "bob", "carol", "dave"].map { ids[$0]! }))
            for user in [alice, bob, carol] {
                let titles = try await fixture.log(user).compactMap { event -> String? in
                    guard case .title(let group, let title, let by, _) = event.kind else { return nil }
                    return "\(group) \(title) \(by)"
                }
                #expect(titles == ["team \(title) bob"], "\(user)")
            }
            #expect(try await fixture.log(erin).isEmpty, "no event to a stranger")
            // The same title again tells no one.
            #expect(try await store.setGroupTitle(title, of: "team", by: alice, nowMs: Self.now).isEmpty)
            #expect(try await Self.count(fixture, carol, .group("team"))?.title == title)
            #expect(try await store.groupRoster(of: "team", for: carol).title == title)
            // Empty takes it away.
            try await store.setGroupTitle("", of: "team", by: alice, nowMs: Self.now)
            #expect(try await Self.count(fixture, carol, .group("team"))?.title == "")
            let last = try await fixture.log(carol).last
            guard case .title(_, let now, let by, _)? = last?.kind else {
                Issue.record("the last event is \(String(describing: last))")
                return
            }
            #expect(now == "" && by == "alice")
            // The administrator's title is no one's.
            try await store.setGroupTitle("管理员的", of: "team", by: nil, nowMs: Self.now)
            guard case .title(_, "管理员的", let admin, _)? = try await fixture.log(carol).last?.kind else {
                Issue.record("no title event for the administrator's title")
                return
            }
            #expect(admin == "")
        }
    }

    @Test(
        "@name mentions a member (every script around it, full-width ＠), @all only from admins; counted unread, gone when read or recalled",
        arguments: StoreKind.allCases
    )
    func mentions(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await Self.team(fixture)
            let (alice, bob, carol, dave, erin) = (
                ids["alice"]!, ids["bob"]!, ids["carol"]!, ids["dave"]!, ids["erin"]!
            )
            func mentions(_ user: UserID) async throws -> UInt64? {
                try await Self.count(fixture, user, .group("team"))?.mentions
            }
            // bob by name after Chinese text, dave by the full-width sign and in another case; erin is no member,
            // carol is the sender, and an address is no mention.
            let outcome = try await Self.send(
                fixture,
                carol,
                "c1",
                to: .group("team"),
                "你好@bob，请看 ＠DAVE. cc @erin @carol mail@alice.example"
            )
            guard case .sent = outcome else {
                Issue.record("\(outcome)")
                return
            }
            #expect(try await mentions(bob) == 1)
            #expect(try await mentions(dave) == 1)
            #expect(try await mentions(alice) == 0)
            #expect(try await mentions(carol) == 0)
            #expect(try await Self.count(fixture, erin, .group("team")) == nil)
            // @all: not from a member; from an admin, everyone else.
            #expect(refusal(try await Self.send(fixture, carol, "c2", to: .group("team"), "@all look")) == .notAdmin)
            guard case .sent = try await Self.send(fixture, bob, "b1", to: .group("team"), "@all 开会了 @bob")
            else {
                Issue.record("@all from an admin was refused")
                return
            }
            #expect(try await mentions(alice) == 1)
            #expect(try await mentions(carol) == 1)
            #expect(try await mentions(dave) == 2)
            #expect(try await mentions(bob) == 0, "sending reads everything before, c1's mention of bob too")
            // Counted whatever the mute.
            try await store.setNotify(.none, in: .group("team"), for: dave, nowMs: Self.now)
            #expect(try await mentions(dave) == 2)
            // A recall takes a mention away.
            _ = try await store.apply([.recall(user: carol, conversation: .group("team"), id: "c1")], nowMs: Self.now)
            #expect(try await mentions(dave) == 1)
            #expect(try await mentions(carol) == 1)
            // Reading takes them away.
            let last = try await Self.count(fixture, dave, .group("team"))!.lastSeq
            _ = try await store.apply(
                [.markRead(user: dave, conversation: .group("team"), upToSeq: last)],
                nowMs: Self.now
            )
            #expect(try await mentions(dave) == 0)
            // A direct message mentions nobody.
            _ = try await store.apply(
                [
                    .send(.init(sender: erin, id: "e1", to: .user("alice"), body: Self.body("@alice hi")))
                ],
                nowMs: Self.now
            )
            #expect(try await Self.count(fixture, alice, .user("erin"))?.mentions == 0)
        }
    }

    @Test(
        "mute: per user and conversation, an event to the user's own devices only, refused outside its conversations",
        arguments: StoreKind.allCases
    )
    func mute(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await Self.team(fixture)
            let (alice, carol, erin) = (ids["alice"]!, ids["carol"]!, ids["erin"]!)
            let before = try await fixture.log(alice).count
            let grown = try await store.setNotify(.mentions, in: .group("team"), for: carol, nowMs: Self.now)
            #expect(Array(grown.keys) == [carol])
            let last = try await fixture.log(carol).last
            #expect(last?.kind == .notify(conversation: .group("team"), level: .mentions))
            #expect(try await fixture.log(alice).count == before)
            #expect(try await Self.count(fixture, carol, .group("team"))?.notify == .mentions)
            #expect(try await Self.count(fixture, alice, .group("team"))?.notify == .all)
            // Unchanged: no event.
            #expect(try await store.setNotify(.mentions, in: .group("team"), for: carol, nowMs: Self.now).isEmpty)
            await expectCode(.notMember) {
                try await store.setNotify(.none, in: .group("team"), for: erin, nowMs: Self.now)
            }
            await expectCode(.notMember) {
                try await store.setNotify(.none, in: .user("alice"), for: erin, nowMs: Self.now)
            }
            await expectCode(.unknownGroup) {
                try await store.setNotify(.none, in: .group("nope"), for: erin, nowMs: Self.now)
            }
            await expectCode(.unknownUser) {
                try await store.setNotify(.none, in: .user("nobody"), for: erin, nowMs: Self.now)
            }
            // A direct conversation mutes too, and names the peer as each side names it.
            _ = try await store.apply(
                [.send(.init(sender: erin, id: "e1", to: .user("alice"), body: Self.body("hi")))],
                nowMs: Self.now
            )
            try await store.setNotify(.none, in: .user("erin"), for: alice, nowMs: Self.now)
            let event = try await fixture.log(alice).last
            #expect(event?.kind == .notify(conversation: .user("erin"), level: .none))
            #expect(try await Self.count(fixture, alice, .user("erin"))?.notify == NotifyLevel.none)
            #expect(try await Self.count(fixture, erin, .user("alice"))?.notify == .all)
        }
    }

    @Test(
        "a new name that reads as another's is refused: I l 1, O 0, rn m, vv w, cl d, . - _ folded, and the reserved words",
        arguments: StoreKind.allCases
    )
    func confusables(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            try await fixture.users("oliver", "mary", "anna.lee", "willow", "alice", "carol", "dave", "vwfan")
            for name in [
                "O1iver", "0liver", "OLIVER", "oIiver", "rnary", "anna_lee", "anna-lee", "wiIlow", "vviIlow",
                // Round three's probe: trailing and doubled marks, and folds read one character at a time.
                "oliver.", "alice-", "carol.", "oliver__", "anna..lee", "anna.-lee", "clave", "vvvfan",
                "rnaRy.", "c1ave",
            ] {
                await expectCode(.nameTaken) {
                    _ = try await store.addUser(name: name, password: "a good password", nowMs: Self.now)
                }
            }
            await expectCode(.invalidName) {
                _ = try await store.addUser(name: "ALL", password: "a good password", nowMs: Self.now)
            }
            for reserved in [
                "aIl", "A1L", "all.", "all-", "everyone", "Here", "channel", "admin", "r00t", "system", "support",
                "courier", "Admin.", "systern",
            ] {
                await expectCode(.invalidName) {
                    _ = try await store.addUser(name: reserved, password: "a good password", nowMs: Self.now)
                }
            }
            // Sign-up checks before any work (a name that reads as mary, not mary itself), and a lowercase i is not
            // an l.
            await expectCode(.nameTaken) {
                _ = try await store.signUp(
                    user: "rnary",
                    password: "a good password",
                    invite: nil,
                    requiresInvite: false,
                    deviceName: "phone",
                    nowMs: Self.now
                )
            }
            _ = try await store.signUp(
                user: "oiiver",
                password: "a good password",
                invite: nil,
                requiresInvite: false,
                deviceName: "phone",
                nowMs: Self.now
            )
            #expect(NameSkeleton.of("O1iver") == NameSkeleton.of("oliver"))
            #expect(NameSkeleton.of("oiiver") != NameSkeleton.of("oliver"))
        }
    }

    @Test("migration v12 works out every name's skeleton again, the oldest of names that read alike keeping it")
    func skeletonsWorkedOutAgain() async throws {
        // (id, name); under v10's fold oliver. and dave had skeletons of their own.
        let users: [(Int64, String)] = [
            (1, "oliver"), (2, "O1iver"), (3, "mary"), (4, "oliver."), (5, "vwfan"), (6, "vvvfan"), (7, "clave"),
            (8, "dave"),
        ]
        let expected = ["oliver 1", "rnary 3", "vvvfan 5", "clave 7"]
        let queue = try DatabaseQueue()
        try Schema.migrator.migrate(queue, upTo: "v11-media-types")
        try await queue.write { db in
            for (id, name) in users {
                try db.execute(sql: "INSERT INTO users (id, name, created_ms) VALUES (?, ?, 0)", arguments: [id, name])
            }
        }
        try Schema.migrator.migrate(queue)
        let rows = try await queue.read { db in
            try Row.fetchAll(db, sql: "SELECT skeleton, user_id FROM name_skeletons ORDER BY user_id")
                .map { "\($0["skeleton"] as String) \($0["user_id"] as Int64)" }
        }
        #expect(rows == expected)
        guard TestDatabase.isEnabled else { return }
        try await TestDatabase.with { location in
            try await PostgresStore(location: location, logger: TestDatabase.logger).migrate()
            try await TestDatabase.admin(location) { connection in
                for (id, name) in users {
                    try await connection.run(
                        "INSERT INTO users (id, name, created_ms) VALUES (\(id), \(name), 0)",
                        logger: TestDatabase.logger
                    )
                }
                // The migration's statement and rule, as `v12-skeletons` runs them.
                try await connection.run("DELETE FROM name_skeletons", logger: TestDatabase.logger)
                try await PostgresSchema.workOutSkeletons(on: connection, logger: TestDatabase.logger)
                let found = try await connection.rows(
                    "SELECT skeleton, user_id FROM name_skeletons ORDER BY user_id",
                    logger: TestDatabase.logger
                ).map { "\(try $0.get("skeleton", as: String.self)) \(try $0.get("user_id", as: Int64.self))" }
                #expect(found == expected)
            }
        }
    }

    @Test(
        "a display name that reads as another user's name, or a reserved one, is refused; one's own in any spelling is not",
        arguments: StoreKind.allCases
    )
    func displayNamesThatPassForOthers(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("oliver", "mallory")
            let mallory = ids["mallory"]!
            for passing in [
                "oliver", "Oliver", "O1iver", "oliver.", "Admin", "SYSTEM", "c0urier",
                // Round three's second probe: other scripts' look-alikes, full-width letters, an @ and marks.
                "оliver", "ｏｌｉｖｅｒ", "Аdmin", "@oliver", "oliver!", "«Оliver»", "ΟLΙVΕR",
            ] {
                await expectCode(.invalidProfile) {
                    try await store.setProfile(of: mallory, ProfileUpdate(displayName: passing), nowMs: Self.now)
                }
            }
            for fine in ["Oliver Twist", "奥利弗", "Mallory ✨", "MALLORY", "ma11ory"] {
                try await store.setProfile(of: mallory, ProfileUpdate(displayName: fine), nowMs: Self.now)
            }
            try await store.setProfile(of: ids["oliver"]!, ProfileUpdate(displayName: "OLIVER"), nowMs: Self.now)
        }
    }

    @Test("skeletons: one character at a time, case folded, marks folded and trimmed")
    func skeletonRule() {
        #expect(NameSkeleton.of("O1iver") == "oliver")
        #expect(NameSkeleton.of("oliver.") == "oliver")
        #expect(NameSkeleton.of("anna..lee") == "anna_lee")
        #expect(NameSkeleton.of("anna-_.lee--") == "anna_lee")
        #expect(NameSkeleton.of("vwfan") == NameSkeleton.of("vvvfan"))
        #expect(NameSkeleton.of("dave") == NameSkeleton.of("clave"))
        #expect(NameSkeleton.of("mary") == NameSkeleton.of("rnary"))
        #expect(NameSkeleton.of("oiiver") != NameSkeleton.of("oliver"))
        #expect(NameSkeleton.of("annalee") != NameSkeleton.of("anna.lee"))
    }

    @Test(
        "a mention is a member's: the whole name before a shorter one, not of members who joined later, not in a text's far end only by the index",
        arguments: StoreKind.allCases
    )
    func mentionEdges(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await Self.team(fixture)
            // bob_ beside bob: an account from before such names were refused (renamed in the database itself).
            try await fixture.users("robert")
            try await fixture.execute("UPDATE users SET name = 'bob_' WHERE name = 'robert'")
            let (alice, carol, erin) = (ids["alice"]!, ids["carol"]!, ids["erin"]!)
            try await store.changeMembers(of: "team", actor: nil, add: ["bob_"], remove: [], nowMs: Self.now)
            let bobUnderscore = try #require(try await store.user(named: "bob_")).id
            let bob = ids["bob"]!
            // "@bob_" and "@bob." are bob, never the look-alike bob_ (round three: a mention goes to the name it
            // reads as); bob_ is mentioned by its whole name only where bob is no member.
            guard case .sent = try await Self.send(fixture, carol, "c1", to: .group("team"), "@bob_ 你好") else {
                Issue.record("not sent")
                return
            }
            #expect(try await Self.mentions(fixture, bob) == 1)
            #expect(try await Self.mentions(fixture, bobUnderscore) == 0)
            _ = try await Self.send(fixture, carol, "c2", to: .group("team"), "问 @bob.")
            #expect(try await Self.mentions(fixture, bob) == 2)
            #expect(try await Self.mentions(fixture, bobUnderscore) == 0)
            try await store.changeMembers(of: "team", actor: nil, add: [], remove: ["bob"], nowMs: Self.now)
            _ = try await Self.send(fixture, carol, "c2b", to: .group("team"), "@bob_ 再见")
            #expect(try await Self.mentions(fixture, bobUnderscore) == 1)
            // A mention past the index's 4,096 characters counts: mentions are read from the whole text.
            let long = String(repeating: "长", count: 5_000) + " @alice"
            _ = try await Self.send(fixture, carol, "c3", to: .group("team"), long)
            #expect(try await Self.mentions(fixture, alice) == 1)
            // erin joins after those: none of them is hers, and @all from before does not count for her.
            try await store.changeMembers(of: "team", actor: nil, add: ["erin"], remove: [], nowMs: Self.now)
            #expect(try await Self.mentions(fixture, erin) == 0)
            _ = try await Self.send(fixture, carol, "c4", to: .group("team"), "welcome @erin")
            #expect(try await Self.mentions(fixture, erin) == 1)
            // Sent and recalled in one batch: no mention is left of it.
            _ = try await store.apply(
                [
                    .send(.init(sender: carol, id: "c5", to: .group("team"), body: Self.body("@erin oops"))),
                    .recall(user: carol, conversation: .group("team"), id: "c5"),
                ],
                nowMs: Self.now
            )
            #expect(try await Self.mentions(fixture, erin) == 1)
            // Leaving and coming back: nothing from before counts, and the mute starts again at all.
            try await store.setNotify(.none, in: .group("team"), for: erin, nowMs: Self.now)
            try await store.changeMembers(of: "team", actor: nil, add: [], remove: ["erin"], nowMs: Self.now)
            try await store.changeMembers(of: "team", actor: nil, add: ["erin"], remove: [], nowMs: Self.now)
            let back = try #require(try await Self.count(fixture, erin, .group("team")))
            #expect(back.mentions == 0 && back.notify == .all)
        }
    }

    @Test("the migration gives names from before their skeletons, the older of two that read alike keeping it")
    func skeletonBackfill() async throws {
        let queue = try DatabaseQueue()
        try Schema.migrator.migrate(queue, upTo: "v9-roles")
        try await queue.write { db in
            for (id, name) in [(1, "oliver"), (2, "O1iver"), (3, "mary")] {
                try db.execute(
                    sql: "INSERT INTO users (id, name, created_ms) VALUES (?, ?, 0)",
                    arguments: [id, name]
                )
            }
        }
        try Schema.migrator.migrate(queue)
        let rows = try await queue.read { db in
            try Row.fetchAll(db, sql: "SELECT skeleton, user_id FROM name_skeletons ORDER BY user_id")
                .map { "\($0["skeleton"] as String) \($0["user_id"] as Int64)" }
        }
        // v10's skeletons, which v12 then works out again by today's rule (mary reads as rnary).
        #expect(rows == ["oliver 1", "rnary 3"])
    }
}
