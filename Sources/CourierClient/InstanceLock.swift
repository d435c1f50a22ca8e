import Dispatch
import Foundation
import GRDB
import Synchronization

/// Marks one client instance (a ``CourierClient`` object) as alive, so that other processes sharing its local store
/// leave its outbox messages to it, and take them over once it is gone.
///
/// The mark is a lock the operating system holds for the process: a small SQLite file, `INSTANCES/ID.lock`, in
/// which the instance keeps an exclusive transaction open. SQLite's file locks are released when the process ends,
/// however it ends (SIGKILL included), and they work between connections of one process too. The file is made
/// under a temporary name and renamed once locked, so a mark that can be seen is a mark that was locked. Another
/// instance asks whether a mark is still held (``held(_:in:)``); it takes over the outbox of one that is not, and
/// removes marks left behind.
final class InstanceLock: Sendable {
    /// The instance's id: a UUID, also written in the outbox rows it owns.
    let id: String
    private let file: URL
    private let queue: DatabaseQueue
    private let released = Mutex(false)

    /// Creates and takes the mark of a new instance.
    ///
    /// - Throws: if the folder or the file cannot be made, or the lock not taken.
    init(folder: URL) throws {
        try FileManager.default.createDirectory(
            at: folder,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
        self.id = UUID().uuidString.lowercased()
        self.file = Self.mark(self.id, in: folder)
        let making = folder.appendingPathComponent(".\(self.id).making")
        var configuration = Configuration()
        configuration.label = "courier.instance"
        // The transaction that holds the lock stays open between accesses, by design.
        configuration.allowsUnsafeTransactions = true
        self.queue = try DatabaseQueue(path: making.path, configuration: configuration)
        try self.queue.writeWithoutTransaction { db in
            try db.execute(sql: "CREATE TABLE IF NOT EXISTS instance (id TEXT)")
            // Held until release() or the end of the process.
            try db.execute(sql: "BEGIN EXCLUSIVE")
        }
        // The lock is on the file, whatever its name: seen under its own name only once held.
        try FileManager.default.moveItem(at: making, to: self.file)
    }

    deinit {
        self.release()
    }

    /// Gives the mark up: the file goes, and with it the lock.
    func release() {
        let first = self.released.withLock { released -> Bool in
            defer { released = true }
            return !released
        }
        guard first else { return }
        try? FileManager.default.removeItem(at: self.file)
        try? self.queue.writeWithoutTransaction { db in
            if db.isInsideTransaction { try db.execute(sql: "ROLLBACK") }
        }
        try? self.queue.close()
    }

    /// Gives the mark up on a thread of its own (file and SQLite work, kept off the tasks' threads).
    func releaseInBackground() async {
        await Self.offTasks { self.release() }
    }

    /// Which of these instances are alive (their mark exists and is held), found on a thread of its own. An error
    /// other than "busy" counts as alive (messages are not taken over on a doubt).
    static func held(_ ids: [String], in folder: URL) async -> Set<String> {
        await Self.offTasks { Set(ids.filter { Self.isHeld(mark: Self.mark($0, in: folder)) }) }
    }

    /// Removes the marks in `folder` whose instance is gone (left by processes that were killed), but `keeping`.
    static func sweep(_ folder: URL, keeping: String) async {
        await Self.offTasks {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
            for name in names where name.hasSuffix(".lock") && name != "\(keeping).lock" {
                let mark = folder.appendingPathComponent(name)
                if !Self.isHeld(mark: mark) { try? FileManager.default.removeItem(at: mark) }
            }
            // A process killed while making its mark leaves the temporary file: gone after a minute.
            for name in names where name.hasSuffix(".making") {
                let file = folder.appendingPathComponent(name)
                let modified = (try? FileManager.default.attributesOfItem(atPath: file.path))?[.modificationDate]
                if let modified = modified as? Date, modified.timeIntervalSinceNow < -60 {
                    try? FileManager.default.removeItem(at: file)
                }
            }
        }
    }

    private static func mark(_ id: String, in folder: URL) -> URL {
        folder.appendingPathComponent(id + ".lock")
    }

    private static func isHeld(mark: URL) -> Bool {
        guard FileManager.default.fileExists(atPath: mark.path) else { return false }
        var configuration = Configuration()
        configuration.readonly = true
        configuration.busyMode = .immediateError
        do {
            let queue = try DatabaseQueue(path: mark.path, configuration: configuration)
            defer { try? queue.close() }
            // A read needs a shared lock, which the holder's exclusive lock refuses.
            _ = try queue.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master") }
            return false
        } catch let error as DatabaseError where error.resultCode == .SQLITE_BUSY {
            return true
        } catch {
            // The file went between the check and the open: its instance released it.
            return FileManager.default.fileExists(atPath: mark.path)
        }
    }

    /// Runs blocking work on a global queue and waits for it.
    private static func offTasks<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: work()) }
        }
    }
}
