import CourierServer
import CourierServerTesting
import CourierStoreSQLite
import CourierTesting
import Foundation
import Logging
import Testing

/// One server per data folder: a second one does not run beside the first (its clients would never see the first's
/// messages).
@Suite("The data folder's lock")
struct DataFolderTests {
    @Test("a second server on a folder in use fails to start, naming the holder; once the first stops, one starts")
    func oneServerPerFolder() async throws {
        let folder = try TemporaryDirectory(prefix: "courier-lock")
        defer { folder.remove() }
        var second = ServerConfiguration()
        second.dataFolder = folder.url
        let configuration = second
        let logger = Logger(label: "courier.test")
        try await ServerFixture.with(folder: folder.url) { _ in
            do {
                _ = try CourierServer(configuration: configuration, logger: logger) {
                    try SQLiteStore(folder: $0, configuration: .init(serving: configuration.store), logger: logger)
                }
                Issue.record("a second server started on a folder in use")
            } catch let error as DataFolderInUse {
                #expect(error.holder == getpid())
                #expect(error.description.contains(folder.url.path))
            }
        }
        // The first has stopped: the folder is free (and its own lock file is no obstacle).
        try await ServerFixture.with(folder: folder.url) { fixture in
            _ = try await fixture.user("alice")
        }
    }
}
