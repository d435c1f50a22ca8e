import ArgumentParser
import Foundation

@main
struct Courier: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "courier",
        abstract: "Courier: instant messaging and media delivery.",
        version: CourierVersion.current,
        subcommands: [
            Serve.self, UserCommand.self, BotCommand.self, HookCommand.self, GroupCommand.self, InviteCommand.self,
            Backup.self,
            Signup.self, Login.self,
            PasswordCommand.self, ProfileCommand.self, DevicesCommand.self, DeleteAccount.self, FindUser.self,
            Send.self, Edit.self,
            React.self, PinCommand.self, Forward.self, History.self, Search.self, UnreadCommand.self, MuteCommand.self,
            BlockCommand.self,
            UnblockCommand.self, BlocksCommand.self, MediaCommand.self, Chat.self,
            ProxyCommand.self, Bench.self,
        ]
    )
}

extension Courier {
    /// Runs the command line; a first word that is no command (`courier sedn …`) is answered with the command it is
    /// likely a slip of, before the parser takes it for an argument and complains about the options after it.
    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if let first = arguments.first, !first.hasPrefix("-"), first != "help" {
            let names = Self.configuration.subcommands.map { $0._commandName }
            if !names.contains(first) {
                let guess = names.map { ($0, Self.distance(first, $0)) }.filter { $0.1 <= 2 }.min { $0.1 < $1.1 }
                let hint = guess.map { "; did you mean '\($0.0)'?" } ?? "; `courier --help` lists them"
                FileHandle.standardError.write(Data("Error: no command '\(first)'\(hint)\n".utf8))
                Foundation.exit(64)
            }
        }
        do {
            var command = try Self.parseAsRoot(arguments)
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch {
            Self.exit(withError: error)
        }
    }

    /// The edit distance between two words (a swap of two neighbours counts one).
    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a)
        let b = Array(b)
        var rows = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { rows[i][0] = i }
        for j in 0...b.count { rows[0][j] = j }
        for i in stride(from: 1, through: a.count, by: 1) {
            for j in stride(from: 1, through: b.count, by: 1) {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                rows[i][j] = min(rows[i - 1][j] + 1, rows[i][j - 1] + 1, rows[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    rows[i][j] = min(rows[i][j], rows[i - 2][j - 2] + 1)
                }
            }
        }
        return rows[a.count][b.count]
    }
}

enum CourierVersion {
    /// The version `courier --version` prints.
    static let current = "0.1.0-dev"
}
