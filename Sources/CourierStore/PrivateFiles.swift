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
    public static func createFolder(_ url: URL) throws {
        try FileManager.default.createDirectory(
            at: url,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: Self.folderMode]
        )
        try FileManager.default.setAttributes([.posixPermissions: Self.folderMode], ofItemAtPath: url.path)
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
