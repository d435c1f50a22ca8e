import ArgumentParser
import CourierChat
import CourierClient
import Foundation

/// `courier mute`: how a conversation alerts you, on all your devices.
struct MuteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mute",
        abstract: "Choose how a conversation alerts you, on all your devices (default: mentions of you only).",
        discussion: """
            --level mentions alerts only on messages that mention you (@you, or @all from an admin); none never \
            alerts; all alerts on every message again. Unread messages and mentions are counted whatever the \
            level (courier unread). A group you are in, or a user you have written with (not-member otherwise).
            """
    )

    @OptionGroup var options: ClientOptions
    @OptionGroup var target: ConversationOptions

    @Option(help: ArgumentHelp("mentions, none or all.", valueName: "level"))
    var level: Level = .mentions

    enum Level: String, ExpressibleByArgument, CaseIterable {
        case mentions, none, all

        var notify: NotifyLevel {
            switch self {
            case .mentions: .mentions
            case .none: NotifyLevel.none
            case .all: .all
            }
        }
    }

    func run() async throws {
        self.checkParsed { try self.target.check() }
        try await ClientSession.run(self.options) { session in
            try await session.connectOrFail()
            do {
                try await session.client.setNotify(self.level.notify, for: self.target.conversation)
            } catch let error as CourierClientError {
                throw CommandFailure(description: "\(error.code): \(error.message)")
            }
        }
        print("\(ChatText.printable(self.target.conversation.description)) alerts on \(self.level.rawValue)")
    }
}

/// `courier unread`: each conversation's unread messages and mentions.
struct UnreadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unread",
        abstract: "List your conversations, most recently active first, with unread messages and mentions.",
        discussion: """
            A line a conversation (under a header in columns on a terminal, else tab-separated): the conversation (@user or #group), unread messages, unread \
            mentions of you, how it alerts you (all, mentions, none), and a group's title. --json prints one \
            object a line instead.
            """
    )

    @OptionGroup var options: ClientOptions

    @Flag(help: "One JSON object a line.")
    var json = false

    func run() async throws {
        let counts = try await ClientSession.run(self.options) { session in
            try await session.connectOrFail()
            do {
                return try await session.client.unreadCounts()
            } catch let error as CourierClientError {
                throw CommandFailure(description: "\(error.code): \(error.message)")
            }
        }
        var table = Table(columns: ["conversation", "unread", "mentions", "alerts", "title"])
        for count in counts {
            if self.json {
                var object: [String: Any] = [
                    "unread": count.unread, "mentions": count.mentions, "notify": count.notify.description,
                ]
                switch count.conversation {
                case .user(let user): object["with"] = user
                case .group(let group): object["group"] = group
                }
                if !count.title.isEmpty { object["title"] = count.title }
                let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
                print(String(decoding: data, as: UTF8.self))
            } else {
                table.add([
                    .text(count.conversation.description), .number(Int64(count.unread)),
                    .number(Int64(count.mentions)), .text(count.notify.description), .text(count.title),
                ])
            }
        }
        if !self.json { table.print() }
    }
}
