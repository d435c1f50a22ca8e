import ArgumentParser
import CourierChat
import CourierClient
import Foundation

/// `courier block`, `courier unblock`: keep a user's direct messages and sight of you away.
struct BlockCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "block",
        abstract: "Block a user: its direct messages no longer reach you, and it sees nothing of you.",
        discussion: """
            While blocked, the user's direct messages are kept from all your devices (it sees them sent, never \
            delivered, and is not told), it sees none of your presence, typing, read marks, display name or \
            picture, and it cannot add you to a group. In a group you share, both of you still see every message. \
            courier unblock lets new messages through; the ones sent meanwhile stay withheld. courier blocks lists \
            whom you block.
            """
    )

    @OptionGroup var options: ClientOptions

    @Argument(help: ArgumentHelp("The user to block.", valueName: "user"))
    var user: String

    func run() async throws {
        try await BlockCommand.set(self.user, blocked: true, self.options)
        print("blocked \(ChatText.printable(self.user))")
    }

    static func set(_ user: String, blocked: Bool, _ options: ClientOptions) async throws {
        try await ClientSession.run(options) { session in
            try await session.connectOrFail()
            do {
                try await session.client.setBlocked(user, blocked)
            } catch let error as CourierClientError {
                throw CommandFailure(description: "\(error.code): \(error.message)")
            }
        }
    }
}

struct UnblockCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unblock",
        abstract: "Unblock a user: its new direct messages reach you again (the ones sent while blocked do not)."
    )

    @OptionGroup var options: ClientOptions

    @Argument(help: ArgumentHelp("The user to unblock.", valueName: "user"))
    var user: String

    func run() async throws {
        try await BlockCommand.set(self.user, blocked: false, self.options)
        print("unblocked \(ChatText.printable(self.user))")
    }
}

/// `courier blocks`: whom you block.
struct BlocksCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "blocks",
        abstract: "List the users you block, the earliest blocked first.",
        discussion: """
            A line a user (under a header in columns on a terminal, else tab-separated): the user and when you \
            blocked it. --json prints one object a line instead.
            """
    )

    @OptionGroup var options: ClientOptions

    @Flag(help: "One JSON object a line.")
    var json = false

    func run() async throws {
        let blocked = try await ClientSession.run(self.options) { session in
            try await session.connectOrFail()
            do {
                return try await session.client.blockedUsers()
            } catch let error as CourierClientError {
                throw CommandFailure(description: "\(error.code): \(error.message)")
            }
        }
        var table = Table(columns: ["user", "since"])
        let formatter = ISO8601DateFormatter()
        for (user, since) in blocked {
            if self.json {
                let object: [String: Any] = ["user": user, "since": formatter.string(from: since)]
                let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
                print(String(decoding: data, as: UTF8.self))
            } else {
                table.add([.text(user), .text(formatter.string(from: since))])
            }
        }
        if !self.json { table.print() }
    }
}
