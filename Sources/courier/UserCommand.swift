import ArgumentParser
import CourierChat
import CourierServer
import CourierStore
import Foundation

struct UserCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "user",
        abstract:
            "Manage accounts and their devices, in a data folder or a PostgreSQL database (also while servers run).",
        discussion: """
            Changes reach a running server within a second: a removed user's and a revoked device's connections \
            are closed. Passwords are stored only as scrypt hashes; tokens only as SHA-256 hashes.
            """,
        subcommands: [Add.self, List.self, Passwd.self, Remove.self, Devices.self, Revoke.self]
    )

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a user. Prints a generated password when --password is not given."
        )
        @OptionGroup var options: DataOptions
        @Argument(
            help: ArgumentHelp(
                "The user name: 1 to 32 letters, digits, '.', '_' or '-', unique regardless of case and of letters "
                    + "that read alike (O1iver beside oliver, oliver. beside oliver); not all, everyone, here, channel, "
                    + "admin, root, system, support or courier."
            )
        )
        var name: String
        @Option(help: "The password (default: a generated one, printed once).")
        var password: String?

        func run() async throws {
            let password = self.password ?? generatedPassword()
            let user = try await options.withStore(creating: true) { store in
                try await store.addUser(name: self.name, password: password, nowMs: nowMs())
            }
            print(
                self.password == nil
                    ? "created user \(user.name) with password \(password)" : "created user \(user.name)"
            )
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List users: name, creation time, and whether removed."
        )
        @OptionGroup var options: DataOptions

        func run() async throws {
            for user in try await options.withStore({ try await $0.users() }) {
                print(
                    "\(user.name)\tcreated \(formatTime(user.createdMs))\(user.removedMs.map { "\tremoved \(formatTime($0))" } ?? "")"
                )
            }
        }
    }

    struct Passwd: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Set a user's password and log out all its devices. Prints a generated password when --password is not given."
        )
        @OptionGroup var options: DataOptions
        @Argument(help: "The user name.") var name: String
        @Option(help: "The new password (default: a generated one, printed once).") var password: String?

        func run() async throws {
            let password = self.password ?? generatedPassword()
            try await options.withStore { store in
                try await store.setPassword(user: self.name, password: password, nowMs: nowMs())
            }
            print(
                self.password == nil
                    ? "new password for \(self.name): \(password)" : "password changed for \(self.name)"
            )
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Remove a user: its devices are logged out and it leaves its groups. Its name is not given out again."
        )
        @OptionGroup var options: DataOptions
        @Argument(help: "The user name.") var name: String

        func run() async throws {
            try await options.withStore { try await $0.removeUser(named: self.name, nowMs: nowMs()) }
            print("removed user \(self.name)")
        }
    }

    struct Devices: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List a user's devices (logins): id, name, state, times, and whether connected now.",
            discussion: """
                One device a line, tab-separated: id, name, state (active, expired or revoked), created, expires, \
                and "connected since TIME" while a running server holds a connection of it, else "last seen TIME" \
                (when its last connection ended; "-" for one that never connected).
                """
        )
        @OptionGroup var options: DataOptions
        @Argument(help: "The user name.") var name: String

        func run() async throws {
            let devices = try await options.withStore { try await $0.devices(of: self.name) }
            let now = nowMs()
            // "Connected" only while a server runs on the folder: one that was killed left it behind. On PostgreSQL,
            // each node clears what it left when it starts again.
            let running = try self.options.postgres() != nil || CourierServer.isRunning(on: self.options.folder)
            for device in devices {
                let state = device.revokedMs != nil ? "revoked" : device.expiresMs <= now ? "expired" : "active"
                let seen =
                    if let since = device.connectedSinceMs, running {
                        "connected since \(formatTime(since))"
                    } else {
                        "last seen \(formatTime([device.lastSeenMs, device.connectedSinceMs].compactMap { $0 }.max()))"
                    }
                print(
                    "\(device.id.rawValue)\t\(ChatText.printable(device.name))\t\(state)\t"
                        + "created \(formatTime(device.createdMs))\texpires \(formatTime(device.expiresMs))\t\(seen)"
                )
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke one device's token; a running server closes its connection within a second."
        )
        @OptionGroup var options: DataOptions
        @Argument(help: "The user name.") var name: String
        @Argument(help: "The device id, from `courier user devices`.") var device: Int64

        func run() async throws {
            try await options.withStore { store in
                try await store.revokeDevice(DeviceID(rawValue: self.device), of: self.name, nowMs: nowMs())
            }
            print("revoked device \(self.device) of \(self.name)")
        }
    }
}
