import ArgumentParser
import CourierStore
import Foundation

struct Backup: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy a data folder's database consistently, also while the server runs.",
        discussion: """
            Writes OUT/\(SQLiteStore.databaseFileName), a complete database as of one moment; the server goes on \
            reading and writing meanwhile. To restore, start the server on the copy: courier serve --data OUT.
            """
    )

    @OptionGroup var options: DataOptions
    @Argument(help: "The new data folder to write; it must not hold a database already.")
    var out: String

    func run() async throws {
        let folder = URL(fileURLWithPath: self.out, isDirectory: true)
        do {
            try PrivateFiles.createFolder(folder)
        } catch {
            throw CommandFailure(description: "cannot create \(self.out): \(error)")
        }
        let target = folder.appendingPathComponent(SQLiteStore.databaseFileName).path
        try await options.withStore { try $0.backup(to: target) }
        print("backed up \(options.folder.path) to \(target)")
    }
}
