import ArgumentParser
import CourierChat
import CourierStore
import CourierStorePostgres
import CourierStoreSQLite
import Foundation
import Logging

/// `--data` and `--database`: the server's data folder and its database, shared by `serve` and the admin commands.
struct DataOptions: ParsableArguments {
    /// The folder used when neither `--data` nor `COURIER_DATA` names one.
    static let defaultFolder = "./courier-data"

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The data folder (default: $COURIER_DATA, else \(DataOptions.defaultFolder)).",
            valueName: "folder"
        )
    )
    var data: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "A PostgreSQL database that several servers share, postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE "
                + "(default: $COURIER_DATABASE, else SQLite in the data folder). Give a URL with a password in "
                + "$COURIER_DATABASE rather than here, where other users of the machine can read it (ps).",
            valueName: "url"
        )
    )
    var database: String?

    /// The PostgreSQL database to use: `--database`, else `COURIER_DATABASE`, else none (SQLite).
    func postgres() throws -> PostgresLocation? {
        guard let url = self.database ?? ProcessInfo.processInfo.environment["COURIER_DATABASE"], !url.isEmpty else {
            return nil
        }
        do {
            return try PostgresLocation(url: url)
        } catch {
            throw ValidationError("--database: \(error)")
        }
    }

    /// The folder to use: `--data`, else `COURIER_DATA`, else the default.
    var folder: URL {
        let path = self.data ?? ProcessInfo.processInfo.environment["COURIER_DATA"] ?? Self.defaultFolder
        return URL(fileURLWithPath: path, isDirectory: true)
    }

    /// Opens the store (PostgreSQL's with `--database`, bringing its schema up to date; else the data folder's, as
    /// a second process beside a running server) and runs `body` on it. The store's errors become one-line failures
    /// (`code: message`, exit status 1).
    @discardableResult
    func withStore<T: Sendable>(_ body: @Sendable (any CourierDatabase) async throws -> T) async throws -> T {
        do {
            let logger = Logger(label: "courier.admin")
            if let location = try self.postgres() {
                let store = PostgresStore(location: location, logger: logger)
                try await store.migrate()
                return try await store.withRunning { try await body(store) }
            }
            let store = try SQLiteStore(folder: self.folder, logger: logger)
            defer { try? store.close() }
            return try await body(store)
        } catch let error as CourierStoreError {
            throw CommandFailure(description: "\(error.code): \(error.message)")
        }
    }

    /// Opens the data folder's SQLite store, for what only it does (a backup), refusing with `--database`.
    func withSQLiteStore<T>(_ body: (SQLiteStore) async throws -> T) async throws -> T {
        guard try self.postgres() == nil else {
            throw CommandFailure(
                description: "this command works on the data folder's SQLite database; for PostgreSQL use its own "
                    + "tools (pg_dump)"
            )
        }
        do {
            let store = try SQLiteStore(folder: self.folder, logger: Logger(label: "courier.admin"))
            defer { try? store.close() }
            return try await body(store)
        } catch let error as CourierStoreError {
            throw CommandFailure(description: "\(error.code): \(error.message)")
        }
    }
}

/// Milliseconds since 1970 by the system clock.
func nowMs() -> Int64 {
    Int64((Date().timeIntervalSince1970 * 1000).rounded())
}

/// A random password for `user add` and `user passwd` when none is given: 20 characters from a 57-letter alphabet
/// without look-alikes (about 116 bits).
func generatedPassword() -> String {
    let alphabet = Array("abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789")
    var generator = SystemRandomNumberGenerator()
    return String((0..<20).map { _ in alphabet.randomElement(using: &generator)! })
}

/// Formats a time for listings, in UTC.
func formatTime(_ ms: Int64?) -> String {
    guard let ms else { return "-" }
    let formatter = ISO8601DateFormatter()
    formatter.timeZone = TimeZone(identifier: "UTC")
    return formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
}

/// A failed admin command: ArgumentParser prints "Error: " and the description, and exits with status 1.
struct CommandFailure: Error, CustomStringConvertible {
    /// What the command says, made printable: it may carry a server's or a proxy's words, whose control characters
    /// must reach the terminal as caret notation, never as sequences it obeys.
    var description: String

    init(description: String) {
        self.description = ChatText.printable(description)
    }
}
