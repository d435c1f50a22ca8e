import ArgumentParser
import CourierStore
import CourierStoreSQLite
import Foundation

struct Backup: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy a data folder's database and media consistently, also while the server runs.",
        discussion: """
            Writes OUT/\(SQLiteStore.databaseFileName), a complete database as of one moment; the server goes on \
            reading and writing meanwhile. Then copies the stored media files to OUT/media/objects/: every file \
            that database names is there (stored files never change, and the server deletes none of those nothing \
            names while a backup runs), uploads still in progress are not. \
            To restore, start the server on the copy: courier serve --data OUT.
            """
    )

    @OptionGroup var options: DataOptions
    @Argument(help: "The new data folder to write; it must not hold a database already.")
    var out: String

    func run() async throws {
        let folder = URL(fileURLWithPath: self.out, isDirectory: true)
        // Nothing to back up (or nothing this command backs up): said before the copy's folder is made.
        if try options.postgres() != nil {
            throw CommandFailure(
                description: "this command works on the data folder's SQLite database; for PostgreSQL use its own "
                    + "tools (pg_dump)"
            )
        }
        try options.requireData()
        do {
            try PrivateFiles.createFolder(folder)
        } catch {
            throw CommandFailure(description: "cannot create \(self.out): \(error)")
        }
        let target = folder.appendingPathComponent(SQLiteStore.databaseFileName).path
        // No media file is deleted (as one nothing names) from before the database is copied until the files are.
        let media = options.folder.appendingPathComponent("media", isDirectory: true)
        do {
            try BlobStore.markBackup(of: media)
        } catch {
            throw CommandFailure(description: "cannot mark \(media.path) as being backed up: \(error)")
        }
        defer { BlobStore.unmarkBackup(of: media) }
        try await options.withSQLiteStore { try $0.backup(to: target) }
        let copied: (files: Int, bytes: Int64)
        do {
            copied = try BlobStore.copyObjects(
                from: media,
                to: folder.appendingPathComponent("media", isDirectory: true)
            )
        } catch {
            throw CommandFailure(description: "the database is backed up to \(target), the media not: \(error)")
        }
        print("backed up \(options.folder.path) to \(target), and \(copied.files) media files (\(copied.bytes) bytes)")
    }
}
