import CourierClient

extension ChatLoop {
    /// Asks the server for a group change, and says what came of it: a group's roster, the groups left, the group
    /// made (it opens), and the change in words.
    static func manage(_ change: GroupChange, client: CourierClient) async throws -> [Input] {
        switch change {
        case .members(let name):
            let roster = try await client.groupRoster(of: name)
            return [.roster(name, title: roster.title, roster.members)]
        case .leaveFrom(let user):
            let left = try await client.leaveGroups(addedBy: user)
            let who = ChatText.printable(user)
            let names = left.map { "#\(ChatText.printable($0))" }.joined(separator: ", ")
            return [
                .notice(
                    left.isEmpty
                        ? "\(who) put you in no group"
                        : "left \(left.count) group\(left.count == 1 ? "" : "s") \(who) put you in: \(names)"
                )
            ]
        case .create(let group, let members):
            try await client.createGroup(group, members: members)
            return [.groupMade(group), .notice(ChatState.done(change))]
        case .add(let group, let users): try await client.addMembers(users, to: group)
        case .remove(let group, let users): try await client.removeMembers(users, from: group)
        case .promote(let group, let users): try await client.setAdmins(users, in: group)
        case .demote(let group, let users): try await client.setAdmins(users, in: group, admin: false)
        case .transfer(let group, let user): try await client.transferGroup(group, to: user)
        case .leave(let group): try await client.leaveGroup(group)
        case .title(let group, let title): try await client.setGroupTitle(title, of: group)
        }
        return [.notice(ChatState.done(change))]
    }
}
