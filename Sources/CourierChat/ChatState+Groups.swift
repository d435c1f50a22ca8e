import CourierClient

/// The commands for groups, for how conversations alert, and for this user's display name.
extension ChatState {
    /// `/group …`: every change but `new` is to the open group.
    mutating func groupCommand(_ words: [String], rest: String) -> [ChatAction] {
        let usage =
            "usage: /group new NAME USER… · add|remove|admin|member USER… · owner USER · title [TEXT] · members · leave"
            + " · leave --from USER"
        guard let action = words.first else {
            self.notice = usage
            return []
        }
        // User names as typed, with or without the @ a mention has.
        let users = words.dropFirst().map { $0.hasPrefix("@") || $0.hasPrefix("＠") ? String($0.dropFirst()) : $0 }
        if action == "new" {
            guard let name = users.first.map({ $0.hasPrefix("#") ? String($0.dropFirst()) : $0 }), !name.isEmpty else {
                self.notice = "usage: /group new NAME USER… (your contacts: users who wrote to you)"
                return []
            }
            return [.manageGroup(.create(name, members: Array(users.dropFirst())))]
        }
        // Every group one user put you in, wherever you are.
        if action == "leave", users.first == "--from" {
            guard users.count == 2 else {
                self.notice = "usage: /group leave --from USER (every group USER put you in)"
                return []
            }
            return [.manageGroup(.leaveFrom(users[1]))]
        }
        guard case .group(let group)? = self.openThread?.conversation else {
            self.notice = "open a group first (/open #GROUP), or /group new NAME USER…"
            return []
        }
        switch action {
        case "add", "remove", "admin", "member":
            guard !users.isEmpty else {
                self.notice = "usage: /group \(action) USER…"
                return []
            }
            let change: GroupChange =
                switch action {
                case "add": .add(group, users)
                case "remove": .remove(group, users)
                case "admin": .promote(group, users)
                default: .demote(group, users)
                }
            return [.manageGroup(change)]
        case "owner":
            guard users.count == 1 else {
                self.notice = "usage: /group owner USER (a member: you become an admin)"
                return []
            }
            return [.manageGroup(.transfer(group, to: users[0]))]
        case "title":
            // What follows the word, as typed: any script, spaces kept.
            let title = rest.drop { $0 != " " }.trimmingCharacters(in: .whitespaces)
            return [.manageGroup(.title(group, title))]
        case "members":
            return [.manageGroup(.members(group))]
        case "leave":
            return [.manageGroup(.leave(group))]
        default:
            self.notice = usage
            return []
        }
    }

    /// `/mute [mentions|none|all]`: how the open conversation alerts this user (`mentions` when not said).
    mutating func muteCommand(_ words: [String]) -> [ChatAction] {
        guard let thread = self.openThread else {
            self.notice = "open a conversation first: /open NAME or /open #GROUP"
            return []
        }
        let level: NotifyLevel
        switch words.first {
        case nil, "mentions": level = .mentions
        case "none", "all":
            level = words.first == "none" ? .none : .all
        default:
            self.notice = "usage: /mute [mentions|none|all] (all: every message alerts again)"
            return []
        }
        return [.setNotify(thread.conversation, level)]
    }

    /// The line the list shows for a conversation: its name (a group's title after it), and marks for mentions
    /// and a mute.
    func listLabel(_ thread: Thread) -> String {
        var label = thread.conversation.description
        if case .group = thread.conversation, let title = self.titles[Self.key(thread.conversation)] {
            label += " " + ChatText.printable(title)
        }
        return label
    }

    /// What the list shows after a conversation's name: `@` with mentions unread, the unread count, and a mark for
    /// a conversation that alerts on mentions only (`~`) or never (`-`).
    static func badge(_ thread: Thread) -> String {
        var badge = ""
        switch thread.notify {
        case .all: break
        case .mentions: badge += "~"
        case .none: badge += "-"
        }
        if thread.mentions > 0 { badge += "@" }
        if thread.unread > 0 { badge += "\(thread.unread)" }
        return badge.isEmpty ? "" : " \(badge) "
    }

    /// What a group change did, in words.
    static func done(_ change: GroupChange) -> String {
        switch change {
        case .create(let group, _): "made #\(group)"
        case .add(let group, let users): "added \(users.joined(separator: ", ")) to #\(group)"
        case .remove(let group, let users): "removed \(users.joined(separator: ", ")) from #\(group)"
        case .promote(let group, let users): "\(users.joined(separator: ", ")) now admin of #\(group)"
        case .demote(let group, let users): "\(users.joined(separator: ", ")) no longer admin of #\(group)"
        case .transfer(let group, let user): "#\(group) is \(user)'s now"
        case .leave(let group): "left #\(group)"
        case .leaveFrom(let user): "left the groups \(user) put you in"
        case .members(let group): "#\(group)"
        case .title(let group, let title): title.isEmpty ? "#\(group) has no title" : "titled #\(group)"
        }
    }

    /// A group's members as a notice: the owner, the admins, the members (names shown as the chat shows them).
    func roster(_ group: String, title: String, _ members: [GroupMemberInfo]) -> String {
        func names(_ role: GroupRoleInfo) -> String {
            members.filter { $0.role == role }.map { self.shown($0.user) }.joined(separator: ", ")
        }
        var parts = ["#\(group)" + (title.isEmpty ? "" : " " + ChatText.printable(title))]
        parts.append("owner " + names(.owner))
        let admins = names(.admin)
        if !admins.isEmpty { parts.append("admins " + admins) }
        let plain = names(.member)
        if !plain.isEmpty { parts.append("members " + plain) }
        return parts.joined(separator: " · ")
    }
}
