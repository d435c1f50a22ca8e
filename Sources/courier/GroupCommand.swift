import ArgumentParser
import CourierChat
import CourierStore
import Foundation

struct GroupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "group",
        abstract: "Manage groups, in a data folder or a PostgreSQL database (also while servers run).",
        discussion: """
            Groups have unique names. A member added later sees the messages sent after joining, not before. \
            These commands act as the administrator: over the protocol, a group's owner and admins add members \
            (their contacts), remove those of a lower role and set its title, the owner makes admins and hands the \
            group on, and any member may leave.
            """,
        subcommands: [Create.self, Add.self, Remove.self, Title.self, Show.self, List.self]
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a group with an owner and members.")
        @OptionGroup var options: DataOptions
        @Argument(help: "The group name: 1 to 32 letters, digits, '.', '_' or '-', unique regardless of case.")
        var name: String
        @Option(help: "The owner's user name (a member).") var owner: String
        @Option(help: "Other members: a,b,c or repeated (--members a --members b).") var members: [String] = []

        func run() async throws {
            try await options.withStore { store in
                try await store.createGroup(
                    name: self.name,
                    owner: self.owner,
                    members: splitNames(self.members),
                    nowMs: nowMs()
                )
            }
            print("created group \(self.name)")
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add members to a group.")
        @OptionGroup var options: DataOptions
        @Argument(help: "The group name.") var name: String
        @Argument(help: "User names to add: a b c, or a,b,c.") var users: [String]

        func run() async throws {
            let users = splitNames(self.users)
            guard !users.isEmpty else { throw ValidationError("name at least one user") }
            try await options.withStore { store in
                try await store.changeMembers(of: self.name, actor: nil, add: users, remove: [], nowMs: nowMs())
            }
            print("added \(users.joined(separator: ", ")) to \(self.name)")
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove members from a group.")
        @OptionGroup var options: DataOptions
        @Argument(help: "The group name.") var name: String
        @Argument(help: "User names to remove: a b c, or a,b,c.") var users: [String]

        func run() async throws {
            let users = splitNames(self.users)
            guard !users.isEmpty else { throw ValidationError("name at least one user") }
            try await options.withStore { store in
                try await store.changeMembers(of: self.name, actor: nil, add: [], remove: users, nowMs: nowMs())
            }
            print("removed \(users.joined(separator: ", ")) from \(self.name)")
        }
    }

    struct Title: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Give a group a title in any script (its name never changes), or take it away (no TEXT)."
        )
        @OptionGroup var options: DataOptions
        @Argument(help: "The group name.") var name: String
        @Argument(help: "The title: at most 64 characters, the rules of a display name.") var text: String = ""

        func run() async throws {
            try await options.withStore { store in
                try await store.setGroupTitle(self.text, of: self.name, by: nil, nowMs: nowMs())
            }
            print(self.text.isEmpty ? "\(self.name) has no title" : "titled \(self.name)")
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show a group's title, owner, members, admins and message count."
        )
        @OptionGroup var options: DataOptions
        @Argument(help: "The group name.") var name: String

        func run() async throws {
            let group = try await options.withStore { try await $0.group(named: self.name) }
            let roster = try await options.withStore { try await $0.groupRoster(of: self.name, for: nil) }
            print("group \(group.name)")
            print("title \(roster.title.isEmpty ? "-" : ChatText.printable(roster.title))")
            print("owner \(group.owner ?? "-")")
            print("members \(group.members.joined(separator: ","))")
            let admins = roster.members.filter { $0.role == .admin }.map(\.user)
            print("admins \(admins.isEmpty ? "-" : admins.joined(separator: ","))")
            print("messages \(group.lastSeq)")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the groups' names.")
        @OptionGroup var options: DataOptions

        func run() async throws {
            for name in try await options.withStore({ try await $0.groupNames() }) { print(name) }
        }
    }
}

/// Names as lists are written on the command line, comma-separated or as separate words, or both:
/// ["a, b,,c", "d"] → ["a", "b", "c", "d"].
func splitNames(_ lists: [String]) -> [String] {
    lists.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
}
