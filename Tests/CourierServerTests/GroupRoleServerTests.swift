import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import Foundation
import Testing

@Suite("Groups in their members' hands over the native port", .serialized)
struct GroupRoleServerTests {
    /// The next `count` role events a client receives (one envelope may carry several), as "group user role".
    static func roles(_ client: NativeTestClient, _ count: Int = 1) async throws -> [String] {
        var seen: [String] = []
        while seen.count < count {
            seen += try await client.expect("a role event") { envelope -> [String]? in
                guard case .events(let events)? = envelope.body else { return nil }
                let roles = events.events.compactMap { event -> String? in
                    guard case .role(let change)? = event.kind else { return nil }
                    return "\(change.group) \(change.user) \(change.role)"
                }
                return roles.isEmpty ? nil : roles
            }
        }
        return seen
    }

    @Test(
        "promote, remove by an admin, the member list, transfer: each refused or done as the roles say, each an event"
    )
    func roles() async throws {
        try await ServerFixture.with { fixture in
            let port = fixture.ports.native
            for name in ["alice", "bob", "carol"] { try await fixture.user(name) }
            try await fixture.store.createGroup(
                name: "team.jp",
                owner: "alice",
                members: ["bob", "carol"],
                byOwner: false,
                nowMs: 1
            )
            let (alice, _) = try await NativeTestClient.login(port: port, "alice")
            let (bob, _) = try await NativeTestClient.login(port: port, "bob")
            let (carol, _) = try await NativeTestClient.login(port: port, "carol")
            func manage(
                _ client: NativeTestClient,
                _ action: Courier_V1_ManageGroup.OneOf_Action
            ) async throws -> String {
                var envelope = ClientEnvelope()
                envelope.manageGroup.group = "team.jp"
                envelope.manageGroup.action = action
                let id = try await client.send(envelope)
                let answer = try await client.expect("the answer") { $0.requestID == id ? $0 : nil }
                return answer.failure?.code ?? (answer.isDone ? "done" : "\(answer)")
            }
            func users(_ names: String...) -> Courier_V1_ManageGroup.Members { .with { $0.users = names } }
            #expect(try await manage(bob, .remove(users("carol"))) == ErrorCodes.notAdmin)
            #expect(try await manage(bob, .promote(users("carol"))) == ErrorCodes.notOwner)
            #expect(try await manage(alice, .promote(users("bob"))) == "done")
            for client in [alice, bob, carol] { #expect(try await Self.roles(client) == ["team.jp bob admin"]) }
            #expect(try await manage(bob, .remove(users("alice"))) == ErrorCodes.notOwner)
            #expect(try await manage(bob, .remove(users("carol"))) == "done")
            let listed = try await bob.request { $0.groupMembers.group = "team.jp" }
            guard case .groupMembers(let members)? = listed.body else {
                Issue.record("no member list: \(listed)")
                return
            }
            #expect(members.members.map { "\($0.user) \($0.role)" } == ["alice owner", "bob admin"])
            let outsider = try await carol.request { $0.groupMembers.group = "team.jp" }
            #expect(outsider.failure?.code == ErrorCodes.notMember)
            #expect(try await manage(alice, .transfer(.with { $0.user = "bob" })) == "done")
            #expect(try await Self.roles(bob, 2) == ["team.jp bob owner", "team.jp alice admin"])
            for client in [alice, bob, carol] { await client.close() }
        }
    }
}
