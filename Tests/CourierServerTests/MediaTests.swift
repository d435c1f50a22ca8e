import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import CourierWire
import Crypto
import Foundation
import NIOCore
import Testing

/// Media messages end to end, one file per concern: uploads (`+Uploads`), `GET /media` (`+HTTP`), the compat port
/// (`+Compat`), and access and limits (`+Access`). One suite: its tests run one at a time.
@Suite("Media messages", .serialized)
struct MediaTests {
    static func randomBytes(_ count: Int, _ name: String) -> [UInt8] {
        SeededRandom.bytes(count, seededFor: name)
    }

    /// The server's media byte counters, from `/metrics`.
    static func mediaBytes(_ fixture: ServerFixture) async throws -> (in: Int, out: Int) {
        (
            try await fixture.metric("courier_media_bytes_in_total"),
            try await fixture.metric("courier_media_bytes_out_total")
        )
    }

    /// The files under the data folder's `media/` subfolder (`objects` or `uploads`).
    static func files(_ fixture: ServerFixture, _ sub: String) -> [String] {
        let root = fixture.folder.appendingPathComponent("media/\(sub)")
        let paths = FileManager.default.enumerator(atPath: root.path)?.compactMap { $0 as? String } ?? []
        return paths.filter { path in
            var folder: ObjCBool = false
            _ = FileManager.default.fileExists(atPath: root.appendingPathComponent(path).path, isDirectory: &folder)
            return !folder.boolValue
        }.sorted()
    }

    static func waitForBytesIn(_ fixture: ServerFixture, _ count: Int) async throws {
        let deadline = ContinuousClock.now + Patience.reply
        while try await Self.mediaBytes(fixture).in < count {
            guard ContinuousClock.now < deadline else { throw TestClientTimeout(description: "bytes in short") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

}

extension Result where Failure == Courier_V1_Error {
    var failureCode: String? {
        if case .failure(let error) = self { return error.code }
        return nil
    }
}
