import CourierStore
import CourierTesting
import Foundation
import Testing

@Suite("Groups in their members' hands: roles, transfers, succession, and the races")
struct GroupRoleTests {
    static let now = StoreFixture.start

    /// The role events in a user's log, as "user role".
    static func roleEvents(_ fixture: StoreFixture, _ user: UserID) async throws -> [String] {
        try await fixture.log(user).compactMap {
            guard case .role(_, let who, let role, _) = $0.kind else { return nil }
            return "\(who) \(role)"
        }
    }

    static func roles(_ store: any CourierDatabase, _ group: String) async throws -> [String] {
        try await store.groupMembers(of: group, for: nil).map { "\($0.user) \($0.role)" }
    }

    @Test(
        "admins add and remove members of a lower role; only the owner changes roles; every change reaches every member",
        arguments: StoreKind.allCases
    )
    func roles(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("alice", "bob", "carol", "dave")
            let (alice, bob, carol) = (ids["alice"]!, ids["bob"]!, ids["carol"]!)
            try await store.createGroup(
                name: "reading.club",
                owner: "alice",
                members: ["bob", "carol"],
                byOwner: false,
                nowMs: Self.now
            )
            // A member adds and removes no one.
            await expectCode(.notAdmin) {
                try await store.changeMembers(
                    of: "reading.club",
                    actor: bob,
                    add: [],
                    remove: ["carol"],
                    nowMs: Self.now
                )
            }
            await expectCode(.notOwner) {
                try await store.setRole(in: "reading.club", of: "carol", to: .admin, by: bob, nowMs: Self.now)
            }
            try await store.setRole(in: "reading.club", of: "bob", to: .admin, by: alice, nowMs: Self.now)
            #expect(try await Self.roles(store, "reading.club") == ["alice owner", "bob admin", "carol member"])
            for user in [alice, bob, carol] { #expect(try await Self.roleEvents(fixture, user) == ["bob admin"]) }
            // The same again changes nothing and tells no one.
            #expect(
                try await store.setRole(in: "reading.club", of: "bob", to: .admin, by: alice, nowMs: Self.now).isEmpty
            )
            // An admin removes a member, not the owner; and changes no role.
            await expectCode(.notOwner) {
                try await store.changeMembers(
                    of: "reading.club",
                    actor: bob,
                    add: [],
                    remove: ["alice"],
                    nowMs: Self.now
                )
            }
            await expectCode(.notOwner) {
                try await store.setRole(in: "reading.club", of: "carol", to: .admin, by: bob, nowMs: Self.now)
            }
            try await store.changeMembers(of: "reading.club", actor: bob, add: [], remove: ["carol"], nowMs: Self.now)
            #expect(try await Self.roles(store, "reading.club") == ["alice owner", "bob admin"])
            // Names that are not members, and the owner's own role, are refused.
            await expectCode(.notMember) {
                try await store.setRole(in: "reading.club", of: "dave", to: .admin, by: alice, nowMs: Self.now)
            }
            await expectCode(.invalidRequest) {
                try await store.setRole(in: "reading.club", of: "alice", to: .member, by: alice, nowMs: Self.now)
            }
            await expectCode(.notMember) { _ = try await store.groupMembers(of: "reading.club", for: ids["dave"]!) }
            try await store.setRole(in: "reading.club", of: "bob", to: .member, by: alice, nowMs: Self.now)
            #expect(try await Self.roleEvents(fixture, bob) == ["bob admin", "bob member"])
        }
    }

    @Test(
        "a transfer makes the old owner an admin; an owner who leaves or is removed hands the group on",
        arguments: StoreKind.allCases
    )
    func transferAndSuccession(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("alice", "bob", "carol", "dave")
            let (alice, bob, carol, dave) = (ids["alice"]!, ids["bob"]!, ids["carol"]!, ids["dave"]!)
            try await store.createGroup(
                name: "team",
                owner: "alice",
                members: ["bob", "carol", "dave"],
                byOwner: false,
                nowMs: Self.now
            )
            try await store.transferOwnership(of: "team", to: "carol", by: alice, nowMs: Self.now)
            #expect(try await Self.roles(store, "team") == ["carol owner", "alice admin", "bob member", "dave member"])
            #expect(try await Self.roleEvents(fixture, dave) == ["carol owner", "alice admin"])
            await expectCode(.notOwner) {
                try await store.transferOwnership(of: "team", to: "bob", by: alice, nowMs: Self.now)
            }
            // The owner leaves: the admin (alice) takes the group, though bob joined as early.
            try await store.changeMembers(of: "team", actor: carol, add: [], remove: ["carol"], nowMs: Self.now)
            #expect(try await Self.roles(store, "team") == ["alice owner", "bob member", "dave member"])
            #expect(try await Self.roleEvents(fixture, bob).last == "alice owner")
            // No admin: the longest-standing member; here the owner's account goes.
            try await store.removeUser(named: "alice", nowMs: Self.now)
            let heir = try await Self.roles(store, "team")
            #expect(heir == ["bob owner", "dave member"], "\(heir)")
            #expect(try await Self.roleEvents(fixture, dave).last == "bob owner")
            // The last one leaves: an empty group, no one to hand it to.
            try await store.changeMembers(of: "team", actor: dave, add: [], remove: ["dave"], nowMs: Self.now)
            try await store.changeMembers(of: "team", actor: bob, add: [], remove: ["bob"], nowMs: Self.now)
            #expect(try await Self.roles(store, "team").isEmpty)
        }
    }

    @Test(
        "an ownership transfer racing the new owner's leave: the group always has one owner, a member",
        arguments: StoreKind.allCases
    )
    func transferRacingLeave(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("alice", "bob", "carol")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            var orders: Set<String> = []
            for round in 0..<8 {
                let group = "race\(round)"
                try await store.createGroup(
                    name: group,
                    owner: "alice",
                    members: ["bob", "carol"],
                    byOwner: false,
                    nowMs: Self.now
                )
                async let transfer: String = Self.outcome {
                    try await store.transferOwnership(of: group, to: "bob", by: alice, nowMs: Self.now)
                }
                async let leave: String = Self.outcome {
                    try await store.changeMembers(of: group, actor: bob, add: [], remove: ["bob"], nowMs: Self.now)
                }
                let (transferred, left) = await (transfer, leave)
                #expect(left == "done", "bob may always leave")
                // Either the transfer found bob gone, or bob owned the group and handed it on as it left.
                #expect(["done", "not-member"].contains(transferred))
                orders.insert(transferred)
                let members = try await store.groupMembers(of: group, for: nil)
                #expect(members.filter { $0.role == .owner }.count == 1, "\(members)")
                #expect(!members.map(\.user).contains("bob"))
                #expect(try await store.group(named: group).owner.map { ["alice", "carol"].contains($0) } == true)
            }
            print("transferRacingLeave (\(kind)): outcomes seen \(orders.sorted())")
        }
    }

    @Test(
        "a member removed while sending: each message is committed before the removal, or refused, never after",
        arguments: StoreKind.allCases
    )
    func removedWhileSending(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            try await store.createGroup(name: "team", owner: "alice", members: ["bob"], byOwner: false, nowMs: Self.now)
            let outcomes = await withTaskGroup(of: [WriteOutcome].self, returning: [WriteOutcome].self) { group in
                group.addTask {
                    var outcomes: [WriteOutcome] = []
                    for index in 0..<60 {
                        if let outcome = try? await fixture.send(bob, "b\(index)", to: .group("team"), "消息 \(index)") {
                            outcomes.append(outcome)
                        }
                    }
                    return outcomes
                }
                group.addTask {
                    // Once some are in, while the rest are being sent.
                    try? await waitUntil("bob's first messages are in") { try await fixture.texts(alice).count >= 10 }
                    _ = try? await store.changeMembers(
                        of: "team",
                        actor: alice,
                        add: [],
                        remove: ["bob"],
                        nowMs: Self.now
                    )
                    return []
                }
                return await group.reduce(into: []) { $0 += $1 }
            }
            #expect(outcomes.count == 60)
            // Where bob left, in alice's log.
            let leftAt = try #require(
                try await fixture.log(alice).compactMap { event -> UInt64? in
                    guard case .membership(_, "bob", .left, let seq) = event.kind else { return nil }
                    return seq
                }.first
            )
            var sent: [UInt64] = []
            var refused = 0
            for outcome in outcomes {
                switch outcome {
                case .sent(let receipt): sent.append(receipt.seq)
                case .refused(let error) where error.code == .notMember: refused += 1
                default: Issue.record("unexpected \(outcome)")
                }
            }
            #expect(sent.allSatisfy { $0 <= leftAt }, "sent \(sent), left at \(leftAt)")
            // Once refused, refused: the sends after the removal all were.
            #expect(sent.count + refused == 60)
            // Alice got every message committed, and none after.
            let seen = try await fixture.texts(alice).count
            #expect(seen == sent.count)
            print(
                "removedWhileSending (\(kind)): \(sent.count) sent before the removal at seq \(leftAt), \(refused) refused"
            )
        }
    }

    /// "done", or the code of the store's refusal.
    static func outcome(_ body: () async throws -> Any) async -> String {
        do {
            _ = try await body()
            return "done"
        } catch let error as CourierStoreError {
            return "\(error.code)"
        } catch {
            return "\(error)"
        }
    }
}
