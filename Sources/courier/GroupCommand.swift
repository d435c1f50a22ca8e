import ArgumentParser
import CourierStore
import Foundation

struct GroupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "group",
        abstract: "Manage groups in a data folder (also while the server runs).",
        discussion: """
            Groups have unique names. A member added later sees the messages sent after joining, not before. \
            These commands act as the administrator: over the protocol, only a group's owner adds and removes \
            members, and any member may leave.
            """,
        subcommands: [Create.self, Add.self, Remove.self, Show.self, List.self]
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a group with an owner and members.")
        @OptionGroup var options: DataOptions
        @Argument(help: "The group name: 1 to 32 letters, digits, '.', '_' or '-', unique regardless of case.")
        var name: String
        @Option(help: "The owner's user name (a member).") var owner: String
        @Option(help: "Other members, comma-separated: a,b,c.") var members: String = ""

        func run() async throws {
            do {
                try await options.openStore().createGroup(
                    name: self.name,
                    owner: self.owner,
                    members: splitNames(self.members),
                    nowMs: nowMs()
                )
            } catch let error as CourierStoreError {
                throw error.exit
            }
            print("created group \(self.name)")
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add members to a group.")
        @OptionGroup var options: DataOptions
        @Argument(help: "The group name.") var name: String
        @Argument(help: "User names to add.") var users: [String]

        func run() async throws {
            do {
                try await options.openStore().changeMembers(of: self.name, actor: nil, add: self.users, nowMs: nowMs())
            } catch let error as CourierStoreError {
                throw error.exit
            }
            print("added \(self.users.joined(separator: ", ")) to \(self.name)")
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove members from a group.")
        @OptionGroup var options: DataOptions
        @Argument(help: "The group name.") var name: String
        @Argument(help: "User names to remove.") var users: [String]

        func run() async throws {
            do {
                try await options.openStore().changeMembers(
                    of: self.name,
                    actor: nil,
                    remove: self.users,
                    nowMs: nowMs()
                )
            } catch let error as CourierStoreError {
                throw error.exit
            }
            print("removed \(self.users.joined(separator: ", ")) from \(self.name)")
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show a group's owner, members and message count.")
        @OptionGroup var options: DataOptions
        @Argument(help: "The group name.") var name: String

        func run() async throws {
            do {
                let group = try await options.openStore().group(named: self.name)
                print(
                    "group \(group.name)\nowner \(group.owner ?? "-")\nmembers \(group.members.joined(separator: ","))\nmessages \(group.lastSeq)"
                )
            } catch let error as CourierStoreError {
                throw error.exit
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the groups' names.")
        @OptionGroup var options: DataOptions

        func run() async throws {
            for name in try await options.openStore().groupNames() { print(name) }
        }
    }
}

/// "a, b,,c" → ["a", "b", "c"].
func splitNames(_ list: String) -> [String] {
    list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
}
