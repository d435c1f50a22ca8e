public import Foundation

/// Files and folders only their owner may read: a data folder holds every user's messages, media and password
/// hashes. Folders are made 0700 and files 0600, whatever the process's umask, and folders that exist are tightened
/// when opened.
public enum PrivateFiles {
    /// Permissions of a private folder.
    public static let folderMode: Int16 = 0o700
    /// Permissions of a private file.
    public static let fileMode: Int16 = 0o600

    /// Creates a folder (and its missing parents) readable by its owner only; an existing one is made so.
    ///
    /// - Throws: `storage-failed` saying in plain words why the folder cannot be used (a file in the way, a part of
    ///   the path that is a file, no permission, a read-only or full file system).
    public static func createFolder(_ url: URL) throws {
        var isFolder: ObjCBool = false
        if FileManager.default.fileExists(atPath: url.path, isDirectory: &isFolder), !isFolder.boolValue {
            throw CourierStoreError(.storageFailed, "\(url.path) is a file, not a folder")
        }
        do {
            try FileManager.default.createDirectory(
                at: url,
                withIntermediateDirectories: true,
                attributes: [.posixPermissions: Self.folderMode]
            )
            try FileManager.default.setAttributes([.posixPermissions: Self.folderMode], ofItemAtPath: url.path)
        } catch {
            throw CourierStoreError(.storageFailed, "cannot use the folder \(url.path): \(Self.plainWords(error))")
        }
    }

    /// A file system error as people say it: its POSIX reason where it has one, not Foundation's dump.
    public static func plainWords(_ error: any Error) -> String {
        let ns = error as NSError
        let underlying = (ns.userInfo[NSUnderlyingErrorKey] as? any Error).map { $0 as NSError }
        let posix =
            underlying.flatMap { $0.domain == NSPOSIXErrorDomain ? $0.code : nil }
            ?? (ns.domain == NSPOSIXErrorDomain ? ns.code : nil)
        switch posix.flatMap({ POSIXErrorCode(rawValue: Int32(truncatingIfNeeded: $0)) }) {
        case .ENOTDIR?: return "a part of the path is a file, not a folder"
        case .EEXIST?: return "a file of that name is in the way"
        case .EACCES?, .EPERM?: return "permission denied"
        case .EROFS?: return "the file system is read-only"
        case .ENOSPC?, .EDQUOT?: return "no space left on the device"
        case .ENOENT?: return "no such file or folder"
        case let code?: return "error \(code.rawValue)"
        case nil: return ns.localizedDescription
        }
    }

    /// Creates an empty file readable by its owner only, unless one exists; an existing one is made so.
    public static func createFile(atPath path: String) throws {
        if !FileManager.default.fileExists(atPath: path) {
            guard
                FileManager.default.createFile(
                    atPath: path,
                    contents: nil,
                    attributes: [.posixPermissions: Self.fileMode]
                )
            else {
                throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
            }
        }
        try self.restrict(path)
    }

    /// Makes an existing file or folder's permissions private (0600 for a file, 0700 for a folder).
    public static func restrict(_ path: String) throws {
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isFolder) else { return }
        try FileManager.default.setAttributes(
            [.posixPermissions: isFolder.boolValue ? Self.folderMode : Self.fileMode],
            ofItemAtPath: path
        )
    }
}
