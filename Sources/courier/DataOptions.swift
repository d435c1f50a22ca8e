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
            "The data folder (default: $COURIER_DATA, else the configuration file's, else "
                + "\(DataOptions.defaultFolder)).",
            valueName: "folder"
        )
    )
    var data: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "A PostgreSQL database that several servers share, postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE "
                + "(default: $COURIER_DATABASE, else the configuration file's, else SQLite in the data folder). Give a URL with a password in "
                + "$COURIER_DATABASE rather than here, where other users of the machine can read it (ps).",
            valueName: "url"
        )
    )
    var database: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "A configuration file in TOML, in the form `courier serve --print-config` prints (default: "
                + "$COURIER_CONFIG). Its settings count where no flag or environment variable gives one; an unknown "
                + "key in it is an error.",
            valueName: "file"
        )
    )
    var config: String?

    /// Reads the configuration file, if one is named, for its `data` and `database` (a flag or environment variable
    /// still wins); the whole file is checked (``ConfigFile``).
    mutating func validate() throws {
        let environment = ProcessInfo.processInfo.environment
        guard let path = ConfigFile.path(flag: self.config, environment: environment) else { return }
        let file = try ConfigFile.read(path: path)
        if self.data == nil, environment["COURIER_DATA"] ?? "" == "" {
            self.data = file.given("data")
        }
        if self.database == nil, environment["COURIER_DATABASE"] ?? "" == "", file.given("database") != "sqlite" {
            self.database = file.given("database")
        }
    }

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

    /// Whether the data folder holds a Courier database.
    var holdsData: Bool {
        FileManager.default.fileExists(atPath: self.folder.appendingPathComponent(SQLiteStore.databaseFileName).path)
    }

    /// Refuses a data folder that holds no Courier database (a mistyped `--data`, a command run in another folder)
    /// before anything is made there: only `serve` and `user add` make one.
    func requireData() throws {
        guard try self.postgres() == nil, !self.holdsData else { return }
        var isFolder: ObjCBool = false
        if FileManager.default.fileExists(atPath: self.folder.path, isDirectory: &isFolder), isFolder.boolValue,
            !FileManager.default.isReadableFile(atPath: self.folder.path)
                || !FileManager.default.isExecutableFile(atPath: self.folder.path)
        {
            throw CommandFailure(description: "cannot read \(self.folder.path): permission denied")
        }
        throw CommandFailure(
            description: "no Courier data in \(self.folder.path): give --data (or $COURIER_DATA) the folder "
                + "`courier serve` uses; `courier serve` or `courier user add` makes a new one"
        )
    }

    /// Says, on standard error, that a command made the data folder it was given.
    func sayMade() {
        FileHandle.standardError.write(Data("made a new data folder: \(self.folder.path)\n".utf8))
    }

    /// Opens the store (PostgreSQL's with `--database`, bringing its schema up to date; else the data folder's, as
    /// a second process beside a running server) and runs `body` on it. The store's errors become one-line failures
    /// (`code: message`, exit status 1).
    ///
    /// - Parameter creating: Whether the command may make the data folder (`user add`), saying so when it does;
    ///   else a folder without Courier's database is refused, and nothing is made (``requireData()``).
    @discardableResult
    func withStore<T: Sendable>(
        creating: Bool = false,
        _ body: @Sendable (any CourierDatabase) async throws -> T
    ) async throws -> T {
        if !creating { try self.requireData() }
        do {
            let logger = Logger(label: "courier.admin")
            if let location = try self.postgres() {
                let store = PostgresStore(location: location, logger: logger)
                try await store.migrate()
                return try await store.withRunning { try await body(store) }
            }
            let made = !self.holdsData
            let store = try SQLiteStore(folder: self.folder, logger: logger)
            defer { try? store.close() }
            if made { self.sayMade() }
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
        try self.requireData()
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
