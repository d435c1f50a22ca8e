import CourierStore
import Testing

@Suite("The push outbox: written with the message, taken by one node under a lease, sent as mutes and sessions say")
struct PushOutboxTests {
    static let now = StoreFixture.start
    static let key = PushSubscriptionTests.key
    static let auth = PushSubscriptionTests.auth

    static func subscribe(_ fixture: StoreFixture, _ session: DeviceSession, _ endpoint: String) async throws {
        try await fixture.store.addPushSubscription(
            endpoint: endpoint,
            p256dh: Self.key,
            auth: Self.auth,
            for: session,
            nowMs: Self.now
        )
    }

    static func send(
        _ fixture: StoreFixture,
        _ sender: UserID,
        _ id: String,
        to: Conversation,
        _ text: String
    ) async throws -> SendReceipt {
        let outcome = try await QuietTests.send(fixture, sender, id, to: to, text)
        guard case .sent(let receipt) = outcome else { throw FixtureError(message: "not sent: \(outcome)") }
        return receipt
    }

    /// Takes the due rows as a sender does: the ones that owe nothing are finished at once; the others returned.
    static func claim(
        _ fixture: StoreFixture,
        node: String = "n1",
        at nowMs: Int64 = Self.now
    ) async throws
        -> [PushJob]
    {
        let jobs = try await fixture.store.claimPushes(
            node: node,
            nowMs: nowMs,
            leaseMs: 60_000,
            limit: 100,
            maxClaims: 10
        ).jobs
        var empty = PushResults()
        empty.done = jobs.filter(\.deliveries.isEmpty).map(\.row)
        try await fixture.store.finishPushes(empty, node: node)
        return jobs.filter { !$0.deliveries.isEmpty }
    }

    /// Each job as "messageID→user@endpoint…", for comparing.
    static func shape(_ jobs: [PushJob], _ names: [UserID: String]) -> [String] {
        jobs.map { job in
            job.messageID + "→"
                + job.deliveries.map { "\(names[$0.user] ?? "?")@\($0.subscription.endpoint)" }.joined(separator: ",")
        }
    }

    @Test(
        "a message writes a row only when someone other than its sender has a subscription; taking it works out who, where and how",
        arguments: StoreKind.allCases
    )
    func rowsAndJobs(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await QuietTests.team(fixture)
            let (alice, bob, carol, dave) = (ids["alice"]!, ids["bob"]!, ids["carol"]!, ids["dave"]!)
            let names = Dictionary(uniqueKeysWithValues: ids.map { ($0.value, $0.key) })

            // Nobody has a subscription: nothing is written.
            _ = try await Self.send(fixture, alice, "a0", to: .group("team"), "早上好")
            #expect(try await fixture.store.pushOutbox().isEmpty)

            let bobPhone = try await PushSubscriptionTests.login(fixture, "bob", "手机")
            let bobLaptop = try await PushSubscriptionTests.login(fixture, "bob", "ノートPC")
            let carolPhone = try await PushSubscriptionTests.login(fixture, "carol", "📱")
            let alicePhone = try await PushSubscriptionTests.login(fixture, "alice", "phone")
            try await Self.subscribe(fixture, bobPhone, "https://push.example/bob-phone")
            try await Self.subscribe(fixture, bobLaptop, "https://push.example/bob-laptop")
            try await Self.subscribe(fixture, carolPhone, "https://push.example/carol")
            try await Self.subscribe(fixture, alicePhone, "https://push.example/alice")

            // Only alice (the sender) is subscribed among a note to herself's members: nothing.
            _ = try await Self.send(fixture, alice, "self", to: .user("alice"), "note")
            #expect(try await fixture.store.pushOutbox().isEmpty)

            // bob's laptop is online (through a node that is alive, on PostgreSQL): only his phone is pushed. dave
            // has no subscription.
            try await fixture.store.recordDeviceActivity([
                DeviceActivityChange(device: bobLaptop.device.id, connected: true, ms: Self.now)
            ])
            let admission = fixture.store.clusterAdmission
            _ = try await admission?.heartbeat(nowMs: Self.now, aliveUntilMs: Self.now + 60_000)
            let sent = try await Self.send(fixture, alice, "a1", to: .group("team"), "第一行\n第二行")
            let rows = try await fixture.store.pushOutbox()
            #expect(rows.count == 1 && rows[0].seq == Int64(sent.seq) && rows[0].user == nil)
            let jobs = try await Self.claim(fixture)
            #expect(
                Self.shape(jobs, names) == ["a1→bob@https://push.example/bob-phone,carol@https://push.example/carol"]
            )
            let job = try #require(jobs.first)
            #expect(job.from == "alice" && job.text == "第一行\n第二行" && job.seq == sent.seq)
            #expect(job.deliveries.allSatisfy { $0.conversation == .group("team") && !$0.urgent && $0.previews })
            _ = dave

            // Taken: no other node takes it while the lease lasts; once it ends, another does.
            #expect(try await Self.claim(fixture, node: "n2").isEmpty)
            #expect(try await Self.claim(fixture, node: "n2", at: Self.now + 60_001).count == 1)

            // Done: gone from the outbox.
            // Done by the node that took it last: gone from the outbox (not by the one whose lease ran out).
            var results = PushResults()
            results.done = [job.row]
            try await fixture.store.finishPushes(results, node: "n1")
            #expect(try await fixture.store.pushOutbox().count == 1)
            try await fixture.store.finishPushes(results, node: "n2")
            #expect(try await fixture.store.pushOutbox().isEmpty)

            // The node holding the laptop's connection died and its place in the cluster is gone (pruned): the
            // laptop is away.
            if let admission {
                try await admission.forgetNode()
                _ = try await Self.send(fixture, alice, "a2", to: .user("bob"), "在吗")
                #expect(
                    Self.shape(try await Self.claim(fixture), names) == [
                        "a2→bob@https://push.example/bob-laptop,bob@https://push.example/bob-phone"
                    ]
                )
                // Alive again: the laptop is online again.
                _ = try await admission.heartbeat(nowMs: Self.now, aliveUntilMs: Self.now + 60_000)
            }

            // A direct message is urgent and names the conversation by its sender; bob hides previews.
            try await fixture.store.setPushPreviews(false, for: bob)
            #expect(try await fixture.store.pushPreviews(of: bob) == false)
            #expect(try await fixture.store.pushPreviews(of: carol) == true)
            _ = try await Self.send(fixture, carol, "c1", to: .user("bob"), "你好 👋🏽")
            let direct = try #require(try await Self.claim(fixture).first)
            #expect(direct.deliveries.count == 1)
            #expect(direct.deliveries[0].conversation == .user("carol"))
            #expect(direct.deliveries[0].urgent && !direct.deliveries[0].previews)
            #expect(direct.from == "carol" && direct.text == "你好 👋🏽")
        }
    }

    @Test(
        "mutes: none is never pushed, mentions only for a mention, @all or a direct message; recalled and offline-less rows are done with",
        arguments: StoreKind.allCases
    )
    func mutes(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await QuietTests.team(fixture)
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            let names = Dictionary(uniqueKeysWithValues: ids.map { ($0.value, $0.key) })
            try await Self.subscribe(
                fixture,
                try await PushSubscriptionTests.login(fixture, "carol", "手机"),
                "https://push.example/carol"
            )
            try await Self.subscribe(
                fixture,
                try await PushSubscriptionTests.login(fixture, "dave", "手机"),
                "https://push.example/dave"
            )
            let carol = ids["carol"]!
            try await fixture.store.setNotify(.mentions, in: .group("team"), for: carol, nowMs: Self.now)
            try await fixture.store.setNotify(.none, in: .group("team"), for: ids["dave"]!, nowMs: Self.now)

            // Neither: the row owes nothing and is done with when taken.
            _ = try await Self.send(fixture, alice, "m1", to: .group("team"), "大家好")
            #expect(try await Self.claim(fixture).isEmpty)
            #expect(try await fixture.store.pushOutbox().isEmpty)

            // A mention reaches carol (urgent), never dave; @all likewise.
            _ = try await Self.send(fixture, bob, "m2", to: .group("team"), "@carol 看一下")
            _ = try await Self.send(fixture, alice, "m3", to: .group("team"), "@all 开会")
            let jobs = try await Self.claim(fixture)
            #expect(
                Self.shape(jobs, names) == [
                    "m2→carol@https://push.example/carol", "m3→carol@https://push.example/carol",
                ]
            )
            #expect(jobs.allSatisfy { $0.deliveries.allSatisfy(\.urgent) })

            // A message recalled before it is taken owes nothing.
            _ = try await Self.send(fixture, bob, "m4", to: .group("team"), "@carol oops")
            _ = try await fixture.store.apply(
                [.recall(user: bob, conversation: .group("team"), id: "m4")],
                nowMs: Self.now
            )
            #expect(try await Self.claim(fixture).isEmpty)
            #expect(try await fixture.store.pushOutbox().map(\.seq).count == 2)
        }
    }

    @Test(
        "a retry goes to its one subscription; a subscription gone (404, 410) is dropped, and a user left with none gets no rows",
        arguments: StoreKind.allCases
    )
    func retriesAndGone(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let (alice, bob) = (ids["alice"]!, ids["bob"]!)
            let names = Dictionary(uniqueKeysWithValues: ids.map { ($0.value, $0.key) })
            let phone = try await PushSubscriptionTests.login(fixture, "bob", "手机")
            let laptop = try await PushSubscriptionTests.login(fixture, "bob", "laptop")
            try await Self.subscribe(fixture, phone, "https://push.example/phone")
            try await Self.subscribe(fixture, laptop, "https://push.example/laptop")
            let sent = try await Self.send(fixture, alice, "x1", to: .user("bob"), "ping")
            let job = try #require(try await Self.claim(fixture).first)
            #expect(job.deliveries.count == 2 && job.attempts == 0)

            var results = PushResults()
            results.done = [job.row]
            results.retries = [
                .init(
                    row: job.row,
                    conversationID: job.conversationID,
                    seq: sent.seq,
                    user: bob,
                    endpoint: "https://push.example/phone",
                    attempts: 1,
                    dueMs: Self.now + 5_000
                )
            ]
            results.gone = [("https://push.example/laptop", bob)]
            try await fixture.store.finishPushes(results, node: "n1")
            #expect(
                try await fixture.store.pushSubscriptions(of: bob).map(\.endpoint) == ["https://push.example/phone"]
            )

            // Not due yet; then due, to the phone alone, its attempts counted.
            #expect(
                try await fixture.store.claimPushes(node: "n", nowMs: Self.now, leaseMs: 1, limit: 9, maxClaims: 10)
                    .nextDueMs
                    == Self.now + 5_000
            )
            #expect(try await Self.claim(fixture, at: Self.now + 4_999).isEmpty)
            let retry = try await Self.claim(fixture, at: Self.now + 5_000)
            #expect(Self.shape(retry, names) == ["x1→bob@https://push.example/phone"])
            #expect(retry.first?.attempts == 1)
            results = PushResults()
            results.done = retry.map(\.row)
            results.gone = [("https://push.example/phone", bob)]
            try await fixture.store.finishPushes(results, node: "n1")

            // bob has no subscription left: a new message writes no row.
            _ = try await Self.send(fixture, alice, "x2", to: .user("bob"), "ping again")
            #expect(try await fixture.store.pushOutbox().isEmpty)
        }
    }

    @Test(
        "a row taken again and again without being done (its node dies each time) is given up past max-push-claims",
        arguments: StoreKind.allCases
    )
    func givenUp(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            try await Self.subscribe(
                fixture,
                try await PushSubscriptionTests.login(fixture, "bob", "手机"),
                "https://push.example/bob"
            )
            _ = try await Self.send(fixture, ids["alice"]!, "g1", to: .user("bob"), "ping")
            // Taken twice, each lease running out (the node died): still owed.
            for round in 0..<2 {
                let jobs = try await fixture.store.claimPushes(
                    node: "n\(round)",
                    nowMs: Self.now + Int64(round) * 1_000,
                    leaseMs: 500,
                    limit: 10,
                    maxClaims: 2
                ).jobs
                #expect(jobs.count == 1 && jobs[0].deliveries.count == 1 && !jobs[0].givenUp, "round \(round)")
            }
            // The third time it is given up: no deliveries; finished, it is gone.
            let third = try await fixture.store.claimPushes(
                node: "n2",
                nowMs: Self.now + 2_000,
                leaseMs: 500,
                limit: 10,
                maxClaims: 2
            ).jobs
            #expect(third.count == 1 && third[0].givenUp && third[0].deliveries.isEmpty)
            var results = PushResults()
            results.done = third.map(\.row)
            try await fixture.store.finishPushes(results, node: "n2")
            #expect(try await fixture.store.pushOutbox().isEmpty)
        }
    }

    @Test(
        "a member who joined after the message, and a removed user, are pushed nothing",
        arguments: StoreKind.allCases
    )
    func joinedAfterAndRemoved(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await QuietTests.team(fixture)
            let names = Dictionary(uniqueKeysWithValues: ids.map { ($0.value, $0.key) })
            try await Self.subscribe(
                fixture,
                try await PushSubscriptionTests.login(fixture, "erin", "手机"),
                "https://push.example/erin"
            )
            try await Self.subscribe(
                fixture,
                try await PushSubscriptionTests.login(fixture, "dave", "手机"),
                "https://push.example/dave"
            )
            // Written before erin joins, taken after: not hers.
            _ = try await Self.send(fixture, ids["alice"]!, "j1", to: .group("team"), "before erin")
            try await fixture.store.changeMembers(of: "team", actor: nil, add: ["erin"], remove: [], nowMs: Self.now)
            #expect(Self.shape(try await Self.claim(fixture), names) == ["j1→dave@https://push.example/dave"])
            _ = try await Self.send(fixture, ids["alice"]!, "j2", to: .group("team"), "after erin")
            try await fixture.store.removeUser(named: "dave", nowMs: Self.now)
            #expect(Self.shape(try await Self.claim(fixture), names) == ["j2→erin@https://push.example/erin"])
        }
    }

    @Test(
        "a revoked device's subscription is dropped with it, and its user pushed nothing more",
        arguments: StoreKind.allCases
    )
    func revoked(kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let ids = try await fixture.users("alice", "bob")
            let phone = try await PushSubscriptionTests.login(fixture, "bob", "手机")
            try await Self.subscribe(fixture, phone, "https://push.example/phone")
            _ = try await Self.send(fixture, ids["alice"]!, "r1", to: .user("bob"), "before")
            try await fixture.store.revokeDevice(phone.device.id, of: "bob", nowMs: Self.now)
            // The row written before the revocation owes nothing now.
            #expect(try await Self.claim(fixture).isEmpty)
            _ = try await Self.send(fixture, ids["alice"]!, "r2", to: .user("bob"), "after")
            #expect(try await fixture.store.pushOutbox().isEmpty)
        }
    }

    @Test(
        "a phone's pushkey with a gateway is a push target: kept per user, limited, dropped with its device; its jobs carry the unread count",
        arguments: StoreKind.allCases
    )
    func gateways(kind: StoreKind) async throws {
        var limits = StoreLimits()
        limits.maxPushKeyBytes = 32
        try await StoreFixture.with(kind, limits: limits) { fixture in
            let ids = try await QuietTests.team(fixture)
            let (alice, bob, carol) = (ids["alice"]!, ids["bob"]!, ids["carol"]!)
            let bobPhone = try await PushSubscriptionTests.login(fixture, "bob", "iPhone")
            let carolPhone = try await PushSubscriptionTests.login(fixture, "carol", "Pixel")
            let url = "https://gateway.example/_matrix/push/v1/notify"
            let bobs = PushGateway(appID: "org.example.courier.ios", pushkey: "apns-令牌-1", url: url)
            try await fixture.store.addPushGateway(bobs, for: bobPhone, nowMs: Self.now)
            // carol's phone holds the same pushkey (two accounts in one app): hers is her own registration, and
            // takes nothing from bob.
            try await fixture.store.addPushGateway(bobs, for: carolPhone, nowMs: Self.now)
            let kept = try await fixture.store.pushSubscriptions(of: bob)
            #expect(kept.map(\.gateway) == [bobs] && kept[0].device == bobPhone.device.id && kept[0].auth.isEmpty)
            #expect(try await fixture.store.pushSubscriptions(of: carol).map(\.gateway) == [bobs])
            // The pushkey is a credential of sorts: never in a description.
            #expect(!"\(kept)".contains("apns"))
            // Too long a pushkey, or an empty app id, is refused.
            for wrong in [
                PushGateway(appID: "a", pushkey: String(repeating: "k", count: 33), url: url),
                PushGateway(appID: "", pushkey: "k", url: url),
            ] {
                do {
                    try await fixture.store.addPushGateway(wrong, for: bobPhone, nowMs: Self.now)
                    Issue.record("taken: \(wrong.appID) \(wrong.pushkey.count)")
                } catch let error as CourierStoreError {
                    #expect(error.code == .invalidRequest)
                }
            }

            // Two messages to bob: each job's delivery to the gateway carries his unread messages so far.
            _ = try await Self.send(fixture, alice, "g1", to: .user("bob"), "一")
            _ = try await Self.send(fixture, alice, "g2", to: .group("team"), "二")
            let jobs = try await Self.claim(fixture)
            let bobsDeliveries = jobs.flatMap(\.deliveries).filter { $0.user == bob }
            #expect(bobsDeliveries.map(\.subscription.gateway) == [bobs, bobs])
            #expect(bobsDeliveries.map(\.unread) == [2, 2])
            #expect(bobsDeliveries.map(\.urgent) == [true, false])
            var done = PushResults()
            done.done = jobs.map(\.row)
            // The gateway rejected bob's pushkey: his registration goes, carol's stays.
            done.gone = [(kept[0].endpoint, bob)]
            try await fixture.store.finishPushes(done, node: "n1")
            #expect(try await fixture.store.pushSubscriptions(of: bob).isEmpty)
            #expect(try await fixture.store.pushSubscriptions(of: carol).count == 1)
            _ = try await Self.send(fixture, alice, "g3", to: .user("bob"), "三")
            #expect(try await fixture.store.pushOutbox().isEmpty, "bob has no push target left")

            // Removed by its user with its app id and pushkey; revoking the device drops the rest.
            try await fixture.store.addPushGateway(bobs, for: bobPhone, nowMs: Self.now)
            let removed = try await fixture.store.removePushGateway(
                appID: bobs.appID,
                pushkey: bobs.pushkey,
                for: carolPhone
            )
            #expect(removed)
            #expect(try await fixture.store.pushSubscriptions(of: carol).isEmpty)
            try await fixture.store.revokeDevice(bobPhone.device.id, of: "bob", nowMs: Self.now + 1)
            #expect(try await fixture.store.pushSubscriptions(of: bob).isEmpty)
        }
    }
}
