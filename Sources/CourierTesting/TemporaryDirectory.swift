public import Foundation

/// A fresh directory under the system's temporary directory, removed by ``remove()``.
///
/// Tests use real files: `withTemporaryDirectory { url in … }` gives each test its own folder.
public struct TemporaryDirectory: Sendable {
    /// The directory.
    public let url: URL

    /// Creates a new, empty directory whose name starts with `prefix`.
    public init(prefix: String = "courier-test") throws {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        self.url = url
    }

    /// Deletes the directory and everything in it.
    public func remove() {
        try? FileManager.default.removeItem(at: self.url)
    }
}

/// Runs `body` with a fresh temporary directory and removes it afterwards, whatever `body` did.
public func withTemporaryDirectory<T>(
    prefix: String = "courier-test",
    _ body: (URL) async throws -> T
) async throws -> T {
    let directory = try TemporaryDirectory(prefix: prefix)
    defer { directory.remove() }
    return try await body(directory.url)
}
