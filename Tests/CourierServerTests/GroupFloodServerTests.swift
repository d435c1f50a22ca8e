import CourierProtocol
import CourierServerTesting
import CourierStore
import CourierTesting
import Testing

/// Round three's finding: one user put a contact into 300 new groups in half a second, and the contact could only
/// leave them one by one.
@Suite(
    "Groups made and members added are limited per user and per address; leave_groups leaves one user's all",
    .serialized
)
struct GroupFloodServerTests {
    @Test("the fourth group change in the window is refused with rate-limited (per user), a title does not count")
    func perUser() async throws {
        try await ServerFixture.with { fixture in
            let port = fixture.ports.native
            for name in ["spam", "vic", "amy"] { try await fixture.user(name) }
            try await fixture.contacts("spam", "vic")
            try await fixture.contacts("spam", "amy")
            let (spam, _) = try await NativeTestClient.login(port: port, "spam")
            func create(_ group: String) async throws -> ServerEnvelope {
                try await spam.request {
                    $0.manageGroup.group = group
                    $0.manageGroup.create.users = ["vic"]
                }
            }
            #expect(try await create("g1").isDone)
            #expect(try await create("g2").isDone)
            // A refused request counts too (amy is no member of a group that does not exist).
            let refused = try await spam.request {
                $0.manageGroup.group = "nothing"
                $0.manageGroup.add.users = ["amy"]
            }
            #expect(refused.failure?.code == ErrorCodes.unknownGroup, "\(refused)")
            // A title is a profile change, counted apart.
            let title = try await spam.request {
                $0.manageGroup.group = "g1"
                $0.manageGroup.title.title = "周末爬山"
            }
            #expect(title.isDone, "\(title)")
            let limited = try await create("g3")
            #expect(limited.failure?.code == ErrorCodes.rateLimited, "\(limited)")
            #expect(limited.failure.map { $0.retryAfterMs > 0 } == true)
            let add = try await spam.request {
                $0.manageGroup.group = "g1"
                $0.manageGroup.add.users = ["amy"]
            }
            #expect(add.failure?.code == ErrorCodes.rateLimited, "\(add)")
            await spam.close()
        } configure: {
            $0.accounts.maxGroupChangesPerUser = 3
        }
    }

    @Test("users from one address share its allowance of group changes")
    func perAddress() async throws {
        try await ServerFixture.with { fixture in
            let port = fixture.ports.native
            for name in ["spam", "ham", "vic"] { try await fixture.user(name) }
            try await fixture.contacts("spam", "vic")
            try await fixture.contacts("ham", "vic")
            let (spam, _) = try await NativeTestClient.login(port: port, "spam")
            let (ham, _) = try await NativeTestClient.login(port: port, "ham")
            for (client, group) in [(spam, "s1"), (ham, "h1")] {
                let made = try await client.request {
                    $0.manageGroup.group = group
                    $0.manageGroup.create.users = ["vic"]
                }
                #expect(made.isDone, "\(made)")
            }
            let third = try await spam.request {
                $0.manageGroup.group = "s2"
                $0.manageGroup.create.users = ["vic"]
            }
            #expect(third.failure?.code == ErrorCodes.rateLimited, "\(third)")
            await spam.close()
            await ham.close()
        } configure: {
            $0.accounts.maxGroupChangesPerUser = 100
            $0.accounts.maxGroupChangesPerAddress = 2
        }
    }

    @Test("leave_groups: one request leaves every group one user put this one in; the others get left events")
    func leaveAll() async throws {
        try await ServerFixture.with { fixture in
            let port = fixture.ports.native
            for name in ["spam", "vic", "amy"] { try await fixture.user(name) }
            try await fixture.contacts("spam", "vic")
            try await fixture.contacts("amy", "vic")
            let (spam, _) = try await NativeTestClient.login(port: port, "spam")
            for index in 0..<12 {
                let made = try await spam.request {
                    $0.manageGroup.group = "spam\(index)"
                    $0.manageGroup.create.users = ["vic"]
                }
                #expect(made.isDone, "\(made)")
            }
            let (amy, _) = try await NativeTestClient.login(port: port, "amy")
            #expect(
                try await amy.request {
                    $0.manageGroup.group = "book-club"
                    $0.manageGroup.create.users = ["vic"]
                }.isDone
            )
            let (vic, _) = try await NativeTestClient.login(port: port, "vic")
            let left = try await vic.request { $0.leaveGroups.addedBy = "spam" }
            guard case .groupsLeft(let groups)? = left.body else {
                Issue.record("not groups_left: \(left)")
                return
            }
            #expect(groups.groups.sorted() == (0..<12).map { "spam\($0)" }.sorted())
            var vicsGroups: [String] = []
            for name in try await fixture.store.groupNames()
            where try await fixture.store.group(named: name).members.contains("vic") {
                vicsGroups.append(name)
            }
            #expect(vicsGroups == ["book-club"])
            // spam hears that vic left each: twelve left events reach spam's log (over one page or several).
            var leaves = 0
            while leaves < 12 {
                leaves += try await spam.expect("vic's leaves") { envelope -> Int? in
                    guard case .events(let page)? = envelope.body else { return nil }
                    let count = page.events.filter {
                        if case .membership(let notice)? = $0.kind {
                            notice.user == "vic" && notice.change == .left
                        } else {
                            false
                        }
                    }.count
                    return count == 0 ? nil : count
                }
            }
            #expect(leaves == 12)
            let unknown = try await vic.request { $0.leaveGroups.addedBy = "nobody" }
            #expect(unknown.failure?.code == ErrorCodes.unknownUser, "\(unknown)")
            let malformed = try await vic.request { $0.leaveGroups.addedBy = "no one" }
            #expect(malformed.failure?.code == ErrorCodes.unknownUser, "\(malformed)")
            for client in [spam, amy, vic] { await client.close() }
        }
    }
}
