import CourierClient
import CourierTesting
import Foundation
import Testing

@testable import CourierChat

@Suite("The terminal chat's groups, titles, mentions, mute and bell, without a terminal")
struct ChatGroupsTests {
    static let now = ChatStateTests.now

    static func run(_ line: String, in state: inout ChatState) -> [ChatAction] {
        ChatCommandsTests.run(line, in: &state)
    }

    /// A chat of alice's with #team open.
    static func state() -> ChatState {
        var state = ChatState(me: "alice", server: "test")
        state.connection = .connected
        state.load(stored: [ChatStateTests.message(1, from: "bob", in: .group("team"))], pending: [], now: Self.now)
        _ = state.select(.group("team"), now: Self.now)
        return state
    }

    @Test("/group makes, changes and lists the open group; /mute, /unmute and /name; mistakes are explained")
    func commands() {
        var state = Self.state()
        #expect(Self.run("/group new club bob", in: &state) == [.manageGroup(.create("club", members: ["bob"]))])
        #expect(
            Self.run("/group new #book-club @bob ＠carol", in: &state)
                == [.manageGroup(.create("book-club", members: ["bob", "carol"]))]
        )
        #expect(Self.run("/group add dave erin", in: &state) == [.manageGroup(.add("team", ["dave", "erin"]))])
        #expect(Self.run("/group remove dave", in: &state) == [.manageGroup(.remove("team", ["dave"]))])
        #expect(Self.run("/group admin bob", in: &state) == [.manageGroup(.promote("team", ["bob"]))])
        #expect(Self.run("/group member bob", in: &state) == [.manageGroup(.demote("team", ["bob"]))])
        #expect(Self.run("/group owner bob", in: &state) == [.manageGroup(.transfer("team", to: "bob"))])
        #expect(
            Self.run("/group title  读书会 📚 شكرا ", in: &state)
                == [.manageGroup(.title("team", "读书会 📚 شكرا"))]
        )
        #expect(Self.run("/group title", in: &state) == [.manageGroup(.title("team", ""))])
        #expect(Self.run("/group members", in: &state) == [.manageGroup(.members("team"))])
        #expect(Self.run("/group leave", in: &state) == [.manageGroup(.leave("team"))])
        #expect(Self.run("/group leave --from @spam", in: &state) == [.manageGroup(.leaveFrom("spam"))])
        #expect(Self.run("/mute", in: &state) == [.setNotify(.group("team"), .mentions)])
        #expect(Self.run("/mute none", in: &state) == [.setNotify(.group("team"), NotifyLevel.none)])
        #expect(Self.run("/unmute", in: &state) == [.setNotify(.group("team"), .all)])
        #expect(Self.run("/name 张伟 (Zhāng)", in: &state) == [.setDisplayName("张伟 (Zhāng)")])
        // /name alone shows the name and changes nothing: before the user's own profile came, it asks for it (and
        // does not say "none"); once it came, it says it; clearing it is said outright.
        #expect(Self.run("/name", in: &state).contains(.loadProfiles(["alice", "bob"])))
        #expect(state.notice?.contains("not come from the server yet") == true, "\(state.notice ?? "")")
        state.setProfiles([ProfileInfo(user: "alice", displayName: nil)])
        #expect(Self.run("/name", in: &state).isEmpty)
        #expect(state.notice?.contains("no display name") == true, "\(state.notice ?? "")")
        state.setProfiles([ProfileInfo(user: "alice", displayName: "爱丽丝 ✨", updated: Date(timeIntervalSince1970: 2))])
        #expect(Self.run("/name  ", in: &state).isEmpty)
        #expect(state.notice?.contains("爱丽丝 ✨") == true, "\(state.notice ?? "")")
        #expect(Self.run("/name --clear", in: &state) == [.setDisplayName("")])
        for wrong in ["/group", "/group owner", "/group add", "/group fly", "/mute loudly", "/group leave --from"] {
            #expect(Self.run(wrong, in: &state).isEmpty, "\(wrong)")
            #expect(state.notice?.hasPrefix("usage") == true, "\(wrong): \(state.notice ?? "")")
        }
        // Changes other than new are to the open group: none is open in a direct conversation.
        _ = state.select(.user("bob"), now: Self.now)
        #expect(Self.run("/group add carol", in: &state).isEmpty)
        #expect(state.notice?.contains("open a group") == true)
        // Leaving one user's groups needs no group open.
        #expect(Self.run("/group leave --from spam", in: &state) == [.manageGroup(.leaveFrom("spam"))])
        // /block blocks the open direct chat's user; --off unblocks; in a group, or with anything else, it says how.
        #expect(Self.run("/block", in: &state) == [.setBlocked("bob", true)])
        #expect(Self.run("/block --off", in: &state) == [.setBlocked("bob", false)])
        #expect(Self.run("/block carol", in: &state).isEmpty)
        #expect(state.notice?.hasPrefix("usage: /block") == true, "\(state.notice ?? "")")
        _ = state.select(.group("team"), now: Self.now)
        #expect(Self.run("/block", in: &state).isEmpty)
        #expect(state.notice?.hasPrefix("usage: /block") == true, "\(state.notice ?? "")")
    }

    @Test("the group's history shows who joined and left and what it was named, where it happened")
    func membershipLines() throws {
        var state = Self.state()
        _ = state.apply(.membership(group: "team", user: "carol", joined: true), now: Self.now)
        _ = state.apply(.groupTitle(group: "team", title: "读书会 📚", by: "bob"), now: Self.now)
        _ = state.apply(.message(ChatStateTests.message(2, from: "carol", in: .group("team"))), now: Self.now)
        _ = state.apply(.membership(group: "team", user: "bob", joined: false), now: Self.now)
        let rows = ChatScreen(state, now: Self.now).rows.map(\.plain)
        let joined = try #require(rows.firstIndex { $0.contains("· carol joined ·") }, "\(rows)")
        let named = try #require(rows.firstIndex { $0.contains("· bob named the group “读书会 📚” ·") }, "\(rows)")
        let second = try #require(rows.firstIndex { $0.contains("│ carol: hi") }, "\(rows)")
        let left = try #require(rows.firstIndex { $0.contains("· bob left ·") }, "\(rows)")
        #expect(joined < named && named < second && second < left, "\(rows.joined(separator: "\n"))")
    }

    @Test("typing shows in a conversation the chat knows or has open, and never puts one in the list by itself")
    func typingFromAStranger() {
        var state = Self.state()
        _ = state.apply(.typing(conversation: .user("mallory"), user: "mallory", typing: true), now: Self.now)
        #expect(state.threads[ChatState.key(.user("mallory"))] == nil, "a stranger's typing made a conversation")
        // A brand-new conversation alice opened: bob typing his first message shows.
        _ = state.select(.user("bob"), now: Self.now)
        _ = state.apply(.typing(conversation: .user("bob"), user: "bob", typing: true), now: Self.now)
        #expect(state.threads[ChatState.key(.user("bob"))]?.typing["bob"] != nil)
    }

    @Test("a muted group rings only for mentions, counts them with '@', and shows its mark; none never rings")
    func bell() {
        var state = Self.state()
        _ = state.select(.user("bob"), now: Self.now)
        let team = ChatState.key(.group("team"))
        var seq: UInt64 = 1
        func message(_ text: String, from: String = "bob") -> ClientEvent {
            seq += 1
            return .message(ChatStateTests.message(seq, from: from, in: .group("team"), text))
        }
        #expect(state.apply(message("plain"), now: Self.now) == [.bell])
        _ = state.apply(.notify(conversation: .group("team"), level: .mentions), now: Self.now)
        #expect(state.apply(message("still plain"), now: Self.now).isEmpty)
        #expect(state.apply(message("看@alice，这里"), now: Self.now) == [.bell])
        #expect(state.apply(message("@all 开会"), now: Self.now) == [.bell])
        #expect(state.apply(message("@alicex is not you"), now: Self.now).isEmpty)
        #expect(state.threads[team]?.mentions == 2 && state.threads[team]?.unread == 5)
        #expect(ChatState.badge(state.threads[team]!) == " ~@5 ")
        _ = state.apply(.notify(conversation: .group("team"), level: NotifyLevel.none), now: Self.now)
        #expect(state.apply(message("@alice again"), now: Self.now).isEmpty)
        #expect(ChatState.badge(state.threads[team]!) == " -@6 ")
        // Opening it reads it: the counts go.
        _ = state.select(.group("team"), now: Self.now)
        #expect(state.threads[team]?.mentions == 0 && state.threads[team]?.unread == 0)
        #expect(ChatState.badge(state.threads[team]!) == " - ")
        // Her own messages never ring.
        _ = state.select(.user("bob"), now: Self.now)
        _ = state.apply(.notify(conversation: .group("team"), level: .all), now: Self.now)
        #expect(state.apply(message("mine @all", from: "alice"), now: Self.now).isEmpty)
        // Back in a group after leaving it, she starts at every message again, as the server does.
        _ = state.apply(.notify(conversation: .group("team"), level: .mentions), now: Self.now)
        _ = state.apply(.membership(group: "team", user: "alice", joined: true), now: Self.now)
        #expect(state.threads[team]?.notify == .all)
    }

    @Test("a group's title shows beside its name in the list, printable, from events and from the unread counts")
    func titles() {
        var state = Self.state()
        _ = state.apply(.groupTitle(group: "team", title: "读书会\u{1B}[31m", by: "bob"), now: Self.now)
        let thread = state.threads[ChatState.key(.group("team"))]!
        #expect(state.listLabel(thread) == "#team 读书会\(ChatText.printable("\u{1B}"))[31m")
        #expect(state.notice == "bob named #team “读书会\(ChatText.printable("\u{1B}"))[31m”")
        _ = state.apply(.groupTitle(group: "team", title: "会", by: ""), now: Self.now)
        #expect(state.notice == "the administrator named #team “会”")
        var count = UnreadCount(conversation: .group("team"), unread: 3, lastSeq: 4)
        count.title = "本の会"
        count.mentions = 1
        count.notify = .mentions
        _ = state.select(.user("bob"), now: Self.now)
        state.setUnread([count])
        let after = state.threads[ChatState.key(.group("team"))]!
        #expect(state.listLabel(after) == "#team 本の会")
        #expect(ChatState.badge(after) == " ~@3 ")
        _ = state.apply(.groupTitle(group: "team", title: "", by: "alice"), now: Self.now)
        #expect(state.listLabel(after) == "#team")
    }
}
