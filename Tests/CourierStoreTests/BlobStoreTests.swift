import CourierStore
import CourierTesting
import Crypto
import Foundation
import Testing

@Suite("The blob store: streamed uploads checked by size and SHA-256, resumable, deduplicated, range reads")
struct BlobStoreTests {
    static func digest(_ data: Data) -> String {
        SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }

    static func bytes(_ count: Int, seed: UInt64) -> Data {
        var random = SeededRandom(seed: seed)
        return Data((0..<count).map { _ in UInt8.random(in: 0...255, using: &random) })
    }

    static func objectFiles(_ folder: URL) -> [String] {
        let objects = folder.appendingPathComponent("objects")
        let enumerator = FileManager.default.enumerator(atPath: objects.path)
        return (enumerator?.allObjects as? [String] ?? []).filter { $0.count > 3 }.sorted()
    }

    @Test("a file sent in chunks, cut and resumed, is stored under its digest and reads back in any range")
    func uploadResumeAndRead() async throws {
        try await withTemporaryDirectory(prefix: "blobs") { folder in
            var configuration = BlobStore.Configuration()
            configuration.readChunkBytes = 4096
            let data = Self.bytes(100_000, seed: 7)
            let digest = Self.digest(data)
            var store = try BlobStore(folder: folder, configuration: configuration)
            var upload = try await store.start(upload: "u1", size: Int64(data.count), sha256: digest)
            #expect(upload.offset == 0)
            var offset: Int64 = 0
            for start in stride(from: 0, to: 50_000, by: 7_000) {
                let chunk = data[start..<min(50_000, start + 7_000)]
                offset = try await store.append(Data(chunk), to: "u1", at: offset)
            }
            #expect(offset == 50_000)
            // A new store on the same folder (a restarted server): the upload resumes where it stood.
            store = try BlobStore(folder: folder, configuration: configuration)
            upload = try await store.start(upload: "u1", size: Int64(data.count), sha256: digest)
            #expect(upload.offset == 50_000)
            await #expect(throws: CourierStoreError(.invalidRequest, "upload u1 continues at 50000, not 0")) {
                try await store.append(Data(data[0..<10]), to: "u1", at: 0)
            }
            offset = try await store.append(Data(data[50_000...]), to: "u1", at: 50_000)
            #expect(try await store.finish(upload: "u1") == digest)
            #expect(try await store.upload("u1") == nil)
            #expect(try await store.size(of: digest) == 100_000)

            var random = SeededRandom(seed: TestSeed.make(for: "blob range reads"))
            for _ in 0..<20 {
                let lower = Int64.random(in: 0..<100_000, using: &random)
                let upper = Int64.random(in: lower...100_000, using: &random)
                var read = Data()
                try await store.read(digest, range: lower..<upper) { read.append($0) }
                #expect(read == data[Int(lower)..<Int(upper)], "\(lower)..<\(upper)")
            }
            await #expect(throws: CourierStoreError.self) {
                try await store.read(digest, range: 0..<100_001) { _ in }
            }
        }
    }

    @Test("identical files are stored once")
    func deduplicated() async throws {
        try await withTemporaryDirectory(prefix: "blobs") { folder in
            let store = try BlobStore(folder: folder)
            let data = Self.bytes(10_000, seed: 3)
            let digest = Self.digest(data)
            for id in ["a", "b"] {
                _ = try await store.start(upload: id, size: 10_000, sha256: digest)
                try await store.append(data, to: id, at: 0)
                #expect(try await store.finish(upload: id) == digest)
            }
            #expect(Self.objectFiles(folder) == ["\(digest.prefix(2))/\(digest)"])
            #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path + "/uploads").isEmpty)
        }
    }

    @Test("wrong bytes, too many bytes and oversize files are refused with their codes, leaving nothing behind")
    func refusals() async throws {
        try await withTemporaryDirectory(prefix: "blobs") { folder in
            var configuration = BlobStore.Configuration()
            configuration.maxBlobBytes = 1_000
            let store = try BlobStore(folder: folder, configuration: configuration)
            let data = Self.bytes(500, seed: 5)
            let wrongDigest = Self.digest(Data(data.reversed()))
            func code(_ body: () async throws -> Void) async -> String? {
                do {
                    try await body()
                    return nil
                } catch let error as CourierStoreError {
                    return error.code.description
                } catch {
                    return "\(error)"
                }
            }
            #expect(
                await code { _ = try await store.start(upload: "big", size: 1_001, sha256: wrongDigest) }
                    == "media-too-large"
            )
            _ = try await store.start(upload: "w", size: 500, sha256: wrongDigest)
            try await store.append(data, to: "w", at: 0)
            #expect(await code { _ = try await store.finish(upload: "w") } == "media-mismatch")
            _ = try await store.start(upload: "x", size: 400, sha256: Self.digest(data))
            #expect(await code { try await store.append(data, to: "x", at: 0) } == "media-mismatch")
            _ = try await store.start(upload: "s", size: 500, sha256: Self.digest(data))
            try await store.append(data[0..<100], to: "s", at: 0)
            #expect(await code { _ = try await store.finish(upload: "s") } == "media-mismatch", "short")
            #expect(await code { try await store.append(data, to: "nope", at: 0) } == "unknown-upload")
            #expect(
                await code { _ = try await store.start(upload: "../etc", size: 1, sha256: wrongDigest) }
                    == "invalid-request"
            )
            #expect(
                await code { _ = try await store.start(upload: "s", size: 499, sha256: Self.digest(data)) }
                    == "invalid-request",
                "the same id declared again with another size"
            )
            #expect(await code { try await store.read(wrongDigest, range: 0..<1) { _ in } } == "unknown-media")
            // The refused uploads are gone; the short one still waits to be finished.
            #expect(Self.objectFiles(folder).isEmpty)
            #expect(try await store.upload("w") == nil)
            #expect(try await store.upload("x") == nil)
            #expect(try await store.upload("s")?.offset == 100)
        }
    }

    @Test("uploads left alone past the abandoned age are removed; recent ones stay")
    func abandonedUploads() async throws {
        try await withTemporaryDirectory(prefix: "blobs") { folder in
            var configuration = BlobStore.Configuration()
            configuration.abandonedUploadAge = .seconds(3600)
            let store = try BlobStore(folder: folder, configuration: configuration)
            let digest = Self.digest(Data([1]))
            for id in ["old", "new"] {
                _ = try await store.start(upload: id, size: 10, sha256: digest)
                try await store.append(Data([1, 2]), to: id, at: 0)
            }
            try FileManager.default.setAttributes(
                [.modificationDate: Date().addingTimeInterval(-7200)],
                ofItemAtPath: folder.path + "/uploads/old.part"
            )
            #expect(try await store.removeAbandoned() == ["old"])
            #expect(try await store.upload("old") == nil)
            #expect(try await store.upload("new")?.offset == 2)
        }
    }
}
