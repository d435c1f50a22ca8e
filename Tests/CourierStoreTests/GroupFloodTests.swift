import CourierStore
import Foundation
import GRDB
import Testing

@testable import CourierStoreSQLite

@Suite(
    "Groups one user fills another's list with: leaving them all at once, and a cap on groups made, on both databases"
)
struct GroupFloodTests {
    /// `a` and `b` write to each other: each may put the other in groups.
    static func acquaint(_ fixture: StoreFixture, _ a: UserID, _ b: UserID) async throws {
        _ = try await fixture.sent(
            a,
            "hello-\(a.rawValue)-\(b.rawValue)",
            to: .user(try await Self.name(fixture, b)),
            "hi"
        )
        _ = try await fixture.sent(
            b,
            "hello-\(b.rawValue)-\(a.rawValue)",
            to: .user(try await Self.name(fixture, a)),
            "hi"
        )
    }

    static func name(_ fixture: StoreFixture, _ user: UserID) async throws -> String {
        try await fixture.store.users().first { $0.id == user }!.name
    }

    /// The groups a user (by name) is a member of.
    static func groups(_ fixture: StoreFixture, of user: String) async throws -> [String] {
        var found: [String] = []
        for name in try await fixture.store.groupNames()
        where try await fixture.store.group(named: name).members.contains(user) {
            found.append(name)
        }
        return found.sorted()
    }

    @Test(
        "leave_groups leaves every group one user put this one in (made with it or added it to), and no other",
        arguments: StoreKind.allCases
    )
    func leaveAllFromOne(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("spam", "vic", "amy", "dan")
            let (spam, vic, amy, dan) = (ids["spam"]!, ids["vic"]!, ids["amy"]!, ids["dan"]!)
            try await Self.acquaint(fixture, spam, vic)
            try await Self.acquaint(fixture, amy, vic)
            try await Self.acquaint(fixture, spam, dan)
            // spam makes five groups with vic in them, and adds vic to amy's group (spam an admin there).
            for index in 0..<5 {
                try await store.createGroup(
                    name: "spam\(index)",
                    owner: "spam",
                    members: ["vic"],
                    byOwner: true,
                    nowMs: 1
                )
            }
            try await Self.acquaint(fixture, amy, spam)
            try await store.createGroup(name: "amys", owner: "amy", members: ["spam"], byOwner: true, nowMs: 1)
            try await store.setRole(in: "amys", of: "spam", to: .admin, by: amy, nowMs: 1)
            try await store.changeMembers(of: "amys", actor: spam, add: ["vic"], remove: [], nowMs: 2)
            // amy puts vic in a group of her own, and spam in it too: not spam's doing for vic.
            try await store.createGroup(
                name: "friends",
                owner: "amy",
                members: ["vic", "spam"],
                byOwner: true,
                nowMs: 3
            )
            // vic made one and put spam in it: vic stays (vic was put there by nobody).
            try await store.createGroup(name: "vics", owner: "vic", members: ["spam"], byOwner: true, nowMs: 3)
            // spam's group that vic left already, and one with dan only.
            try await store.createGroup(name: "spam-gone", owner: "spam", members: ["vic"], byOwner: true, nowMs: 3)
            try await store.changeMembers(of: "spam-gone", actor: vic, add: [], remove: ["vic"], nowMs: 4)
            try await store.createGroup(name: "dans", owner: "spam", members: ["dan"], byOwner: true, nowMs: 4)

            let left = try await store.leaveGroups(of: vic, addedBy: "SPAM", nowMs: 5)
            #expect(left.groups.sorted() == ["amys", "spam0", "spam1", "spam2", "spam3", "spam4"])
            #expect(try await Self.groups(fixture, of: "vic") == ["friends", "vics"])
            #expect(try await Self.groups(fixture, of: "dan") == ["dans"])
            // Everyone in those groups is told vic left: spam's log grew, amy's too (amys).
            #expect(left.appended[spam] != nil && left.appended[amy] != nil && left.appended[vic] != nil)
            #expect(left.appended[dan] == nil)
            let vicLog = try await fixture.log(vic)
            let leaves = vicLog.filter {
                if case .membership(_, let user, let change, _) = $0.kind {
                    user == "vic" && change == .left
                } else {
                    false
                }
            }
            #expect(leaves.count == 6 + 1, "six now, one from spam-gone: \(leaves.count)")
            // Again: nothing left to leave.
            #expect(try await store.leaveGroups(of: vic, addedBy: "spam", nowMs: 6).groups.isEmpty)
            // No such user.
            await expectCode(.unknownUser) { _ = try await store.leaveGroups(of: vic, addedBy: "nobody", nowMs: 6) }
        }
    }

    @Test(
        "an owner who leaves all of one user's groups hands each on; the administrator's additions are nobody's",
        arguments: StoreKind.allCases
    )
    func leavingOwnersAndAdministrators(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("spam", "vic", "amy")
            let (spam, vic) = (ids["spam"]!, ids["vic"]!)
            try await Self.acquaint(fixture, spam, vic)
            try await store.createGroup(name: "g1", owner: "spam", members: ["vic"], byOwner: true, nowMs: 1)
            // spam hands g1 to vic: vic, the owner now, was still put there by spam.
            try await store.transferOwnership(of: "g1", to: "vic", by: spam, nowMs: 2)
            // The administrator puts vic in a group of spam's: that is nobody's doing.
            try await store.createGroup(name: "g2", owner: "spam", members: [], nowMs: 2)
            try await store.changeMembers(of: "g2", actor: nil, add: ["vic"], remove: [], nowMs: 3)
            let left = try await store.leaveGroups(of: vic, addedBy: "spam", nowMs: 4)
            #expect(left.groups == ["g1"])
            let g1 = try await store.group(named: "g1")
            #expect(g1.owner == "spam" && g1.members == ["spam"])
            #expect(try await Self.groups(fixture, of: "vic") == ["g2"])
        }
    }

    @Test(
        "a user may have made at most maxGroupsPerMaker groups that still have members",
        arguments: StoreKind.allCases
    )
    func capOnGroupsMade(kind: StoreKind) async throws {
        var limits = StoreLimits()
        limits.maxGroupsPerMaker = 3
        try await StoreFixture.with(kind, limits: limits) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("spam", "vic")
            try await Self.acquaint(fixture, ids["spam"]!, ids["vic"]!)
            for index in 0..<3 {
                try await store.createGroup(name: "g\(index)", owner: "spam", members: ["vic"], byOwner: true, nowMs: 1)
            }
            await expectCode(.quotaExceeded) {
                try await store.createGroup(name: "g3", owner: "spam", members: ["vic"], byOwner: true, nowMs: 1)
            }
            // Handing one on does not free its place (it is still one spam made) …
            try await store.transferOwnership(of: "g0", to: "vic", by: ids["spam"]!, nowMs: 2)
            await expectCode(.quotaExceeded) {
                try await store.createGroup(name: "g3", owner: "spam", members: [], byOwner: true, nowMs: 2)
            }
            // … a group left empty does.
            try await store.changeMembers(of: "g1", actor: ids["vic"]!, add: [], remove: ["vic"], nowMs: 3)
            try await store.changeMembers(of: "g1", actor: ids["spam"]!, add: [], remove: ["spam"], nowMs: 3)
            try await store.createGroup(name: "g3", owner: "spam", members: [], byOwner: true, nowMs: 4)
            // The administrator is not held to it, and what it makes counts for nobody.
            try await store.createGroup(name: "g4", owner: "spam", members: ["vic"], nowMs: 5)
            try await store.changeMembers(of: "g3", actor: ids["spam"]!, add: [], remove: ["spam"], nowMs: 6)
            try await store.createGroup(name: "g5", owner: "spam", members: [], byOwner: true, nowMs: 7)
        }
    }

    @Test("migration v13: groups from before were made by their owner, members from before were put in by it")
    func migration() async throws {
        let queue = try DatabaseQueue()
        try Schema.migrator.migrate(queue, upTo: "v12-skeletons")
        try await queue.write { db in
            try db.execute(sql: "INSERT INTO users (id, name, created_ms) VALUES (1, 'own', 0), (2, 'mem', 0)")
            try db.execute(
                sql: "INSERT INTO conversations (id, kind, name, owner_id, created_ms) VALUES (7, 2, 'g', 1, 0)"
            )
            try db.execute(
                sql: """
                    INSERT INTO members (conversation_id, user_id, joined_seq) VALUES (7, 1, 0), (7, 2, 0)
                    """
            )
        }
        try Schema.migrator.migrate(queue)
        try await queue.read { db in
            #expect(try Int64.fetchOne(db, sql: "SELECT creator_id FROM conversations WHERE id = 7") == 1)
            let addedBy = try Row.fetchAll(db, sql: "SELECT user_id, added_by FROM members ORDER BY user_id")
                .map { "\($0["user_id"] as Int64) \(($0["added_by"] as Int64?).map(String.init) ?? "nil")" }
            #expect(addedBy == ["1 nil", "2 1"])
        }
    }
}
