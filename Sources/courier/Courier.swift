import ArgumentParser

@main
struct Courier: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "courier",
        abstract: "Courier: instant messaging and media delivery.",
        version: CourierVersion.current,
        subcommands: [
            Serve.self, UserCommand.self, GroupCommand.self, InviteCommand.self, Backup.self, Signup.self, Login.self,
            PasswordCommand.self, ProfileCommand.self, DevicesCommand.self, DeleteAccount.self, FindUser.self,
            Send.self, Edit.self,
            React.self, History.self, Search.self, UnreadCommand.self, MuteCommand.self, MediaCommand.self, Chat.self,
            ProxyCommand.self, Bench.self,
        ]
    )
}

enum CourierVersion {
    /// The version `courier --version` prints.
    static let current = "0.1.0-dev"
}
