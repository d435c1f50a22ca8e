import CourierPostgresTesting
import CourierStore
import CourierStorePostgres
import CourierTesting
import Crypto
import Foundation
import Logging
import PostgresNIO
import Testing

/// Blob storage of either kind, and what the tests look at beneath it.
struct BlobFixture: Sendable {
    let storage: any BlobStorage
    /// A new storage on the same place: a restarted server, or another node.
    let reopen: @Sendable () async throws -> any BlobStorage
    /// The digests stored.
    let stored: @Sendable () async throws -> [String]
    /// Bytes kept for neither a stored blob nor an upload in progress (files in the uploads folder without their
    /// record; chunks whose content nothing names).
    let strays: @Sendable () async throws -> Int
    /// Makes an upload look as if it last grew `seconds` earlier.
    let age: @Sendable (_ upload: String, _ seconds: Int) async throws -> Void
    /// The database, for PostgreSQL.
    var location: PostgresLocation? = nil

    static func with(
        _ kind: StoreKind,
        configuration: BlobStore.Configuration = .init(),
        _ body: @Sendable (BlobFixture) async throws -> Void
    ) async throws {
        switch kind {
        case .sqlite:
            try await withTemporaryDirectory(prefix: "blobs") { folder in
                let open: @Sendable () throws -> any BlobStorage = {
                    try BlobStore(folder: folder, configuration: configuration)
                }
                let fixture = BlobFixture(
                    storage: try open(),
                    reopen: open,
                    stored: {
                        let objects = folder.appendingPathComponent("objects")
                        let files = FileManager.default.enumerator(atPath: objects.path)?.allObjects as? [String] ?? []
                        return files.filter { $0.count > 3 }.map { String($0.dropFirst(3)) }.sorted()
                    },
                    strays: {
                        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path + "/uploads")
                        return names.filter { $0.hasSuffix(".part") }.filter {
                            !names.contains(String($0.dropLast(".part".count)) + ".meta")
                        }.count
                    },
                    age: { upload, seconds in
                        try FileManager.default.setAttributes(
                            [.modificationDate: Date().addingTimeInterval(-Double(seconds))],
                            ofItemAtPath: folder.path + "/uploads/\(upload).part"
                        )
                    }
                )
                try await body(fixture)
            }
        case .postgres:
            var postgres = PostgresStore.Configuration()
            postgres.maxConnections = 4
            // Small rows (an append is cut into rows of this size): the tests' files span several, and reads cross their
            // edges.
            postgres.mediaRowBytes = 3_000
            let settings = postgres
            try await TestDatabase.with { location in
                let store = PostgresStore(location: location, configuration: settings, logger: TestDatabase.logger)
                try await store.migrate()
                let folder = URL(fileURLWithPath: "/nonexistent")
                try await store.withRunning {
                    @Sendable func query<T: PostgresDecodable & Sendable>(
                        _ sql: PostgresQuery,
                        as: T.Type
                    ) async throws -> [T]
                    where T._DecodableType == T {
                        var values: [T] = []
                        try await TestDatabase.admin(location) { connection in
                            for try await value in try await connection.query(sql, logger: TestDatabase.logger)
                                .decode(T.self)
                            {
                                values.append(value)
                            }
                        }
                        return values
                    }
                    let fixture = BlobFixture(
                        storage: try store.blobStorage(
                            folder: folder,
                            configuration: configuration,
                            logger: TestDatabase.logger
                        ),
                        reopen: {
                            // Another node's store on the same database, for as long as the test runs.
                            try store.blobStorage(
                                folder: folder,
                                configuration: configuration,
                                logger: TestDatabase.logger
                            )
                        },
                        stored: { try await query("SELECT sha256 FROM media_blobs ORDER BY sha256", as: String.self) },
                        strays: {
                            try await query(
                                """
                                SELECT count(*)::bigint FROM media_chunks c WHERE NOT EXISTS
                                    (SELECT 1 FROM media_blobs b WHERE b.content = c.content)
                                AND NOT EXISTS (SELECT 1 FROM media_uploads u WHERE u.content = c.content)
                                """,
                                as: Int64.self
                            ).reduce(0) { $0 + Int($1) }
                        },
                        age: { upload, seconds in
                            try await TestDatabase.admin(location) { connection in
                                try await connection.run(
                                    """
                                    UPDATE media_uploads SET changed_ms = changed_ms - \(Int64(seconds) * 1000)
                                    WHERE id = \(upload)
                                    """,
                                    logger: TestDatabase.logger
                                )
                            }
                        },
                        location: location
                    )
                    try await body(fixture)
                }
            }
        }
    }
}

/// The same tests on both kinds of blob storage: files in a server's folder, and rows in PostgreSQL.
@Suite("Blob storage: streamed uploads checked by size and SHA-256, resumable, deduplicated, range reads")
struct BlobStoreTests {
    static func digest(_ data: Data) -> String {
        SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }

    /// Waits until `count` sessions of the connection's database wait for a lock.
    static func waitForLockWaiters(_ count: Int64, _ what: String, _ connection: PostgresConnection) async throws {
        try await waitUntil(what) {
            var waiting: Int64 = 0
            // Statistics are read once per transaction unless cleared.
            try await connection.run("SELECT pg_stat_clear_snapshot()", logger: TestDatabase.logger)
            let rows = try await connection.query(
                """
                SELECT count(*)::bigint FROM pg_stat_activity
                WHERE datname = current_database() AND wait_event_type = 'Lock'
                """,
                logger: TestDatabase.logger
            )
            for try await value in rows.decode(Int64.self) { waiting = value }
            return waiting == count
        }
    }

    static func bytes(_ count: Int, seed: UInt64) -> Data {
        var random = SeededRandom(seed: seed)
        return Data((0..<count).map { _ in UInt8.random(in: 0...255, using: &random) })
    }

    @Test(
        "a file sent in chunks, cut and resumed, is stored under its digest and reads back in any range",
        arguments: StoreKind.allCases
    )
    func uploadResumeAndRead(kind: StoreKind) async throws {
        var configuration = BlobStore.Configuration()
        configuration.readChunkBytes = 4096
        try await BlobFixture.with(kind, configuration: configuration) { fixture in
            let data = Self.bytes(100_000, seed: 7)
            let digest = Self.digest(data)
            var store = fixture.storage
            var upload = try await store.start(upload: "u1", size: Int64(data.count), sha256: digest)
            #expect(upload.offset == 0)
            var offset: Int64 = 0
            for start in stride(from: 0, to: 50_000, by: 7_000) {
                let chunk = data[start..<min(50_000, start + 7_000)]
                offset = try await store.append(Data(chunk), to: "u1", at: offset)
            }
            #expect(offset == 50_000)
            // A new store on the same place (a restarted server, another node): the upload resumes where it stood.
            store = try await fixture.reopen()
            upload = try await store.start(upload: "u1", size: Int64(data.count), sha256: digest)
            #expect(upload.offset == 50_000)
            await #expect(throws: CourierStoreError(.invalidRequest, "upload u1 continues at 50000, not 0")) {
                try await store.append(Data(data[0..<10]), to: "u1", at: 0)
            }
            offset = try await store.append(Data(data[50_000...]), to: "u1", at: 50_000)
            #expect(try await store.finish(upload: "u1") == digest)
            #expect(try await store.upload("u1") == nil)
            #expect(try await store.size(of: digest) == 100_000)
            #expect(try await fixture.stored() == [digest])

            var random = SeededRandom(seed: TestSeed.make(for: "blob range reads"))
            for _ in 0..<20 {
                let lower = Int64.random(in: 0..<100_000, using: &random)
                let upper = Int64.random(in: lower...100_000, using: &random)
                var read = Data()
                try await store.read(digest, range: lower..<upper) { read.append(contentsOf: $0.readableBytesView) }
                #expect(read == data[Int(lower)..<Int(upper)], "\(lower)..<\(upper)")
            }
            await #expect(throws: CourierStoreError.self) {
                try await store.read(digest, range: 0..<100_001) { _ in }
            }
        }
    }

    @Test("identical files are stored once", arguments: StoreKind.allCases)
    func deduplicated(kind: StoreKind) async throws {
        try await BlobFixture.with(kind) { fixture in
            let store = fixture.storage
            let data = Self.bytes(10_000, seed: 3)
            let digest = Self.digest(data)
            for id in ["a", "b"] {
                _ = try await store.start(upload: id, size: 10_000, sha256: digest)
                try await store.append(data, to: id, at: 0)
                #expect(try await store.finish(upload: id) == digest)
            }
            #expect(try await fixture.stored() == [digest])
            #expect(try await store.uploadsInProgress().isEmpty)
            #expect(try await fixture.strays() == 0, "the second copy's bytes are gone")
            var read = Data()
            try await store.read(digest, range: 0..<10_000) { read.append(contentsOf: $0.readableBytesView) }
            #expect(read == data)
        }
    }

    @Test(
        "wrong bytes, too many bytes and oversize files are refused with their codes, leaving nothing behind",
        arguments: StoreKind.allCases
    )
    func refusals(kind: StoreKind) async throws {
        var configuration = BlobStore.Configuration()
        configuration.maxBlobBytes = 1_000
        try await BlobFixture.with(kind, configuration: configuration) { fixture in
            let store = fixture.storage
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
            #expect(try await fixture.stored().isEmpty)
            #expect(try await fixture.strays() == 0)
            #expect(try await store.uploadsInProgress() == ["s": 500])
            #expect(try await store.upload("w") == nil)
            #expect(try await store.upload("x") == nil)
            #expect(try await store.upload("s")?.offset == 100)
        }
    }

    @Test("uploads left alone past the abandoned age are removed; recent ones stay", arguments: StoreKind.allCases)
    func abandonedUploads(kind: StoreKind) async throws {
        var configuration = BlobStore.Configuration()
        configuration.abandonedUploadAge = .seconds(3600)
        try await BlobFixture.with(kind, configuration: configuration) { fixture in
            let store = fixture.storage
            let digest = Self.digest(Data([1]))
            for id in ["old", "new"] {
                _ = try await store.start(upload: id, size: 10, sha256: digest)
                try await store.append(Data([1, 2]), to: id, at: 0)
            }
            try await fixture.age("old", 7200)
            #expect(try await store.removeAbandoned() == ["old"])
            #expect(try await store.upload("old") == nil)
            #expect(try await store.upload("new")?.offset == 2)
            #expect(try await fixture.strays() == 0)
        }
    }

    @Test("the uploads in progress of some id prefixes are those, and only those", arguments: StoreKind.allCases)
    func uploadsByPrefix(kind: StoreKind) async throws {
        try await BlobFixture.with(kind) { fixture in
            let store = fixture.storage
            let ids = ["n1-a", "n12-b", "c1-x", "n2-c", "c10-y", "n1-z"]
            for (index, id) in ids.enumerated() {
                _ = try await store.start(upload: id, size: Int64(index + 1), sha256: nil)
            }
            #expect(try await store.uploadsInProgress(prefixes: ["n1-", "c1-"]) == ["n1-a": 1, "c1-x": 3, "n1-z": 6])
            #expect(try await store.uploadsInProgress(prefixes: ["n3-"]) == [:])
            #expect(try await store.uploadsInProgress().count == ids.count)
        }
    }

    /// The file store leaves this to its one server (``MediaService`` lets one connection at a time own an upload);
    /// nodes sharing PostgreSQL have only the database between them.
    @Test(
        "PostgreSQL: two nodes appending to one upload at once: one is refused, and the bytes stored are the other's",
        .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
    )
    func racingAppends() async throws {
        try await BlobFixture.with(.postgres) { fixture in
            let first = fixture.storage
            let second = try await fixture.reopen()
            let location = try #require(fixture.location)
            let seed = TestSeed.make(for: "racing appends")
            var random = SeededRandom(seed: seed)
            for round in 0..<3 {
                let id = "race\(round)"
                let one = Self.bytes(5_000, seed: random.next())
                let other = Self.bytes(5_000, seed: random.next())
                _ = try await first.start(upload: id, size: 10_000, sha256: nil)
                // The upload's row held elsewhere until both appends wait on the database: they then meet for sure.
                let appends = try await TestDatabase.admin(location) { connection in
                    try await connection.run("BEGIN", logger: TestDatabase.logger)
                    try await connection.run(
                        "SELECT 1 FROM media_uploads WHERE id = \(id) FOR UPDATE",
                        logger: TestDatabase.logger
                    )
                    let a = Task { try await first.append(one, to: id, at: 0) }
                    let b = Task { try await second.append(other, to: id, at: 0) }
                    try await Self.waitForLockWaiters(2, "both appends wait for the database", connection)
                    try await connection.run("COMMIT", logger: TestDatabase.logger)
                    return [await a.result, await b.result]
                }
                let won = appends.compactMap { try? $0.get() }
                #expect(won == [5_000], "round \(round): exactly one append lands")
                for case .failure(let error) in appends {
                    #expect((error as? CourierStoreError)?.code == .invalidRequest, "\(error)")
                }
                // The rest of the file follows the winner's bytes, and the whole reads back as one writer's.
                let winner = (try? appends[0].get()) != nil ? one : other
                try await first.append(winner, to: id, at: 5_000)
                let digest = try await second.finish(upload: id)
                var read = Data()
                try await first.read(digest, range: 0..<10_000) { read.append(contentsOf: $0.readableBytesView) }
                #expect(read == winner + winner, "round \(round)")
            }
        }
    }

    @Test(
        "PostgreSQL: an upload deleted and started again on another node: the first writer's appends and finish are refused",
        .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
    )
    func restartedUnderAWriter() async throws {
        try await BlobFixture.with(.postgres) { fixture in
            let (first, second) = (fixture.storage, try await fixture.reopen())
            let file = Self.bytes(2_000, seed: 11)
            let digest = Self.digest(file)
            // A's upload, half sent.
            let started = try await first.start(upload: "u", size: 2_000, sha256: digest)
            try await first.append(file[0..<1_000], to: "u", at: 0, content: started.content)
            // Elsewhere: too many bytes delete it; it starts again, and other bytes go in.
            await #expect(throws: CourierStoreError.self) {
                try await second.append(Self.bytes(1_500, seed: 12), to: "u", at: 1_000)
            }
            let again = try await second.start(upload: "u", size: 2_000, sha256: digest)
            #expect(again.content != started.content && again.offset == 0)
            try await second.append(Self.bytes(1_000, seed: 13), to: "u", at: 0, content: again.content)
            // A goes on where it thinks it is: refused, and its hash of the real bytes files nothing.
            await #expect(throws: CourierStoreError(.invalidRequest, "upload u was deleted and started again")) {
                try await first.append(file[1_000...], to: "u", at: 1_000, content: started.content)
            }
            await #expect(throws: CourierStoreError(.uploadBusy, "upload u was deleted and started again")) {
                try await first.finish(upload: "u", digest: digest, content: started.content)
            }
            #expect(try await fixture.stored().isEmpty)
            #expect(try await first.upload("u")?.offset == 1_000)
        }
    }

    @Test(
        "PostgreSQL: one owner's uploads started on two nodes at once are admitted one after the other",
        .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
    )
    func admissionTakesTurns() async throws {
        try await BlobFixture.with(.postgres) { fixture in
            let (first, second) = (fixture.storage, try await fixture.reopen())
            let location = try #require(fixture.location)
            // At most one upload in progress.
            let admission = BlobAdmission(owner: 7, prefixes: ["n7-"]) { others in
                guard others.isEmpty else { throw CourierStoreError(.quotaExceeded, "one at a time") }
            }
            let starts = try await TestDatabase.admin(location) { connection in
                // The owner's turn taken elsewhere until both starts wait for it.
                try await connection.run("BEGIN", logger: TestDatabase.logger)
                try await connection.run(
                    "SELECT pg_advisory_xact_lock(\(PostgresBlobStore.admissionLockClass), \(Int32(7)))",
                    logger: TestDatabase.logger
                )
                let a = Task { try await first.start(upload: "n7-a", size: 10, sha256: nil, admission: admission) }
                let b = Task { try await second.start(upload: "n7-b", size: 10, sha256: nil, admission: admission) }
                try await Self.waitForLockWaiters(2, "both starts wait for the owner's turn", connection)
                try await connection.run("COMMIT", logger: TestDatabase.logger)
                return [await a.result, await b.result]
            }
            #expect(starts.compactMap { try? $0.get() }.count == 1, "exactly one is admitted")
            for case .failure(let error) in starts {
                #expect((error as? CourierStoreError)?.code == .quotaExceeded, "\(error)")
            }
            #expect(try await first.uploadsInProgress().count == 1)
        }
    }
}
