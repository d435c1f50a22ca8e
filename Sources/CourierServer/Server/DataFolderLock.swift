import CourierStore
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Why a server did not start on its data folder.
public struct DataFolderInUse: Error, CustomStringConvertible {
    public var folder: String
    /// The process that holds the folder, when it could be read.
    public var holder: Int32?

    public var description: String {
        let who = self.holder.map { "another courier server (process \($0))" } ?? "another courier server"
        return "\(who) is already using the data folder \(self.folder): stop it first, or give this one another "
            + "folder (--data); two servers on one folder would not see each other's messages"
    }
}

/// An exclusive lock on a data folder for one running server (`flock` on `server.lock` in the folder, with the
/// holder's process id written in it): a second server on the same folder, in this process or another, fails to
/// start instead of running beside the first. The commands that change accounts (`courier user …`) open the store
/// without it: they are meant to run beside the server. The system drops the lock when the process ends, however.
final class DataFolderLock: Sendable {
    static let fileName = "server.lock"
    private let descriptor: Int32
    private let released = Atomic<Bool>(false)

    /// Takes the lock, creating the folder (private) if needed.
    ///
    /// - Throws: ``DataFolderInUse``; ``CourierStoreError`` (`storage-failed`) when the lock file cannot be made.
    init(folder: URL) throws {
        try PrivateFiles.createFolder(folder)
        let path = folder.appendingPathComponent(Self.fileName).path
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            let reason = String(cString: strerror(errno))
            throw CourierStoreError(.storageFailed, "cannot open \(path): \(reason)")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            var bytes = [UInt8](repeating: 0, count: 32)
            let count = pread(descriptor, &bytes, bytes.count, 0)
            close(descriptor)
            let holder = count > 0 ? Int32(String(decoding: bytes[0..<count], as: UTF8.self)) : nil
            throw DataFolderInUse(folder: folder.path, holder: holder)
        }
        let pid = Array(String(getpid()).utf8)
        _ = ftruncate(descriptor, 0)
        _ = pid.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
        self.descriptor = descriptor
    }

    /// Gives the lock up (once; later calls do nothing).
    func release() {
        guard !self.released.exchange(true, ordering: .acquiringAndReleasing) else { return }
        close(self.descriptor)
    }

    /// Whether a server holds the folder now (its lock is taken), without making or taking anything.
    static func isHeld(_ folder: URL) -> Bool {
        let descriptor = open(folder.appendingPathComponent(Self.fileName).path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        guard flock(descriptor, LOCK_SH | LOCK_NB) == 0 else { return true }
        flock(descriptor, LOCK_UN)
        return false
    }

    deinit {
        self.release()
    }
}
