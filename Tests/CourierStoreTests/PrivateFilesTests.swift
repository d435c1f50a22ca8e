import CourierStore
import CourierStoreSQLite
import CourierTesting
import Foundation
import GRDB
import Logging
import Testing

/// A data folder holds every user's messages, media and password hashes: only its owner may read it.
@Suite("Data folders are private")
struct PrivateFilesTests {
    static func mode(_ path: String) throws -> Int {
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        return (attributes[.posixPermissions] as? NSNumber)?.intValue ?? -1
    }

    @Test("the folder is 0700, SQLite's database and its WAL 0600, media folders 0700 and files 0600, backups too")
    func modes() async throws {
        // A permissive umask, as a service manager may leave it: the store must not rely on it.
        let previous = umask(0o022)
        defer { umask(previous) }
        try await withTemporaryDirectory(prefix: "private") { parent in
            let folder = parent.appendingPathComponent("data", isDirectory: true)
            let store = try SQLiteStore(folder: folder, logger: Logger(label: "test"))
            _ = try await store.latestChangeID()
            let database = folder.appendingPathComponent(SQLiteStore.databaseFileName).path
            #expect(try Self.mode(folder.path) == 0o700)
            #expect(try Self.mode(database) == 0o600)
            #expect(try Self.mode(database + "-wal") == 0o600)

            let blobs = try BlobStore(folder: folder.appendingPathComponent("media"))
            let data = Data("a picture".utf8)
            let digest = BlobStoreTests.digest(data)
            _ = try await blobs.start(upload: "u", size: Int64(data.count), sha256: digest)
            try await blobs.append(data, to: "u", at: 0)
            _ = try await blobs.finish(upload: "u")
            let media = folder.appendingPathComponent("media").path
            for sub in ["", "/objects", "/uploads", "/objects/\(digest.prefix(2))"] {
                #expect(try Self.mode(media + sub) == 0o700, "\(sub)")
            }
            #expect(try Self.mode(media + "/objects/\(digest.prefix(2))/\(digest)") == 0o600)

            let copy = parent.appendingPathComponent("copy.sqlite").path
            try store.backup(to: copy)
            #expect(try Self.mode(copy) == 0o600)
            try store.close()

            // A folder an older version left readable is tightened when opened.
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: folder.path)
            try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: database)
            let reopened = try SQLiteStore(folder: folder, logger: Logger(label: "test"))
            #expect(try Self.mode(folder.path) == 0o700)
            #expect(try Self.mode(database) == 0o600)
            try reopened.close()
        }
    }

    @Test("a storage failure tells the client plain words, never the server's paths or SQL; a full disk says so")
    func plainStorageErrors() async throws {
        try await withTemporaryDirectory(prefix: "private") { folder in
            let blobs = try BlobStore(folder: folder)
            _ = try await blobs.start(upload: "u", size: 10, sha256: nil)
            // The part file turns into a link to nowhere (one byte long, its target's name): the write fails, even
            // for root.
            let part = folder.appendingPathComponent("uploads/u.part").path
            try FileManager.default.removeItem(atPath: part)
            try FileManager.default.createSymbolicLink(atPath: part, withDestinationPath: "x")
            do {
                _ = try await blobs.append(Data(count: 9), to: "u", at: 1)
                Issue.record("the write succeeded")
            } catch let error as CourierStoreError {
                #expect(error.code == .storageFailed)
                #expect(!error.message.contains(folder.path) && !error.message.contains("/"), "\(error.message)")
            }
        }
        // A full disk, as the file system and SQLite report it.
        let fileSystem = CocoaError(
            .fileWriteOutOfSpace,
            userInfo: [NSFilePathErrorKey: "/srv/courier/media/uploads/x.part"]
        )
        let posix = NSError(domain: NSPOSIXErrorDomain, code: Int(POSIXErrorCode.ENOSPC.rawValue))
        let sqlite = DatabaseError(resultCode: .SQLITE_FULL, message: "database or disk is full", sql: "INSERT INTO x")
        // SQLite's own error is read by its store, the file system's by everyone.
        let plains: [CourierStoreError] = [
            CourierStoreError.plain(fileSystem, doing: "store it"),
            CourierStoreError.plain(posix, doing: "store it"),
            SQLiteStore.plain(sqlite, doing: "store it"),
        ]
        for plain in plains {
            #expect(plain.code == .storageFailed)
            #expect(
                plain.message.contains("disk is full") && !plain.message.contains("/srv")
                    && !plain.message.contains("INSERT")
            )
        }
    }
}
