import CourierTesting
import Foundation
import Testing

@testable import MediaCache

@Suite("MediaCache: fragments on disk")
struct FragmentStoreTests {
    @Test("committed fragments are read back after reopening; bytes written but not committed are never listed")
    func commitAndCrash() async throws {
        try await withTemporaryDirectory { folder in
            let store = try FragmentStore(folder: folder)
            let key = "http://origin.test/video.mp4"
            let bytes = Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 31) })
            var record = ResourceRecord(key: key)
            record.totalLength = Int64(bytes.count)
            record.etag = "\"v1\""
            record.contentType = "video/mp4"
            try store.write(bytes[1000..<2000], at: 1000, for: key)
            record = try store.commit(record, adding: [1000..<2000])
            try store.write(bytes[3000..<3500], at: 3000, for: key)
            record = try store.commit(record, adding: [3000..<3500])
            // Written, then the process dies before the commit: the index does not list it.
            try store.write(bytes[0..<1000], at: 0, for: key)

            let reopened = try FragmentStore(folder: folder)
            let found = try #require(reopened.record(for: key))
            #expect(found.ranges.ranges == [1000..<2000, 3000..<3500])
            #expect(found.etag == "\"v1\"" && found.totalLength == 4096 && found.contentType == "video/mp4")
            #expect(try reopened.read(1200..<1800, for: key) == bytes[1200..<1800])
            #expect(try reopened.read(3000..<3500, for: key) == bytes[3000..<3500])
            #expect(reopened.record(for: "http://origin.test/other.mp4") == nil)
        }
    }

    @Test("a key becomes a digest-named folder inside the cache, whatever it contains")
    func keysStayInside() async throws {
        try await withTemporaryDirectory { folder in
            let store = try FragmentStore(folder: folder)
            for key in [
                "../../etc/passwd", "/absolute", "a/b/../../..", "\u{0}nul", String(repeating: "x", count: 5000),
            ] {
                let resource = store.resourceFolder(for: key)
                let name = resource.lastPathComponent
                #expect(name.count == 64 && name.allSatisfy(\.isHexDigit))
                #expect(
                    resource.standardizedFileURL.path == folder.appendingPathComponent(name).standardizedFileURL.path
                )
                try store.write(Data([1, 2, 3]), at: 0, for: key)
                _ = try store.commit(ResourceRecord(key: key), adding: [0..<3])
                #expect(try store.read(0..<3, for: key) == Data([1, 2, 3]))
                try store.remove(key)
                #expect(store.record(for: key) == nil)
            }
            let left = try FileManager.default.contentsOfDirectory(atPath: folder.path)
            #expect(left.isEmpty, "\(left)")
        }
    }

    @Test("a damaged index reads as nothing cached, never as wrong ranges")
    func damagedIndex() async throws {
        try await withTemporaryDirectory { folder in
            let store = try FragmentStore(folder: folder)
            let key = "http://origin.test/a"
            try store.write(Data(repeating: 7, count: 10), at: 0, for: key)
            _ = try store.commit(ResourceRecord(key: key), adding: [0..<10])
            let index = store.resourceFolder(for: key).appendingPathComponent("index")
            try Data("{\"key\":".utf8).write(to: index)
            #expect(store.record(for: key) == nil)
        }
    }
}
