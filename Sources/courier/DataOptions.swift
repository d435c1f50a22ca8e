import ArgumentParser
import CourierStore
import Foundation
import Logging

/// `--data`: the server's data folder, shared by `serve` and the admin commands.
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

    /// The folder to use: `--data`, else `COURIER_DATA`, else the default.
    var folder: URL {
        let path = self.data ?? ProcessInfo.processInfo.environment["COURIER_DATA"] ?? Self.defaultFolder
        return URL(fileURLWithPath: path, isDirectory: true)
    }

    /// Opens the data folder's store, as a second process beside a running server, and runs `body` on it. The
    /// store's errors become one-line failures (`code: message`, exit status 1).
    @discardableResult
    func withStore<T>(_ body: (SQLiteStore) async throws -> T) async throws -> T {
        do {
            return try await body(try SQLiteStore(folder: self.folder, logger: Logger(label: "courier.admin")))
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
    var description: String
}
