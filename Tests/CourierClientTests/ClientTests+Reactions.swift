import CourierServerTesting
import CourierTesting
import Testing

@testable import CourierClient

/// Edits and reactions a device learns from its events and from history pages, kept in its store.
extension ClientTests {
    @Test(
        "an edit of a message a device never fetched is an edit there, never a new message; one that holds it stores it"
    )
    func editOfAMessageNotHeld() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                let alice = try Self.client(fixture, "alice", folder: folder)
                let phone = try Self.client(fixture, "bob", folder: folder, device: "phone")
                try await Self.running([(alice, "alice"), (phone, "the phone")]) { group, readers in
                    let (aliceEvents, phoneEvents) = (readers[0], readers[1])
                    let id = try await alice.send("我家在上海东边", to: .user("bob"))
                    _ = try await aliceEvents.next("the ack") { event -> Bool? in
                        if case .sent(id, _, 1, _) = event { true } else { nil }
                    }
                    _ = try await phoneEvents.next("the message") { event -> Bool? in
                        if case .message(let message) = event, message.seq == 1 { true } else { nil }
                    }

                    // bob's laptop logs in after it: a new device starts at bob's present, the message is history.
                    let laptop = try Self.client(fixture, "bob", folder: folder, device: "laptop")
                    let laptopEvents = EventReader(laptop)
                    group.addTask { await laptop.run() }
                    _ = try await laptopEvents.next("the laptop caught up") { $0 == .caughtUp ? true : nil }
                    try await alice.edit(.seq(1, in: .user("bob")), text: "我家在上海西边")
                    try await alice.react(.seq(1, in: .user("bob")), key: "👍")
                    // The first of the message or its edit the laptop hears of is the edit.
                    let first = try await laptopEvents.next("the edit") { event -> ClientEvent? in
                        switch event {
                        case .message, .edited: event
                        default: nil
                        }
                    }
                    guard case .edited(let edited) = first else {
                        Issue.record("the laptop heard \(first) first")
                        return
                    }
                    #expect(edited.seq == 1 && edited.text == "我家在上海西边" && edited.edited != nil)
                    _ = try await laptopEvents.next("the reaction") { event -> Bool? in
                        if case .reaction(let change) = event, change.seq == 1, change.key == "👍" { true } else { nil }
                    }
                    // Nothing stored for it: the laptop holds no message it never fetched.
                    #expect(try await laptop.storedMessages(in: .user("alice")).isEmpty)
                    // The phone, which holds it, holds it as edited.
                    _ = try await phoneEvents.next("the edit, on the phone") { event -> Bool? in
                        if case .edited(let message) = event, message.seq == 1 { true } else { nil }
                    }
                    let held = try await phone.storedMessages(in: .user("alice"))
                    #expect(held.map(\.text) == ["我家在上海西边"] && held.first?.edited != nil, "\(held)")

                    // The next message is stored on the laptop alone; history has the first as it now reads.
                    let second = try await alice.send("地铁站旁边", to: .user("bob"))
                    _ = try await laptopEvents.next("the second message") { event -> Bool? in
                        if case .message(let message) = event, message.id == second { true } else { nil }
                    }
                    #expect(try await laptop.storedMessages(in: .user("alice")).map(\.text) == ["地铁站旁边"])
                    // (A page comes newest first.)
                    let page = try await laptop.history(of: .user("alice"))
                    #expect(page.messages.map(\.text) == ["地铁站旁边", "我家在上海西边"])
                    #expect(page.messages.last?.edited != nil)
                    #expect(page.messages.last?.reactions == [ChatReaction(key: "👍", count: 1, mine: false)])
                    laptop.stop()
                }
            }
        }
    }

    @Test(
        "the store keeps reactions and edits from the events and from every page of history, and quotes as their original now reads: a client started again shows them"
    )
    func reactionsAndQuotesSurviveARestart() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                let alice = try Self.client(fixture, "alice", folder: folder)
                let phone = try Self.client(fixture, "bob", folder: folder, device: "phone")
                try await Self.running([(alice, "alice"), (phone, "the phone")]) { _, readers in
                    let phoneEvents = readers[1]
                    _ = try await alice.send("周六去爬山吗", to: .user("bob"))
                    _ = try await phoneEvents.next("the message") { event -> Bool? in
                        if case .message(let message) = event, message.seq == 1 { true } else { nil }
                    }
                    _ = try await phone.send("好啊", to: .user("alice"), replyTo: .seq(1))
                    _ = try await phoneEvents.next("the reply's ack") { event -> Bool? in
                        if case .sent(_, _, 2, _) = event { true } else { nil }
                    }
                    try await alice.react(.seq(1, in: .user("bob")), key: "👀")
                    try await phone.react(.seq(1, in: .user("alice")), key: "👍")
                    try await alice.edit(.seq(1, in: .user("bob")), text: "周日去爬山吗")
                    _ = try await phoneEvents.next("the edit") { event -> Bool? in
                        if case .edited(let message) = event, message.seq == 1 { true } else { nil }
                    }
                }
                // Started again on the same store: what it shows is what the events left there.
                let again = try Self.client(fixture, "bob", folder: folder, device: "phone")
                let stored = try await again.storedMessages(in: .user("alice"))
                #expect(stored.map(\.text) == ["周日去爬山吗", "好啊"], "\(stored)")
                #expect(
                    stored.first?.reactions
                        == [
                            ChatReaction(key: "👀", count: 1, mine: false), ChatReaction(key: "👍", count: 1, mine: true),
                        ],
                    "\(stored.first?.reactions ?? [])"
                )
                #expect(stored.last?.replyTo?.text == "周日去爬山吗", "\(stored.last?.replyTo.map { "\($0)" } ?? "")")

                // A device that never saw them learns them from a page, and keeps them.
                let laptop = try Self.client(fixture, "bob", folder: folder, device: "laptop")
                try await Self.running([(laptop, "the laptop")]) { _, _ in
                    _ = try await laptop.history(of: .user("alice"))
                }
                let restarted = try Self.client(fixture, "bob", folder: folder, device: "laptop")
                let paged = try await restarted.storedMessages(in: .user("alice"))
                #expect(paged.map(\.text) == ["周日去爬山吗", "好啊"], "\(paged)")
                #expect(paged.first?.reactions.map(\.key) == ["👀", "👍"], "\(paged)")
                #expect(paged.first?.edited != nil)
                #expect(paged.last?.replyTo?.text == "周日去爬山吗")
            }
        }
    }

    @Test("two clients of one store count a reaction once")
    func sharedStoreReactions() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                let alice = try Self.client(fixture, "alice", folder: folder)
                // One store, two clients (a chat and a command beside it), one device.
                let first = try Self.client(fixture, "bob", folder: folder, device: "phone")
                let second = try Self.client(fixture, "bob", folder: folder, device: "phone")
                try await Self.running([(alice, "alice"), (first, "first"), (second, "second")]) { _, readers in
                    let (aliceEvents, firstEvents, secondEvents) = (readers[0], readers[1], readers[2])
                    let id = try await alice.send("投票：周六还是周日？", to: .user("bob"))
                    _ = try await aliceEvents.next("the ack") { event -> Bool? in
                        if case .sent(id, _, 1, _) = event { true } else { nil }
                    }
                    try await alice.react(.seq(1, in: .user("bob")), key: "🗳")
                    for (reader, name) in [(firstEvents, "first"), (secondEvents, "second")] {
                        _ = try await reader.next("the reaction at \(name)") { event -> Bool? in
                            if case .reaction(let change) = event, change.seq == 1 { true } else { nil }
                        }
                    }
                    let stored = try await first.storedMessages(in: .user("alice"))
                    // (The server keeps the key in its emoji presentation.)
                    #expect(stored.first?.reactions.map(\.count) == [1], "\(stored)")
                    #expect(stored.first?.reactions.first?.key.unicodeScalars.first == "🗳".unicodeScalars.first)
                }
            }
        }
    }
}
