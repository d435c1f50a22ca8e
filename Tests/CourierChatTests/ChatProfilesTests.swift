import CourierClient
import CourierTesting
import Foundation
import Testing

@testable import CourierChat

@Suite("The terminal chat's display names, without a terminal")
struct ChatProfilesTests {
    static let now = ChatStateTests.now

    /// alice's chat: @bob open (bob wrote twice), and #team where carol wrote.
    static func state() -> ChatState {
        var state = ChatMessagesTests.state()
        _ = state.merge(
            history: [ChatStateTests.message(1, from: "carol", in: .group("team"), "مرحبا")],
            more: false,
            of: .group("team")
        )
        return state
    }

    @Test("each user the chat shows is asked for once; display names show beside user names, within the pane")
    func displayNames() {
        var state = Self.state()
        // The user's own too: /name shows it.
        #expect(state.profilesWanted() == [.loadProfiles(["alice", "bob", "carol"])])
        #expect(state.profilesWanted().isEmpty, "asked once")
        state.setProfiles([
            ProfileInfo(user: "bob", displayName: "ボブ・田中"),
            ProfileInfo(user: "carol", displayName: nil),
        ])
        var screen = ChatMessagesTests.screen(state)
        #expect(screen.contains { $0.contains(" @ボブ・田中 (bob)") }, "\(screen)")
        #expect(screen.contains { $0.contains(" ボブ・田中 (bob): こんにちは、元気？") }, "\(screen)")
        #expect(screen.contains { $0.contains(" you: 明天见") }, "\(screen)")
        // Rows stay within the terminal's width, counted as a terminal counts wide characters.
        for row in screen { #expect(DisplayWidth.of(row) <= state.columns, "\(row)") }

        // A profile event changes what shows; a display name with control characters shows them harmless.
        _ = state.apply(.profile(ProfileInfo(user: "BOB", displayName: "Bob\u{1B}[2J")), now: Self.now)
        screen = ChatMessagesTests.screen(state)
        #expect(screen.contains { $0.contains(" Bob^[[2J (bob): こんにちは") }, "\(screen)")
        #expect(!screen.joined().contains("\u{1B}"))
        // Removed: the user name alone.
        _ = state.apply(.profile(ProfileInfo(user: "bob")), now: Self.now)
        screen = ChatMessagesTests.screen(state)
        #expect(screen.contains { $0.contains(" bob: こんにちは、元気？") }, "\(screen)")
        // A new sender is asked for when its message comes; asked again when the asking failed.
        _ = state.apply(.message(ChatStateTests.message(2, from: "dave", in: .group("team"), "שלום")), now: Self.now)
        #expect(state.profilesWanted() == [.loadProfiles(["dave"])])
        state.profilesFailed(["dave"])
        #expect(state.profilesWanted() == [.loadProfiles(["dave"])])
    }

    @Test(
        "a long display name is cut to a third of the width; the user name after it always shows; a stale answer changes nothing"
    )
    func longNames() {
        var state = Self.state()
        let later = Self.now.addingTimeInterval(60)
        // A display name made to look like another user's line, padded with wide characters.
        state.setProfiles([
            ProfileInfo(
                user: "bob",
                displayName: "alice (alice): 汇款给我" + String(repeating: "你", count: 40),
                updated: later
            )
        ])
        let screen = ChatMessagesTests.screen(state)
        // The user name and the message still show, whatever the display name's length.
        #expect(screen.contains { $0.contains("(bob): こんにちは") }, "\(screen)")
        let name = state.shown("bob")
        #expect(name.hasSuffix("… (bob)") && DisplayWidth.of(name) <= state.columns / 3 + 7, "\(name)")
        // An answer older than the event that came first changes nothing.
        state.setProfiles([ProfileInfo(user: "bob", displayName: "Old Bob", updated: Self.now)])
        #expect(state.shown("bob").hasSuffix("… (bob)"))
        // A newer one does.
        state.setProfiles([ProfileInfo(user: "bob", displayName: "Bob", updated: later.addingTimeInterval(1))])
        #expect(state.shown("bob") == "Bob (bob)")
    }

    @Test("a bot's name says so wherever it shows, with or without a display name; a person's does not")
    func bots() {
        var state = Self.state()
        var helper = ProfileInfo(user: "helper", updated: Self.now)
        helper.bot = true
        state.setProfiles([helper, ProfileInfo(user: "bob", displayName: "Bob", updated: Self.now)])
        #expect(state.shown("helper") == "helper [bot]")
        #expect(state.shown("HELPER") == "HELPER [bot]")
        #expect(state.shown("bob") == "Bob (bob)")
        helper.displayName = "助手 🤖"
        helper.updated = Self.now.addingTimeInterval(1)
        state.setProfiles([helper])
        #expect(state.shown("helper") == "助手 🤖 (helper [bot])")
    }
}
